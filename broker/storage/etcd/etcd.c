/*
 * The etcd backend: values, folders and listings over etcd's v3 API
 * (through its JSON gateway, etcd_http.c); locks are in etcd_lock.c.
 *
 * Layout under the prefix P:  P/k/<key>  a value (fleet.h's envelope);
 * P/l/<name>, P/d/<name>, P/h/<name>  a lock (etcd_lock.c).  The fleet's
 * signed policy bundle is a value under P/k/.tsec-fleet/ (records.c).  Folders are implicit: a folder exists
 * while a key lies below it.  Every write is one txn whose compares
 * carry the store's rules (no value where a folder is, no value above
 * another), so a rule and the write it guards are one step in etcd.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/etcd/etcd_private.h"

struct etcd *tsec__etcd_of(struct tsec__backend *b)
{
	return (struct etcd *)b;
}

size_t tsec__etcd_bk(const struct etcd *e, char ns, const char *key, char *out)
{
	size_t kl = strlen(key);

	memcpy(out, e->prefix, e->plen);
	out[e->plen] = '/';
	out[e->plen + 1] = ns;
	out[e->plen + 2] = '/';
	memcpy(out + e->plen + 3, key, kl + 1);
	return e->plen + 3 + kl;
}

json_t *tsec__etcd_del_op(const char *k, size_t kn)
{
	return json_pack("{s{so}}", "request_delete_range", "key", tsec__b64(k, kn));
}

json_t *tsec__etcd_range(const char *k, size_t n, bool below, bool count_only)
{
	json_t *r = json_object();
	char end[TSEC__BK_MAX + 2];

	if (below) {
		/* [k/, k0): everything below the folder k, not "k-sibling". */
		char kk[TSEC__BK_MAX + 2];

		memcpy(kk, k, n);
		kk[n] = '/';
		memcpy(end, k, n);
		end[n] = '/' + 1;
		json_object_set_new(r, "key", tsec__b64(kk, n + 1));
		json_object_set_new(r, "range_end", tsec__b64(end, n + 1));
	} else {
		json_object_set_new(r, "key", tsec__b64(k, n));
	}
	if (count_only) {
		json_object_set_new(r, "keys_only", json_true());
		json_object_set_new(r, "limit", tsec__jnum(1));
	}
	return json_pack("{so}", "request_range", r);
}

json_t *tsec__etcd_cmp(const char *k, size_t n, bool below, const char *target,
		       const char *result, json_t *val)
{
	json_t *c = json_object();

	if (below) {
		char kk[TSEC__BK_MAX + 2], end[TSEC__BK_MAX + 2];

		memcpy(kk, k, n);
		kk[n] = '/';
		memcpy(end, k, n);
		end[n] = '/' + 1;
		json_object_set_new(c, "key", tsec__b64(kk, n + 1));
		json_object_set_new(c, "range_end", tsec__b64(end, n + 1));
	} else {
		json_object_set_new(c, "key", tsec__b64(k, n));
	}
	json_object_set_new(c, "target", json_string(target));
	json_object_set_new(c, "result", json_string(result));
	if (!strcmp(target, "VERSION"))
		json_object_set_new(c, "version", val);
	else if (!strcmp(target, "CREATE"))
		json_object_set_new(c, "create_revision", val);
	else if (!strcmp(target, "MOD"))
		json_object_set_new(c, "mod_revision", val);
	else
		json_object_set_new(c, "value", val);
	return c;
}

json_t *tsec__etcd_resp(const json_t *txn, size_t i, const char *kind)
{
	return json_object_get(json_array_get(json_object_get(txn, "responses"), i), kind);
}

const json_t *tsec__etcd_kv0(const json_t *range)
{
	return json_array_get(json_object_get(range, "kvs"), 0);
}

