/*
 * The etcd backend's invalidation feed (remote.h): a thread watches
 * P/k/ and tells the LocalCache of each key a write or delete touched.
 * When the watch (re)starts, or etcd says it compacted past what the
 * watch needed, the feed cannot know what it missed, and drops every
 * cached value instead.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/storage/etcd_private.h"

static int on_result(void *ctx, json_t *res)
{
	struct etcd *e = ctx;
	const json_t *ev = json_object_get(res, "events");
	size_t pre = e->plen + 3;

	if (json_is_true(json_object_get(res, "created")) ||
	    tsec__jint(res, "compact_revision", 0) > 0) {
		e->fn(e->fn_ctx, NULL);
		if (json_is_true(json_object_get(res, "canceled")))
			return 1;        /* start again */
		return 0;
	}
	if (json_is_true(json_object_get(res, "canceled"))) {
		e->fn(e->fn_ctx, NULL);
		return 1;
	}
	for (size_t i = 0; i < json_array_size(ev); i++) {
		uint8_t *k;
		size_t kn;

		if (tsec__unb64(json_object_get(json_array_get(ev, i), "kv"), "key", &k, &kn))
			continue;
		if (kn > pre && kn <= TSEC__BK_MAX && !memcmp(k, e->prefix, e->plen) &&
		    !memcmp(k + e->plen, "/k/", 3) && !memchr(k, '\0', kn))
			e->fn(e->fn_ctx, (const char *)k + pre);
		free(k);
	}
	return 0;
}

static void *feed(void *arg)
{
	struct etcd *e = arg;
	char from[TSEC__BK_MAX], end[TSEC__BK_MAX];
	size_t n = tsec__etcd_bk(e, 'k', "", from);
	long backoff = 10;

	memcpy(end, from, n);
	end[n - 1] = '/' + 1;
	while (atomic_load(&e->feed_on)) {
		struct tsec_error err;
		struct timespec ts;

		if (tsec__etcd_watch(e->c, from, n, end, n, 0, on_result, e, &err) == 0 &&
		    !atomic_load(&e->feed_on))
			break;
		/* Ended or failed: whatever happened meanwhile is unknown. */
		e->fn(e->fn_ctx, NULL);
		ts.tv_sec = backoff / 1000;
		ts.tv_nsec = (backoff % 1000) * 1000000;
		nanosleep(&ts, NULL);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return NULL;
}

int tsec__etcd_feed(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		    struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	int rc;

	e->fn = fn;
	e->fn_ctx = ctx;
	atomic_store(&e->feed_on, true);
	if ((rc = pthread_create(&e->feed, NULL, feed, e))) {
		atomic_store(&e->feed_on, false);
		return tsec__seterr(err, TSEC_EIO, "", "cannot start the etcd watch: %s",
				    strerror(rc));
	}
	return 0;
}

void tsec__etcd_feed_stop(struct etcd *e)
{
	if (!atomic_exchange(&e->feed_on, false))
		return;
	tsec__etcd_watch_stop(e->c);
	pthread_join(e->feed, NULL);
}
