/*
 * The etcd leases locks live on, and the reaper of this broker's locks
 * (issue 36: an acquire in one request, as etcd's own concurrency
 * package takes a mutex on its session's lease).
 *
 * Leases.  A lock is put on a lease this broker keeps alive, not on a
 * lease of its own, so that an acquire is one txn and a renew one txn.
 * Unlike etcd's Mutex, our locks have deadlines, and a lock must last to
 * its deadline even when the broker that handed it out dies (its holder
 * may call another broker): so a lease may carry a lock only while etcd
 * surely keeps it until the lock's deadline.  There is one lease per
 * length class (a power of two seconds at least 1.5 times the lock's
 * TTL), kept alive every quarter of its length, so that it always has
 * at least three quarters of its length, and so the lock's TTL, left.
 * valid_until is a lower bound of when etcd ends it: when the grant or
 * last keepalive was sent, plus the TTL etcd answered.  An acquire whose
 * lock would outlast that bound first keeps the lease alive itself.
 * When the broker dies, its leases end within their length: a dead
 * broker's lock is free at most about three TTLs after its last
 * keepalive, never before its deadline.
 *
 * The reaper.  A lock on a live lease does not end by itself when its
 * holder stops renewing: the broker that last took or renewed it
 * deletes it at its deadline, by its own monotonic clock (the clock it
 * measured the deadline by; another broker's clock never decides).  The
 * delete is guarded by the token and by the revision of the deadline it
 * wrote, so a lock since renewed elsewhere, released or taken anew is
 * left alone.  The held table is this broker's own locks, each looked
 * up by a scan of that table, proportional to the locks it holds.
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
	int64_t lease;
	char ds[24];            /* the deadline this broker wrote in d */
	int64_t until;          /* that deadline, monotonic ms */
	int64_t retry;          /* a reap etcd did not answer: again then */
};

/* The class of a lock TTL: the least power of two seconds >= 1.5 TTL. */
static unsigned class_of(uint64_t ttl_ms)
{
	uint64_t s = ttl_ms / 1000 + (ttl_ms % 1000 != 0), need = s + (s + 1) / 2;
	unsigned b = 0;

	while (b < TSEC__ETCD_CLASSES - 1 && ((uint64_t)1 << b) < need)
		b++;
	return b;
}

/* How long a lock of ttl_ms needs the lease to last from now. */
static int64_t needed_ms(const struct tsec__etcd_session *s, uint64_t ttl_ms)
{
	int64_t most = s->granted_s * 1000 * 2 / 3;   /* past 45 years: capped */

	return ttl_ms < (uint64_t)most ? (int64_t)ttl_ms : most;
}

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
	if ((rc = tsec__etcd_post(e->c, path, req, TSEC__ETCD_IDEMPOTENT, &r, err)))
		return rc;
	res = json_object_get(r, "result") ? json_object_get(r, "result") : r;
	*got_id = tsec__jint(res, "ID", 0);
	*got_ttl = tsec__jint(res, "TTL", 0);
	json_decref(r);
	return 0;
}

/* Drops what lay on a lease etcd no longer has.  Under sess_mu. */
static void lease_gone(struct etcd *e, int64_t lease)
{
	for (unsigned b = 0; b < TSEC__ETCD_CLASSES; b++)
		if (e->sessions[b].id == lease)
			memset(&e->sessions[b], 0, sizeof(e->sessions[b]));
	for (size_t i = 0; i < e->nheld;) {
		if (e->held[i].lease == lease) {
			free(e->held[i].name);
			e->held[i] = e->held[--e->nheld];
		} else {
			i++;
		}
	}
}

/*
 * Keeps class b's lease alive, or grants it when it has none: the
 * request is made without sess_mu.  0, or the error of the request.
 */
static int refresh(struct etcd *e, unsigned b, struct tsec_error *err)
{
	int64_t id, got_id = 0, got_ttl = 0, sent = tsec__mono_ms();
	int64_t ask = (int64_t)1 << b;
	int rc;

	pthread_mutex_lock(&e->sess_mu);
	id = e->sessions[b].id;
	pthread_mutex_unlock(&e->sess_mu);
	rc = id ? tsec__etcd_lease_post(e, "/v3/lease/keepalive", id, 0, &got_id, &got_ttl, err)
		: tsec__etcd_lease_post(e, "/v3/lease/grant", 0, ask, &got_id, &got_ttl, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&e->sess_mu);
	if (id && got_ttl <= 0) {
		lease_gone(e, id);       /* ended while we were away */
		rc = tsec__seterr(err, TSEC_ENOENT, "", "etcd ended this broker's lease");
	} else if (!id && (!got_id || got_ttl <= 0)) {
		rc = tsec__seterr(err, TSEC_EIO, "", "etcd granted no lease");
	} else if (e->sessions[b].id == id || !id) {
		/* (A grant racing another's keeps the later: the other
		 * lease, holding nothing, ends at its TTL.) */
		e->sessions[b].id = id ? id : got_id;
		e->sessions[b].granted_s = got_ttl;
		e->sessions[b].valid_until = sent + got_ttl * 1000;
	}
	pthread_mutex_unlock(&e->sess_mu);
	return rc;
}

