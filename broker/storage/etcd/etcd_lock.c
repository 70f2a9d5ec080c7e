/*
 * Locks on etcd.  A lock is three keys: P/l/<name> (the holder's token)
 * and P/d/<name> (its deadline, unix ms as at least 16 digits, so that
 * etcd compares deadlines as bytes: a deadline past 1e16 has 17 to 19
 * digits and a first digit above the '0' that starts every 16-digit
 * "now", so it still compares greater), both attached to an etcd lease,
 * and
 * P/h/<name> (the last holder's token, no lease: it tells "released"
 * from "your lease ended").
 *
 * - Acquire: grant a lease, then one txn "create_revision of l is 0 ->
 *   put l, d, h with the lease", whose failure branch reads l and d.  The
 *   fence is l's create_revision, which etcd makes strictly increasing.
 *   A name found held within the last second is read first instead, so a
 *   waiter polls with one read and grants no lease it would revoke.  A
 *   held lock is taken over only when etcd ends its lease (as etcd's own
 *   Mutex does): no broker's clock decides that another broker's holder
 *   is gone.  Only where a fleet sets clock_skew_ms (its clocks are known
 *   to agree that well) is a lock whose deadline passed more than
 *   clock_skew_ms ago by the taker's clock deleted by a txn guarded by
 *   what was read, then taken the same way.
 * - Renew: one txn "l is my token and d is still ahead -> move d", then
 *   a lease keepalive (no TTL back: the lease is gone, not the owner).
 * - Release: one txn with the same guard deletes l, d and h; the lease,
 *   holding nothing, ends at its TTL.
 * - A fenced write's txn compares l's create_revision and token and d,
 *   so a stale holder's write fails in the same step as the write.
 *
 * etcd's lease (whole seconds, at least the lease asked for) ends the
 * lock of a holder that died, whatever the brokers' clocks say; the
 * deadline in d gives leases their exact length.
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

static json_t *del_op(const char *k, size_t kn)
{
	return json_pack("{s{so}}", "request_delete_range", "key", tsec__b64(k, kn));
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

/*
 * The deadline in kv, read as a number of up to 19 digits.
 * Anything else, a missing key included, is INT64_MAX: held until etcd's
 * own lease ends it, never taken over early by a planted or torn value.
 */
static int64_t deadline_of(const json_t *kv)
{
	uint8_t *v;
	size_t n;
	int64_t d = 0;

	if (!kv || tsec__unb64(kv, "value", &v, &n))
		return INT64_MAX;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9' || n > DEADLINE_DIGITS ||
		    d > (INT64_MAX - (v[i] - '0')) / 10) {
			d = INT64_MAX;
			break;
		}
		d = d * 10 + (v[i] - '0');
	}
	if (n == 0)
		d = INT64_MAX;
	free(v);
	return d;
}

static int lease_call(struct etcd *e, const char *path, int64_t id, int64_t ttl_s,
		      int64_t *got_id, int64_t *got_ttl, struct tsec_error *err)
{
	json_t *req = json_object(), *r, *res;
	int rc;

	if (id)
		json_object_set_new(req, "ID", tsec__jnum(id));
	if (ttl_s)
		json_object_set_new(req, "TTL", tsec__jnum(ttl_s));
	if ((rc = tsec__etcd_post(e->c, path, req, TSEC__ETCD_IDEMPOTENT, &r, err)))
		return rc;
	res = json_object_get(r, "result") ? json_object_get(r, "result") : r;
	if (got_id)
		*got_id = tsec__jint(res, "ID", 0);
	if (got_ttl)
		*got_ttl = tsec__jint(res, "TTL", 0);
	if (ttl_s && !id && tsec__jint(res, "TTL", 0) > ttl_s &&
	    tsec__jint(res, "TTL", 0) > atomic_load(&e->lease_floor_s))
		atomic_store(&e->lease_floor_s, tsec__jint(res, "TTL", 0));
	json_decref(r);
	return 0;
}

static void revoke(struct etcd *e, int64_t lease)
{
	struct tsec_error ignored;

	if (lease)
		lease_call(e, "/v3/lease/revoke", lease, 0, NULL, NULL, &ignored);
}

static int64_t ttl_seconds(uint64_t ttl_ms)
{
	uint64_t s = ttl_ms / 1000 + (ttl_ms % 1000 != 0);

	return s > INT32_MAX ? INT32_MAX : (int64_t)s;
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
	char l[TSEC__BK_MAX], d[TSEC__BK_MAX], h[TSEC__BK_MAX];
	size_t ln, dn, hn;
};

