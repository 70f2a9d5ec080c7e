/*
 * The store's feed hub: one subscription to the backend's feed
 * (backend.h allows one subscriber), handed on to the LocalCache and to
 * every watcher a host added with tsec_store_watch (the certificate
 * cache's follower is one).  The hub is the subscriber; it forwards in
 * the backend's feed thread, under its mutex, so a watcher added or the
 * store closing never races a delivery.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "broker/storage/localcache.h"
#include "broker/storage/store_private.h"
#include "common/error.h"

#define WATCHERS 8

struct tsec__hub {
	pthread_mutex_t mu;
	struct tsec__feed_sink cache;    /* the LocalCache's, if it has one */
	bool has_cache;
	bool subscribed;
	struct {
		tsec_store_watch_fn fn;
		void *ctx;
	} w[WATCHERS];
	unsigned nw;
	/* How to subscribe (the backend, under any LocalCache). */
	struct tsec__backend *be;
	int (*feed)(struct tsec__backend *, const struct tsec__feed_sink *, struct tsec_error *);
	bool shared;
};

static void hub_changed(void *ctx, const char *key)
{
	struct tsec__hub *h = ctx;

	pthread_mutex_lock(&h->mu);
	if (h->has_cache)
		tsec__feed_changed(&h->cache, key);
	for (unsigned i = 0; i < h->nw; i++)
		h->w[i].fn(h->w[i].ctx, key);
	pthread_mutex_unlock(&h->mu);
}

static void hub_alive(void *ctx, int64_t sent_ms)
{
	struct tsec__hub *h = ctx;

	pthread_mutex_lock(&h->mu);
	if (h->has_cache)
		tsec__feed_alive(&h->cache, sent_ms);
	pthread_mutex_unlock(&h->mu);
}

static void hub_dead(void *ctx, const char *why)
{
	struct tsec__hub *h = ctx;

	pthread_mutex_lock(&h->mu);
	if (h->has_cache)
		tsec__feed_dead(&h->cache, why);
	/* A watcher re-reads what it keeps: changes may have been missed. */
	for (unsigned i = 0; i < h->nw; i++)
		h->w[i].fn(h->w[i].ctx, NULL);
	pthread_mutex_unlock(&h->mu);
}

static int subscribe(struct tsec__hub *h, uint32_t bound_ms, struct tsec_error *err)
{
	struct tsec__feed_sink s = { hub_changed, hub_alive, hub_dead, h, bound_ms };
	int rc = h->feed(h->be, &s, err);

	if (!rc)
		h->subscribed = true;
	return rc;
}

int tsec__hub_open(struct tsec__hub **out, struct tsec__backend *be,
		   const struct tsec__backend_kind *bk, const struct tsec__feed_sink *cache,
		   struct tsec_error *err)
{
	struct tsec__hub *h;
	int rc = 0;

	*out = NULL;
	if (!bk->feed)
		return 0;                /* nothing to hand on */
	if (!(h = calloc(1, sizeof(*h))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	pthread_mutex_init(&h->mu, NULL);
	h->be = be;
	h->feed = bk->feed;
	h->shared = bk->caps & TSEC__CAP_SHARED;
	if (cache) {
		h->cache = *cache;
		h->has_cache = true;
		rc = subscribe(h, cache->bound_ms, err);
	}
	if (rc) {
		tsec__hub_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

void tsec__hub_free(struct tsec__hub *h)
{
	if (!h)
		return;
	pthread_mutex_destroy(&h->mu);
	free(h);
}

int tsec_store_watch(struct tsec_store *s, tsec_store_watch_fn fn, void *ctx,
		     struct tsec_error *err)
{
	struct tsec__hub *h = s ? s->hub : NULL;
	int rc = 0;

	if (!s || !fn)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no function");
	if (!h || !h->shared)
		return tsec__seterr(err, TSEC_EINVAL, "backend", "this backend tells nobody what "
				    "other writers change (files: read again instead); etcd and "
				    "redis do");
	pthread_mutex_lock(&h->mu);
	if (h->nw == WATCHERS) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", "at most %d watchers a store", WATCHERS);
	} else {
		h->w[h->nw].fn = fn;
		h->w[h->nw].ctx = ctx;
		h->nw++;
	}
	pthread_mutex_unlock(&h->mu);
	/* The first watcher of a store with no LocalCache subscribes (the
	 * feed delivers from its own thread, which takes the mutex). */
	if (!rc && !h->subscribed && (rc = subscribe(h, 0, err))) {
		pthread_mutex_lock(&h->mu);
		h->nw--;
		pthread_mutex_unlock(&h->mu);
	}
	return rc;
}

void tsec_store_unwatch(struct tsec_store *s, tsec_store_watch_fn fn, void *ctx)
{
	struct tsec__hub *h = s ? s->hub : NULL;

	if (!h)
		return;
	/* Deliveries hold the mutex: none is running once it is taken. */
	pthread_mutex_lock(&h->mu);
	for (unsigned i = 0; i < h->nw; i++)
		if (h->w[i].fn == fn && h->w[i].ctx == ctx) {
			h->w[i] = h->w[--h->nw];
			break;
		}
	pthread_mutex_unlock(&h->mu);
}
