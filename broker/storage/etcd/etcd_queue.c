/*
 * Waiters on etcd locks, served in the order they came (backend.h's
 * lock_try).  A wait that finds a lock held or waited for puts its entry,
 * P/q/<name>/<waiter>, on a lease of its own; the entry's create_revision
 * is its place.  A free lock is taken (etcd_lock.c) only in a txn that
 * compares the whole queue range: empty for a caller that is not queued,
 * every entry's create_revision at least its own for a queued one.  So a
 * holder that releases and asks again at once, or a newcomer, cannot take
 * a lock from the waiter at the head, on this broker or any other.
 *
 * The entry's lease is the shortest etcd grants (its minimum TTL, 2 s
 * with etcd's defaults), kept alive by the wait's own tries (lock.c tries
 * at least every 50 ms) once a quarter of it has passed.  A wait that
 * stops trying (its broker died or paused) leaves the queue when etcd
 * ends that lease; one that ends unserved (its deadline passed) deletes
 * its entry at once (tsec__etcd_lock_unwait).  A queue entry carries
 * nothing but its place: a planted one (anyone who can write under the
 * prefix) can delay a lock by its lease, as a planted lock could, and
 * cannot take it.
 *
 * The waits this broker has queued are kept in e->waiters under keep_mu.
 * A wait that finds no free place (TSEC__ETCD_WAITERS queued at once)
 * polls unqueued: it is served after the queue empties.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "broker/storage/etcd/etcd_private.h"

#define WAITER_TTL_S 2          /* asked; etcd raises it to its minimum */

size_t tsec__etcd_qkey(const struct etcd *e, const char *name, const uint8_t waiter[16],
		       char *out)
{
	size_t n = tsec__etcd_bk(e, 'q', name, out);

	out[n++] = '/';
	sodium_bin2hex(out + n, 33, waiter, 16);
	return n + 32;
}

/* waiter's place in e->waiters, or -1.  Under keep_mu. */
static int find(struct etcd *e, const uint8_t *waiter)
{
	for (int i = 0; i < TSEC__ETCD_WAITERS; i++)
		if (e->waiters[i].lease && sodium_memcmp(e->waiters[i].id, waiter, 16) == 0)
			return i;
	return -1;
}

/* Whether etcd has surely ended w's lease by now (it is no longer kept
 * alive): its place can be taken. */
static bool over(const struct tsec__etcd_waiter *w, int64_t now)
{
	return now - w->kept_at > w->ttl_ms;
}

int64_t tsec__etcd_queued(struct etcd *e, const uint8_t *waiter)
{
	int64_t rev = 0;
	int i;

	if (!waiter)
		return 0;
	pthread_mutex_lock(&e->keep_mu);
	if ((i = find(e, waiter)) >= 0)
		rev = e->waiters[i].rev;
	pthread_mutex_unlock(&e->keep_mu);
	return rev;
}

void tsec__etcd_queue_forget(struct etcd *e, const uint8_t *waiter)
{
	int i;

	pthread_mutex_lock(&e->keep_mu);
	if ((i = find(e, waiter)) >= 0)
		memset(&e->waiters[i], 0, sizeof(e->waiters[i]));
	pthread_mutex_unlock(&e->keep_mu);
}

/* Keeps w's lease alive when a quarter of it has passed. */
static void keep(struct etcd *e, const uint8_t *waiter)
{
	struct tsec_error ignored;
	int64_t now = tsec__mono_ms(), lease, id, ttl;
	int i;

	pthread_mutex_lock(&e->keep_mu);
	i = find(e, waiter);
	lease = i >= 0 && now - e->waiters[i].kept_at >= e->waiters[i].ttl_ms / 4
		? e->waiters[i].lease : 0;
	pthread_mutex_unlock(&e->keep_mu);
	if (!lease ||
	    tsec__etcd_lease_post(e, "/v3/lease/keepalive", lease, 0, &id, &ttl, &ignored))
		return;                  /* (a failed keepalive is tried at the next try) */
	pthread_mutex_lock(&e->keep_mu);
	if ((i = find(e, waiter)) >= 0 && e->waiters[i].lease == lease) {
		if (ttl <= 0) {
			memset(&e->waiters[i], 0, sizeof(e->waiters[i]));   /* ended: join again */
		} else {
			e->waiters[i].kept_at = now;
			e->waiters[i].ttl_ms = ttl * 1000;
		}
	}
	pthread_mutex_unlock(&e->keep_mu);
}