static void *session_main(void *arg);

int tsec__etcd_session_lease(struct etcd *e, uint64_t ttl_ms, int64_t *lease,
			     struct tsec_error *err)
{
	unsigned b = class_of(ttl_ms);
	struct tsec__etcd_session *s = &e->sessions[b];
	int rc;

	for (int tries = 0;; tries++) {
		int64_t now = tsec__mono_ms();

		pthread_mutex_lock(&e->sess_mu);
		if (!e->sess_on && !e->sess_stopped) {
			if ((rc = pthread_create(&e->sess, NULL, session_main, e))) {
				pthread_mutex_unlock(&e->sess_mu);
				return tsec__seterr(err, TSEC_EIO, "", "cannot start the etcd "
						    "lease keeper: %s", strerror(rc));
			}
			e->sess_on = true;
		}
		s->used_at = now;
		if (s->id && s->valid_until - now >= needed_ms(s, ttl_ms)) {
			*lease = s->id;
			pthread_mutex_unlock(&e->sess_mu);
			return 0;
		}
		pthread_mutex_unlock(&e->sess_mu);
		if (tries == 2)
			return tsec__seterr(err, TSEC_EIO, "", "etcd keeps no lease long enough "
					    "for a lock of %llu ms", (unsigned long long)ttl_ms);
		if ((rc = refresh(e, b, err)) && rc != TSEC_ENOENT)
			return rc;
		pthread_mutex_lock(&e->sess_mu);
		pthread_cond_broadcast(&e->sess_cv);    /* a new keepalive time */
		pthread_mutex_unlock(&e->sess_mu);
	}
}

void tsec__etcd_session_dead(struct etcd *e, int64_t lease)
{
	pthread_mutex_lock(&e->sess_mu);
	lease_gone(e, lease);
	pthread_mutex_unlock(&e->sess_mu);
}

int tsec__etcd_held_add(struct etcd *e, const char *name, const uint8_t token[16],
			int64_t lease, const char *ds, int64_t until, struct tsec_error *err)
{
	struct tsec__etcd_held *h;
	int rc = 0;

	pthread_mutex_lock(&e->sess_mu);
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
	h->lease = lease;
	h->until = until;
	h->retry = 0;
	e->nheld++;
	pthread_cond_broadcast(&e->sess_cv);     /* perhaps the earliest deadline */
out:
	pthread_mutex_unlock(&e->sess_mu);
	return rc;
}

/* Drops the entries of name and token whose deadline string is ds, or
 * all of them (ds NULL).  Under sess_mu. */
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
	pthread_mutex_lock(&e->sess_mu);
	drop_locked(e, name, token, NULL);
	pthread_mutex_unlock(&e->sess_mu);
}

/*
 * Deletes l and d of a lock whose deadline passed, unless d is no longer
 * the deadline this broker wrote (renewed since, here or elsewhere,
 * released, or taken anew); h stays, so its holder hears "your lease has
 * ended", as when etcd ends a lease.  Whether etcd answered.
 */
static bool reap(struct etcd *e, const struct tsec__etcd_held *h)
{
	char l[TSEC__BK_MAX], d[TSEC__BK_MAX];
	size_t ln = tsec__etcd_bk(e, 'l', h->name, l), dn = tsec__etcd_bk(e, 'd', h->name, d);
	json_t *cmp = json_array(), *ops = json_array(), *r;
	struct tsec_error ignored;
	bool succ;

	json_array_append_new(cmp, tsec__etcd_cmp(l, ln, false, "VALUE", "EQUAL",
						  tsec__b64(h->token, 16)));
	json_array_append_new(cmp, tsec__etcd_cmp(d, dn, false, "VALUE", "EQUAL",
						  tsec__b64(h->ds, strlen(h->ds))));
	json_array_append_new(ops, tsec__etcd_del_op(l, ln));
	json_array_append_new(ops, tsec__etcd_del_op(d, dn));
	if (tsec__etcd_txn(e, cmp, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ, &ignored))
		return false;
	json_decref(r);
	return true;
}

