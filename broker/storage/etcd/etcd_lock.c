/*
 * Locks on etcd.  A lock is three keys: P/l/<name> (the holder's token)
 * and P/d/<name> (the deadline its writer set: unix ms as at least 16
 * digits, compared only for equality, as the version the keeper reaps),
 * both on a lease of the lock's own, and P/h/<name> (the last holder's
 * token, no lease: it tells "released" from "your lease has ended").
 *
 * No broker's clock decides anything about a lock another broker wrote
 * (issue 48: the guards compared the deadline one broker wrote, by its
 * wall clock, with another's wall clock, so a holder renewing through a
 * broker whose clock was an hour fast was told its lease had ended with
 * a minute left):
 * - the lock ends when etcd ends its lease, granted for its TTL (whole
 *   seconds) at each acquire and renewal and kept alive by nothing else
 *   (etcd_keeper.c), so a lock whose broker is gone ends ceil(TTL) after
 *   its holder's last acquire or renewal, by etcd's clock;
 * - the broker that wrote its deadline deletes it then, by its own
 *   monotonic clock, guarded by the token and that deadline, so that a
 *   TTL of 1,001 ms ends after 1,001 ms, not after etcd's lease (2 s at
 *   least);
 * - renew and release are guarded by the token alone (the lock exists
 *   only while its lease does), a fenced write by the token and the
 *   fence.
 *
 * - Acquire: a lease for it, then one txn "create_revision of l is 0,
 *   and nobody waits first -> put l, d on that lease and h", whose failure
 *   branch reads l and d; waiters are served in the order they came
 *   (etcd_queue.c).  The fence is l's create_revision, which etcd makes
 *   strictly increasing.  A name found held within the last second is
 *   read first instead, so a waiter polls with a read, not a write etcd
 *   must agree on (and no lease is granted for a lock found held).
 * - Renew: a lease for the new TTL, then one txn "l is my token -> put l
 *   and d, with the new deadline, on it" (a put keeps l's
 *   create_revision: the fence stays).  The old lease carries nothing
 *   then, and etcd ends it at its TTL.
 * - Release: one txn with the same guard deletes l, d and h.
 * - A fenced write's txn compares l's create_revision and token, so a
 *   stale holder's write fails in the same step as the write.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/etcd/etcd_private.h"
#include "broker/storage/lease.h"

#define DEADLINE_DIGITS 19      /* INT64_MAX's */

static size_t deadline_str(int64_t ms, char out[24])
{
	return (size_t)snprintf(out, 24, "%016" PRId64, ms < 0 ? 0 : ms);
}

static json_t *put_op(const char *k, size_t kn, const void *v, size_t vn, int64_t lease,
		      bool ignore_lease)
{
	json_t *p = json_pack("{soso}", "key", tsec__b64(k, kn), "value", tsec__b64(v, vn));

	if (lease)
		json_object_set_new(p, "lease", tsec__jnum(lease));
	if (ignore_lease)
		json_object_set_new(p, "ignore_lease", json_true());
	return json_pack("{so}", "request_put", p);
}

/* Whether kv's value is token. */
static bool holds(const json_t *kv, const uint8_t token[16])
{
	uint8_t *v;
	size_t n;
	bool same;

	if (!kv || tsec__unb64(kv, "value", &v, &n))
		return false;
	same = n == 16 && sodium_memcmp(v, token, 16) == 0;
	free(v);
	return same;
}

/* The deadline string in d's kv into out (24 bytes): "" when it is none
 * this broker could have written (then it never reaps on its account). */
static void ds_of(const json_t *kv, char out[24])
{
	uint8_t *v;
	size_t n;

	out[0] = '\0';
	if (!kv || tsec__unb64(kv, "value", &v, &n))
		return;
	if (n >= 16 && n <= DEADLINE_DIGITS && strspn((const char *)v, "0123456789") >= n) {
		memcpy(out, v, n);
		out[n] = '\0';
	}
	free(v);
}

/* Why a guarded lock txn failed, from its failure reads [l, h]. */
static int why(const json_t *r, const char *name, const uint8_t token[16],
	       struct tsec_error *err)
{
	const json_t *l = tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
	const json_t *h = tsec__etcd_kv0(tsec__etcd_resp(r, 1, "response_range"));

	if (l || holds(h, token))
		return tsec__seterr(err, TSEC_ENOTOWNER, name, "lock '%s': %s", name,
				    l && !holds(l, token) ? "held by another owner"
							  : "your lease has ended");
	return tsec__seterr(err, TSEC_ENOENT, name, "lock '%s' is not held", name);
}

struct keys {
	char l[TSEC__BK_MAX], d[TSEC__BK_MAX], h[TSEC__BK_MAX], q[TSEC__BK_MAX];
	size_t ln, dn, hn, qn;
};

