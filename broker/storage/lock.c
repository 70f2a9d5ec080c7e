/*
 * Locks through the store: the name is checked by the key rules and by
 * the policy (as "locks/<name>"), then the backend keeps the lease
 * (backend.h, lease.c).  Waiting is here, the same on every backend: one
 * deadline for every attempt and every wait, capped and jittered backoff,
 * and the waiter's own id so the backend can queue it (no starvation).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "broker/storage/backend.h"
#include "broker/storage/lease.h"
#include "broker/storage/store_private.h"

#define BACKOFF_MIN_MS 1
#define BACKOFF_MAX_MS 50

/*
 * Validates a lock name (and, for acquire and renew, the lease) and asks
 * the policy about locks/<name>.
 */
static int check(struct tsec_store *s, const struct tsec_principal *who, const char *name,
		 const char *action, uint64_t ttl_ms, bool need_ttl, struct tsec_error *err)
{
	char key[TSEC_LOCK_NAME_MAX + 8];
	struct tsec__skey sk;
	struct tsec_request r;
	size_t n = name ? strlen(name) : 0;
	int rc;

	if (!n || n > TSEC_LOCK_NAME_MAX || memchr(name, '/', n))
		return tsec__seterr(err, TSEC_EKEY, "name",
				    "lock name must be one key segment of 1-%d bytes",
				    TSEC_LOCK_NAME_MAX);
	memcpy(key, "locks/", 6);
	memcpy(key + 6, name, n + 1);
	if ((rc = tsec__skey_parse(key, false, &sk, err)))
		return rc;
	if (sk.n != 2)
		return tsec__seterr(err, TSEC_EKEY, "name", "lock name must be one key segment");
	if (need_ttl && ttl_ms == 0)
		return tsec__seterr(err, TSEC_EINVAL, "ttl_ms", "a lease needs ttl_ms > 0");
	tsec__req_for(&r, action, &sk);
	if (ttl_ms) {
		r.ctx.has = TSEC_CTX_TTL_MS;
		r.ctx.ttl_ms = ttl_ms;
	}
	return tsec__store_check(s, who, &r, 1, err);
}

/* A wait's first state: its deadline, its waiter id, the least backoff. */
static void wait_init(struct tsec_lock_wait *w, const char *name, uint64_t ttl_ms,
		      uint64_t timeout_ms)
{
	tsec__strlcpy(w->name, name, strlen(name), sizeof(w->name));
	w->ttl_ms = ttl_ms;
	/* In nanoseconds: a deadline in whole milliseconds could end up to
	 * one early. */
	w->deadline_ns = tsec__deadline_after((int64_t)tsec__mono_ns(),
					      timeout_ms > UINT64_MAX / 1000000
					      ? UINT64_MAX : timeout_ms * 1000000);
	w->backoff_ms = BACKOFF_MIN_MS;
	w->pause_ms = 0;
	randombytes_buf(w->waiter, sizeof(w->waiter));
}

/* Milliseconds left before w's deadline (rounded up), 0 when none. */
static int64_t left_of(const struct tsec_lock_wait *w)
{
	int64_t left = w->deadline_ns - (int64_t)tsec__mono_ns();

	return left <= 0 ? 0 : left / 1000000 + (left % 1000000 != 0);
}

/* A wait whose deadline passed unserved: it leaves the lock's queue. */
static int timed_out(struct tsec_store *s, const struct tsec_lock_wait *w,
		     struct tsec_error *err)
{
	if (s->be->ops->lock_unwait)
		s->be->ops->lock_unwait(s->be, w->name, w->waiter);
	return tsec__seterr(err, TSEC_ETIMEDOUT, w->name,
			    "lock still held when the deadline passed");
}

/*
 * One attempt as w's waiter.  TSEC_EBUSY with w->pause_ms set (jittered
 * backoff, never past the deadline) while the lock is held and time is
 * left; TSEC_ETIMEDOUT once the deadline has passed.  Past the deadline
 * no attempt is made (but the first, so a wait of 0 is one try): a
 * waiter paused through its deadline must not take the lock after it.
 */
static int attempt(struct tsec_store *s, struct tsec_lock_wait *w, bool first,
		   struct tsec__lease *lease, struct tsec_error *err)
{
	int64_t left, nap;
	int rc;

	if (!first && left_of(w) <= 0)
		return timed_out(s, w, err);
	if ((rc = s->be->ops->lock_try(s->be, w->name, w->ttl_ms, w->waiter, lease, err)) !=
	    TSEC_EBUSY)
		return rc;
	left = left_of(w);
	if (left <= 0)
		return timed_out(s, w, err);
	/* Jitter spreads waiters that started together. */
	nap = w->backoff_ms / 2 + (int64_t)randombytes_uniform(w->backoff_ms / 2 + 1);
	w->pause_ms = (uint32_t)(nap < left ? nap : left);
	if (w->backoff_ms < BACKOFF_MAX_MS)
		w->backoff_ms = w->backoff_ms * 2 < BACKOFF_MAX_MS ? w->backoff_ms * 2
								   : BACKOFF_MAX_MS;
	return TSEC_EBUSY;
}

static void fill(struct tsec_lock *out, const char *name, const struct tsec__lease *lease)
{
	tsec__strlcpy(out->name, name, strlen(name), sizeof(out->name));
	memcpy(out->token, lease->token, sizeof(out->token));
	out->expires_ms = lease->expires_ms;
	out->fence = lease->fence;
}

