/* Internal: what storage's own files share (store.c, lock.c, txn.c, records.c,
 * watch.c, certfiles.c, raw.c): the store's struct.  Layers above storage
 * include store_above.h instead. */
#ifndef TSEC_STORE_PRIVATE_H
#define TSEC_STORE_PRIVATE_H

#include <stdatomic.h>

#include "tinysecurity/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/key.h"
#include "broker/storage/keys.h"
#include "broker/storage/store_above.h"

struct tsec__backend;

/* The fence of a lock handle, checked (txn.c). */
struct tsec__fence;
int tsec__fence_of(const struct tsec_lock *lk, struct tsec__fence *f, struct tsec_error *err);

struct tsec_store {
	struct tsec__backend *be;        /* owned */
	struct tsec__backend *cache;     /* be, when it is a LocalCache */
	struct tsec_bus *bus;
	char endpoint[TSEC_ENDPOINT_NAME_MAX];
	/* Its handle, once the bus has it (tsec__store_check): no lookup by
	 * name a call.  Endpoints are never unloaded. */
	_Atomic(struct tsec_endpoint *) ep;
	size_t value_max;
	tsec_store_observer_fn observer;
	void *observer_ctx;
	struct tsec__gates *gates;       /* per-key gates of this store */
	struct tsec__hub *hub;           /* the backend's feed, handed on (watch.c) */
};

/* watch.c: the hub subscribed to be's feed (bk's; none: *out NULL), at
 * once when cache (the LocalCache's sink) is given, else at the first
 * tsec_store_watch.  Freed after the backend is closed. */
struct tsec__hub;
struct tsec__backend_kind;
struct tsec__feed_sink;
int tsec__hub_open(struct tsec__hub **out, struct tsec__backend *be,
		   const struct tsec__backend_kind *bk, const struct tsec__feed_sink *cache,
		   struct tsec_error *err);
void tsec__hub_free(struct tsec__hub *h);

#endif
