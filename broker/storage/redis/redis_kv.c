/*
 * The redis backend's values: get, stat, folders and listings (P/i, a
 * sorted set of every key, read by lexicographic ranges), and the writes,
 * each one Lua script (redis.c runs them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/redis/redis_private.h"

/* GET and the folder probe in one round trip. */
static int look(struct redisbe *r, const struct tsec__skey *sk, redisReply **val, bool *folder,
		struct tsec_error *err)
{
	char bk[BK_MAX], lo[TSEC_KEY_MAX + 3], hi[TSEC_KEY_MAX + 3];
	const char *a1[2] = { "GET", bk };
	const char *a2[7] = { "ZRANGEBYLEX", NULL, lo, hi, "LIMIT", "0", "1" };
	char ikey[TSEC_KEY_MAX + 4];
	redisReply *r1 = NULL, *r2 = NULL;
	redisContext *c;
	int64_t until = tsec__rd_until(r);
	int rc = 0;

	*val = NULL;
	tsec__rd_bk_of(r, sk->text, bk);
	snprintf(ikey, sizeof(ikey), "%s/i", r->prefix);
	a2[1] = ikey;
	snprintf(lo, sizeof(lo), "[%s/", sk->text);
	snprintf(hi, sizeof(hi), "(%s0", sk->text);
	for (int attempt = 0; attempt < 2; attempt++) {
		struct nopipe np;
		bool got;
		int e;

		if (!(c = tsec__rd_take(r, until, err)))
			return TSEC_EIO;
		tsec__rd_nopipe_on(&np);
		redisAppendCommandArgv(c, 2, a1, NULL);
		redisAppendCommandArgv(c, 7, a2, NULL);
		got = tsec__rd_reply(c, &r1) == REDIS_OK && tsec__rd_reply(c, &r2) == REDIS_OK;
		e = errno;
		tsec__rd_nopipe_off(&np);
		if (got)
			break;
		freeReplyObject(r1);
		r1 = NULL;
		tsec__rd_lost(r, c, e, true, err);
		if (tsec__rd_timed_out(c, e))
			attempt = 2;     /* the budget is spent: no second try */
		tsec__rd_free(c);
		c = NULL;
	}
	if (!c)
		return TSEC_EIO;
	tsec__rd_give(r, c);
	if (r1->type == REDIS_REPLY_ERROR || r2->type != REDIS_REPLY_ARRAY)
		rc = tsec__seterr(err, TSEC_EIO, sk->text, "redis: %.200s",
				  r1->type == REDIS_REPLY_ERROR ? r1->str : "bad answer");
	*folder = r2->type == REDIS_REPLY_ARRAY && r2->elements > 0;
	freeReplyObject(r2);
	if (rc || r1->type != REDIS_REPLY_STRING)
		freeReplyObject(r1);
	else
		*val = r1;
	return rc;
}

static int open_val(struct redisbe *r, const char *text, redisReply *v, size_t max,
		    char **out, size_t *len, int64_t *mtime, struct tsec_error *err)
{
	char bk[BK_MAX];
	size_t bn = tsec__rd_bk_of(r, text, bk), vl;
	uint8_t *val;
	int64_t mt;
	int rc;

	if ((rc = tsec__env_unwrap(&r->seal, bk, bn, (uint8_t *)v->str, v->len, &val, &vl, &mt,
				   err))) {
		snprintf(err->where, sizeof(err->where), "%s", text);
		return rc;
	}
	if (mtime)
		*mtime = mt;
	if (len)
		*len = vl;
	if (vl > max)
		return tsec__seterr(err, TSEC_ETOOBIG, text, "value larger than %zu bytes", max);
	if (out) {
		if (!(*out = malloc(vl + 1)))
			return tsec__seterr(err, TSEC_ENOMEM, text, NULL);
		memcpy(*out, val, vl);
		(*out)[vl] = '\0';
	}
	return 0;
}

