/*
 * The store's multi-key operations: move (one value, never replacing the
 * destination; the policy checks both ends) and put_many (a group of
 * writes, all or nothing), plain or fenced by a lock.  Each takes the
 * per-key gates of all its keys, in one canonical order, before it
 * reaches the backend.
 */
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "broker/storage/gates.h"
#include "broker/storage/store_private.h"

int tsec__fence_of(const struct tsec_lock *lk, struct tsec__fence *f, struct tsec_error *err)
{
	if (!lk)
		return tsec__seterr(err, TSEC_EINVAL, "", "a fenced write needs its lock");
	if (!lk->name[0] || memchr(lk->name, '/', strnlen(lk->name, sizeof(lk->name))))
		return tsec__seterr(err, TSEC_EKEY, "name", "lock name must be one key segment");
	if (!lk->fence)
		return tsec__seterr(err, TSEC_EINVAL, "fence", "a fenced write needs the lock's "
				    "fence");
	f->name = lk->name;
	memcpy(f->token, lk->token, sizeof(f->token));
	f->fence = lk->fence;
	return 0;
}

static int move_as(struct tsec_store *s, const struct tsec_principal *who, const char *src,
		   const char *dst, const struct tsec__fence *f, struct tsec_error *err)
{
	struct tsec__skey a, b;
	struct tsec_request r;
	struct tsec__gateset g;
	const char *keys[2];
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");
	if ((rc = tsec__skey_parse(src, false, &a, err)) ||
	    (rc = tsec__skey_parse(dst, false, &b, err)))
		return rc;
	tsec__req_for(&r, "storage.move", &a);
	r.ctx.has = TSEC_CTX_DEST;
	r.ctx.dest.ptr = b.text;
	r.ctx.dest.len = b.tlen;
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if (strcmp(a.text, b.text) == 0)
		return tsec__seterr(err, TSEC_EEXIST, b.text, "source and destination are the same");
	keys[0] = a.text;
	keys[1] = b.text;
	if ((rc = tsec__gates_lock(s->gates, keys, 2, &g)))
		return tsec__seterr(err, rc, "", NULL);
	rc = s->be->ops->move(s->be, &a, &b, f, err);
	tsec__gates_unlock(s->gates, &g);
	return rc;
}

int tsec_store_move(struct tsec_store *s, const struct tsec_principal *who,
		    const char *src, const char *dst, struct tsec_error *err)
{
	return move_as(s, who, src, dst, NULL, err);
}

int tsec_store_move_fenced(struct tsec_store *s, const struct tsec_principal *who,
			   const struct tsec_lock *lk, const char *src, const char *dst,
			   struct tsec_error *err)
{
	struct tsec__fence f;
	int rc;

	if ((rc = tsec__fence_of(lk, &f, err)))
		return rc;
	return move_as(s, who, src, dst, &f, err);
}

/*
 * The group's i-th write, parsed into sk[i] and checked against the
 * value limit and the writes before it: no key twice, no key a folder
 * of another (checked here, once, for every backend).
 */
static int put_item(const struct tsec_store *s, const struct tsec_put *p, struct tsec__skey *sk,
		    size_t i, struct tsec_error *err)
{
	int rc;

	if ((rc = tsec__skey_parse(p->key, false, &sk[i], err)))
		return rc;
	if (p->len > s->value_max)
		return tsec__seterr(err, TSEC_ETOOBIG, sk[i].text, "value larger than %zu bytes",
				    s->value_max);
	if (!p->value && p->len)
		return tsec__seterr(err, TSEC_EINVAL, sk[i].text, "NULL value");
	for (size_t j = 0; j < i; j++) {
		if (sk[j].tlen == sk[i].tlen && !memcmp(sk[j].text, sk[i].text, sk[i].tlen))
			return tsec__seterr(err, TSEC_EINVAL, sk[i].text,
					    "key written twice in one transaction");
		if (tsec__skey_below(&sk[j], &sk[i]) || tsec__skey_below(&sk[i], &sk[j]))
			return tsec__seterr(err, TSEC_EEXIST, sk[i].text, "'%s' and '%s' would be "
					    "a value and a folder of each other", sk[j].text,
					    sk[i].text);
	}
	return 0;
}

/*
 * Validates, checks and writes a group; f: only while that lease holds;
 * rec: with a record of the store's own, guarded by its old value.
 */
/* What the policy is asked of one value of a group (its size, and the
 * certificate being stored under a certificate's key), and what the
 * backend is given. */
static void put_asked(const struct tsec_put *p, const struct tsec__skey *sk,
		      struct tsec_request *r, struct tsec__bput *bp)
{
	tsec__req_for(r, "storage.store", sk);
	r->ctx.has = TSEC_CTX_SIZE;
	r->ctx.size = p->len;
	if (tsec__is_cert_key(sk) && p->len) {
		r->ctx.has |= TSEC_CTX_CERT_PEM;
		r->ctx.cert_pem.ptr = p->value;
		r->ctx.cert_pem.len = p->len;
	}
	*bp = (struct tsec__bput){ sk, p->value ? p->value : "", p->len };
}