static int acquire(struct tsec_store *s, const struct tsec_principal *who, const char *name,
		   uint64_t ttl_ms, uint64_t timeout_ms, int wait, struct tsec_lock *out,
		   struct tsec_error *err)
{
	struct tsec_lock_wait w;
	struct tsec__lease lease;
	int rc;

	if (!s || !out)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no lock to fill");
	if (wait) {
		/* The waits of tsec_lock_wait_begin/step, napping between:
		 * a reload during the wait is asked about. */
		rc = tsec_lock_wait_begin(s, who, name, ttl_ms, timeout_ms, &w, out, err);
		while (rc == TSEC_EBUSY) {
			tsec__nap_ms(w.pause_ms);
			rc = tsec_lock_wait_step(s, who, &w, out, err);
		}
		return rc;
	}
	memset(out, 0, sizeof(*out));
	if ((rc = check(s, who, name, "lock.acquire", ttl_ms, true, err)) ||
	    (rc = s->be->ops->lock_try(s->be, name, ttl_ms, NULL, &lease, err)))
		return rc;
	fill(out, name, &lease);
	return 0;
}

int tsec_lock_acquire(struct tsec_store *s, const struct tsec_principal *who,
		      const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
		      struct tsec_lock *out, struct tsec_error *err)
{
	return acquire(s, who, name, ttl_ms, timeout_ms, 1, out, err);
}

int tsec_lock_try_acquire(struct tsec_store *s, const struct tsec_principal *who,
			  const char *name, uint64_t ttl_ms, struct tsec_lock *out,
			  struct tsec_error *err)
{
	return acquire(s, who, name, ttl_ms, 0, 0, out, err);
}

static int step(struct tsec_store *s, const struct tsec_principal *who,
		struct tsec_lock_wait *w, bool first, struct tsec_lock *out,
		struct tsec_error *err);

int tsec_lock_wait_begin(struct tsec_store *s, const struct tsec_principal *who,
			 const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
			 struct tsec_lock_wait *w, struct tsec_lock *out,
			 struct tsec_error *err)
{
	uint64_t gen;
	int rc;

	if (!s || !w || !out)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store, wait or lock to fill");
	memset(out, 0, sizeof(*out));
	/* Read before asking: a reload while it asks moves the count, and
	 * the next step asks again. */
	gen = tsec_bus_generation(s->bus);
	if ((rc = check(s, who, name, "lock.acquire", ttl_ms, true, err)))
		return rc;
	wait_init(w, name, ttl_ms, timeout_ms);
	w->policy_gen = gen;
	return step(s, who, w, true, out, err);
}

int tsec_lock_wait_step(struct tsec_store *s, const struct tsec_principal *who,
			struct tsec_lock_wait *w, struct tsec_lock *out, struct tsec_error *err)
{
	return step(s, who, w, false, out, err);
}

void tsec_lock_wait_abandon(struct tsec_store *s, const struct tsec_lock_wait *w)
{
	size_t n;

	if (!s || !w)
		return;
	n = strnlen(w->name, sizeof(w->name));
	if (n && n < sizeof(w->name) && !memchr(w->name, '/', n) && s->be->ops->lock_unwait)
		s->be->ops->lock_unwait(s->be, w->name, w->waiter);
}

static int step(struct tsec_store *s, const struct tsec_principal *who,
		struct tsec_lock_wait *w, bool first, struct tsec_lock *out,
		struct tsec_error *err)
{
	struct tsec__lease lease;
	uint64_t gen;
	size_t n;
	int rc;

	if (!s || !w || !out)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store, wait or lock to fill");
	if (!who || !who->id.ptr)
		return tsec__seterr(err, TSEC_EINVAL, "principal", "no principal");
	/* What begin wrote: a name of one segment, terminated in its array. */
	n = strnlen(w->name, sizeof(w->name));
	if (n == 0 || n == sizeof(w->name) || memchr(w->name, '/', n) || w->ttl_ms == 0)
		return tsec__seterr(err, TSEC_EINVAL, "", "not a wait tsec_lock_wait_begin began");
	/* A policy loaded or reloaded since the wait last asked: ask it,
	 * so a wait outlives no permission. */
	if ((gen = tsec_bus_generation(s->bus)) != w->policy_gen) {
		if ((rc = check(s, who, w->name, "lock.acquire", w->ttl_ms, true, err)))
			return rc;
		w->policy_gen = gen;
	}
	if ((rc = attempt(s, w, first, &lease, err)))
		return rc;
	fill(out, w->name, &lease);
	return 0;
}

int tsec_lock_renew(struct tsec_store *s, const struct tsec_principal *who,
		    struct tsec_lock *lk, uint64_t ttl_ms, struct tsec_error *err)
{
	int64_t expires = 0;
	int rc;

	if (!s || !lk)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no lock");
	if ((rc = check(s, who, lk->name, "lock.renew", ttl_ms, true, err)) ||
	    (rc = s->be->ops->lock_renew(s->be, lk->name, lk->token, ttl_ms, &expires, err)))
		return rc;
	lk->expires_ms = expires;
	return 0;
}

int tsec_lock_release(struct tsec_store *s, const struct tsec_principal *who,
		      const struct tsec_lock *lk, struct tsec_error *err)
{
	int rc;

	if (!s || !lk)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no lock");
	if ((rc = check(s, who, lk->name, "lock.release", 0, false, err)))
		return rc;
	return s->be->ops->lock_release(s->be, lk->name, lk->token, err);
}