int tsec__rd_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	redisReply *v;
	bool folder;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = look(r, sk, &v, &folder, err)))
		return rc;
	if (v) {
		rc = open_val(r, sk->text, v, max, out, len, NULL, err);
		freeReplyObject(v);
		if (rc)
			*len = 0;
		return rc;
	}
	return folder ? tsec__seterr(err, TSEC_EINVAL, sk->text, "'%s' is a folder, not a value",
				     sk->text)
		      : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
}

/* One MGET: redis runs it whole, between two scripts (a group is one). */
int tsec__rd_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		      size_t max, char **out, size_t *len, struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	char bk[TSEC__GET_MANY_MAX][BK_MAX];
	const char *argv[TSEC__GET_MANY_MAX + 1] = { "MGET" };
	size_t lens[TSEC__GET_MANY_MAX + 1] = { 4 };
	redisReply *rep;
	int rc = 0;

	if ((rc = tsec__values_begin(out, len, n, err)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		lens[i + 1] = tsec__rd_bk_of(r, k[i].text, bk[i]);
		argv[i + 1] = bk[i];
	}
	if (!(rep = tsec__rd_call(r, (int)n + 1, argv, lens, true, err)))
		return tsec__rd_failed(err);
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != n)
		rc = tsec__seterr(err, TSEC_EIO, r->host, "redis: bad answer to MGET");
	for (size_t i = 0; i < n && !rc; i++) {
		redisReply *v = rep->element[i];
		if (v->type == REDIS_REPLY_STRING)
			rc = open_val(r, k[i].text, v, max, &out[i], &len[i], NULL, err);
		else if (v->type != REDIS_REPLY_NIL)
			rc = tsec__seterr(err, TSEC_EIO, k[i].text, "redis: bad answer to MGET");
	}
	freeReplyObject(rep);
	if (rc)
		tsec__values_free(out, len, n);
	return rc;
}

int tsec__rd_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err)
{
	redisReply *v;
	bool folder;
	int rc;

	if ((rc = look(tsec__rd_rb_of(b), sk, &v, &folder, err)))
		return rc;
	*kind = v ? 1 : folder ? 2 : 0;
	freeReplyObject(v);
	return 0;
}

/*
 * A folder's time: the newest of its first FOLDER_LOOK values by name
 * (the index has no order by time), each read whole and verified as a
 * load is; a folder of certmagic's (an account: two values) is exact.
 * Issue 50: every folder was 1970-01-01, and certmagic picks the newest
 * account folder by it.
 */
#define FOLDER_LOOK 8
static int folder_mtime(struct redisbe *r, const struct tsec__skey *sk, int64_t *mtime,
			struct tsec_error *err)
{
	char ikey[TSEC_KEY_MAX + 4], lo[TSEC_KEY_MAX + 3], hi[TSEC_KEY_MAX + 3];
	char bk[FOLDER_LOOK][BK_MAX], names[FOLDER_LOOK][TSEC_KEY_MAX + 1];
	const char *av[7] = { "ZRANGEBYLEX", ikey, lo, hi, "LIMIT", "0", "8" };
	size_t lv[7] = { 11, 0, 0, 0, 5, 1, 1 };
	const char *mv[FOLDER_LOOK + 1] = { "MGET" };
	size_t ml[FOLDER_LOOK + 1] = { 4 }, n = 0;
	redisReply *rep;
	int rc = 0;

