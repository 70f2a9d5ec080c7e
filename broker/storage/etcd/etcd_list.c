/*
 * The etcd backend's listings (etcd.c has the rest): keys-only ranges of
 * PAGE keys, each page checked to start past the last, and bounded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/etcd/etcd_private.h"

#define PAGE 1000

/*
 * Lists by keys-only ranges of PAGE keys.  A flat listing names each
 * folder once and jumps past everything below it (the next range starts
 * at "folder0"), so a folder of a million keys costs one step.
 */
/*
 * One key k[0..kl) of a listing's page below base[0..bl): added to out
 * as the store names it, "<key>/<child>" (a value, or with !recursive
 * the folder it lies in, once: *folder set, so the range restarts past
 * everything below it), or skipped when the store could not have written
 * it.  from[0..*fl) is where the next range starts.  0 or TSEC_ENOMEM.
 */
static int list_key(struct etcd *e, const char *base, size_t bl, int recursive, bool reserved,
		    const uint8_t *k, size_t kl, struct tsec_strlist *out, size_t *cap,
		    char *from, size_t *fl, bool *folder)
{
	const char *name = (const char *)k + e->plen + 3, *slash;
	size_t cn;

	*folder = false;
	if (kl <= bl || kl > TSEC__BK_MAX || memcmp(k, base, bl)) {
		/* Not a key we could have written: skip it, and continue
		 * after it (an overlong one: after every key sharing its first
		 * TSEC__BK_MAX bytes, all as long). */
		*fl = kl > TSEC__BK_MAX ? TSEC__BK_MAX : kl;
		memcpy(from, k, *fl);
		from[(*fl)++] = kl > TSEC__BK_MAX ? (char)0xff : '\0';
		return 0;
	}
	if (!tsec__remote_name_ok(name, kl - e->plen - 3, reserved)) {
		memcpy(from, k, kl);     /* planted: skip it */
		from[kl] = '\0';
		*fl = kl + 1;
		return 0;
	}
	slash = recursive ? NULL : memchr(k + bl, '/', kl - bl);
	if (!slash) {
		memcpy(from, k, kl);
		from[kl] = '\0';
		*fl = kl + 1;
		return tsec__strlist_add(out, cap, name, kl - e->plen - 3, "");
	}
	/* Next: past everything below this child. */
	cn = (size_t)(slash - (const char *)k);
	memcpy(from, k, cn);
	from[cn] = '/' + 1;
	*fl = cn + 1;
	*folder = true;
	return tsec__strlist_add(out, cap, name, cn - e->plen - 3, "/");
}

/* Byte order of a[0..an) and b[0..bn), as etcd orders keys. */
static int keycmp(const void *a, size_t an, const void *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	return c ? c : (an > bn) - (an < bn);
}

/*
 * Whether the key k[0..kl) may come next in a range asked from
 * from[0..fl) up to end[0..el): at or past where the listing stands (so
 * a page always advances) and before its end.  A member that answers
 * otherwise, or the same page again, would keep a listing going for
 * ever (issue 52, item 1).
 */
static int in_range(const uint8_t *k, size_t kl, const char *from, size_t fl, const char *end,
		    size_t el, const char *what, struct tsec_error *err)
{
	if (keycmp(k, kl, from, fl) < 0 || keycmp(k, kl, end, el) >= 0)
		return tsec__seterr(err, TSEC_EIO, what, "etcd answered a listing with a key "
				    "outside the range asked (a page that does not advance)");
	return 0;
}

/* Where a listing stands: the folder's names begin with base[0..bl);
 * the next page asks from[0..fl) up to the folder's end. */
struct cursor {
	char base[TSEC__BK_MAX + 2], from[TSEC__BK_MAX + 2], end[TSEC__BK_MAX + 2];
	size_t bl, fl;
};

/*
 * One page's keys (the answer r) into out, the cursor moved past each
 * (past a child folder's whole range when not recursive): 0 or the
 * error.  *done: the listing is whole (no more pages, or an empty one).
 */
static int take_page(struct etcd *e, const json_t *r, const struct tsec__skey *sk,
		     int recursive, struct cursor *cu, struct tsec_strlist *out, size_t *cap,
		     bool *done, struct tsec_error *err)
{
	const json_t *kvs = json_object_get(r, "kvs");
	bool more = json_is_true(json_object_get(r, "more")), folder = false;
	size_t n = json_array_size(kvs);
	int rc = 0;

	*done = false;
	for (size_t i = 0; i < n; i++) {
		uint8_t *k;
		size_t kl;

		if (tsec__unb64(json_array_get(kvs, i), "key", &k, &kl))
			return tsec__seterr(err, TSEC_EIO, sk->text, "etcd sent a key that is not "
					    "base64");
		if (!(rc = in_range(k, kl, cu->from, cu->fl, cu->end, cu->bl, sk->text, err)))
			rc = list_key(e, cu->base, cu->bl, recursive, tsec__key_reserved(sk->text), k,
				      kl, out, cap, cu->from, &cu->fl, &folder);
		free(k);
		if (rc == TSEC_ENOMEM)
			return tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
		if (rc || folder)
			return rc;           /* a folder: the range restarts past it */
	}
	*done = !more || n == 0;
	return 0;
}

int tsec__et_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct etcd *e = tsec__etcd_of(b);
	struct cursor cu;
	size_t cap = 0, pages = 0;
	bool done = false;
	int rc = 0, kind;

	/* base: "P/k/" for the root, "P/k/<key>/" below it. */
	cu.bl = tsec__etcd_bk(e, 'k', sk->text, cu.base);
	if (sk->tlen)
		cu.base[cu.bl++] = '/';
	memcpy(cu.end, cu.base, cu.bl);
	cu.end[cu.bl - 1] = '/' + 1;
	memcpy(cu.from, cu.base, cu.bl);
	cu.fl = cu.bl;
	while (!done && !rc) {
		json_t *req = json_object(), *r;

		json_object_set_new(req, "key", tsec__b64(cu.from, cu.fl));
		json_object_set_new(req, "range_end", tsec__b64(cu.end, cu.bl));
		json_object_set_new(req, "keys_only", json_true());
		json_object_set_new(req, "limit", tsec__jnum(PAGE));
		if (++pages > TSEC__LIST_PAGES || out->n > TSEC__LIST_NAMES) {
			json_decref(req);
			rc = tsec__seterr(err, TSEC_ETOOBIG, sk->text, "a listing of more than %d "
					  "names or pages", TSEC__LIST_NAMES);
		} else if (!(rc = tsec__etcd_post(e->c, "/v3/kv/range", req, TSEC__ETCD_IDEMPOTENT,
						  0, PAGE, &r, err))) {
			rc = take_page(e, r, sk, recursive, &cu, out, &cap, &done, err);
			json_decref(r);
		}
	}
	if (rc) {
		tsec_strlist_free(out);
		return rc;
	}
	if (out->n == 0 && sk->tlen)
		return (rc = tsec__et_kind(b, sk, &kind, err)) ? rc : tsec__list_none(sk, kind, err);
	return 0;
}