static void keys_of(struct etcd *e, const char *name, struct keys *k)
{
	k->ln = tsec__etcd_bk(e, 'l', name, k->l);
	k->dn = tsec__etcd_bk(e, 'd', name, k->d);
	k->hn = tsec__etcd_bk(e, 'h', name, k->h);
	k->qn = tsec__etcd_bk(e, 'q', name, k->q);      /* the queue: [q/, q0) */
}

/* The guard of renew and release: l is the token (it exists only while
 * its lease does: no clock is asked). */
static json_t *guard(const struct keys *k, const uint8_t token[16])
{
	json_t *cmp = json_array();

	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "VALUE", "EQUAL",
						  tsec__b64(token, 16)));
	return cmp;
}

static json_t *why_reads(const struct keys *k)
{
	json_t *ko = json_array();

	json_array_append_new(ko, tsec__etcd_range(k->l, k->ln, false, false));
	json_array_append_new(ko, tsec__etcd_range(k->h, k->hn, false, false));
	return ko;
}

/*
 * Runs ops (consumed) after a read of l, in one txn guarded by "l is my
 * token".  ENOTOWNER or ENOENT (why) when the guard fails.
 */
static int guarded(struct etcd *e, const struct keys *k, const char *name,
		   const uint8_t token[16], json_t *ops, int retry, struct tsec_error *err)
{
	json_t *all = json_array(), *r;
	bool succ;
	int rc;

	json_array_append_new(all, tsec__etcd_range(k->l, k->ln, false, false));
	json_array_extend(all, ops);
	json_decref(ops);
	if ((rc = tsec__etcd_txn(e, guard(k, token), all, why_reads(k), retry, &r, &succ, err)))
		return rc;
	rc = succ ? 0 : why(r, name, token, err);
	json_decref(r);
	return rc;
}

/* A slot of the recently-busy table: names hash onto BUSY_SLOTS. */
static size_t busy_slot(const char *name)
{
	uint32_t h = 2166136261u;

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return h % TSEC__ETCD_BUSY_SLOTS;
}

/*
 * The create txn: "l was never created, and nobody waits (or `me`, the
 * caller's queue entry of create_revision `rev`, waits longest)" -> put
 * l, d on lease and h (and delete me); its failure reads l, d (who holds
 * it, until when) and me (still queued?).  *succ and the response (the
 * caller frees it) as tsec__etcd_txn.
 */
static int create(struct etcd *e, const struct keys *k, const uint8_t token[16], int64_t lease,
		  const char *ds, size_t dl, const char *me, size_t men, int64_t rev,
		  json_t **r, bool *succ, struct tsec_error *err)
{
	json_t *cmp = json_array(), *ops = json_array(), *ko = json_array();

	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "CREATE", "EQUAL",
						  tsec__jnum(0)));
	json_array_append_new(cmp, rev ? tsec__etcd_cmp(k->q, k->qn, true, "CREATE", "GREATER",
							tsec__jnum(rev - 1))
				       : tsec__etcd_cmp(k->q, k->qn, true, "CREATE", "EQUAL",
							tsec__jnum(0)));
	json_array_append_new(ops, put_op(k->l, k->ln, token, 16, lease, false));
	json_array_append_new(ops, put_op(k->d, k->dn, ds, dl, lease, false));
	json_array_append_new(ops, put_op(k->h, k->hn, token, 16, 0, false));
	if (rev)
		json_array_append_new(ops, tsec__etcd_del_op(me, men));
	json_array_append_new(ko, tsec__etcd_range(k->l, k->ln, false, false));
	json_array_append_new(ko, tsec__etcd_range(k->d, k->dn, false, false));
	if (rev)
		json_array_append_new(ko, tsec__etcd_range(me, men, false, true));
	return tsec__etcd_txn(e, cmp, ops, ko, TSEC__ETCD_IDEMPOTENT, r, succ, err);
}

/* A read of the queue's head: its oldest entry, keys only. */
static json_t *head_op(const struct keys *k)
{
	json_t *op = tsec__etcd_range(k->q, k->qn, true, true);
	json_t *rr = json_object_get(op, "request_range");

	json_object_set_new(rr, "sort_order", json_string("ASCEND"));
	json_object_set_new(rr, "sort_target", json_string("CREATE"));
	return op;
}

/* A try that found the lock held, or waited for by an earlier waiter:
 * the waiter queues (or keeps its place), and polls with reads. */
static int busy(struct etcd *e, const char *name, const uint8_t *waiter, bool held,
		struct tsec_error *err)
{
	atomic_store(&e->busy_at[busy_slot(name)], tsec__mono_ms());
	tsec__etcd_queue_wait(e, name, waiter);
	return tsec__seterr(err, TSEC_EBUSY, name, held ? "lock '%s' is held"
				: "lock '%s' is free but others wait for it first", name);
}