int tsec__etcd_txn(struct etcd *e, json_t *cmp, json_t *ok, json_t *ko, int retry,
		   json_t **resp, bool *succeeded, struct tsec_error *err)
{
	json_t *t = json_object();
	size_t ranges = 0;
	int rc;

	*resp = NULL;
	if (json_array_size(cmp) > e->max_ops || json_array_size(ok) > e->max_ops) {
		json_decref(cmp);
		json_decref(ok);
		json_decref(ko);
		json_decref(t);
		return tsec__seterr(err, TSEC_ETOOBIG, "", "one etcd transaction would need more "
				    "than %zu operations (etcd's --max-txn-ops)", e->max_ops);
	}
	/* Each range of a transaction names one key or takes one (limit 1):
	 * its answer holds at most one value a range. */
	for (int k = 0; k < 2; k++) {
		const json_t *op;
		size_t i;

		json_array_foreach(k ? ko : ok, i, op)
			ranges += json_object_get(op, "request_range") != NULL;
	}
	json_object_set_new(t, "compare", cmp ? cmp : json_array());
	json_object_set_new(t, "success", ok ? ok : json_array());
	json_object_set_new(t, "failure", ko ? ko : json_array());
	if ((rc = tsec__etcd_post(e->c, "/v3/kv/txn", t, retry, ranges, 0, resp, err)))
		return rc;
	/* A missing "succeeded" means false (the gateway leaves out zeros). */
	*succeeded = json_is_true(json_object_get(*resp, "succeeded"));
	return 0;
}

/* What lies at a key: its value's kv (or NULL) and whether it is a folder. */
static int look(struct etcd *e, const struct tsec__skey *sk, json_t **resp,
		const json_t **kv, bool *folder, struct tsec_error *err)
{
	char bk[TSEC__BK_MAX];
	size_t n = tsec__etcd_bk(e, 'k', sk->text, bk);
	json_t *ops = json_array();
	bool ok;
	int rc;

	json_array_append_new(ops, tsec__etcd_range(bk, n, false, false));
	json_array_append_new(ops, tsec__etcd_range(bk, n, true, true));
	if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, resp, &ok, err)))
		return rc;
	*kv = tsec__etcd_kv0(tsec__etcd_resp(*resp, 0, "response_range"));
	*folder = tsec__etcd_kv0(tsec__etcd_resp(*resp, 1, "response_range")) != NULL;
	return 0;
}

/* Opens the value in kv: *val is new (free()), NUL-terminated. */
static int open_kv(struct etcd *e, const char *text, const json_t *kv, size_t max,
		   char **out, size_t *len, int64_t *mtime, struct tsec_error *err)
{
	char bk[TSEC__BK_MAX];
	size_t bn = tsec__etcd_bk(e, 'k', text, bk), envlen, vlen;
	uint8_t *env, *val;
	int64_t mt;
	int rc;

	if (tsec__unb64(kv, "value", &env, &envlen))
		return tsec__seterr(err, TSEC_EIO, text, "%s: etcd sent a value that is not base64", text);
	if ((rc = tsec__env_unwrap(&e->seal, bk, bn, env, envlen, &val, &vlen, &mt, err))) {
		free(env);
		snprintf(err->where, sizeof(err->where), "%s", text);
		return rc;
	}
	if (mtime)
		*mtime = mt;
	if (vlen > max) {
		free(env);
		return tsec__seterr(err, TSEC_ETOOBIG, text, "value larger than %zu bytes", max);
	}
	if (out) {
		memmove(env, val, vlen);
		env[vlen] = '\0';
		*out = (char *)env;
		*len = vlen;
	} else {
		free(env);
		if (len)
			*len = vlen;
	}
	return 0;
}

static int et_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	const json_t *kv;
	json_t *r;
	bool folder;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = look(e, sk, &r, &kv, &folder, err)))
		return rc;
	if (kv)
		rc = open_kv(e, sk->text, kv, max, out, len, NULL, err);
	else if (folder)
		rc = tsec__seterr(err, TSEC_EINVAL, sk->text, "'%s' is a folder, not a value", sk->text);
	else
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	json_decref(r);
	return rc;
}

/* One transaction of ranges: every value as of one revision. */
static int et_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		       size_t max, char **out, size_t *len, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	json_t *ops, *r = NULL;
	bool ok;
	int rc;

	if ((rc = tsec__values_begin(out, len, n, err)))
		return rc;
	ops = json_array();
	for (size_t i = 0; i < n; i++) {
		char bk[TSEC__BK_MAX];
		size_t bn = tsec__etcd_bk(e, 'k', k[i].text, bk);

		json_array_append_new(ops, tsec__etcd_range(bk, bn, false, false));
	}
	if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &ok, err)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		const json_t *kv = tsec__etcd_kv0(tsec__etcd_resp(r, i, "response_range"));
		if (kv)
			rc = open_kv(e, k[i].text, kv, max, &out[i], &len[i], NULL, err);
	}
	json_decref(r);
	if (rc)
		tsec__values_free(out, len, n);
	return rc;
}