static void keys_of(struct etcd *e, const char *name, struct keys *k)
{
	k->ln = tsec__etcd_bk(e, 'l', name, k->l);
	k->dn = tsec__etcd_bk(e, 'd', name, k->d);
	k->hn = tsec__etcd_bk(e, 'h', name, k->h);
}

/* The guard of renew and release: l is token and d is still ahead. */
static json_t *guard(const struct keys *k, const uint8_t token[16], int64_t now_ms)
{
	char ds[24];
	size_t dl = deadline_str(now_ms, ds);
	json_t *cmp = json_array();

	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "VALUE", "EQUAL",
						  tsec__b64(token, 16)));
	json_array_append_new(cmp, tsec__etcd_cmp(k->d, k->dn, false, "VALUE", "GREATER",
						  tsec__b64(ds, dl)));
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
 * token and d is still ahead"; *lease is l's etcd lease.  ENOTOWNER or
 * ENOENT (why) when the guard fails.
 */
static int guarded(struct etcd *e, const struct keys *k, const char *name,
		   const uint8_t token[16], int64_t now, json_t *ops, int retry, int64_t *lease,
		   struct tsec_error *err)
{
	json_t *all = json_array(), *r;
	bool succ;
	int rc;

	json_array_append_new(all, tsec__etcd_range(k->l, k->ln, false, false));
	json_array_extend(all, ops);
	json_decref(ops);
	if ((rc = tsec__etcd_txn(e, guard(k, token, now), all, why_reads(k), retry, &r, &succ, err)))
		return rc;
	rc = succ ? 0 : why(r, name, token, err);
	*lease = tsec__jint(tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range")), "lease", 0);
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
 * The create txn: "l was never created" -> put l, d, h on lease; its
 * failure reads l and d (who holds it, until when).  *succ and the
 * response (the caller frees it) as tsec__etcd_txn.
 */
static int create(struct etcd *e, const struct keys *k, const uint8_t token[16], int64_t lease,
		  const char *ds, size_t dl, json_t **r, bool *succ, struct tsec_error *err)
{
	json_t *cmp = json_array(), *ops = json_array(), *ko = json_array();

	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "CREATE", "EQUAL",
						  tsec__jnum(0)));
	json_array_append_new(ops, put_op(k->l, k->ln, token, 16, lease, false));
	json_array_append_new(ops, put_op(k->d, k->dn, ds, dl, lease, false));
	json_array_append_new(ops, put_op(k->h, k->hn, token, 16, 0, false));
	json_array_append_new(ko, tsec__etcd_range(k->l, k->ln, false, false));
	json_array_append_new(ko, tsec__etcd_range(k->d, k->dn, false, false));
	return tsec__etcd_txn(e, cmp, ops, ko, TSEC__ETCD_IDEMPOTENT, r, succ, err);
}

/*
 * Deletes a held lock whose deadline (d) passed more than clock_skew_ms
 * ago by this broker's clock, unless it changed since l and d were read:
 * only where the fleet set clock_skew_ms.  Whether it was deleted.
 */
static bool take_over(struct etcd *e, const struct keys *k, const json_t *l, const json_t *d)
{
	struct tsec_error ignored;
	json_t *cmp, *ops, *r;
	int64_t lease = tsec__jint(l, "lease", 0);
	bool succ = false;

	if (!e->skew_ms || deadline_of(d) > tsec__wall_ms() - (int64_t)e->skew_ms)
		return false;
	cmp = json_array();
	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "CREATE", "EQUAL",
						  tsec__jnum(tsec__jint(l, "create_revision", 0))));
	json_array_append_new(cmp, d ? tsec__etcd_cmp(k->d, k->dn, false, "MOD", "EQUAL",
						      tsec__jnum(tsec__jint(d, "mod_revision", 0)))
				     : tsec__etcd_cmp(k->d, k->dn, false, "VERSION", "EQUAL",
						      tsec__jnum(0)));
	ops = json_array();
	json_array_append_new(ops, del_op(k->l, k->ln));
	json_array_append_new(ops, del_op(k->d, k->dn));
	if (tsec__etcd_txn(e, cmp, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ, &ignored))
		return false;
	json_decref(r);
	if (succ)
		revoke(e, lease);        /* only once it is ours to end */
	return succ;
}

/*
 * Two requests when the lock is free: grant a lease, then one create txn
 * whose failure branch reads the holder.  A name found held in the last
 * BUSY_MS is looked at first instead (one read per poll, no lease granted
 * and revoked while waiting); a lease granted for a lock found held is
 * revoked.
 */
