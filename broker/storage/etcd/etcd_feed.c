/*
 * The etcd backend's invalidation feed (fleet.h): a thread watches the
 * prefix and tells the LocalCache of each key a write or delete touched.
 * When the watch (re)starts, or etcd says it compacted past what the
 * watch needed, the feed cannot know what it missed, and drops every
 * cached value instead.
 *
 * Liveness: a second thread writes P/b/feed = "<id>:<seq>" every
 * bound / 3 and notes when it sent each.  When the watch delivers our
 * own heartbeat, every write acknowledged before it was sent has been
 * delivered too (a watch delivers in revision order), so the cache may
 * serve hits until then + bound.  A watch pinned to a hung or
 * partitioned member delivers nothing: hits stop within the bound, and
 * the watch is ended and started on the next member.  One key for the
 * whole fleet: every broker's feed writes it, so nothing accumulates.
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/storage/etcd/etcd_private.h"
#include "common/clock.h"

/* A heartbeat of ours: "<id>:<seq>"; its send time, or 0. */
static int64_t beat_sent(struct etcd *e, const uint8_t *v, size_t n)
{
	size_t idn = strlen(e->beat_id);
	uint64_t seq = 0;
	int64_t at = 0;

	if (n <= idn + 1 || n > idn + 21 || memcmp(v, e->beat_id, idn) || v[idn] != ':')
		return 0;
	for (size_t i = idn + 1; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return 0;
		seq = seq * 10 + (uint64_t)(v[i] - '0');
	}
	pthread_mutex_lock(&e->beat_mu);
	if (e->ring[seq % TSEC__BEATS].seq == seq)
		at = e->ring[seq % TSEC__BEATS].at;
	pthread_mutex_unlock(&e->beat_mu);
	return at;
}

int tsec__etcd_on_result(void *ctx, json_t *res)
{
	struct etcd *e = ctx;
	const json_t *ev = json_object_get(res, "events");
	size_t pre = e->plen + 3;

	if (json_is_true(json_object_get(res, "created")) ||
	    tsec__jint(res, "compact_revision", 0) > 0) {
		tsec__feed_changed(&e->sink, NULL);
		if (json_is_true(json_object_get(res, "canceled")))
			return 1;        /* start again */
		return 0;
	}
	if (json_is_true(json_object_get(res, "canceled"))) {
		tsec__feed_changed(&e->sink, NULL);
		return 1;
	}
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const json_t *kv = json_object_get(json_array_get(ev, i), "kv");
		uint8_t *k, *v;
		size_t kn, vn;
		int64_t at;

		if (tsec__unb64(kv, "key", &k, &kn))
			continue;
		if (kn > pre && kn <= TSEC__BK_MAX && !memcmp(k, e->prefix, e->plen) &&
		    !memcmp(k + e->plen, "/k/", 3) && !memchr(k, '\0', kn)) {
			tsec__feed_changed(&e->sink, (const char *)k + pre);
		} else if (kn == e->beat_klen && !memcmp(k, e->beat_key, kn) &&
			   !tsec__unb64(kv, "value", &v, &vn)) {
			if ((at = beat_sent(e, v, vn))) {
				tsec__feed_alive(&e->sink, at);
				atomic_store(&e->proven, at);
			}
			free(v);
		}
		free(k);
	}
	return 0;
}

