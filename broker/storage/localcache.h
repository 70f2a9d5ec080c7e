/*
 * Internal: the LocalCache (localcache.c), a backend that caches any
 * other: hits served from memory, misses coalesced per key, and over a
 * shared backend every hit bounded by the feed's last proof of life.
 */
#ifndef TSEC_STORAGE_LOCALCACHE_H
#define TSEC_STORAGE_LOCALCACHE_H

#include "broker/storage/backend.h"

struct tsec_store_info;

/* Caches `inner` (owned), at most max_bytes of values. */
int tsec__localcache_open(struct tsec__backend **out, struct tsec__backend *inner,
			  size_t max_bytes, struct tsec_error *err);

/*
 * The sink to subscribe to inner's feed (backend.h).  With watched (a
 * shared backend), no hit is served until the feed's first proof of
 * life, nor later than bound_ms (0: TSEC__FEED_BOUND_MS) after its last;
 * a break drops every value until the next proof.  Without it (files),
 * the feed only drops the keys it names.
 */
void tsec__localcache_sink(struct tsec__backend *cache, bool watched, uint32_t bound_ms,
			   struct tsec__feed_sink *out);

/* Drops key, or every value when key is NULL (the sink's changed). */
void tsec__localcache_invalidate(void *cache, const char *key);

void tsec__localcache_info(struct tsec__backend *cache, struct tsec_store_info *info);
const struct tsec__backend *tsec__localcache_inner(const struct tsec__backend *cache);

/*
 * A hit and nothing else: the value of key if the cache holds it now
 * (1, *out new), 0 when it does not (nothing is read from the backend,
 * no gate is taken), TSEC_ENOMEM when out of memory.  Never waits on
 * I/O.
 */
int tsec__localcache_peek(struct tsec__backend *cache, const struct tsec__skey *k, size_t max,
			  char **out, size_t *len);

#endif
