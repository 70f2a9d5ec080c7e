/*
 * The redis backend (hiredis): one primary.  Values are P/k/<key> (the
 * envelope of remote.h), and the sorted set P/i holds every key with
 * score 0, so that folders and listings are lexicographic ranges
 * (ZRANGEBYLEX).  Every write and every lock operation is one Lua script
 * (redis_scripts.h), atomic on the server.  Locks: P/l/<name> holds the
 * token with a PX expiry (redis's clock ends the lease), P/f/<name> the
 * fence (never below the server's clock in microseconds, so it does not
 * go back when the counter is lost) and the last holder.
 *
 * What redis cannot promise: replication is asynchronous, so a failover
 * can lose acknowledged writes and lock grants.  Where that matters, use
 * etcd.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "broker/storage/remote.h"
#include "broker/storage/redis_scripts.h"
#include "common/clock.h"

#define POOL 32
#define PAGE 1000
#define BK_MAX (2 * TSEC_KEY_MAX + 8)

enum { S_PUT, S_DEL, S_MOVE, S_ACQUIRE, S_RENEW, S_RELEASE, S_META_CAS, S_COUNT };

static const char *const scripts[S_COUNT] = {
	tsec__lua_put, tsec__lua_del, tsec__lua_move,
	tsec__lua_acquire, tsec__lua_renew, tsec__lua_release, tsec__lua_meta_cas,
};

struct redisbe {
	struct tsec__backend base;
	char host[256];
	int port;                    /* 0: host is a unix socket path */
	struct timeval tmo;
	char user[256], pass[512];
	char prefix[TSEC_KEY_MAX + 1];
	size_t plen;
	struct tsec__seal seal;
	char sha[S_COUNT][41];       /* the scripts' SHA-1, for EVALSHA */
	pthread_mutex_t mu;
	redisContext *pool[POOL];
	size_t npool;
	/* the invalidation feed */
	pthread_t feed;
	atomic_bool feed_on;
	redisContext *feed_ctx;      /* under mu, to wake it */
	tsec__inval_fn fn;
	void *fn_ctx;
	char note[256];              /* what its configuration promises */
};

static struct redisbe *rb_of(struct tsec__backend *b)
{
	return (struct redisbe *)b;
}

static size_t bk_of(const struct redisbe *r, const char *key, char *out)
{
	return (size_t)snprintf(out, BK_MAX, "%s/k/%s", r->prefix, key);
}

/*
 * hiredis writes with write(): on a connection the server closed, or one
 * this process shut down, that raises SIGPIPE, whose default kills the
 * process, and a library must not.  Around each command the calling
 * thread blocks SIGPIPE and then takes back one it raised (as libcurl
 * does); the feed thread keeps it blocked.
 */
struct nopipe {
	sigset_t old;
};

static void nopipe_on(struct nopipe *np)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, &np->old);
}

static void nopipe_off(struct nopipe *np)
{
	static const struct timespec none = { 0, 0 };
	sigset_t s, pending;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	if (!sigismember(&np->old, SIGPIPE)) {
		if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE))
			sigtimedwait(&s, NULL, &none);
		pthread_sigmask(SIG_SETMASK, &np->old, NULL);
	}
}

static redisContext *dial(struct redisbe *r, struct tsec_error *err)
{
	redisContext *c = r->port ? redisConnectWithTimeout(r->host, r->port, r->tmo)
				  : redisConnectUnixWithTimeout(r->host, r->tmo);
	redisReply *rep;

	if (!c || c->err) {
		tsec__seterr(err, TSEC_EIO, r->host, "redis at %s:%d: %s", r->host, r->port,
			     c ? c->errstr : "cannot allocate");
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, r->tmo);
	if (r->pass[0]) {
		struct nopipe np;

		nopipe_on(&np);
		rep = r->user[0] ? redisCommand(c, "AUTH %s %s", r->user, r->pass)
				 : redisCommand(c, "AUTH %s", r->pass);
		nopipe_off(&np);
		if (!rep || rep->type == REDIS_REPLY_ERROR) {
			tsec__seterr(err, TSEC_EDENIED, r->host, "redis at %s refused the password%s",
				     r->host, r->user[0] ? " (or user)" : "");
			freeReplyObject(rep);
			redisFree(c);
			return NULL;
		}
		freeReplyObject(rep);
	}
	return c;
}

/*
 * Whether an idle pooled connection is dead: the server closed it (a
 * restart) or sent something unasked.  Checked before use, so that a
 * write is sent on a connection that was alive: a command written to a
 * connection the server had already closed never reached it, and would
 * otherwise be reported as "may or may not have been applied".
 */
static bool stale(const redisContext *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };

	return poll(&p, 1, 0) != 0;
}