static void *feed(void *arg)
{
	struct etcd *e = arg;
	char from[TSEC__BK_MAX], end[TSEC__BK_MAX];
	size_t n = e->plen + 1;
	long backoff = 10;

	/* The whole prefix: values (P/k/) and the heartbeat (P/b/feed). */
	memcpy(from, e->prefix, e->plen);
	from[e->plen] = '/';
	memcpy(end, from, n);
	end[n - 1] = '/' + 1;
	while (atomic_load(&e->feed_on)) {
		struct tsec_error err = { 0 };

		atomic_store(&e->watch_since, tsec__mono_ms());
		if (tsec__etcd_watch(e->c, from, n, end, n, 0, tsec__etcd_on_result, e, &err) == 0 &&
		    !atomic_load(&e->feed_on))
			break;
		/* Ended or failed: whatever happened meanwhile is unknown. */
		tsec__feed_dead(&e->sink, err.msg[0] ? err.msg : "the watch ended");
		tsec__sleep_ns((uint64_t)backoff * 1000000u);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return NULL;
}

/* Waits ms, or until the feed stops; false when it stopped. */
static bool beat_wait(struct etcd *e, int64_t ms)
{
	struct timespec ts = tsec__abstime(CLOCK_MONOTONIC, ms);

	pthread_mutex_lock(&e->beat_mu);
	while (atomic_load(&e->feed_on) &&
	       pthread_cond_timedwait(&e->beat_cv, &e->beat_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&e->beat_mu);
	return atomic_load(&e->feed_on);
}

static void *beat(void *arg)
{
	struct etcd *e = arg;
	uint32_t bound = tsec__feed_bound(&e->sink);

	while (beat_wait(e, bound / 3)) {
		char val[48];
		int64_t now = tsec__mono_ms(), since = atomic_load(&e->watch_since);
		json_t *req = json_object(), *r = NULL;
		struct tsec_error err;
		uint64_t seq;
		int n;

		/* A watch that has shown none of our heartbeats for a whole
		 * bound is stuck (a hung member): start it on the next. */
		if (now - since > bound && now - atomic_load(&e->proven) > bound)
			tsec__etcd_watch_kick(e->c);
		pthread_mutex_lock(&e->beat_mu);
		seq = ++e->beat_seq;
		e->ring[seq % TSEC__BEATS].seq = seq;
		e->ring[seq % TSEC__BEATS].at = now;
		pthread_mutex_unlock(&e->beat_mu);
		n = snprintf(val, sizeof(val), "%s:%llu", e->beat_id, (unsigned long long)seq);
		json_object_set_new(req, "key", tsec__b64(e->beat_key, e->beat_klen));
		json_object_set_new(req, "value", tsec__b64(val, (size_t)n));
		/* Lost or late: the next one proves it. */
		if (!tsec__etcd_post(e->c, "/v3/kv/put", req, TSEC__ETCD_IDEMPOTENT, 0, 0, &r, &err))
			json_decref(r);
	}
	return NULL;
}

int tsec__etcd_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		    struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	uint8_t id[8];
	pthread_condattr_t ca;
	int rc;

	e->sink = *sink;
	randombytes_buf(id, sizeof(id));
	sodium_bin2hex(e->beat_id, sizeof(e->beat_id), id, sizeof(id));
	e->beat_klen = tsec__etcd_bk(e, 'b', "feed", e->beat_key);
	pthread_mutex_init(&e->beat_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->beat_cv, &ca);
	pthread_condattr_destroy(&ca);
	e->beat_init = true;
	atomic_store(&e->feed_on, true);
	if ((rc = pthread_create(&e->feed, NULL, feed, e))) {
		atomic_store(&e->feed_on, false);
		return tsec__seterr(err, TSEC_EIO, "", "cannot start the etcd watch: %s",
				    strerror(rc));
	}
	if ((rc = pthread_create(&e->beat, NULL, beat, e))) {
		tsec__etcd_feed_stop(e);
		return tsec__seterr(err, TSEC_EIO, "", "cannot start the etcd heartbeat: %s",
				    strerror(rc));
	}
	e->beat_on = true;
	return 0;
}

void tsec__etcd_feed_stop(struct etcd *e)
{
	if (atomic_exchange(&e->feed_on, false)) {
		pthread_mutex_lock(&e->beat_mu);
		pthread_cond_broadcast(&e->beat_cv);
		pthread_mutex_unlock(&e->beat_mu);
		tsec__etcd_watch_stop(e->c);
		pthread_join(e->feed, NULL);
		if (e->beat_on)
			pthread_join(e->beat, NULL);
		e->beat_on = false;
	}
	if (e->beat_init) {
		pthread_cond_destroy(&e->beat_cv);
		pthread_mutex_destroy(&e->beat_mu);
		e->beat_init = false;
	}
}