int tsec__etcd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
			const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	_Atomic int64_t *busy = &e->busy_at[busy_slot(name)];
	struct keys k;
	json_t *r, *ops;
	const json_t *l, *d;
	int64_t now, lease = 0, granted = 0;
	uint8_t token[16];
	char ds[24];
	size_t dl;
	bool succ;
	int rc;

	(void)waiter;                    /* waiting is capped backoff (lock.c) */
	keys_of(e, name, &k);
	if (tsec__mono_ms() - atomic_load(busy) < TSEC__ETCD_BUSY_MS) {
		/* Held a moment ago: is it still, and is its deadline past? */
		ops = json_array();
		json_array_append_new(ops, tsec__etcd_range(k.l, k.ln, false, false));
		json_array_append_new(ops, tsec__etcd_range(k.d, k.dn, false, false));
		if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ,
					 err)))
			return rc;
		l = tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
		d = tsec__etcd_kv0(tsec__etcd_resp(r, 1, "response_range"));
		if (l && !take_over(e, &k, l, d)) {
			json_decref(r);
			atomic_store(busy, tsec__mono_ms());
			return tsec__seterr(err, TSEC_EBUSY, name, "lock '%s' is held", name);
		}
		json_decref(r);
	}
	/* The deadline counts from before the lease exists, so that etcd
	 * never ends the lease before the deadline. */
	now = tsec__wall_ms();
	if ((rc = lease_call(e, "/v3/lease/grant", 0, ttl_seconds(ttl_ms), &lease, &granted, err)))
		return rc;
	if (!lease || granted <= 0)
		return tsec__seterr(err, TSEC_EIO, name, "etcd granted no lease");
	randombytes_buf(token, sizeof(token));
	dl = deadline_str(tsec__deadline_after(now, ttl_ms), ds);
	for (int tries = 0;; tries++) {
		if ((rc = create(e, &k, token, lease, ds, dl, &r, &succ, err))) {
			revoke(e, lease);
			return rc;
		}
		l = succ ? NULL : tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
		d = succ ? NULL : tsec__etcd_kv0(tsec__etcd_resp(r, 1, "response_range"));
		if (succ) {
			out->fence = (uint64_t)tsec__jint(json_object_get(r, "header"), "revision", 0);
		} else if (holds(l, token)) {
			/* Our own write, answered late and retried. */
			out->fence = (uint64_t)tsec__jint(l, "create_revision", 0);
		} else if (!tries && l && take_over(e, &k, l, d)) {
			json_decref(r);
			continue;        /* ended by its deadline: once more */
		} else {
			json_decref(r);
			revoke(e, lease);
			atomic_store(busy, tsec__mono_ms());
			return tsec__seterr(err, TSEC_EBUSY, name, "lock '%s' is held", name);
		}
		break;
	}
	json_decref(r);
	memcpy(out->token, token, sizeof(token));
	out->expires_ms = tsec__deadline_after(now, ttl_ms);
	return 0;
}

/*
 * Of two leases, the one the lock no longer uses (0: unknown, or the lock
 * is no longer ours on either).
 */
static int64_t on_lease(struct etcd *e, const struct keys *k, const uint8_t token[16],
			int64_t old, int64_t fresh)
{
	struct tsec_error ignored;
	json_t *ops = json_array(), *r;
	const json_t *l;
	int64_t now_on, unused = 0;
	bool succ;

	json_array_append_new(ops, tsec__etcd_range(k->l, k->ln, false, false));
	if (tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ, &ignored))
		return 0;
	l = tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range"));
	if (l && holds(l, token)) {
		now_on = tsec__jint(l, "lease", 0);
		unused = now_on == fresh ? old : now_on == old ? fresh : 0;
	} else {
		unused = fresh;          /* not ours: the fresh lease holds nothing of ours */
	}
	json_decref(r);
	return unused;
}