/* One transaction of count-only ranges: which keys hold a value. */
static int et_files_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
			 int *file, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	json_t *ops = json_array(), *r = NULL;
	bool ok;
	int rc;

	for (size_t i = 0; i < n; i++) {
		char bk[TSEC__BK_MAX];
		size_t bn = tsec__etcd_bk(e, 'k', k[i].text, bk);

		json_array_append_new(ops, tsec__etcd_range(bk, bn, false, true));
	}
	if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &ok, err)))
		return rc;
	for (size_t i = 0; i < n; i++)
		file[i] = tsec__etcd_kv0(tsec__etcd_resp(r, i, "response_range")) != NULL;
	json_decref(r);
	return 0;
}

int tsec__et_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err)
{
	const json_t *kv;
	json_t *r;
	bool folder;
	int rc;

	if ((rc = look(tsec__etcd_of(b), sk, &r, &kv, &folder, err)))
		return rc;
	*kind = kv ? 1 : folder ? 2 : 0;
	json_decref(r);
	return 0;
}

/*
 * A folder's time: its newest value's (highest mod_revision below it, one
 * range sorted by etcd; its envelope's mtime), as a folder on disk takes
 * its latest entry's (issue 50: every folder was 1970-01-01, and
 * certmagic picks the newest account folder by it). */
static int folder_mtime(struct etcd *e, const struct tsec__skey *sk, int64_t *mtime,
			struct tsec_error *err)
{
	char bk[TSEC__BK_MAX];
	size_t n = tsec__etcd_bk(e, 'k', sk->text, bk), klen, envlen, vlen;
	json_t *ops = json_array(), *op = tsec__etcd_range(bk, n, true, false), *resp;
	json_t *rr = json_object_get(op, "request_range");
	const json_t *kv;
	uint8_t *key = NULL, *env = NULL, *val;
	bool ok;
	int rc;

	json_object_set_new(rr, "limit", tsec__jnum(1));
	json_object_set_new(rr, "sort_order", json_string("DESCEND"));
	json_object_set_new(rr, "sort_target", json_string("MOD"));
	json_array_append_new(ops, op);
	if ((rc = tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &resp, &ok, err)))
		return rc;
	kv = tsec__etcd_kv0(tsec__etcd_resp(resp, 0, "response_range"));
	if (!kv) {
		*mtime = 0;              /* emptied meanwhile */
	} else if (tsec__unb64(kv, "key", &key, &klen) || tsec__unb64(kv, "value", &env, &envlen) ||
		   klen <= n || memcmp(key, bk, n)) {
		rc = tsec__seterr(err, TSEC_EIO, sk->text, "%s: etcd sent a key or value that is "
				  "not base64, or not below it", sk->text);
	} else {
		rc = tsec__env_unwrap(&e->seal, (const char *)key, klen, env, envlen, &val, &vlen,
				      mtime, err);
	}
	free(key);
	free(env);
	json_decref(resp);
	return rc;
}

static int et_stat(struct tsec__backend *b, const struct tsec__skey *sk,
		   struct tsec_stat *st, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	const json_t *kv;
	json_t *r;
	bool folder;
	size_t len;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((rc = look(e, sk, &r, &kv, &folder, err)))
		return rc;
	if (kv) {
		rc = open_kv(e, sk->text, kv, SIZE_MAX, NULL, &len, &st->mtime_ns, err);
		st->size = len;
		st->is_file = 1;
	} else if (!folder) {
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	} else {
		rc = folder_mtime(e, sk, &st->mtime_ns, err);
	}
	json_decref(r);
	return rc;
}