static redisContext *take(struct redisbe *r, struct tsec_error *err)
{
	redisContext *c = NULL;

	for (;;) {
		pthread_mutex_lock(&r->mu);
		c = r->npool ? r->pool[--r->npool] : NULL;
		pthread_mutex_unlock(&r->mu);
		if (!c || !stale(c))
			break;
		redisFree(c);
	}
	return c ? c : dial(r, err);
}

/* Returns c to the pool, or drops it when it failed. */
static void give(struct redisbe *r, redisContext *c)
{
	if (c && !c->err) {
		pthread_mutex_lock(&r->mu);
		if (r->npool < POOL) {
			r->pool[r->npool++] = c;
			c = NULL;
		}
		pthread_mutex_unlock(&r->mu);
	}
	redisFree(c);
}

/*
 * One command.  A read (idempotent) that meets a dead pooled connection
 * is tried again once on a new one; a write reports the unknown outcome.
 */
static redisReply *call(struct redisbe *r, int argc, const char **argv, const size_t *lens,
			bool idempotent, struct tsec_error *err)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		redisContext *c = take(r, err);
		redisReply *rep;
		struct nopipe np;

		if (!c)
			return NULL;
		nopipe_on(&np);
		rep = redisCommandArgv(c, argc, argv, lens);
		nopipe_off(&np);
		if (rep) {
			give(r, c);
			if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8)) {
				tsec__seterr(err, TSEC_EIO, r->host, "redis: %.200s", rep->str);
				freeReplyObject(rep);
				return NULL;
			}
			return rep;
		}
		tsec__seterr(err, idempotent ? TSEC_EIO : TSEC_EUNKNOWN, r->host, "redis at %s: %s%s",
			     r->host, c->errstr,
			     idempotent ? "" : " (the write may or may not have been applied)");
		redisFree(c);
		if (!idempotent)
			return NULL;
	}
	return NULL;
}

/* The code a failed call() left in err. */
static int failed(const struct tsec_error *err)
{
	return err && err->code ? err->code : TSEC_EIO;
}

/* Runs script s with args (prefix first, added here). */
static redisReply *script(struct redisbe *r, int s, int nargs, const char **args,
			  const size_t *lens, bool idempotent, struct tsec_error *err)
{
	const char *argv[3 + 64 + 2 * 64 + 8];
	size_t len[sizeof(argv) / sizeof(argv[0])];
	const char **av = argv;
	size_t *lv = len;
	redisReply *rep;
	int argc = 4 + nargs;

	if ((size_t)argc > sizeof(argv) / sizeof(argv[0])) {
		av = malloc((size_t)argc * sizeof(*av));
		lv = malloc((size_t)argc * sizeof(*lv));
		if (!av || !lv) {
			free(av);
			free(lv);
			tsec__seterr(err, TSEC_ENOMEM, "", NULL);
			return NULL;
		}
	}
	av[0] = "EVALSHA";
	lv[0] = 7;
	av[1] = r->sha[s];
	lv[1] = 40;
	av[2] = "0";
	lv[2] = 1;
	av[3] = r->prefix;
	lv[3] = r->plen;
	for (int i = 0; i < nargs; i++) {
		av[4 + i] = args[i];
		lv[4 + i] = lens ? lens[i] : strlen(args[i]);
	}
	rep = call(r, argc, av, lv, idempotent, err);
	if (rep && rep->type == REDIS_REPLY_ERROR) {
		/* NOSCRIPT: a restarted server; send the text (and so load it). */
		freeReplyObject(rep);
		av[0] = "EVAL";
		lv[0] = 4;
		av[1] = scripts[s];
		lv[1] = strlen(scripts[s]);
		rep = call(r, argc, av, lv, idempotent, err);
	}
	if (av != argv) {
		free(av);
		free(lv);
	}
	return rep;
}

/* A script's error name ("EEXIST") as our code; 0 for "OK". */
/* A script's answer word (Lua strings come back as bulk strings). */
static bool says(const redisReply *rep, const char *word)
{
	return (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING) &&
	       !strcmp(rep->str, word);
}

static int verdict_of(const char *s, const char *what, struct tsec_error *err);

static int verdict(const redisReply *rep, const char *what, struct tsec_error *err)
{
	return verdict_of(rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING
			  ? rep->str : "", what, err);
}

/* A fenced script's answer about its lock ("L" + owned()'s), or NULL. */
static const char *lock_said(const redisReply *rep, const struct tsec__fence *f)
{
	return f && (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING) &&
	       rep->str[0] == 'L' ? rep->str + 1 : NULL;
}

