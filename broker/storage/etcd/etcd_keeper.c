/*
 * The leases etcd locks live on, and the deadlines this broker wrote.
 *
 * A lock lives on a lease of its own (etcd_lock.c), granted for its TTL
 * in whole seconds when it is taken or renewed, and kept alive by
 * nothing else: etcd ends it, by its own clock, a TTL after the holder's
 * last acquire or renewal through any broker, whatever became of the
 * broker that granted it (issue 48: on a broker's shared lease of a power
 * of two seconds, kept alive every quarter of it, a dead broker's lock
 * blocked others for 1.6 to 4.4 TTLs).
 *
 * The keeper.  etcd rounds a lease up to whole seconds and raises it to
 * its minimum (2 s by default), so the broker that wrote a lock's
 * deadline also deletes the lock at that deadline, by its own monotonic
 * clock (the clock it measured the deadline by): its keeper thread, or an
 * acquire of that name through this broker that finds it held past it
 * (tsec__etcd_held_due).  The delete is guarded by the token and the
 * deadline it wrote, so a lock since renewed (here or elsewhere),
 * released or taken anew is left alone.  No broker's clock decides what
 * another broker wrote.  The held table is this broker's own deadlines,
 * each looked up by a scan of that table, proportional to the locks it
 * holds.
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/storage/etcd/etcd_private.h"

struct tsec__etcd_held {
	char *name;
	uint8_t token[16];
	char ds[24];            /* the deadline this broker wrote in d */
	int64_t until;          /* that deadline, monotonic ms */
	int64_t retry;          /* a reap etcd did not answer: again then */
};

int tsec__etcd_lease_post(struct etcd *e, const char *path, int64_t id, int64_t ttl_s,
			  int64_t *got_id, int64_t *got_ttl, struct tsec_error *err)
{
	json_t *req = json_object(), *r;
	const json_t *res;
	int rc;

	if (id)
		json_object_set_new(req, "ID", tsec__jnum(id));
	if (ttl_s)
		json_object_set_new(req, "TTL", tsec__jnum(ttl_s));
	if ((rc = tsec__etcd_post(e->c, path, req, TSEC__ETCD_IDEMPOTENT, 0, 0, &r, err)))
		return rc;
	res = json_object_get(r, "result") ? json_object_get(r, "result") : r;
	*got_id = tsec__jint(res, "ID", 0);
	*got_ttl = tsec__jint(res, "TTL", 0);
	json_decref(r);
	return 0;
}

int tsec__etcd_lock_lease(struct etcd *e, uint64_t ttl_ms, int64_t *lease,
			  struct tsec_error *err)
{
	int64_t s = (int64_t)(ttl_ms / 1000 + (ttl_ms % 1000 != 0)), ttl = 0;
	int rc;

	/* At most a century: etcd takes an int64 of seconds. */
	if (s > 100LL * 365 * 86400)
		s = 100LL * 365 * 86400;
	if ((rc = tsec__etcd_lease_post(e, "/v3/lease/grant", 0, s, lease, &ttl, err)))
		return rc;
	if (!*lease || ttl < s)
		return tsec__seterr(err, TSEC_EIO, "", "etcd granted no lease of %lld s for a lock",
				    (long long)s);
	return 0;
}

static void *keeper_main(void *arg);

int tsec__etcd_held_add(struct etcd *e, const char *name, const uint8_t token[16],
			const char *ds, int64_t until, struct tsec_error *err)
{
	struct tsec__etcd_held *h;
	int rc = 0;

	pthread_mutex_lock(&e->keep_mu);
	if (!e->keep_on && !e->keep_stopped) {
		if ((rc = pthread_create(&e->keeper, NULL, keeper_main, e))) {
			rc = tsec__seterr(err, TSEC_EIO, "", "cannot start the etcd lock keeper: %s",
					  strerror(rc));
			goto out;
		}
		e->keep_on = true;
	}
	if (e->nheld == e->capheld) {
		size_t cap = e->capheld ? e->capheld * 2 : 16;
		struct tsec__etcd_held *n = realloc(e->held, cap * sizeof(*n));

		if (!n) {
			rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
			goto out;
		}
		e->held = n;
		e->capheld = cap;
	}
	h = &e->held[e->nheld];
	if (!(h->name = strdup(name))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
		goto out;
	}
	memcpy(h->token, token, 16);
	snprintf(h->ds, sizeof(h->ds), "%s", ds);
	h->until = until;
	h->retry = 0;
	e->nheld++;
	pthread_cond_broadcast(&e->keep_cv);     /* perhaps the earliest deadline */
out:
	pthread_mutex_unlock(&e->keep_mu);
	return rc;
}

/* Drops the entries of name and token whose deadline string is ds, or
 * all of them (ds NULL).  Under keep_mu. */
static void drop_locked(struct etcd *e, const char *name, const uint8_t token[16],
			const char *ds)
{
	for (size_t i = 0; i < e->nheld;) {
		struct tsec__etcd_held *h = &e->held[i];

		if (!sodium_memcmp(h->token, token, 16) && !strcmp(h->name, name) &&
		    (!ds || !strcmp(h->ds, ds))) {
			free(h->name);
			*h = e->held[--e->nheld];
		} else {
			i++;
		}
	}
}