/*
 * A held lock (its l and d as read) whose deadline this broker wrote and
 * which has passed by this broker's clock: deleted now (the keeper would
 * at its next look).  Whether it was.
 */
static bool ended_here(struct etcd *e, const char *name, const json_t *l, const json_t *d)
{
	uint8_t *tok;
	size_t n;
	char ds[24];
	bool due;

	if (!l || tsec__unb64(l, "value", &tok, &n))
		return false;
	ds_of(d, ds);
	due = n == 16 && ds[0] && tsec__etcd_held_due(e, name, tok, ds) &&
	      tsec__etcd_reap(e, name, tok, ds);
	free(tok);
	return due;
}

/* Whether rc, err are etcd's "requested lease not found". */
static bool lease_lost(int rc, const struct tsec_error *err)
{
	return rc == TSEC_ENOENT && strstr(err->msg, "lease not found");
}

/*
 * Notes a deadline written (or perhaps written: rc an error) for the
 * keeper.  A lock that cannot be noted is not handed out.
 */
static int noted(struct etcd *e, const char *name, const uint8_t token[16], const char *ds,
		 int64_t until, int rc, struct tsec_error *err)
{
	struct tsec_error ignored;

	if (rc) {
		tsec__etcd_held_add(e, name, token, ds, until, &ignored);
		return rc;
	}
	if ((rc = tsec__etcd_held_add(e, name, token, ds, until, err)))
		tsec__etcd_lock_release(&e->base, name, token, &ignored);
	return rc;
}

/*
 * A lease for the lock and one create txn on it when the lock is free and
 * nobody waits; the txn's failure branch reads the holder.  A name found
 * held in the last BUSY_MS is looked at first instead (a read, which
 * etcd answers without a raft round, one per poll), with the head of its
 * queue (etcd_queue.c).
 */
int tsec__etcd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
			const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	struct keys k;
	json_t *r, *ops;
	const json_t *l, *d, *q;
	int64_t now, mono, lease = 0, rev = tsec__etcd_queued(e, waiter);
	uint8_t token[16];
	char ds[24], me[TSEC__BK_MAX];
	size_t men = waiter ? tsec__etcd_qkey(e, name, waiter, me) : 0;
	bool succ;
	int rc;

	keys_of(e, name, &k);
	if (tsec__mono_ms() - atomic_load(&e->busy_at[busy_slot(name)]) < TSEC__ETCD_BUSY_MS) {
		/* Held a moment ago: is it still, and who waits longest? */
		ops = json_array();
		json_array_append_new(ops, tsec__etcd_range(k.l, k.ln, false, false));
		json_array_append_new(ops, tsec__etcd_range(k.d, k.dn, false, false));
		json_array_append_new(ops, head_op(&k));
		if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ,
					 err)))
			return rc;
		l = tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
		d = tsec__etcd_kv0(tsec__etcd_resp(r, 1, "response_range"));
		q = tsec__etcd_kv0(tsec__etcd_resp(r, 2, "response_range"));
		if ((l && !ended_here(e, name, l, d)) ||
		    (q && tsec__jint(q, "create_revision", 0) != rev)) {
			json_decref(r);
			return busy(e, name, waiter, l != NULL, err);
		}
		json_decref(r);
	}
	/* The deadline counts from before the lease was asked for: etcd
	 * ends the lease no sooner than its TTL after it granted it. */
	now = tsec__wall_ms();
	mono = tsec__mono_ms();
	randombytes_buf(token, sizeof(token));
	deadline_str(tsec__deadline_after(now, ttl_ms), ds);
	for (int tries = 0;; tries++) {
		if ((rc = tsec__etcd_lock_lease(e, ttl_ms, &lease, err)))
			return rc;
		rc = create(e, &k, token, lease, ds, strlen(ds), me, men, rev, &r, &succ, err);
		if (lease_lost(rc, err) && tries < 2)
			continue;        /* it ended before the txn (a pause): another */
		if (rc)
			return noted(e, name, token, ds, tsec__deadline_after(mono, ttl_ms), rc, err);
		l = succ ? NULL : tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
		d = succ ? NULL : tsec__etcd_kv0(tsec__etcd_resp(r, 1, "response_range"));
		if (succ) {
			out->fence = (uint64_t)tsec__jint(json_object_get(r, "header"), "revision", 0);
		} else if (holds(l, token)) {
			/* Our own write, answered late and retried. */
			out->fence = (uint64_t)tsec__jint(l, "create_revision", 0);
		} else if (!tries && l && ended_here(e, name, l, d)) {
			json_decref(r);
			continue;        /* ended by its deadline, here: once more */
		} else {
			/* Held, or free with an older waiter first (the lease
			 * granted for it ends unused at its TTL).  A queued
			 * waiter whose entry is gone (its lease ended while it
			 * paused) joins again, at the back. */
			if (rev && !tsec__etcd_kv0(tsec__etcd_resp(r, 2, "response_range")))
				tsec__etcd_queue_forget(e, waiter);
			json_decref(r);
			return busy(e, name, waiter, l != NULL, err);
		}
		break;
	}
	json_decref(r);
	if (rev)
		tsec__etcd_queue_forget(e, waiter);      /* served: its entry went in the txn */
	if ((rc = noted(e, name, token, ds, tsec__deadline_after(mono, ttl_ms), 0, err)))
		return rc;
	memcpy(out->token, token, sizeof(token));
	out->expires_ms = tsec__deadline_after(now, ttl_ms);
	return 0;
}