static int et_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	char bk[TSEC__BK_MAX], end[TSEC__BK_MAX + 2], kk[TSEC__BK_MAX + 2];
	size_t n = tsec__etcd_bk(e, 'k', sk->text, bk);
	json_t *cmp = NULL, *ok = json_array(), *ko = NULL, *r;
	int64_t deleted = 0;
	size_t at = 0;               /* the first answer of ours in ko */
	bool succ;
	int rc;

	if (f) {
		/* The fence's compares; its reads first in ko (fence_why). */
		cmp = json_array();
		ko = json_array();
		tsec__etcd_fence_cmp(e, f, cmp, ko);
		at = json_array_size(ko);
	}

	json_array_append_new(ok, tsec__etcd_del_op(bk, n));
	if (recursive) {
		memcpy(kk, bk, n);
		kk[n] = '/';
		memcpy(end, bk, n);
		end[n] = '/' + 1;
		json_array_append_new(ok, json_pack("{s{soso}}", "request_delete_range",
						    "key", tsec__b64(kk, n + 1),
						    "range_end", tsec__b64(end, n + 1)));
	} else {
		if (!cmp)
			cmp = json_array();
		if (!ko)
			ko = json_array();
		json_array_append_new(cmp, tsec__etcd_cmp(bk, n, false, "VERSION", "GREATER",
							  tsec__jnum(0)));
		json_array_append_new(ko, tsec__etcd_range(bk, n, true, true));
	}
	if ((rc = tsec__etcd_txn(e, cmp, ok, ko, TSEC__ETCD_ONCE, &r, &succ, err)))
		return rc;
	if (!succ && f && (rc = tsec__etcd_fence_why(e, f, r, err))) {
		;
	} else if (!succ && recursive) {
		rc = tsec__seterr(err, TSEC_EIO, sk->text, "the fenced delete of %s did not apply",
				  sk->text);
	} else if (!succ) {
		rc = tsec__etcd_kv0(tsec__etcd_resp(r, at, "response_range"))
			? tsec__seterr(err, TSEC_EINVAL, sk->text,
				       "'%s' is a folder (delete it recursively)", sk->text)
			: tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	} else {
		for (size_t i = 0; i < (recursive ? 2u : 1u); i++)
			deleted += tsec__jint(tsec__etcd_resp(r, i, "response_delete_range"),
					      "deleted", 0);
		if (!deleted)
			rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	}
	json_decref(r);
	return rc;
}

/*
 * The compares that let a value stand at sk: no value at any folder
 * above it, no folder at it.  Ancestors already added are skipped.
 */
static void where_value_may_stand(struct etcd *e, const struct tsec__skey *sk, json_t *cmp)
{
	char bk[TSEC__BK_MAX];
	size_t n = tsec__etcd_bk(e, 'k', sk->text, bk), pre = e->plen + 3;

	for (size_t i = pre; i < n; i++) {
		json_t *c;
		bool dup = false;
		size_t j;

		if (bk[i] != '/')
			continue;
		c = tsec__etcd_cmp(bk, i, false, "VERSION", "EQUAL", tsec__jnum(0));
		for (j = 0; j < json_array_size(cmp) && !dup; j++)
			dup = json_equal(json_array_get(cmp, j), c);
		if (dup)
			json_decref(c);
		else
			json_array_append_new(cmp, c);
	}
	json_array_append_new(cmp, tsec__etcd_cmp(bk, n, true, "VERSION", "EQUAL", tsec__jnum(0)));
}

/* A put of value under sk (the envelope made here). */
static int put_op(struct etcd *e, const char *text, const void *v, size_t len, int64_t mtime,
		  json_t **op, struct tsec_error *err)
{
	char bk[TSEC__BK_MAX];
	size_t n = tsec__etcd_bk(e, 'k', text, bk), envlen;
	uint8_t *env;
	int rc;

	if ((rc = tsec__env_wrap(&e->seal, bk, n, v, len, mtime, &env, &envlen, err)))
		return rc;
	*op = json_pack("{s{soso}}", "request_put", "key", tsec__b64(bk, n),
			"value", tsec__b64(env, envlen));
	free(env);
	return *op ? 0 : tsec__seterr(err, TSEC_ENOMEM, text, NULL);
}

/*
 * A guard as etcd compares: what the key held when looked at must be
 * what g says (else TSEC_ECHANGED now), and the txn then requires it
 * unchanged since that look: the same mod revision, or still absent.
 * *cmp_rev is the revision compared (0: absent).
 */