/* Tries the reap of h's entry again at 'at'.  Under sess_mu. */
static void retry_held(struct etcd *e, const struct tsec__etcd_held *h, int64_t at)
{
	for (size_t i = 0; i < e->nheld; i++)
		if (!sodium_memcmp(e->held[i].token, h->token, 16) &&
		    !strcmp(e->held[i].name, h->name) && !strcmp(e->held[i].ds, h->ds))
			e->held[i].retry = at;
}

/* Waits until the monotonic ms at, or a signal; under sess_mu. */
static void wait_until(struct etcd *e, int64_t at)
{
	int64_t ms = at - tsec__mono_ms();
	struct timespec ts;

	if (ms <= 0)
		return;
	ts = tsec__abstime(CLOCK_MONOTONIC, ms > 3600 * 1000 ? 3600 * 1000 : ms);
	pthread_cond_timedwait(&e->sess_cv, &e->sess_mu, &ts);
}

/* Whether class b's lease is still wanted: a lock of ours on it, or an
 * acquire within its length.  Under sess_mu. */
static bool wanted(struct etcd *e, unsigned b, int64_t now)
{
	const struct tsec__etcd_session *s = &e->sessions[b];

	if (now - s->used_at < s->granted_s * 1000)
		return true;
	for (size_t i = 0; i < e->nheld; i++)
		if (e->held[i].lease == s->id)
			return true;
	return false;
}

/*
 * The keeper: keeps each wanted lease alive every quarter of its length
 * (a failed keepalive is tried again within a second), lets the others
 * end, and reaps this broker's locks whose deadline passed.
 */
static void *session_main(void *arg)
{
	struct etcd *e = arg;
	int64_t retry_at[TSEC__ETCD_CLASSES] = { 0 };

	pthread_mutex_lock(&e->sess_mu);
	while (!e->sess_stopped) {
		int64_t now = tsec__mono_ms(), next = now + 3600 * 1000;
		bool found = false;

		for (unsigned b = 0; b < TSEC__ETCD_CLASSES; b++) {
			struct tsec__etcd_session *s = &e->sessions[b];
			int64_t at;

			if (!s->id)
				continue;
			if (!wanted(e, b, now)) {
				memset(s, 0, sizeof(*s));   /* etcd ends it at its TTL */
				continue;
			}
			at = s->valid_until - s->granted_s * 1000 * 3 / 4;
			if (retry_at[b] > at)
				at = retry_at[b];
			if (at <= now) {
				struct tsec_error err;

				pthread_mutex_unlock(&e->sess_mu);
				if (refresh(e, b, &err))
					retry_at[b] = tsec__mono_ms() + 500;
				pthread_mutex_lock(&e->sess_mu);
				found = true;
				break;
			}
			if (at < next)
				next = at;
		}
		for (size_t i = 0; !found && i < e->nheld; i++) {
			int64_t at = e->held[i].until > e->held[i].retry ? e->held[i].until
									 : e->held[i].retry;

			if (at <= now) {
				struct tsec__etcd_held due = e->held[i];
				char name[TSEC__BK_MAX];
				bool answered;

				snprintf(name, sizeof(name), "%s", due.name);
				due.name = name;
				pthread_mutex_unlock(&e->sess_mu);
				answered = reap(e, &due);
				pthread_mutex_lock(&e->sess_mu);
				if (answered)
					drop_locked(e, due.name, due.token, due.ds);
				else
					retry_held(e, &due, tsec__mono_ms() + 500);
				found = true;
			} else if (at < next) {
				next = at;
			}
		}
		if (!found && !e->sess_stopped)
			wait_until(e, next);
	}
	pthread_mutex_unlock(&e->sess_mu);
	return NULL;
}

void tsec__etcd_session_init(struct etcd *e)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&e->sess_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->sess_cv, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * Stops the keeper.  The leases are left to end at their TTL, and with
 * them the locks this broker handed out, unless another broker renews
 * them first: a broker that stops does not end its callers' locks.
 */
void tsec__etcd_session_stop(struct etcd *e)
{
	bool on;

	pthread_mutex_lock(&e->sess_mu);
	e->sess_stopped = true;
	on = e->sess_on;
	pthread_cond_broadcast(&e->sess_cv);
	pthread_mutex_unlock(&e->sess_mu);
	if (on)
		pthread_join(e->sess, NULL);
	for (size_t i = 0; i < e->nheld; i++)
		free(e->held[i].name);
	free(e->held);
	e->held = NULL;
	e->nheld = e->capheld = 0;
	pthread_cond_destroy(&e->sess_cv);
	pthread_mutex_destroy(&e->sess_mu);
}
