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
	memset(h->slot, 0, sizeof(h->slot));
}

static bool same(const struct tsec__held *s, const struct tsec_lock *lk)
{
	return s->used && !strcmp(s->lk.name, lk->name) &&
	       !sodium_memcmp(s->lk.token, lk->token, sizeof(lk->token));
}

static bool live(const struct tsec__held *s, int64_t now)
{
	return s->used && s->until > now;
}

/* The lease's end on the monotonic clock: expires_ms is on this
 * process's wall clock, read just now beside the monotonic one. */
static int64_t until_of(const struct tsec_lock *lk)
{
	int64_t mono = tsec__mono_ms(), left = lk->expires_ms - tsec__wall_ms();

	return left > INT64_MAX - mono ? INT64_MAX : mono + left;
}

int tsec__held_put(struct tsec__held_table *h, const struct tsec_lock *lk, int caller,
		   int quota)
{
	int64_t now = tsec__mono_ms(), until = until_of(lk);
	int rc = -1, free_slot = -1, mine = 0;

	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++) {
		if (!live(&h->slot[i], now)) {
			if (free_slot < 0)
				free_slot = i;
		} else if (h->slot[i].caller == caller) {
			mine++;
		}
	}
	if (mine >= quota) {
		rc = -2;
	} else if (free_slot >= 0) {
		h->slot[free_slot].lk = *lk;
		h->slot[free_slot].until = until;
		h->slot[free_slot].caller = caller;
		h->slot[free_slot].used = 1;
		rc = 0;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int tsec__held_of(struct tsec__held_table *h, int caller)
{
	int64_t now = tsec__mono_ms();
	int n = 0;

	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		n += live(&h->slot[i], now) && h->slot[i].caller == caller;
	pthread_mutex_unlock(&h->lock);
	return n;
}

void tsec__held_touch(struct tsec__held_table *h, const struct tsec_lock *lk)
{
	int64_t until = until_of(lk);

	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		if (same(&h->slot[i], lk)) {
			h->slot[i].lk.expires_ms = lk->expires_ms;
			h->slot[i].until = until;
		}
	pthread_mutex_unlock(&h->lock);
}

void tsec__held_drop(struct tsec__held_table *h, const struct tsec_lock *lk)
{
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		if (same(&h->slot[i], lk))
			h->slot[i].used = 0;
	pthread_mutex_unlock(&h->lock);
}

size_t tsec__held_count(struct tsec__held_table *h)
{
	int64_t now = tsec__mono_ms();
	size_t n = 0;

	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		n += live(&h->slot[i], now);
	pthread_mutex_unlock(&h->lock);
	return n;
}

void tsec__held_release_all(struct tsec__daemon *d)
{
	struct tsec__held_table *h = &d->held;
	int64_t now = tsec__mono_ms();

	for (int i = 0; i < TSEC_D_MAX_HELD; i++) {
		const struct tsec__caller *c;
		struct tsec_principal p;
		struct tsec_error err;

		if (!live(&h->slot[i], now))
			continue;
		c = &d->cfg.callers[h->slot[i].caller];
		memset(&p, 0, sizeof(p));
		p.id = tsec_str_c(c->principal);
		p.roles = c->roles;
		p.nroles = c->nroles;
		if (tsec_lock_release(d->store, &p, &h->slot[i].lk, &err) == 0)
			tsec__say("released lock %s held by %s", h->slot[i].lk.name, c->principal);
		h->slot[i].used = 0;
	}
}