/* The store's own record in a group: a reserved key no caller names, so
 * no policy question; its guard is what it held when read. */
static int record_item(const struct tsec__guarded *rec, struct tsec__skey *rsk,
		       struct tsec__bput *bp, struct tsec__guard *guard, struct tsec_error *err)
{
	int rc;

	if ((rc = tsec__skey_parse_any(rec->key, rsk, err)))
		return rc;
	if (!tsec__key_reserved(rsk->text))
		return tsec__seterr(err, TSEC_EINVAL, rsk->text, "not a record of the store's");
	*bp = (struct tsec__bput){ rsk, rec->value, rec->len };
	*guard = (struct tsec__guard){ rsk, rec->old, rec->oldlen };
	return 0;
}

static int put_group(struct tsec_store *s, const struct tsec_principal *who,
		     const struct tsec_put *puts, size_t n, const struct tsec__fence *f,
		     bool checked, const struct tsec__guarded *rec, struct tsec_error *err)
{
	/* A certificate's group on the stack; a longer one allocated. */
	struct tsec__skey sk_small[TSEC__SMALL_GROUP], *sk = sk_small;
	struct tsec_request r_small[TSEC__SMALL_GROUP], *r = r_small;
	struct tsec__bput bp_small[TSEC__SMALL_GROUP], *bp = bp_small;
	const char *keys_small[TSEC__SMALL_GROUP], **keys = keys_small;
	struct tsec__gateset g;
	struct tsec__guard guard, *gd = NULL;
	struct tsec__skey rsk;
	size_t i, all = n + (rec ? 1 : 0);
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");
	if (n == 0 && !rec)
		return 0;
	if (!puts && n)
		return tsec__seterr(err, TSEC_EINVAL, "", "no values");
	if (n > SIZE_MAX / sizeof(*sk))
		return tsec__seterr(err, TSEC_ENOMEM, "", "too many values in one group");
	/* Not zeroed: each parsed key is kilobytes, and every field read is
	 * written first (tsec__skey_parse, tsec__req_for, below; a request's
	 * other fields are cleared by tsec__req_for). */
	if (all > TSEC__SMALL_GROUP) {
		sk = malloc(n * sizeof(*sk));
		r = malloc(n * sizeof(*r));
		bp = malloc(all * sizeof(*bp));
		keys = malloc(all * sizeof(*keys));
	}
	if (!sk || !r || !bp || !keys) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	for (i = 0; i < n; i++) {
		if ((rc = put_item(s, &puts[i], sk, i, err)))
			goto out;
		put_asked(&puts[i], &sk[i], &r[i], &bp[i]);
		keys[i] = sk[i].text;
	}
	if (rec) {
		if ((rc = record_item(rec, &rsk, &bp[n], &guard, err)))
			goto out;
		keys[n] = rsk.text;
		gd = &guard;
	}
	if (n && !checked && (rc = tsec__store_check(s, who, r, n, err)))
		goto out;
	if ((rc = tsec__gates_lock(s->gates, keys, all, &g))) {
		rc = tsec__seterr(err, rc, "", NULL);
		goto out;
	}
	rc = s->be->ops->put_many(s->be, bp, all, f, gd, err);
	tsec__gates_unlock(s->gates, &g);
out:
	if (bp != bp_small) {
		free(sk);
		free(r);
		free(bp);
		free(keys);
	}
	return rc;
}

int tsec_store_put_many(struct tsec_store *s, const struct tsec_principal *who,
			const struct tsec_put *puts, size_t n, struct tsec_error *err)
{
	return put_group(s, who, puts, n, NULL, false, NULL, err);
}

int tsec_store_put_fenced(struct tsec_store *s, const struct tsec_principal *who,
			  const struct tsec_lock *lk, const struct tsec_put *puts, size_t n,
			  struct tsec_error *err)
{
	struct tsec__fence f;
	int rc;

	if ((rc = tsec__fence_of(lk, &f, err)))
		return rc;
	return put_group(s, who, puts, n, &f, false, NULL, err);
}

int tsec__store_put_checked(struct tsec_store *s, const struct tsec_lock *lk,
			    const struct tsec_put *puts, size_t n,
			    const struct tsec__guarded *rec, struct tsec_error *err)
{
	struct tsec__fence f;
	int rc;

	if (!lk)
		return put_group(s, NULL, puts, n, NULL, true, rec, err);
	if ((rc = tsec__fence_of(lk, &f, err)))
		return rc;
	return put_group(s, NULL, puts, n, &f, true, rec, err);
}