/*
 * A lease for the new TTL, and one txn: "l is my token" -> put l and d,
 * with the new deadline, on it (a put keeps l's create_revision: the
 * fence stays).  The old lease carries nothing then.
 */
int tsec__etcd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			  uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	int64_t now = tsec__wall_ms(), mono = tsec__mono_ms(), lease = 0, until;
	struct keys k;
	json_t *ops;
	char ds[24];
	size_t dl;
	int rc;

	keys_of(e, name, &k);
	until = tsec__deadline_after(now, ttl_ms);
	dl = deadline_str(until, ds);
	for (int tries = 0;; tries++) {
		if ((rc = tsec__etcd_lock_lease(e, ttl_ms, &lease, err)))
			return rc;
		ops = json_array();
		json_array_append_new(ops, put_op(k.l, k.ln, token, 16, lease, false));
		json_array_append_new(ops, put_op(k.d, k.dn, ds, dl, lease, false));
		rc = guarded(e, &k, name, token, ops, TSEC__ETCD_IDEMPOTENT, err);
		if (!lease_lost(rc, err) || tries >= 2)
			break;
	}
	if (rc == TSEC_ENOTOWNER || rc == TSEC_ENOENT)
		return rc;               /* the guard failed: nothing written */
	if (!rc)
		tsec__etcd_held_drop(e, name, token);   /* its old deadlines */
	/* On an error, perhaps applied: the keeper deletes it at the new
	 * deadline too, if that is what d holds then. */
	if ((rc = noted(e, name, token, ds, tsec__deadline_after(mono, ttl_ms), rc, err)))
		return rc;
	*expires_ms = until;
	return 0;
}

int tsec__etcd_lock_release(struct tsec__backend *b, const char *name,
			    const uint8_t token[16], struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	struct keys k;
	json_t *ops;
	int rc;

	keys_of(e, name, &k);
	ops = json_array();
	json_array_append_new(ops, tsec__etcd_del_op(k.l, k.ln));
	json_array_append_new(ops, tsec__etcd_del_op(k.d, k.dn));
	json_array_append_new(ops, tsec__etcd_del_op(k.h, k.hn));
	/* One request; the lease, carrying nothing now, ends at its TTL. */
	if (!(rc = guarded(e, &k, name, token, ops, TSEC__ETCD_ONCE, err)) ||
	    rc == TSEC_ENOENT || rc == TSEC_ENOTOWNER)
		tsec__etcd_held_drop(e, name, token);
	return rc;
}

void tsec__etcd_fence_cmp(struct etcd *e, const struct tsec__fence *f, json_t *cmp, json_t *ko)
{
	struct keys k;

	keys_of(e, f->name, &k);
	json_array_append_new(cmp, tsec__etcd_cmp(k.l, k.ln, false, "CREATE", "EQUAL",
						  tsec__jnum((int64_t)f->fence)));
	json_array_append_new(cmp, tsec__etcd_cmp(k.l, k.ln, false, "VALUE", "EQUAL",
						  tsec__b64(f->token, 16)));
	json_array_append_new(ko, tsec__etcd_range(k.l, k.ln, false, false));
	json_array_append_new(ko, tsec__etcd_range(k.h, k.hn, false, false));
}

int tsec__etcd_fence_why(struct etcd *e, const struct tsec__fence *f, const json_t *resp,
			 struct tsec_error *err)
{
	const json_t *l = tsec__etcd_kv0(tsec__etcd_resp(resp, 0, "response_range"));

	(void)e;
	if (l && holds(l, f->token) &&
	    (uint64_t)tsec__jint(l, "create_revision", 0) == f->fence)
		return 0;                /* the lock is fine: a folder was in the way */
	if (l && holds(l, f->token))
		return tsec__seterr(err, TSEC_ENOTOWNER, f->name, "lock '%s': another fence",
				    f->name);
	return why(resp, f->name, f->token, err);
}