	_Static_assert(FOLDER_LOOK == 8, "the LIMIT above");
	*mtime = 0;
	lv[1] = (size_t)snprintf(ikey, sizeof(ikey), "%s/i", r->prefix);
	lv[2] = (size_t)snprintf(lo, sizeof(lo), "[%s/", sk->text);
	lv[3] = (size_t)snprintf(hi, sizeof(hi), "(%s0", sk->text);
	if (!(rep = tsec__rd_call(r, 7, av, lv, true, err)))
		return tsec__rd_failed(err);
	for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements && n < FOLDER_LOOK;
	     i++) {
		const redisReply *e = rep->element[i];

		/* Only names the store could have written (a planted one is
		 * skipped, as a listing skips it). */
		if (e->type != REDIS_REPLY_STRING || e->len > TSEC_KEY_MAX ||
		    !tsec__remote_name_ok(e->str, e->len, tsec__key_reserved(sk->text)))
			continue;
		memcpy(names[n], e->str, e->len);
		names[n][e->len] = '\0';
		ml[n + 1] = tsec__rd_bk_of(r, names[n], bk[n]);
		mv[n + 1] = bk[n];
		n++;
	}
	freeReplyObject(rep);
	if (n == 0)
		return 0;                /* emptied meanwhile */
	if (!(rep = tsec__rd_call(r, (int)n + 1, mv, ml, true, err)))
		return tsec__rd_failed(err);
	for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements && i < n && !rc;
	     i++) {
		int64_t mt = 0;
		size_t len;

		if (rep->element[i]->type != REDIS_REPLY_STRING)
			continue;        /* deleted meanwhile */
		rc = open_val(r, names[i], rep->element[i], SIZE_MAX, NULL, &len, &mt, err);
		if (!rc && mt > *mtime)
			*mtime = mt;
	}
	freeReplyObject(rep);
	return rc;
}

int tsec__rd_stat(struct tsec__backend *b, const struct tsec__skey *sk, struct tsec_stat *st,
		   struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	redisReply *v;
	bool folder;
	size_t len = 0;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((rc = look(r, sk, &v, &folder, err)))
		return rc;
	if (v) {
		rc = open_val(r, sk->text, v, SIZE_MAX, NULL, &len, &st->mtime_ns, err);
		st->size = len;
		st->is_file = 1;
		freeReplyObject(v);
		return rc;
	}
	return folder ? folder_mtime(r, sk, &st->mtime_ns, err)
		      : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
}

/*
 * Whether the name e[0..n) may come next in a listing standing at lo
 * ("[" from, "(" past) below base: past where it stands, so a page
 * always advances, and under base.  A server that answers otherwise, or
 * the same page again, would keep a listing going for ever (issue 52,
 * item 1).
 */
static bool advances(const char *e, size_t n, const char *lo, size_t lo_len, const char *base,
		     size_t bl)
{
	size_t ln = lo_len - 1, m = n < ln ? n : ln;
	int c = memcmp(e, lo + 1, m);

	if (!c)
		c = (n > ln) - (n < ln);
	return (lo[0] == '[' ? c >= 0 : c > 0) && n >= bl && !memcmp(e, base, bl);
}

/* (tsec__rd_list's own: a page that does not advance.) */
#define LIST_BACKWARDS (-1000)

/* A flat listing jumps past each folder, as etcd.c does. */
/* Where a listing is: the folder's names begin with base; the next page
 * starts at lo (a ZRANGEBYLEX bound, "[x" or "(x"). */
struct cursor {
	char base[TSEC_KEY_MAX + 2], lo[TSEC_KEY_MAX + 4];
	size_t bl, lo_len;
};

/*
 * One page's names into out, the cursor moved past each (and past a
 * child folder's whole range when not recursive): 0, TSEC_EPROTO for an
 * element not a string, LIST_BACKWARDS for a name that does not advance,
 * or the add's error.  *all: every element was taken (none ended it).
 */
static int take_page(const redisReply *rep, const struct tsec__skey *sk, int recursive,
		     struct cursor *cu, struct tsec_strlist *out, size_t *cap, bool *all)
{
	size_t n = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;