static int verdict_of(const char *s, const char *what, struct tsec_error *err)
{

	if (!strcmp(s, "OK"))
		return 0;
	if (!strcmp(s, "EEXIST"))
		return tsec__seterr(err, TSEC_EEXIST, what, "%s: a folder stands where a value would "
				    "go, or a value where a folder would", what);
	if (!strcmp(s, "ENOENT"))
		return tsec__seterr(err, TSEC_ENOENT, what, "%s: not found or not held", what);
	if (!strcmp(s, "ENOTOWNER"))
		return tsec__seterr(err, TSEC_ENOTOWNER, what, "lock '%s': held by another owner, "
				    "or your lease has ended", what);
	if (!strcmp(s, "EINVAL"))
		return tsec__seterr(err, TSEC_EINVAL, what, "'%s' is a folder", what);
	return tsec__seterr(err, TSEC_EIO, what, "redis answered unexpectedly");
}

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
	int rc = 0;

	*val = NULL;
	bk_of(r, sk->text, bk);
	snprintf(ikey, sizeof(ikey), "%s/i", r->prefix);
	a2[1] = ikey;
	snprintf(lo, sizeof(lo), "[%s/", sk->text);
	snprintf(hi, sizeof(hi), "(%s0", sk->text);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!(c = take(r, err)))
			return TSEC_EIO;
		redisAppendCommandArgv(c, 2, a1, NULL);
		redisAppendCommandArgv(c, 7, a2, NULL);
		if (redisGetReply(c, (void **)&r1) == REDIS_OK &&
		    redisGetReply(c, (void **)&r2) == REDIS_OK)
			break;
		freeReplyObject(r1);
		r1 = NULL;
		tsec__seterr(err, TSEC_EIO, r->host, "redis at %s: %s", r->host, c->errstr);
		redisFree(c);
		c = NULL;
	}
	if (!c)
		return TSEC_EIO;
	give(r, c);
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
	size_t bn = bk_of(r, text, bk), vl;
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

static int rd_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
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

static int rd_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err)
{
	redisReply *v;
	bool folder;
	int rc;

	if ((rc = look(rb_of(b), sk, &v, &folder, err)))
		return rc;
	*kind = v ? 1 : folder ? 2 : 0;
	freeReplyObject(v);
	return 0;
}

static int rd_stat(struct tsec__backend *b, const struct tsec__skey *sk, struct tsec_stat *st,
		   struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
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
	return folder ? 0 : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
}

/* A flat listing jumps past each folder, as etcd.c does. */
static int rd_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	size_t lo_len;
	char ikey[TSEC_KEY_MAX + 4], base[TSEC_KEY_MAX + 2], lo[TSEC_KEY_MAX + 4],
		hi[TSEC_KEY_MAX + 4], page[16];
	size_t bl, cap = 0;
	int rc = 0;

	snprintf(ikey, sizeof(ikey), "%s/i", r->prefix);
	bl = (size_t)snprintf(base, sizeof(base), "%s%s", sk->text, sk->text[0] ? "/" : "");
	lo_len = (size_t)snprintf(lo, sizeof(lo), "[%s", base);
	if (bl)
		snprintf(hi, sizeof(hi), "(%.*s0", (int)bl - 1, base);
	else
		snprintf(hi, sizeof(hi), "+");
	snprintf(page, sizeof(page), "%d", PAGE);
	for (;;) {
		const char *av[7] = { "ZRANGEBYLEX", ikey, lo, hi, "LIMIT", "0", page };
		size_t lv[7] = { 11, strlen(ikey), lo_len, strlen(hi), 5, 1, strlen(page) };
		redisReply *rep = call(r, 7, av, lv, true, err);
		size_t i, n;

		if (!rep)
			return TSEC_EIO;
		n = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
		for (i = 0; i < n && !rc; i++) {
			const redisReply *e = rep->element[i];
			const char *slash;

			if (e->type != REDIS_REPLY_STRING) {
				rc = -2;
				break;
			}
			if (e->len <= bl || e->len > TSEC_KEY_MAX || !tsec__remote_name_ok(e->str, e->len)) {
				/* Planted: skip it and continue after it (an overlong
				 * one: after every name sharing its first
				 * TSEC_KEY_MAX bytes, all as long). */
				size_t l = e->len <= TSEC_KEY_MAX ? e->len : TSEC_KEY_MAX;

				lo[0] = '(';
				memcpy(lo + 1, e->str, l);   /* bytes, NUL included */
				if (e->len > TSEC_KEY_MAX)
					lo[1 + l++] = (char)0xff;
				lo_len = 1 + l;
				continue;
			}
			slash = recursive ? NULL : memchr(e->str + bl, '/', e->len - bl);
			if (slash) {
				size_t cn = (size_t)(slash - e->str);

				rc = tsec__strlist_add(out, &cap, e->str, cn, "/");
				lo_len = (size_t)snprintf(lo, sizeof(lo), "[%.*s0", (int)cn, e->str);
				break;
			}
			rc = tsec__strlist_add(out, &cap, e->str, e->len, "");
			lo_len = (size_t)snprintf(lo, sizeof(lo), "(%.*s", (int)e->len, e->str);
		}
		freeReplyObject(rep);
		if (rc) {
			tsec_strlist_free(out);
			return rc == -2 ? tsec__seterr(err, TSEC_EIO, sk->text, "redis answered a "
						       "listing with something not a name")
					: tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
		}
		if (i == n && n < PAGE)
			break;
	}
	if (out->n == 0 && sk->text[0]) {
		int kind;

		if ((rc = rd_kind(b, sk, &kind, err)))
			return rc;
		return kind == 1 ? tsec__seterr(err, TSEC_EINVAL, sk->text, "'%s' is a file, not a "
						"folder", sk->text)
				 : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	}
	return 0;
}

