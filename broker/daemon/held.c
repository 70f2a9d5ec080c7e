/*
 * tsec-broker: the locks taken through the broker, so that a stopping
 * broker releases what its callers still hold.  The table is bounded; a
 * slot whose lease has ended is free again (its lock is nobody's to
 * release), and when every slot holds a live lease a new acquire is
 * undone and refused rather than forgotten.  Each caller may hold at
 * most its quota of live slots, so no one caller can fill the table and
 * lock every other caller out for the length of its leases.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/clock.h"

void tsec__held_init(struct tsec__held_table *h)
{
	pthread_mutex_init(&h->lock, NULL);
	h->n = 0;
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
	h->slot[i] = h->slot[--h->n];
}

/* Drops the entries whose lease has ended (nobody's to release now).
 * Every walk of the table is over the locks held, never the whole
 * capacity (issue 36: the fixed 1 MB scan cost 6.5% of a turn). */
static void prune(struct tsec__held_table *h, int64_t now)
{
	for (size_t i = 0; i < h->n;)
		if (h->slot[i].until <= now)
			remove_at(h, i);
		else
			i++;
}

static int mine(const struct tsec__held_table *h, int caller)
{
	int n = 0;

	for (size_t i = 0; i < h->n; i++)
		n += h->slot[i].caller == caller;
	return n;
}

int tsec__held_put(struct tsec__held_table *h, const struct tsec_lock *lk, int caller,
		   int quota)
{
	int64_t now = tsec__mono_ms(), until = until_of(lk);
	int rc = TSEC__HELD_FULL;

	pthread_mutex_lock(&h->lock);
	prune(h, now);
	if (mine(h, caller) >= quota) {
		rc = TSEC__HELD_QUOTA;
	} else if (h->n < TSEC_D_MAX_HELD) {
		h->slot[h->n].lk = *lk;
		h->slot[h->n].until = until;
		h->slot[h->n].caller = caller;
		h->n++;
		rc = TSEC__HELD_OK;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int tsec__held_of(struct tsec__held_table *h, int caller)
{
	int n;

	pthread_mutex_lock(&h->lock);
	prune(h, tsec__mono_ms());
	n = mine(h, caller);
	pthread_mutex_unlock(&h->lock);
	return n;
}

void tsec__held_touch(struct tsec__held_table *h, const struct tsec_lock *lk)
{
	int64_t until = until_of(lk);

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++)
		if (same(&h->slot[i], lk)) {
			h->slot[i].lk.expires_ms = lk->expires_ms;
			h->slot[i].until = until;
		}
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

size_t tsec__held_count(struct tsec__held_table *h)
{
	size_t n;

	pthread_mutex_lock(&h->lock);
	prune(h, tsec__mono_ms());
	n = h->n;
	pthread_mutex_unlock(&h->lock);
	return n;
}

void tsec__held_release_all(struct tsec__daemon *d)
{
	struct tsec__held_table *h = &d->held;

	prune(h, tsec__mono_ms());
	for (size_t i = 0; i < h->n; i++) {
		const struct tsec__caller *c = &d->cfg.callers[h->slot[i].caller];
		struct tsec_principal p;
		struct tsec_error err;

		memset(&p, 0, sizeof(p));
		p.id = tsec_str_c(c->principal);
		p.roles = c->roles;
		p.nroles = c->nroles;
		if (tsec_lock_release(d->store, &p, &h->slot[i].lk, &err) == 0)
			tsec__say("released lock %s held by %s", h->slot[i].lk.name, c->principal);
	}
	h->n = 0;
}
