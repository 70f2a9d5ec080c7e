/*
 * tsec-broker: the locks taken through the broker, so that a stopping
 * broker releases what its callers still hold.
 */
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"

void tsec__held_init(struct tsec__held_table *h)
{
	pthread_mutex_init(&h->lock, NULL);
	memset(h->slot, 0, sizeof(h->slot));
}

void tsec__held_put(struct tsec__held_table *h, const struct tsec_lock *lk, int caller)
{
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		if (!h->slot[i].used) {
			h->slot[i].lk = *lk;
			h->slot[i].caller = caller;
			h->slot[i].used = 1;
			break;
		}
	pthread_mutex_unlock(&h->lock);
}

void tsec__held_drop(struct tsec__held_table *h, const struct tsec_lock *lk)
{
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < TSEC_D_MAX_HELD; i++)
		if (h->slot[i].used && !strcmp(h->slot[i].lk.name, lk->name) &&
		    !sodium_memcmp(h->slot[i].lk.token, lk->token, 16))
			h->slot[i].used = 0;
	pthread_mutex_unlock(&h->lock);
}

void tsec__held_release_all(struct tsec__daemon *d)
{
	struct tsec__held_table *h = &d->held;

	for (int i = 0; i < TSEC_D_MAX_HELD; i++) {
		const struct tsec__caller *c;
		struct tsec_principal p;
		struct tsec_error err;

		if (!h->slot[i].used)
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