int tsec__etcd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			  uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	int64_t now = tsec__wall_ms(), lease, ttl = 0, until;
	struct keys k;
	json_t *r, *ops;
	char ds[24];
	size_t dl;
	bool succ;
	int rc;

	keys_of(e, name, &k);
	until = tsec__deadline_after(now, ttl_ms);
	dl = deadline_str(until, ds);
	ops = json_array();
	json_array_append_new(ops, put_op(k.d, k.dn, ds, dl, 0, true));
	if ((rc = guarded(e, &k, name, token, now, ops, TSEC__ETCD_IDEMPOTENT, &lease, err)))
		return rc;
	if ((rc = lease_call(e, "/v3/lease/keepalive", lease, 0, NULL, &ttl, err)))
		return rc;
	if (ttl <= 0)
		return tsec__seterr(err, TSEC_ENOTOWNER, name, "lock '%s': its etcd lease is gone",
				    name);
	if ((uint64_t)ttl * 1000 < ttl_ms ||
	    (ttl > ttl_seconds(ttl_ms) && ttl > atomic_load(&e->lease_floor_s))) {
		/*
		 * A longer lease than etcd's, or a shorter one: move the lock to
		 * a fresh etcd lease of the length asked for, so that the lock
		 * ends for everyone when its holder was told (a put keeps the
		 * key's create_revision: the fence stays).
		 */
		int64_t fresh = 0, got = 0;
		json_t *cmp = json_array();

		if ((rc = lease_call(e, "/v3/lease/grant", 0, ttl_seconds(ttl_ms), &fresh, &got, err)))
			return rc;
		json_array_append_new(cmp, tsec__etcd_cmp(k.l, k.ln, false, "VALUE", "EQUAL",
							  tsec__b64(token, 16)));
		ops = json_array();
		json_array_append_new(ops, put_op(k.l, k.ln, token, 16, fresh, false));
		json_array_append_new(ops, put_op(k.d, k.dn, ds, dl, fresh, false));
		if ((rc = tsec__etcd_txn(e, cmp, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &succ, err))) {
			/* Unknown outcome: the lock may be on the fresh lease
			 * already, and revoking it would end our own lock.  Look
			 * before ending either lease; if we cannot look, end
			 * neither (etcd ends the unused one at its TTL). */
			int64_t unused = on_lease(e, &k, token, lease, fresh);

			revoke(e, unused);
			if (!unused || unused != lease)
				return rc;
			succ = true;     /* it was applied: the lock is on fresh */
		} else {
			json_decref(r);
			revoke(e, succ ? lease : fresh);
		}
		if (!succ)
			return tsec__seterr(err, TSEC_ENOTOWNER, name, "lock '%s': lost while renewing",
					    name);
	}
	*expires_ms = until;
	return 0;
}

int tsec__etcd_lock_release(struct tsec__backend *b, const char *name,
			    const uint8_t token[16], struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	struct keys k;
	json_t *ops;
	int64_t lease;

	keys_of(e, name, &k);
	ops = json_array();
	json_array_append_new(ops, del_op(k.l, k.ln));
	json_array_append_new(ops, del_op(k.d, k.dn));
	json_array_append_new(ops, del_op(k.h, k.hn));
	/* One request.  The lock's lease, holding nothing now, is left for
	 * etcd to end at its TTL rather than revoked on the caller's time
	 * (as etcd's own Mutex leaves its session's lease). */
	return guarded(e, &k, name, token, tsec__wall_ms(), ops, TSEC__ETCD_ONCE, &lease, err);
}

void tsec__etcd_fence_cmp(struct etcd *e, const struct tsec__fence *f, json_t *cmp, json_t *ko)
{
	struct keys k;
	char ds[24];
	size_t dl = deadline_str(tsec__wall_ms(), ds);

	keys_of(e, f->name, &k);
	json_array_append_new(cmp, tsec__etcd_cmp(k.l, k.ln, false, "CREATE", "EQUAL",
						  tsec__jnum((int64_t)f->fence)));
	json_array_append_new(cmp, tsec__etcd_cmp(k.l, k.ln, false, "VALUE", "EQUAL",
						  tsec__b64(f->token, 16)));
	json_array_append_new(cmp, tsec__etcd_cmp(k.d, k.dn, false, "VALUE", "GREATER",
						  tsec__b64(ds, dl)));
	json_array_append_new(ko, tsec__etcd_range(k.l, k.ln, false, false));
	json_array_append_new(ko, tsec__etcd_range(k.h, k.hn, false, false));
	json_array_append_new(ko, tsec__etcd_range(k.d, k.dn, false, false));
}

int tsec__etcd_fence_why(struct etcd *e, const struct tsec__fence *f, const json_t *resp,
			 struct tsec_error *err)
{
	const json_t *l = tsec__etcd_kv0(tsec__etcd_resp(resp, 0, "response_range"));
	const json_t *d = tsec__etcd_kv0(tsec__etcd_resp(resp, 2, "response_range"));

	(void)e;
	if (l && holds(l, f->token) &&
	    (uint64_t)tsec__jint(l, "create_revision", 0) == f->fence &&
	    deadline_of(d) > tsec__wall_ms())
		return 0;                /* the lock is fine: a folder was in the way */
	if (l && holds(l, f->token) && (uint64_t)tsec__jint(l, "create_revision", 0) != f->fence)
		return tsec__seterr(err, TSEC_ENOTOWNER, f->name, "lock '%s': another fence",
				    f->name);
	return why(resp, f->name, f->token, err);
}
