/*
 * The lease rules, once for every backend: who may take a lock, when a
 * holder still holds it, what a fence is.
 *
 * Fairness: a waiter that finds the lock held takes the one queue slot
 * if it is free (or its occupant stopped asking for WAITER_STALE_MS);
 * while a live waiter is queued, nobody else may take the lock when it
 * frees, so a holder that releases and asks again at once cannot keep it
 * from the others.  Waiters ask at least every 50 ms (lock.c), well
 * inside WAITER_STALE_MS.
 *
 * Fences: each acquire hands out max(last fence + 1, wall time in
 * microseconds).  The first term makes them strictly increase while the
 * lock's state survives; the second keeps them increasing even if the
 * state is lost (a new machine, a wiped folder), as long as the clock
 * does not go back.
 */
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "broker/storage/backend.h"
#include "broker/storage/lease.h"
#include "common/clock.h"

#define WAITER_STALE_MS 250

static bool zero16(const uint8_t *v)
{
	return sodium_is_zero(v, 16);
}

int64_t tsec__deadline_after(int64_t now, uint64_t ms)
{
	if (now < 0)
		now = 0;
	return ms > (uint64_t)(INT64_MAX - now) ? INT64_MAX : now + (int64_t)ms;
}

int tsec__lease_try(struct tsec__lease_state *st, const uint8_t *waiter,
		    uint64_t ttl_ms, int64_t now_ms, struct tsec__lease *out,
		    bool *dirty)
{
	bool held = !zero16(st->token) && st->expires_ms > now_ms;
	bool queued = !zero16(st->waiter) &&
		      tsec__ms_since(now_ms, st->waiter_seen_ms) <= WAITER_STALE_MS;
	bool me = waiter && queued && sodium_memcmp(st->waiter, waiter, 16) == 0;
	uint64_t us;

	*dirty = false;
	if (held || (queued && !me)) {
		if (waiter && (!queued || me)) {
			/* Take or keep the queue slot; refresh it only now and then. */
			if (!me || tsec__ms_since(now_ms, st->waiter_seen_ms) > WAITER_STALE_MS / 4) {
				memcpy(st->waiter, waiter, 16);
				st->waiter_seen_ms = now_ms;
				*dirty = true;
			}
		}
		return TSEC_EBUSY;
	}
	randombytes_buf(st->token, sizeof(st->token));
	us = tsec__wall_us();
	st->fence = us > st->fence ? us : st->fence + 1;
	st->expires_ms = tsec__deadline_after(now_ms, ttl_ms);
	if (me)
		memset(st->waiter, 0, sizeof(st->waiter));
	*dirty = true;
	memcpy(out->token, st->token, 16);
	out->fence = st->fence;
	out->expires_ms = st->expires_ms;
	return 0;
}

bool tsec__lease_unwait(struct tsec__lease_state *st, const uint8_t waiter[16])
{
	if (zero16(st->waiter) || sodium_memcmp(st->waiter, waiter, 16))
		return false;
	memset(st->waiter, 0, sizeof(st->waiter));
	return true;
}

int tsec__lease_owned(const struct tsec__lease_state *st, const uint8_t token[16],
		      int64_t now_ms, const char *name, struct tsec_error *err)
{
	if (zero16(st->token))
		return tsec__seterr(err, TSEC_ENOENT, name, "no such lock is held");
	/* Constant time: the comparison says nothing of the token. */
	if (sodium_memcmp(st->token, token, 16) != 0)
		return tsec__seterr(err, TSEC_ENOTOWNER, name,
				    "the lock is not held with this token");
	if (st->expires_ms <= now_ms)
		return tsec__seterr(err, TSEC_ENOTOWNER, name,
				    "the lease has ended; take the lock again");
	return 0;
}

int tsec__lease_fenced(const struct tsec__lease_state *st, const struct tsec__fence *f,
		       int64_t now_ms, struct tsec_error *err)
{
	int rc = tsec__lease_owned(st, f->token, now_ms, f->name, err);

	if (rc)
		return rc;
	if (st->fence != f->fence)
		return tsec__seterr(err, TSEC_ENOTOWNER, f->name,
				    "fence %llu is not the lock's current fence",
				    (unsigned long long)f->fence);
	return 0;
}

void tsec__lease_release(struct tsec__lease_state *st)
{
	memset(st->token, 0, sizeof(st->token));
	st->expires_ms = 0;
}