void tsec__etcd_held_drop(struct etcd *e, const char *name, const uint8_t token[16])
{
	pthread_mutex_lock(&e->keep_mu);
	drop_locked(e, name, token, NULL);
	pthread_mutex_unlock(&e->keep_mu);
}

bool tsec__etcd_held_due(struct etcd *e, const char *name, const uint8_t token[16],
			 const char *ds)
{
	int64_t now = tsec__mono_ms();
	bool due = false;

	pthread_mutex_lock(&e->keep_mu);
	for (size_t i = 0; i < e->nheld && !due; i++)
		due = !sodium_memcmp(e->held[i].token, token, 16) && !strcmp(e->held[i].name, name) &&
		      !strcmp(e->held[i].ds, ds) && e->held[i].until <= now;
	pthread_mutex_unlock(&e->keep_mu);
	return due;
}

bool tsec__etcd_reap(struct etcd *e, const char *name, const uint8_t token[16], const char *ds)
{
	char l[TSEC__BK_MAX], d[TSEC__BK_MAX];
	size_t ln = tsec__etcd_bk(e, 'l', name, l), dn = tsec__etcd_bk(e, 'd', name, d);
	json_t *cmp = json_array(), *ops = json_array(), *r;
	struct tsec_error ignored;
	bool succ;

	json_array_append_new(cmp, tsec__etcd_cmp(l, ln, false, "VALUE", "EQUAL",
						  tsec__b64(token, 16)));
	json_array_append_new(cmp, tsec__etcd_cmp(d, dn, false, "VALUE", "EQUAL",
						  tsec__b64(ds, strlen(ds))));
	json_array_append_new(ops, tsec__etcd_del_op(l, ln));
	json_array_append_new(ops, tsec__etcd_del_op(d, dn));
	if (tsec__etcd_txn(e, cmp, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ, &ignored))
		return false;
	json_decref(r);
	pthread_mutex_lock(&e->keep_mu);
	drop_locked(e, name, token, ds);
	pthread_mutex_unlock(&e->keep_mu);
	return true;
}

/* Tries the reap of h's entry again at 'at'.  Under keep_mu. */
static void retry_held(struct etcd *e, const struct tsec__etcd_held *h, int64_t at)
{
	for (size_t i = 0; i < e->nheld; i++)
		if (!sodium_memcmp(e->held[i].token, h->token, 16) &&
		    !strcmp(e->held[i].name, h->name) && !strcmp(e->held[i].ds, h->ds))
			e->held[i].retry = at;
}

/*
 * Waits until the monotonic ms at, or a signal; under keep_mu.  While a
 * test has moved the injected clock (common/clock.h), at most 10 ms: a
 * deadline that the clock passed is seen without waiting out real time.
 */
static void wait_until(struct etcd *e, int64_t at)
{
	int64_t ms = at - tsec__mono_ms();
	struct timespec ts;

	if (ms <= 0)
		return;
	if (tsec__clock_shift() && ms > 10)
		ms = 10;
	ts = tsec__abstime(CLOCK_MONOTONIC, ms > 3600 * 1000 ? 3600 * 1000 : ms);
	pthread_cond_timedwait(&e->keep_cv, &e->keep_mu, &ts);
}

/* The keeper: deletes this broker's locks whose deadline passed. */
static void *keeper_main(void *arg)
{
	struct etcd *e = arg;

	pthread_mutex_lock(&e->keep_mu);
	while (!e->keep_stopped) {
		int64_t now = tsec__mono_ms(), next = now + 3600 * 1000;
		bool found = false;

		for (size_t i = 0; !found && i < e->nheld; i++) {
			int64_t at = e->held[i].until > e->held[i].retry ? e->held[i].until
									 : e->held[i].retry;

			if (at <= now) {
				struct tsec__etcd_held due = e->held[i];
				char name[TSEC__BK_MAX];

				snprintf(name, sizeof(name), "%s", due.name);
				due.name = name;
				pthread_mutex_unlock(&e->keep_mu);
				if (!tsec__etcd_reap(e, due.name, due.token, due.ds)) {
					pthread_mutex_lock(&e->keep_mu);
					retry_held(e, &due, tsec__mono_ms() + 500);
				} else {
					pthread_mutex_lock(&e->keep_mu);
				}
				found = true;
			} else if (at < next) {
				next = at;
			}
		}
		if (!found && !e->keep_stopped)
			wait_until(e, next);
	}
	pthread_mutex_unlock(&e->keep_mu);
	return NULL;
}

void tsec__etcd_keeper_init(struct etcd *e)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&e->keep_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->keep_cv, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * Stops the keeper.  The locks this broker handed out are left to their
 * holders and to etcd's leases of them: a broker that stops does not end
 * its callers' locks.
 */
void tsec__etcd_keeper_stop(struct etcd *e)
{
	bool on;

	pthread_mutex_lock(&e->keep_mu);
	e->keep_stopped = true;
	on = e->keep_on;
	pthread_cond_broadcast(&e->keep_cv);
	pthread_mutex_unlock(&e->keep_mu);
	if (on)
		pthread_join(e->keeper, NULL);
	for (size_t i = 0; i < e->nheld; i++)
		free(e->held[i].name);
	free(e->held);
	e->held = NULL;
	e->nheld = e->capheld = 0;
	pthread_cond_destroy(&e->keep_cv);
	pthread_mutex_destroy(&e->keep_mu);
}