	*all = false;
	for (size_t i = 0; i < n; i++) {
		const redisReply *e = rep->element[i];
		const char *slash;
		int rc;

		if (e->type != REDIS_REPLY_STRING)
			return TSEC_EPROTO;
		if (!advances(e->str, e->len, cu->lo, cu->lo_len, cu->base, cu->bl))
			return LIST_BACKWARDS;
		if (e->len <= cu->bl || e->len > TSEC_KEY_MAX ||
		    !tsec__remote_name_ok(e->str, e->len, tsec__key_reserved(sk->text))) {
			/* Planted: skip it and continue after it (an overlong
			 * one: after every name sharing its first TSEC_KEY_MAX
			 * bytes, all as long). */
			size_t l = e->len <= TSEC_KEY_MAX ? e->len : TSEC_KEY_MAX;

			cu->lo[0] = '(';
			memcpy(cu->lo + 1, e->str, l);   /* bytes, NUL included */
			if (e->len > TSEC_KEY_MAX)
				cu->lo[1 + l++] = (char)0xff;
			cu->lo_len = 1 + l;
			continue;
		}
		slash = recursive ? NULL : memchr(e->str + cu->bl, '/', e->len - cu->bl);
		if (slash) {
			size_t cn = (size_t)(slash - e->str);

			rc = tsec__strlist_add(out, cap, e->str, cn, "/");
			cu->lo_len = (size_t)snprintf(cu->lo, sizeof(cu->lo), "[%.*s0", (int)cn, e->str);
			return rc;       /* the next page starts past the folder */
		}
		if ((rc = tsec__strlist_add(out, cap, e->str, e->len, "")))
			return rc;
		cu->lo_len = (size_t)snprintf(cu->lo, sizeof(cu->lo), "(%.*s", (int)e->len, e->str);
	}
	*all = true;
	return 0;
}

/* A listing that found nothing: a file, or nothing there. */
static int list_empty(struct tsec__backend *b, const struct tsec__skey *sk,
		      struct tsec_error *err)
{
	int kind, rc;

	if ((rc = tsec__rd_kind(b, sk, &kind, err)))
		return rc;
	return tsec__list_none(sk, kind, err);
}

int tsec__rd_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	struct cursor cu;
	char ikey[TSEC_KEY_MAX + 4], hi[TSEC_KEY_MAX + 4], page[16];
	size_t cap = 0, pages = 0;
	int rc = 0;

	snprintf(ikey, sizeof(ikey), "%s/i", r->prefix);
	cu.bl = (size_t)snprintf(cu.base, sizeof(cu.base), "%s%s", sk->text, sk->text[0] ? "/" : "");
	cu.lo_len = (size_t)snprintf(cu.lo, sizeof(cu.lo), "[%s", cu.base);
	if (cu.bl)
		snprintf(hi, sizeof(hi), "(%.*s0", (int)cu.bl - 1, cu.base);
	else
		snprintf(hi, sizeof(hi), "+");
	snprintf(page, sizeof(page), "%d", PAGE);
	for (;;) {
		const char *av[7] = { "ZRANGEBYLEX", ikey, cu.lo, hi, "LIMIT", "0", page };
		size_t lv[7] = { 11, strlen(ikey), cu.lo_len, strlen(hi), 5, 1, strlen(page) };
		redisReply *rep;
		bool all;
		size_t n;

		if (++pages > TSEC__LIST_PAGES || out->n > TSEC__LIST_NAMES) {
			tsec_strlist_free(out);
			return tsec__seterr(err, TSEC_ETOOBIG, sk->text, "a listing of more than %d "
					    "names or pages", TSEC__LIST_NAMES);
		}
		if (!(rep = tsec__rd_call(r, 7, av, lv, true, err))) {
			tsec_strlist_free(out);  /* no part of a listing is the answer */
			return TSEC_EIO;
		}
		n = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
		rc = take_page(rep, sk, recursive, &cu, out, &cap, &all);
		freeReplyObject(rep);
		if (rc) {
			tsec_strlist_free(out);
			return rc == TSEC_EPROTO ? tsec__seterr(err, TSEC_EIO, sk->text, "redis answered a "
						       "listing with something not a name")
			     : rc == LIST_BACKWARDS ? tsec__seterr(err, TSEC_EIO, sk->text, "redis answered a "
						       "listing with a name outside the range asked "
						       "(a page that does not advance)")
					: tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
		}
		if (all && n < PAGE)
			break;
	}
	return out->n == 0 && sk->text[0] ? list_empty(b, sk, err) : 0;
}

/* The fence as three script arguments (empty name: none). */
void tsec__rd_fence_args(const struct tsec__fence *f, const char **args, size_t *lens,
		       char fence[24])
{
	args[0] = f ? f->name : "";
	lens[0] = strlen(args[0]);
	args[1] = f ? (const char *)f->token : "";
	lens[1] = f ? 16 : 0;
	args[2] = fence;
	lens[2] = (size_t)snprintf(fence, 24, "%llu", f ? (unsigned long long)f->fence : 0ull);
}