static int guard_cmp(struct etcd *e, const struct tsec__guard *g, json_t *cmp,
		     int64_t *cmp_rev, struct tsec_error *err)
{
	char bk[TSEC__BK_MAX];
	size_t bn = tsec__etcd_bk(e, 'k', g->sk->text, bk), vlen = 0;
	const json_t *kv;
	json_t *r;
	bool folder, same;
	char *val = NULL;
	int rc;

	if ((rc = look(e, g->sk, &r, &kv, &folder, err)))
		return rc;
	*cmp_rev = kv ? tsec__jint(kv, "mod_revision", 0) : 0;
	if (kv && g->value)
		rc = open_kv(e, g->sk->text, kv, g->len, &val, &vlen, NULL, err);
	json_decref(r);
	if (rc == TSEC_ETOOBIG)
		same = false;
	else if (rc)
		return rc;
	else
		same = g->value ? kv && vlen == g->len && !memcmp(val, g->value, g->len) : !kv;
	free(val);
	if (!same)
		return tsec__seterr(err, TSEC_ECHANGED, g->sk->text, "%s changed meanwhile",
				    g->sk->text);
	json_array_append_new(cmp, *cmp_rev
			      ? tsec__etcd_cmp(bk, bn, false, "MOD", "EQUAL", tsec__jnum(*cmp_rev))
			      : tsec__etcd_cmp(bk, bn, false, "VERSION", "EQUAL", tsec__jnum(0)));
	return 0;
}

static int et_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *g,
		       struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	json_t *cmp = json_array(), *ok = json_array(), *ko = json_array(), *op, *r;
	int64_t now = tsec__wall_ms() * 1000000, grev = 0;
	bool succ;
	int rc;

	for (size_t i = 0; i < n; i++) {
		where_value_may_stand(e, p[i].sk, cmp);
		if ((rc = put_op(e, p[i].sk->text, p[i].value, p[i].len, now, &op, err)))
			goto fail;
		json_array_append_new(ok, op);
	}
	if (f)
		tsec__etcd_fence_cmp(e, f, cmp, ko);
	if (g) {
		char bk[TSEC__BK_MAX];
		size_t bn = tsec__etcd_bk(e, 'k', g->sk->text, bk);
		if ((rc = guard_cmp(e, g, cmp, &grev, err)))
			goto fail;
		/* After the fence's ranges in the failure's answers. */
		json_array_append_new(ko, tsec__etcd_range(bk, bn, false, false));
	}
	if ((rc = tsec__etcd_txn(e, cmp, ok, ko, TSEC__ETCD_ONCE, &r, &succ, err)))
		return rc;
	if (!succ)
		rc = f ? tsec__etcd_fence_why(e, f, r, err) : 0;
	if (!succ && !rc && g) {
		const json_t *kv = tsec__etcd_kv0(tsec__etcd_resp(r, f ? TSEC__ETCD_FENCE_READS : 0,
								     "response_range"));
		if ((kv ? tsec__jint(kv, "mod_revision", 0) : 0) != grev)
			rc = tsec__seterr(err, TSEC_ECHANGED, g->sk->text, "%s changed meanwhile",
					  g->sk->text);
	}
	if (!succ && !rc)
		rc = tsec__seterr(err, TSEC_EEXIST, p[0].sk->text, "a folder stands where a value "
				  "would go, or a value where a folder would (%s%s)", p[0].sk->text,
				  n > 1 ? ", ..." : "");
	json_decref(r);
	return rc;
fail:
	json_decref(cmp);
	json_decref(ok);
	json_decref(ko);
	return rc;
}