/* The fence as three script arguments (empty name: none). */
static void fence_args(const struct tsec__fence *f, const char **args, size_t *lens,
		       char fence[24])
{
	args[0] = f ? f->name : "";
	lens[0] = strlen(args[0]);
	args[1] = f ? (const char *)f->token : "";
	lens[1] = f ? 16 : 0;
	args[2] = fence;
	lens[2] = (size_t)snprintf(fence, 24, "%llu", f ? (unsigned long long)f->fence : 0ull);
}

static int rd_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	const char *args[5] = { sk->text, recursive ? "1" : "0" };
	size_t lens[5] = { strlen(sk->text), 1 };
	char fence[24];
	redisReply *rep;
	int rc;

	fence_args(f, args + 2, lens + 2, fence);
	if (!(rep = script(rb_of(b), S_DEL, 5, args, lens, false, err)))
		return failed(err);
	if (lock_said(rep, f))
		rc = verdict_of(lock_said(rep, f), f->name, err);
	else if (rep->type == REDIS_REPLY_INTEGER)
		rc = rep->integer > 0 ? 0 : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found",
							  sk->text);
	else
		rc = verdict(rep, sk->text, err);
	freeReplyObject(rep);
	return rc;
}

static int rd_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	size_t nargs = 4 + 2 * n, i;
	const char **args = calloc(nargs, sizeof(*args));
	size_t *lens = calloc(nargs, sizeof(*lens));
	uint8_t **env = calloc(n, sizeof(*env));
	int64_t now = tsec__wall_ms() * 1000000;
	char count[24], fence[24];
	redisReply *rep = NULL;
	int rc = 0;

	if (!args || !lens || !env) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	/* ARGV: P (added by script), n, lock name, token, fence, pairs. */
	args[0] = count;
	lens[0] = (size_t)snprintf(count, sizeof(count), "%zu", n);
	args[1] = f ? f->name : "";
	lens[1] = strlen(args[1]);
	args[2] = f ? (const char *)f->token : "";
	lens[2] = f ? 16 : 0;
	args[3] = fence;
	lens[3] = (size_t)snprintf(fence, sizeof(fence), "%llu",
				   f ? (unsigned long long)f->fence : 0ull);
	for (i = 0; i < n; i++) {
		char bk[BK_MAX];
		size_t bn = bk_of(r, p[i].sk->text, bk);

		if ((rc = tsec__env_wrap(&r->seal, bk, bn, p[i].value, p[i].len, now, &env[i],
					 &lens[5 + 2 * i], err)))
			goto out;
		args[4 + 2 * i] = p[i].sk->text;
		lens[4 + 2 * i] = strlen(p[i].sk->text);
		args[5 + 2 * i] = (const char *)env[i];
	}
	/* Not resent: a second copy after a lost answer could undo a peer's
	 * write made in between. */
	if (!(rep = script(r, S_PUT, (int)nargs, args, lens, false, err))) {
		rc = failed(err);
		goto out;
	}
	rc = verdict(rep, f && strcmp(rep->str ? rep->str : "", "EEXIST") ? f->name
			  : p[0].sk->text, err);
out:
	freeReplyObject(rep);
	for (i = 0; env && i < n; i++)
		free(env[i]);
	free(env);
	free(args);
	free(lens);
	return rc;
}