/* Joins name's queue: a place in e->waiters, a lease, the entry on it. */
static void join(struct etcd *e, const char *name, const uint8_t *waiter)
{
	struct tsec_error ignored;
	int64_t sent = tsec__mono_ms(), lease = 0, ttl = 0, rev;
	char qk[TSEC__BK_MAX];
	size_t qn = tsec__etcd_qkey(e, name, waiter, qk);
	json_t *req, *r;
	int at = -1;

	pthread_mutex_lock(&e->keep_mu);
	for (int i = 0; i < TSEC__ETCD_WAITERS && at < 0; i++)
		if (!e->waiters[i].lease || (e->waiters[i].lease > 0 && over(&e->waiters[i], sent)))
			at = i;
	if (at >= 0) {
		memset(&e->waiters[at], 0, sizeof(e->waiters[at]));
		e->waiters[at].lease = -1;       /* taken while joining */
		memcpy(e->waiters[at].id, waiter, 16);
	}
	pthread_mutex_unlock(&e->keep_mu);
	if (at < 0)
		return;                  /* every place taken: poll unqueued */
	rev = 0;
	if (!tsec__etcd_lease_post(e, "/v3/lease/grant", 0, WAITER_TTL_S, &lease, &ttl,
				   &ignored) && lease && ttl > 0) {
		req = json_pack("{soso}", "key", tsec__b64(qk, qn), "value", tsec__b64("", 0));
		json_object_set_new(req, "lease", tsec__jnum(lease));
		if (!tsec__etcd_post(e->c, "/v3/kv/put", req, TSEC__ETCD_IDEMPOTENT, 0, 0, &r, &ignored)) {
			/* A put's revision is the new key's create_revision;
			 * resent (the first answer lost), it is a later one:
			 * a place further back, never ahead of its turn. */
			rev = tsec__jint(json_object_get(r, "header"), "revision", 0);
			json_decref(r);
		}
	}
	pthread_mutex_lock(&e->keep_mu);
	if (rev > 0) {
		e->waiters[at].lease = lease;
		e->waiters[at].rev = rev;
		e->waiters[at].kept_at = sent;
		e->waiters[at].ttl_ms = ttl * 1000;
	} else {
		memset(&e->waiters[at], 0, sizeof(e->waiters[at]));   /* polls unqueued */
	}
	pthread_mutex_unlock(&e->keep_mu);
}

void tsec__etcd_queue_wait(struct etcd *e, const char *name, const uint8_t *waiter)
{
	if (!waiter)
		return;
	if (tsec__etcd_queued(e, waiter))
		keep(e, waiter);
	else
		join(e, name, waiter);
}

void tsec__etcd_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16])
{
	struct etcd *e = tsec__etcd_of(b);
	struct tsec_error ignored;
	char qk[TSEC__BK_MAX];
	size_t qn;
	json_t *req, *r;

	if (!tsec__etcd_queued(e, waiter))
		return;
	qn = tsec__etcd_qkey(e, name, waiter, qk);
	req = json_pack("{so}", "key", tsec__b64(qk, qn));
	if (!tsec__etcd_post(e->c, "/v3/kv/deleterange", req, TSEC__ETCD_IDEMPOTENT, 0, 0, &r,
			     &ignored))
		json_decref(r);          /* (else its lease ends it) */
	tsec__etcd_queue_forget(e, waiter);
}