static int et_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	char bs[TSEC__BK_MAX];
	size_t sn = tsec__etcd_bk(e, 'k', src->text, bs);

	if (tsec__skey_below(dst, src) || tsec__skey_below(src, dst))
		return tsec__seterr(err, TSEC_EEXIST, dst->text, "'%s' and '%s' are a value and a "
				    "folder", src->text, dst->text);
	/* Read, then write guarded by what was read; again if it changed. */
	for (int tries = 0; tries < 8; tries++) {
		json_t *r, *cmp, *ok, *ko = NULL, *op;
		const json_t *kv;
		bool folder, succ;
		int64_t modrev, mtime;
		char *val;
		size_t len;
		int rc, kind;

		if ((rc = look(e, src, &r, &kv, &folder, err)))
			return rc;
		if (!kv) {
			json_decref(r);
			return folder ? tsec__seterr(err, TSEC_EINVAL, src->text,
						     "'%s' is a folder; only values move", src->text)
				      : tsec__seterr(err, TSEC_ENOENT, src->text, "%s: not found",
						     src->text);
		}
		modrev = tsec__jint(kv, "mod_revision", 0);
		rc = open_kv(e, src->text, kv, SIZE_MAX, &val, &len, &mtime, err);
		json_decref(r);
		if (rc)
			return rc;
		cmp = json_array();
		ok = json_array();
		if (f) {
			ko = json_array();
			tsec__etcd_fence_cmp(e, f, cmp, ko);
		}
		json_array_append_new(cmp, tsec__etcd_cmp(bs, sn, false, "MOD", "EQUAL",
							  tsec__jnum(modrev)));
		where_value_may_stand(e, dst, cmp);
		{
			char bd[TSEC__BK_MAX];
			size_t dn = tsec__etcd_bk(e, 'k', dst->text, bd);
			json_array_append_new(cmp, tsec__etcd_cmp(bd, dn, false, "VERSION", "EQUAL",
								  tsec__jnum(0)));
		}
		rc = put_op(e, dst->text, val, len, mtime, &op, err);
		sodium_memzero(val, len);
		free(val);
		if (rc) {
			json_decref(cmp);
			json_decref(ok);
			json_decref(ko);
			return rc;
		}
		json_array_append_new(ok, op);
		json_array_append_new(ok, tsec__etcd_del_op(bs, sn));
		if ((rc = tsec__etcd_txn(e, cmp, ok, ko, TSEC__ETCD_ONCE, &r, &succ, err)))
			return rc;
		if (!succ && f && (rc = tsec__etcd_fence_why(e, f, r, err))) {
			json_decref(r);
			return rc;
		}
		json_decref(r);
		if (succ)
			return 0;
		/* Which compare failed?  The destination, or the source moved on. */
		if ((rc = tsec__et_kind(b, dst, &kind, err)))
			return rc;
		if (kind)
			return tsec__seterr(err, TSEC_EEXIST, dst->text, "%s already exists", dst->text);
	}
	return tsec__seterr(err, TSEC_EBUSY, src->text, "%s kept changing during the move", src->text);
}

static void et_close(struct tsec__backend *b)
{
	struct etcd *e = tsec__etcd_of(b);

	if (!e)
		return;
	tsec__etcd_feed_stop(e);
	tsec__etcd_keeper_stop(e);
	tsec__etcd_conn_close(e->c);
	sodium_memzero(&e->seal, sizeof(e->seal));
	free(e);
}

static const struct tsec__backend_ops etcd_ops = {
	.name = "etcd",
	.close = et_close,
	.get = et_get,
	.get_many = et_get_many,
	.files_many = et_files_many,
	.kind = tsec__et_kind,
	.stat = et_stat,
	.list = tsec__et_list,
	.del = et_del,
	.move = et_move,
	.put_many = et_put_many,
	.lock_try = tsec__etcd_lock_try,
	.lock_unwait = tsec__etcd_lock_unwait,
	.lock_renew = tsec__etcd_lock_renew,
	.lock_release = tsec__etcd_lock_release,
};

int tsec__etcd_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		    struct tsec_error *err)
{
	struct etcd *e;
	int rc;

	*out = NULL;
	if (o->root || o->delay_us)
		return tsec__seterr(err, TSEC_EINVAL, o->root ? "root" : "delay_us",
				    "etcd takes endpoints and prefix, not %s",
				    o->root ? "root" : "delay_us");
	if (!(e = calloc(1, sizeof(*e))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	e->base.ops = &etcd_ops;
	e->max_ops = 128;
	if ((rc = tsec__prefix_norm(o->prefix, e->prefix, sizeof(e->prefix), err)) ||
	    (o->key_file && (rc = tsec__seal_load(&e->seal, o->key_file, err))) ||
	    (rc = tsec__etcd_conn_open(&e->c, o, err))) {
		free(e);
		return rc;
	}
	e->plen = strlen(e->prefix);
	tsec__etcd_keeper_init(e);
	*out = &e->base;
	return 0;
}