static int rd_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);

	if (tsec__key_below(dst->text, src->text) || tsec__key_below(src->text, dst->text))
		return tsec__seterr(err, TSEC_EEXIST, dst->text, "'%s' and '%s' are a value and a "
				    "folder", src->text, dst->text);
	for (int tries = 0; tries < 8; tries++) {
		char bd[BK_MAX];
		size_t bdn = bk_of(r, dst->text, bd), nl = 0;
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
			size_t lens[7] = { strlen(src->text), strlen(dst->text) };
			char fence[24];

			fence_args(f, args + 2, lens + 2, fence);
			args[5] = old;
			lens[5] = oldlen;
			args[6] = (const char *)nenv;
			lens[6] = nl;
			if (!(rep = script(r, S_MOVE, 7, args, lens, false, err)))
				rc = failed(err);
			else if (says(rep, "RETRY"))
				rc = 1;
			else if (lock_said(rep, f))
				rc = verdict_of(lock_said(rep, f), f->name, err);
			else
				rc = verdict(rep, !strcmp(rep->str ? rep->str : "", "EEXIST")
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

static int rd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	char ttl[24];
	uint8_t token[16];
	const char *args[3] = { name, (const char *)token, ttl };
	size_t lens[3] = { strlen(name), 16, 0 };
	int64_t now = tsec__wall_ms();
	redisReply *rep;

	(void)waiter;                    /* waiting is capped backoff (lock.c) */
	randombytes_buf(token, sizeof(token));
	lens[2] = (size_t)snprintf(ttl, sizeof(ttl), "%llu",
				   (unsigned long long)(ttl_ms > INT64_MAX / 2 ? INT64_MAX / 2 : ttl_ms));
	/* Safe to resend: the script knows its own grant by the token. */
	if (!(rep = script(r, S_ACQUIRE, 3, args, lens, true, err)))
		return TSEC_EIO;
	if (rep->type != REDIS_REPLY_INTEGER) {
		freeReplyObject(rep);
		return tsec__seterr(err, TSEC_EBUSY, name, "lock '%s' is held", name);
	}
	out->fence = (uint64_t)rep->integer;
	memcpy(out->token, token, sizeof(token));
	out->expires_ms = tsec__deadline_after(now, ttl_ms);
	freeReplyObject(rep);
	return 0;
}

static int rd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			 uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	char ttl[24];
	const char *args[3] = { name, (const char *)token, ttl };
	size_t lens[3] = { strlen(name), 16, 0 };
	int64_t now = tsec__wall_ms();
	redisReply *rep;
	int rc;

	lens[2] = (size_t)snprintf(ttl, sizeof(ttl), "%llu",
				   (unsigned long long)(ttl_ms > INT64_MAX / 2 ? INT64_MAX / 2 : ttl_ms));
	if (!(rep = script(rb_of(b), S_RENEW, 3, args, lens, true, err)))
		return TSEC_EIO;
	if (!(rc = verdict(rep, name, err)))
		*expires_ms = tsec__deadline_after(now, ttl_ms);
	freeReplyObject(rep);
	return rc;
}

static int rd_lock_release(struct tsec__backend *b, const char *name, const uint8_t token[16],
			   struct tsec_error *err)
{
	const char *args[2] = { name, (const char *)token };
	size_t lens[2] = { strlen(name), 16 };
	redisReply *rep;
	int rc;

	if (!(rep = script(rb_of(b), S_RELEASE, 2, args, lens, false, err)))
		return failed(err);
	rc = verdict(rep, name, err);
	freeReplyObject(rep);
	return rc;
}

/* ---- the invalidation feed: SUBSCRIBE P/inval ---- */

/* One message of the feed: a list of keys, or "*" for everything. */
static void on_message(struct redisbe *r, const redisReply *m)
{
	char *s = strndup(m->str, m->len), *save = NULL;

	for (char *k = s ? strtok_r(s, "\n", &save) : NULL; k; k = strtok_r(NULL, "\n", &save))
		r->fn(r->fn_ctx, strcmp(k, "*") ? k : NULL);
	if (!s)
		r->fn(r->fn_ctx, NULL);
	free(s);
}

static bool is_kind(const redisReply *rep, const char *kind)
{
	return rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
	       rep->element[0]->type == REDIS_REPLY_STRING &&
	       !strcmp(rep->element[0]->str, kind);
}

/*
 * Subscribes on c and reads the feed until it fails or stops: a PING
 * every bound / 3 on the subscription itself, whose pong proves every
 * message published before the ping was delivered (redis answers in
 * order); no pong within the bound is a half-open connection.  Returns
 * why it ended (NULL when stopped).
 */