int tsec__rd_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	const char *args[5] = { sk->text, recursive ? "1" : "0" };
	size_t lens[5] = { sk->tlen, 1 };
	char fence[24];
	redisReply *rep;
	int rc;

	tsec__rd_fence_args(f, args + 2, lens + 2, fence);
	if (!(rep = tsec__rd_script(tsec__rd_rb_of(b), S_DEL, 5, args, lens, false, err)))
		return tsec__rd_failed(err);
	if (tsec__rd_lock_said(rep, f))
		rc = tsec__rd_verdict_of(tsec__rd_lock_said(rep, f), f->name, err);
	else if (rep->type == REDIS_REPLY_INTEGER)
		rc = rep->integer > 0 ? 0 : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found",
							  sk->text);
	else
		rc = tsec__rd_verdict(rep, sk->text, err);
	freeReplyObject(rep);
	return rc;
}

/*
 * What g's key holds now, as stored (*raw, new; NULL for nothing), once
 * it is known to be what g says: TSEC_ECHANGED when it is not.
 */
static int guard_raw(struct redisbe *r, const struct tsec__guard *g, char **raw,
		     size_t *rawlen, struct tsec_error *err)
{
	redisReply *v;
	char *val = NULL;
	size_t len = 0;
	bool folder, same;
	int rc;

	*raw = NULL;
	*rawlen = 0;
	if ((rc = look(r, g->sk, &v, &folder, err)))
		return rc;
	if (v) {
		/* Opening decrypts in place: the stored bytes are kept first. */
		if (!(*raw = malloc(v->len ? v->len : 1))) {
			freeReplyObject(v);
			return tsec__seterr(err, TSEC_ENOMEM, g->sk->text, NULL);
		}
		memcpy(*raw, v->str, v->len);
		*rawlen = v->len;
		rc = g->value ? open_val(r, g->sk->text, v, g->len, &val, &len, NULL, err) : 0;
		freeReplyObject(v);
		if (rc && rc != TSEC_ETOOBIG) {
			free(*raw);
			*raw = NULL;
			return rc;
		}
	}
	same = g->value ? *raw && !rc && len == g->len && !memcmp(val, g->value, len) : !*raw;
	free(val);
	if (same)
		return 0;
	free(*raw);
	*raw = NULL;
	return tsec__seterr(err, TSEC_ECHANGED, g->sk->text, "%s changed meanwhile", g->sk->text);
}

int tsec__rd_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *g,
		       struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	size_t nargs = 7 + 2 * n, i, rawlen = 0;
	const char **args = calloc(nargs, sizeof(*args));
	size_t *lens = calloc(nargs, sizeof(*lens));
	uint8_t **env = calloc(n, sizeof(*env));
	int64_t now = tsec__wall_ms() * 1000000;
	char count[24], fence[24], *raw = NULL;
	redisReply *rep = NULL;
	int rc = 0;

	if (!args || !lens || !env) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	if (g && (rc = guard_raw(r, g, &raw, &rawlen, err)))
		goto out;
	/* ARGV: P (added by script), n, lock name, token, fence, the guard's
	 * key, its mode and bytes, pairs. */
	args[0] = count;
	lens[0] = (size_t)snprintf(count, sizeof(count), "%zu", n);
	args[1] = f ? f->name : "";
	lens[1] = strlen(args[1]);
	args[2] = f ? (const char *)f->token : "";
	lens[2] = f ? 16 : 0;
	args[3] = fence;
	lens[3] = (size_t)snprintf(fence, sizeof(fence), "%llu",
				   f ? (unsigned long long)f->fence : 0ull);
	args[4] = g ? g->sk->text : "";
	lens[4] = g ? g->sk->tlen : 0;
	args[5] = raw ? "V" : "A";
	lens[5] = 1;
	args[6] = raw ? raw : "";
	lens[6] = rawlen;
	for (i = 0; i < n; i++) {
		char bk[BK_MAX];
		size_t bn = tsec__rd_bk_of(r, p[i].sk->text, bk);

		if ((rc = tsec__env_wrap(&r->seal, bk, bn, p[i].value, p[i].len, now, &env[i],
					 &lens[8 + 2 * i], err)))
			goto out;
		args[7 + 2 * i] = p[i].sk->text;
		lens[7 + 2 * i] = p[i].sk->tlen;
		args[8 + 2 * i] = (const char *)env[i];
	}
	/* Not resent: a second copy after a lost answer could undo a peer's
	 * write made in between. */
	if (!(rep = tsec__rd_script(r, S_PUT, (int)nargs, args, lens, false, err))) {
		rc = tsec__rd_failed(err);
		goto out;
	}
	{
		const char *said = rep->str ? rep->str : "";
		rc = tsec__rd_verdict(rep, !strcmp(said, "ECHANGED") ? g->sk->text
				      : f && strcmp(said, "EEXIST") ? f->name : p[0].sk->text, err);
	}
