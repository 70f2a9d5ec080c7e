/*
 * tsec-broker: the locks taken through the broker, for two jobs.  Each
 * caller may hold at most its quota of live ones (so no one caller can
 * fill the table and lock every other caller out for the length of its
 * leases), and a grant is found again by the connection and call id it
 * was made for, so that a cancel which crossed the grant lets the lock
 * go (issue 48).  Nothing here is released when the broker stops: a lock
 * belongs to its caller, who renews and releases it through this broker
 * started again or any other (its lease ends it otherwise).
 *
 * The table grows as locks are taken, up to TSEC_D_MAX_HELD; a slot whose
 * lease has ended is free again (its lock is nobody's to release).  Every
 * walk is over the locks held, never the capacity (issue 36), and only
 * when a caller reaches its quota or the table is full is it pruned.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/clock.h"

int tsec__held_init(struct tsec__held_table *h, int ncallers)
{
	pthread_mutex_init(&h->lock, NULL);
	h->n = h->cap = 0;
	h->slot = NULL;
	h->nslots = (ncallers > 0 ? (size_t)ncallers : 0) + 1;
	h->of = calloc(h->nslots, sizeof(*h->of));
	return h->of ? 0 : -1;
}

void tsec__held_free(struct tsec__held_table *h)
{
	if (!h->of)
		return;              /* never begun */
	free(h->slot);
	free(h->of);
	h->slot = NULL;
	h->of = NULL;
	h->n = h->cap = 0;
	pthread_mutex_destroy(&h->lock);
}

/* A caller's count (callers a reload added share the last). */
static size_t *count_of(struct tsec__held_table *h, int caller)
{
	return &h->of[caller >= 0 && (size_t)caller < h->nslots - 1 ? (size_t)caller
								      : h->nslots - 1];
}

static bool same(const struct tsec__held *s, const struct tsec_lock *lk)
{
	return !strcmp(s->lk.name, lk->name) &&
	       !sodium_memcmp(s->lk.token, lk->token, sizeof(lk->token));
}

/* The lease's end on the monotonic clock: expires_ms is on this
 * process's wall clock, read just now beside the monotonic one. */
static int64_t until_of(const struct tsec_lock *lk)
{
	int64_t mono = tsec__mono_ms(), left = lk->expires_ms - tsec__wall_ms();

	return left > INT64_MAX - mono ? INT64_MAX : mono + left;
}

/* Entry i leaves: the last takes its place (the order means nothing). */
static void remove_at(struct tsec__held_table *h, size_t i)
{
	(*count_of(h, h->slot[i].caller))--;
	h->slot[i] = h->slot[--h->n];
}

/* Drops the entries whose lease has ended (nobody's to release now). */
static void prune(struct tsec__held_table *h, int64_t now)
{
	for (size_t i = 0; i < h->n;)
		if (h->slot[i].until <= now)
			remove_at(h, i);
		else
			i++;
}

/* Room for one more entry: 0, or -1 at TSEC_D_MAX_HELD or without memory. */
static int room(struct tsec__held_table *h)
{
	size_t cap;
	struct tsec__held *n;

	if (h->n < h->cap)
		return 0;
	if (h->cap >= TSEC_D_MAX_HELD)
		return -1;
	cap = h->cap ? h->cap * 2 : 64;
	if (cap > TSEC_D_MAX_HELD)
		cap = TSEC_D_MAX_HELD;
	if (!(n = realloc(h->slot, cap * sizeof(*n))))
		return -1;
	h->slot = n;
	h->cap = cap;
	return 0;
}

static void put_at_end(struct tsec__held_table *h, const struct tsec_lock *lk, int caller,
		       const struct tsec__grant_of *of)
{
	struct tsec__held *s = &h->slot[h->n++];

	memset(s, 0, sizeof(*s));
	s->lk = *lk;
	s->until = until_of(lk);
	s->caller = caller;
	if (of) {
		s->conn = of->conn;
		s->idlen = of->idlen <= sizeof(s->id) ? of->idlen : 0;
		memcpy(s->id, of->id, s->idlen);
	}
	(*count_of(h, caller))++;
}

int tsec__held_put(struct tsec__held_table *h, const struct tsec_lock *lk, int caller,
		   int quota, const struct tsec__grant_of *of)
{
	int rc = TSEC__HELD_OK;

	pthread_mutex_lock(&h->lock);
	if (*count_of(h, caller) >= (size_t)quota || h->n == TSEC_D_MAX_HELD)
		prune(h, tsec__mono_ms());
	if (*count_of(h, caller) >= (size_t)quota)
		rc = TSEC__HELD_QUOTA;
	else if (room(h))
		rc = TSEC__HELD_FULL;
	else
		put_at_end(h, lk, caller, of);
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int tsec__held_of(struct tsec__held_table *h, int caller, int quota)
{
	size_t n;

	pthread_mutex_lock(&h->lock);
	if (*count_of(h, caller) >= (size_t)quota)
		prune(h, tsec__mono_ms());
	n = *count_of(h, caller);
	pthread_mutex_unlock(&h->lock);
	return n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
}

void tsec__held_touch(struct tsec__held_table *h, const struct tsec_lock *lk, int caller)
{
	int64_t until = until_of(lk);
	bool found = false;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++)
		if (same(&h->slot[i], lk)) {
			h->slot[i].lk.expires_ms = lk->expires_ms;
			h->slot[i].until = until;
			found = true;
		}
	/* Taken through another broker, or through this one before it
	 * restarted: counted from now on, whatever the quota (a renewal is
	 * never refused for it). */
	if (!found && !room(h))
		put_at_end(h, lk, caller, NULL);
	pthread_mutex_unlock(&h->lock);
}

void tsec__held_drop(struct tsec__held_table *h, const struct tsec_lock *lk)
{
	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n;)
		if (same(&h->slot[i], lk))
			remove_at(h, i);
		else
			i++;
	pthread_mutex_unlock(&h->lock);
}

bool tsec__held_take(struct tsec__held_table *h, int caller, const struct tsec__grant_of *of,
		     struct tsec_lock *out)
{
	bool found = false;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++) {
		const struct tsec__held *s = &h->slot[i];

		if (s->caller == caller && s->conn == of->conn && s->idlen &&
		    s->idlen == of->idlen && !memcmp(s->id, of->id, s->idlen)) {
			*out = s->lk;
			remove_at(h, i);
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return found;
}

size_t tsec__held_count(struct tsec__held_table *h)
{
	size_t n;

	pthread_mutex_lock(&h->lock);
	prune(h, tsec__mono_ms());
	n = h->n;
	pthread_mutex_unlock(&h->lock);
	return n;
}