static const char *subscribed(struct redisbe *r, redisContext *c, const char *chan,
			      char *why, size_t whylen, bool *was_live)
{
	uint32_t bound = tsec__localcache_bound(r->fn_ctx);
	int64_t ping_at = 0, next_ping = 0;
	redisReply *rep;

	rep = redisCommand(c, "SUBSCRIBE %b", chan, strlen(chan));
	if (!is_kind(rep, "subscribe")) {
		snprintf(why, whylen, "SUBSCRIBE %.64s: %.100s", chan,
			 rep && rep->type == REDIS_REPLY_ERROR ? rep->str :
			 c->err ? c->errstr : "unexpected answer");
		freeReplyObject(rep);
		return why;
	}
	freeReplyObject(rep);
	/* Subscribed: whatever was cached before may be stale. */
	r->fn(r->fn_ctx, NULL);
	while (atomic_load(&r->feed_on)) {
		int64_t now = tsec__mono_ms();
		struct pollfd pf = { .fd = c->fd, .events = POLLIN };
		void *got = NULL;
		int done = 0;

		if (ping_at && now - ping_at >= bound) {
			snprintf(why, whylen, "no answer to a PING on the subscription in %u ms",
				 bound);
			return why;
		}
		if (!ping_at && now >= next_ping) {
			ping_at = now;
			redisAppendCommand(c, "PING");
			while (!done)
				if (redisBufferWrite(c, &done) != REDIS_OK)
					goto broken;
		}
		if (redisGetReplyFromReader(c, &got) != REDIS_OK)
			goto broken;
		if (!got) {
			int64_t wake = ping_at ? ping_at + bound : next_ping;

			if (poll(&pf, 1, (int)(wake > now ? (wake - now < 100 ? wake - now : 100)
						       : 0)) > 0 &&
			    redisBufferRead(c) != REDIS_OK)
				goto broken;
			continue;
		}
		rep = got;
		if (is_kind(rep, "message") && rep->elements == 3 &&
		    rep->element[2]->type == REDIS_REPLY_STRING) {
			on_message(r, rep->element[2]);
		} else if (is_kind(rep, "pong") && ping_at) {
			tsec__localcache_alive(r->fn_ctx, ping_at);
			*was_live = true;
			ping_at = 0;
			next_ping = tsec__mono_ms() + bound / 3;
		}
		freeReplyObject(rep);
	}
	return NULL;
broken:
	if (!atomic_load(&r->feed_on))
		return NULL;
	snprintf(why, whylen, "the subscription broke: %.120s", c->errstr);
	return why;
}

static void *feed(void *arg)
{
	struct redisbe *r = arg;
	char chan[TSEC_KEY_MAX + 8], why[192];
	long backoff = 10;

	snprintf(chan, sizeof(chan), "%s/inval", r->prefix);
	{
		sigset_t sp;                 /* for this thread's life (nopipe_on) */

		sigemptyset(&sp);
		sigaddset(&sp, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &sp, NULL);
	}
	while (atomic_load(&r->feed_on)) {
		struct tsec_error err = { 0 };
		struct timespec ts;
		redisContext *c = dial(r, &err);
		const char *lost = err.msg;
		bool was_live = false;

		if (c) {
			pthread_mutex_lock(&r->mu);
			r->feed_ctx = c;
			pthread_mutex_unlock(&r->mu);
			if (!atomic_load(&r->feed_on))
				shutdown(c->fd, SHUT_RDWR);
			lost = subscribed(r, c, chan, why, sizeof(why), &was_live);
			if (was_live)
				backoff = 10;
			pthread_mutex_lock(&r->mu);
			r->feed_ctx = NULL;
			pthread_mutex_unlock(&r->mu);
			redisFree(c);
		}
		if (!atomic_load(&r->feed_on))
			break;
		/* Missed messages: drop all, serve no hit until proven again. */
		tsec__localcache_dead(r->fn_ctx, lost);
		ts.tv_sec = backoff / 1000;
		ts.tv_nsec = (backoff % 1000) * 1000000;
		nanosleep(&ts, NULL);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return NULL;
}

int tsec__redis_feed(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		     struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	int rc;

	r->fn = fn;
	r->fn_ctx = ctx;
	atomic_store(&r->feed_on, true);
	if ((rc = pthread_create(&r->feed, NULL, feed, r))) {
		atomic_store(&r->feed_on, false);
		return tsec__seterr(err, TSEC_EIO, "", "cannot start the redis feed: %s",
				    strerror(rc));
	}
	return 0;
}

static int rd_meta_get(struct tsec__backend *b, const char *name, char **out, size_t *len,
		       struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	char k[BK_MAX];
	const char *av[2] = { "GET", k };
	redisReply *rep;
	int rc = 0;

	*out = NULL;
	snprintf(k, sizeof(k), "%s/m/%s", r->prefix, name);
	if (!(rep = call(r, 2, av, NULL, true, err)))
		return TSEC_EIO;
	if (rep->type != REDIS_REPLY_STRING)
		rc = tsec__seterr(err, TSEC_ENOENT, name, "no %s published", name);
	else if (!(*out = malloc(rep->len + 1)))
		rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	else {
		memcpy(*out, rep->str, rep->len);
		(*out)[rep->len] = '\0';
		*len = rep->len;
	}
	freeReplyObject(rep);
	return rc;
}

static int rd_meta_put(struct tsec__backend *b, const char *name, const char *val, size_t len,
		       const struct tsec__meta_expect *ex, struct tsec_error *err)
{
	struct redisbe *r = rb_of(b);
	char k[BK_MAX];
	const char *av[3] = { "SET", k, val };
	size_t lv[3] = { 3, 0, len };
	redisReply *rep;

	if (ex) {
		const char *args[4] = { name, val, ex->val ? "1" : "0", ex->val ? ex->val : "" };
		size_t lens[4] = { strlen(name), len, 1, ex->val ? ex->len : 0 };
		int rc = 0;

		/* Safe to resend: a record holding our value is success. */
		if (!(rep = script(r, S_META_CAS, 4, args, lens, true, err)))
			return failed(err);
		if (says(rep, "EBUSY"))
			rc = tsec__seterr(err, TSEC_EBUSY, name, "%s changed since it was read; "
					  "read it again", name);
		else if (!says(rep, "OK"))
			rc = tsec__seterr(err, TSEC_EIO, name, "redis answered unexpectedly");
		freeReplyObject(rep);
		return rc;
	}
	lv[1] = (size_t)snprintf(k, sizeof(k), "%s/m/%s", r->prefix, name);
	if (!(rep = call(r, 3, av, lv, true, err)))
		return TSEC_EIO;
	freeReplyObject(rep);
	return 0;
}

static void rd_close(struct tsec__backend *b)
{
	struct redisbe *r = rb_of(b);

	if (!r)
		return;
	if (atomic_exchange(&r->feed_on, false)) {
		pthread_mutex_lock(&r->mu);
		if (r->feed_ctx)
			shutdown(r->feed_ctx->fd, SHUT_RDWR);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->feed, NULL);
	}
	for (size_t i = 0; i < r->npool; i++)
		redisFree(r->pool[i]);
	pthread_mutex_destroy(&r->mu);
	sodium_memzero(r, sizeof(*r));
	free(r);
}