out:
	freeReplyObject(rep);
	for (i = 0; env && i < n; i++)
		free(env[i]);
	free(env);
	free(args);
	free(lens);
	free(raw);
	return rc;
}

int tsec__rd_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);

	if (tsec__skey_below(dst, src) || tsec__skey_below(src, dst))
		return tsec__seterr(err, TSEC_EEXIST, dst->text, "'%s' and '%s' are a value and a "
				    "folder", src->text, dst->text);
	for (int tries = 0; tries < 8; tries++) {
		char bd[BK_MAX];
		size_t bdn = tsec__rd_bk_of(r, dst->text, bd), nl = 0;
		redisReply *v, *rep;
		uint8_t *nenv = NULL;
		char *val = NULL, *old;
		size_t oldlen;
		int64_t mt;
		size_t len;
		bool folder;
		int rc;

		if ((rc = look(r, src, &v, &folder, err)))
			return rc;
		if (!v)
			return folder ? tsec__seterr(err, TSEC_EINVAL, src->text, "'%s' is a folder; "
						     "only values move", src->text)
				      : tsec__seterr(err, TSEC_ENOENT, src->text, "%s: not found",
						     src->text);
		/* Sealed values are bound to their key: seal it again for dst.
		 * Opening decrypts in place: keep the stored bytes to compare. */
		if (!(old = malloc(v->len ? v->len : 1))) {
			freeReplyObject(v);
			return tsec__seterr(err, TSEC_ENOMEM, src->text, NULL);
		}
		oldlen = v->len;
		memcpy(old, v->str, oldlen);
		if (!(rc = open_val(r, src->text, v, SIZE_MAX, &val, &len, &mt, err)))
			rc = tsec__env_wrap(&r->seal, bd, bdn, val, len, mt, &nenv, &nl, err);
		if (val)
			sodium_memzero(val, len);
		free(val);
		if (!rc) {
			const char *args[7] = { src->text, dst->text };
			size_t lens[7] = { src->tlen, dst->tlen };
			char fence[24];

			tsec__rd_fence_args(f, args + 2, lens + 2, fence);
			args[5] = old;
			lens[5] = oldlen;
			args[6] = (const char *)nenv;
			lens[6] = nl;
			if (!(rep = tsec__rd_script(r, S_MOVE, 7, args, lens, false, err)))
				rc = tsec__rd_failed(err);
			else if (tsec__rd_says(rep, "RETRY"))
				rc = 1;
			else if (tsec__rd_lock_said(rep, f))
				rc = tsec__rd_verdict_of(tsec__rd_lock_said(rep, f), f->name, err);
			else
				rc = tsec__rd_verdict(rep, !strcmp(rep->str ? rep->str : "", "EEXIST")
					     ? dst->text : src->text, err);
			freeReplyObject(rep);
		}
		free(nenv);
		free(old);
		freeReplyObject(v);
		if (rc != 1)
			return rc;
	}
	return tsec__seterr(err, TSEC_EBUSY, src->text, "%s kept changing during the move", src->text);
}