static void rd_note(struct tsec__backend *b, char *out, size_t n)
{
	snprintf(out, n, "%s", rb_of(b)->note);
}

/* A server setting by CONFIG GET into out; false if refused (an ACL
 * without CONFIG, a managed redis). */
static bool config_get(redisContext *c, const char *name, char *out, size_t n)
{
	redisReply *rep = redisCommand(c, "CONFIG GET %s", name);
	bool ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
		  rep->element[1]->type == REDIS_REPLY_STRING;

	if (ok)
		snprintf(out, n, "%s", rep->element[1]->str);
	freeReplyObject(rep);
	return ok;
}

/*
 * At open, on c: may this user publish on P/inval (every write does),
 * and subscribe to it when a cache needs the feed?  Redis 7's default
 * ACL for a new user (resetchannels) allows neither, and a write would
 * be refused.  Then what the server's settings promise: an eviction
 * policy under maxmemory can drop a held lock's key (a second holder),
 * so it is refused; no appendonly, or a lazy fsync, loses acknowledged
 * writes on a restart or a crash, which is said in r->note.
 */
static int probe(struct redisbe *r, redisContext *c, bool feed, struct tsec_error *err)
{
	char chan[TSEC_KEY_MAX + 8], aof[16] = "", fsync[16] = "", evict[32] = "", max[32] = "";
	redisReply *rep;
	bool refused;

	snprintf(chan, sizeof(chan), "%s/inval", r->prefix);
	rep = redisCommand(c, "PUBLISH %s %b", chan, "", (size_t)0);
	refused = !rep || rep->type != REDIS_REPLY_INTEGER;
	if (!rep)
		return tsec__seterr(err, TSEC_EIO, chan, "redis did not answer PUBLISH on '%s': "
				    "%.100s", chan, c->errstr);
	if (refused)
		tsec__seterr(err, TSEC_EDENIED, chan, "redis refused PUBLISH on "
			     "'%s' (%.100s): every write publishes there; grant the user the "
			     "channel (ACL SETUSER NAME '&%s'; Redis 7 gives a new user none)",
			     chan, rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr,
			     chan);
	freeReplyObject(rep);
	if (refused)
		return err->code;
	if (feed) {
		redisContext *sc = dial(r, err);

		if (!sc)
			return TSEC_EIO;
		rep = redisCommand(sc, "SUBSCRIBE %s", chan);
		refused = !is_kind(rep, "subscribe");
		if (!rep)
			tsec__seterr(err, TSEC_EIO, chan, "redis did not answer SUBSCRIBE to "
				     "'%s': %.100s", chan, sc->errstr);
		else if (refused)
			tsec__seterr(err, TSEC_EDENIED, chan, "redis refused "
				     "SUBSCRIBE to '%s' (%.100s): the LocalCache needs it; grant "
				     "the user the channel (ACL SETUSER NAME '&%s')", chan,
				     rep && rep->type == REDIS_REPLY_ERROR ? rep->str : sc->errstr,
				     chan);
		freeReplyObject(rep);
		redisFree(sc);
		if (refused)
			return err->code;
	}
	if (!config_get(c, "appendonly", aof, sizeof(aof)) ||
	    !config_get(c, "appendfsync", fsync, sizeof(fsync)) ||
	    !config_get(c, "maxmemory-policy", evict, sizeof(evict)) ||
	    !config_get(c, "maxmemory", max, sizeof(max))) {
		snprintf(r->note, sizeof(r->note), "the server's persistence and eviction "
			 "settings are unknown (CONFIG GET refused): an acknowledged write may "
			 "be lost on a restart, and an eviction policy could drop lock state");
		return 0;
	}
	if (strcmp(max, "0") && strcmp(evict, "noeviction"))
		return tsec__seterr(err, TSEC_EINVAL, "maxmemory-policy", "redis has maxmemory "
				    "%s with maxmemory-policy %s: it may evict a held lock's key "
				    "and hand the lock to a second holder; set noeviction", max,
				    evict);
	if (strcmp(aof, "yes"))
		snprintf(r->note, sizeof(r->note), "appendonly is off: a restart of redis "
			 "loses the writes acknowledged since its last snapshot (fences still "
			 "never go back: they follow the server's clock)");
	else if (strcmp(fsync, "always"))
		snprintf(r->note, sizeof(r->note), "appendfsync %s: a crash of the machine "
			 "can lose the last %s of acknowledged writes", fsync,
			 strcmp(fsync, "everysec") ? "seconds" : "second");
	return 0;
}

static const struct tsec__backend_ops redis_ops = {
	.name = "redis",
	.close = rd_close,
	.note = rd_note,
	.get = rd_get,
	.kind = rd_kind,
	.stat = rd_stat,
	.list = rd_list,
	.del = rd_del,
	.move = rd_move,
	.put_many = rd_put_many,
	.lock_try = rd_lock_try,
	.lock_renew = rd_lock_renew,
	.lock_release = rd_lock_release,
	.meta_get = rd_meta_get,
	.meta_put = rd_meta_put,
};

int tsec__redis_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		     struct tsec_error *err)
{
	const char *ep = o->endpoints;
	struct redisbe *r;
	redisContext *c;
	int rc;

	*out = NULL;
	if (o->root || o->delay_us || o->tls_ca || o->tls_cert || o->tls_key || o->request_max ||
	    o->clock_skew_ms)
		return tsec__seterr(err, TSEC_EINVAL, "backend", "redis takes endpoints, prefix, "
				    "key_file, timeout_ms, username and password_file only");
	if (!ep || !*ep || strchr(ep, ','))
		return tsec__seterr(err, TSEC_EINVAL, "endpoints", "redis needs one endpoint, "
				    "\"host:port\" or \"unix:/path\" (one primary)");
	if (!(r = calloc(1, sizeof(*r))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	r->base.ops = &redis_ops;
	pthread_mutex_init(&r->mu, NULL);
	if (!strncmp(ep, "unix:", 5)) {
		snprintf(r->host, sizeof(r->host), "%s", ep + 5);
	} else {
		const char *colon = strrchr(ep, ':');
		char *end;
		long port = colon ? strtol(colon + 1, &end, 10) : 0;

		if (!colon || *end || port <= 0 || port > 65535 ||
		    (size_t)(colon - ep) >= sizeof(r->host)) {
			rd_close(&r->base);
			return tsec__seterr(err, TSEC_EINVAL, "endpoints", "redis endpoint '%.64s' is "
					    "not host:port", ep);
		}
		snprintf(r->host, sizeof(r->host), "%.*s", (int)(colon - ep), ep);
		r->port = (int)port;
	}
	{
		uint32_t t = o->timeout_ms ? o->timeout_ms : TSEC__REMOTE_TIMEOUT_MS;
		r->tmo.tv_sec = t / 1000;
		r->tmo.tv_usec = (t % 1000) * 1000;
	}
	if (o->username)
		snprintf(r->user, sizeof(r->user), "%s", o->username);
	if ((o->password_file &&
	     (rc = tsec__password_load(o->password_file, r->pass, sizeof(r->pass), err))) ||
	    (rc = tsec__prefix_norm(o->prefix, r->prefix, sizeof(r->prefix), err)) ||
	    (o->key_file && (rc = tsec__seal_load(&r->seal, o->key_file, err)))) {
		rd_close(&r->base);
		return rc;
	}
	r->plen = strlen(r->prefix);
	for (int s = 0; s < S_COUNT; s++) {
		unsigned char d[SHA_DIGEST_LENGTH];

		/* The SHA-1 redis names a script by, for EVALSHA (not a
		 * security use). */
		SHA1((const unsigned char *)scripts[s], strlen(scripts[s]), d);
		sodium_bin2hex(r->sha[s], sizeof(r->sha[s]), d, sizeof(d));
	}
	/* Connect now, so a wrong address, password or ACL is said at open. */
	if (!(c = dial(r, err))) {
		rd_close(&r->base);
		return TSEC_EIO;
	}
	{
		struct nopipe np;

		nopipe_on(&np);
		rc = probe(r, c, o->cache_bytes > 0, err);
		nopipe_off(&np);
	}
	if (rc) {
		redisFree(c);
		rd_close(&r->base);
		return rc;
	}
	give(r, c);
	*out = &r->base;
	return 0;
}
