/*
 * The redis backend (hiredis): one primary.  Values are P/k/<key> (the
 * envelope of fleet.h), and the sorted set P/i holds every key with
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/redis/redis_private.h"
#include "broker/storage/redis/redis_scripts.h"
#include "common/clock.h"
#include "common/opts.h"

static const char *const scripts[S_COUNT] = {
	tsec__lua_put, tsec__lua_del, tsec__lua_move,
	tsec__lua_acquire, tsec__lua_renew, tsec__lua_release, tsec__lua_unwait,
};

struct redisbe *tsec__rd_rb_of(struct tsec__backend *b)
{
	return (struct redisbe *)b;
}

size_t tsec__rd_bk_of(const struct redisbe *r, const char *key, char *out)
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

void tsec__rd_nopipe_on(struct nopipe *np)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, &np->old);
}

void tsec__rd_nopipe_off(struct nopipe *np)
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

static int64_t tmo_ms(const struct redisbe *r)
{
	return (int64_t)r->tmo.tv_sec * 1000 + r->tmo.tv_usec / 1000;
}

int64_t tsec__rd_until(const struct redisbe *r)
{
	return tsec__mono_ms() + tmo_ms(r);
}

static struct timeval tv_of(int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	return tv;
}

static bool timed_out(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT || e == EINPROGRESS;
}

bool tsec__rd_timed_out(const redisContext *c, int e)
{
	return c->err == REDIS_ERR_IO && timed_out(e);
}

/*
 * The deadline of the call this thread is making (tsec__rd_take), 0 for
 * none (a feed's own connection): each read waits only for what is left
 * of it, so a reply trickled a byte at a time cannot stretch timeout_ms
 * (issue 52, item 2: a byte each 0.3 s held a 2 s call for 53 s).
 */
static _Thread_local int64_t call_until;
/* Reads the call made: the first waits with the timeout set when the
 * connection was taken (the whole budget then), so only later ones
 * cost a clock read and a setsockopt. */
static _Thread_local unsigned call_reads;

int tsec__rd_reply(redisContext *c, redisReply **out)
{
	void *rep = NULL;

	*out = NULL;
	if (tsec__rd_write(c) != REDIS_OK)
		return REDIS_ERR;
	for (;;) {
		if (redisGetReplyFromReader(c, &rep) != REDIS_OK)
			return REDIS_ERR;
		if (rep) {
			*out = rep;
			return REDIS_OK;
		}
		if (c->reader->len - c->reader->pos > TSEC__RD_BULK_MAX) {
			tsec__rd_refuse(c);
			return REDIS_ERR;
		}
		if (call_until && call_reads++) {
			int64_t left = call_until - tsec__mono_ms();

			if (left <= 0) {
				c->err = REDIS_ERR_IO;
				snprintf(c->errstr, sizeof(c->errstr), "the call's deadline passed");
				errno = ETIMEDOUT;
				return REDIS_ERR;
			}
			redisSetTimeout(c, tv_of(left));
		}
		if (tsec__rd_read(c) != REDIS_OK)
			return REDIS_ERR;
	}
}

redisReply *tsec__rd_command(redisContext *c, int argc, const char **argv, const size_t *lens)
{
	redisReply *rep;

	if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK ||
	    tsec__rd_reply(c, &rep) != REDIS_OK)
		return NULL;
	return rep;
}

int tsec__rd_lost(struct redisbe *r, const redisContext *c, int e, bool idempotent,
		  struct tsec_error *err)
{
	const char *unknown = idempotent ? "" : " (the write may or may not have been applied)";
	int code = idempotent ? TSEC_EIO : TSEC_EUNKNOWN;

	if (c && tsec__rd_timed_out(c, e))
		return tsec__seterr(err, code, r->host, "redis at %s: no answer within %lld ms "
				    "(timeout_ms)%s", r->host, (long long)tmo_ms(r), unknown);
	if (c && tsec__rd_refused_reply(c))
		return tsec__seterr(err, code, r->host, "redis at %s: a reply larger than this "
				    "client takes (over %u elements or %u MiB): refused, connection "
				    "closed%s", r->host, TSEC__RD_ELEMENTS_MAX,
				    (unsigned)(TSEC__RD_REPLY_MAX >> 20), unknown);
	return tsec__seterr(err, code, r->host, "redis at %s: %s%s", r->host,
			    c ? c->errstr : "no connection", unknown);
}

/* params db=N: which of the server's databases (SELECT); 0 the default. */
static int db_of(const char *params, long *db, struct tsec_error *err)
{
	char v[TSEC__PARAM_MAX + 1], *end;

	*db = 0;
	if (!tsec__param(params, "db", v))
		return 0;
	errno = 0;
	*db = strtol(v, &end, 10);
	if (!*v || *end || errno || *db < 0 || *db > INT32_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "params", "redis option db: \"%.32s\" is "
				    "not a database number (0 or more)", v);
	return 0;
}

/*
 * One command of a new connection's set-up (AUTH, SELECT): 0, or -1 with
 * err said: the connection lost, or the server's refusal as code with
 * "redis at HOST refused WHAT" and, but for a refused password, its
 * words.
 */
static int setup_command(struct redisbe *r, redisContext *c, int argc, const char **av,
			 int code, const char *what, struct tsec_error *err)
{
	redisReply *rep;
	struct nopipe np;
	int e;

	tsec__rd_nopipe_on(&np);
	rep = tsec__rd_command(c, argc, av, NULL);
	e = errno;
	tsec__rd_nopipe_off(&np);
	if (!rep) {
		tsec__rd_lost(r, c, e, true, err);
		return -1;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		/* Not the server's words to AUTH: they could echo what it was sent. */
		tsec__seterr(err, code, code == TSEC_EINVAL ? "params" : r->host,
			     "redis at %s refused %s%s%.100s", r->host, what,
			     code == TSEC_EDENIED ? "" : ": ", code == TSEC_EDENIED ? "" : rep->str);
		freeReplyObject(rep);
		return -1;
	}
	freeReplyObject(rep);
	return 0;
}

/* A new connection's password and database: 0, or -1 with err said. */
static int setup(struct redisbe *r, redisContext *c, struct tsec_error *err)
{
	char n[24], what[48];

	if (r->pass[0] &&
	    setup_command(r, c, r->user[0] ? 3 : 2,
			  (const char *[]){ "AUTH", r->user[0] ? r->user : r->pass, r->pass },
			  TSEC_EDENIED, r->user[0] ? "the password (or user)" : "the password", err))
		return -1;
	if (!r->db)
		return 0;
	snprintf(n, sizeof(n), "%ld", r->db);
	snprintf(what, sizeof(what), "SELECT %ld (db)", r->db);
	return setup_command(r, c, 2, (const char *[]){ "SELECT", n }, TSEC_EINVAL, what, err);
}

static redisContext *dial_by(struct redisbe *r, int64_t until, struct tsec_error *err)
{
	int64_t left = until - tsec__mono_ms();
	redisContext *c;
	int e;

	if (left <= 0) {
		tsec__seterr(err, TSEC_EIO, r->host, "redis at %s: no answer within %lld ms "
			     "(timeout_ms)", r->host, (long long)tmo_ms(r));
		return NULL;
	}
	call_until = until;
	call_reads = 0;
	for (;;) {
		c = r->port ? redisConnectWithTimeout(r->host, r->port, tv_of(left))
			    : redisConnectUnixWithTimeout(r->host, tv_of(left));
		e = errno;
		/* hiredis fails a connect whose wait a signal interrupted:
		 * dial again while the call's budget lasts (issue 35). */
		if (!c || !c->err || e != EINTR || (left = until - tsec__mono_ms()) <= 0)
			break;
		tsec__rd_free(c);
	}
	if (!c || c->err) {
		if (c && tsec__rd_timed_out(c, e))
			tsec__seterr(err, TSEC_EIO, r->host, "redis at %s:%d: no connection within "
				     "%lld ms (timeout_ms)", r->host, r->port, (long long)tmo_ms(r));
		else
			tsec__seterr(err, TSEC_EIO, r->host, "redis at %s:%d: %s", r->host, r->port,
				     c ? c->errstr : "cannot allocate");
		tsec__rd_free(c);
		return NULL;
	}
	if (!tsec__rd_cap(c)) {
		tsec__seterr(err, TSEC_EIO, r->host, "redis at %s: cannot bound its replies "
			     "(a hiredis this build does not know)", r->host);
		tsec__rd_free(c);
		return NULL;
	}
	redisSetTimeout(c, tv_of(until - tsec__mono_ms() > 0 ? until - tsec__mono_ms() : 1));
	if (tsec__rd_tls_start(r, c, err)) {
		tsec__rd_free(c);
		return NULL;
	}
	if (setup(r, c, err)) {
		tsec__rd_free(c);
		return NULL;
	}
	return c;
}

redisContext *tsec__rd_dial(struct redisbe *r, struct tsec_error *err)
{
	redisContext *c = dial_by(r, tsec__rd_until(r), err);

	/* Its own commands (the feed's) get the whole timeout each. */
	call_until = 0;
	if (c)
		redisSetTimeout(c, r->tmo);
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
	int n;

	/* A signal is not a dead connection (issue 35). */
	while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
		;
	return n != 0;
}

redisContext *tsec__rd_take(struct redisbe *r, int64_t until, struct tsec_error *err)
{
	redisContext *c = NULL;
	int64_t left;

	for (;;) {
		pthread_mutex_lock(&r->mu);
		c = r->npool ? r->pool[--r->npool] : NULL;
		pthread_mutex_unlock(&r->mu);
		if (!c || !stale(c))
			break;
		tsec__rd_free(c);
	}
	if (!c)
		return dial_by(r, until, err);
	if ((left = until - tsec__mono_ms()) <= 0) {
		tsec__rd_give(r, c);
		tsec__seterr(err, TSEC_EIO, r->host, "redis at %s: no answer within %lld ms "
			     "(timeout_ms)", r->host, (long long)tmo_ms(r));
		return NULL;
	}
	redisSetTimeout(c, tv_of(left));
	call_until = until;
	call_reads = 0;
	return c;
}

/* Returns c to the pool, or drops it when it failed. */
void tsec__rd_give(struct redisbe *r, redisContext *c)
{
	call_until = 0;                  /* the call is over */
	if (c && !c->err) {
		pthread_mutex_lock(&r->mu);
		if (r->npool < POOL) {
			r->pool[r->npool++] = c;
			c = NULL;
		}
		pthread_mutex_unlock(&r->mu);
	}
	tsec__rd_free(c);
}

/*
 * One command within the call's budget.  A read (idempotent) whose
 * connection broke is tried again once on a new one while the budget
 * lasts; one that timed out is not (its budget is spent); a write
 * reports the unknown outcome.
 */
redisReply *tsec__rd_call_by(struct redisbe *r, int argc, const char **argv,
			     const size_t *lens, bool idempotent, int64_t until,
			     struct tsec_error *err)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		redisContext *c = tsec__rd_take(r, until, err);
		redisReply *rep;
		struct nopipe np;
		int e;

		if (!c)
			return NULL;
		tsec__rd_nopipe_on(&np);
		rep = tsec__rd_command(c, argc, argv, lens);
		e = errno;
		tsec__rd_nopipe_off(&np);
		if (rep) {
			tsec__rd_give(r, c);
			if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8)) {
				tsec__seterr(err, TSEC_EIO, r->host, "redis: %.200s", rep->str);
				freeReplyObject(rep);
				return NULL;
			}
			return rep;
		}
		bool spent = tsec__rd_timed_out(c, e);

		tsec__rd_lost(r, c, e, idempotent, err);
		tsec__rd_free(c);
		call_until = 0;
		if (!idempotent || spent)
			return NULL;
	}
	return NULL;
}

redisReply *tsec__rd_call(struct redisbe *r, int argc, const char **argv, const size_t *lens,
			bool idempotent, struct tsec_error *err)
{
	return tsec__rd_call_by(r, argc, argv, lens, idempotent, tsec__rd_until(r), err);
}

/* The code a failed tsec__rd_call() left in err. */
int tsec__rd_failed(const struct tsec_error *err)
{
	return err && err->code ? err->code : TSEC_EIO;
}

/* Runs script s with args (prefix first, added here). */
redisReply *tsec__rd_script(struct redisbe *r, int s, int nargs, const char **args,
			  const size_t *lens, bool idempotent, struct tsec_error *err)
{
	const char *argv[3 + 64 + 2 * 64 + 8];
	size_t len[sizeof(argv) / sizeof(argv[0])];
	const char **av = argv;
	size_t *lv = len;
	redisReply *rep;
	int argc = 4 + nargs;
	int64_t until = tsec__rd_until(r);

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
	rep = tsec__rd_call_by(r, argc, av, lv, idempotent, until, err);
	if (rep && rep->type == REDIS_REPLY_ERROR) {
		/* NOSCRIPT: a restarted server; send the text (and so load it). */
		freeReplyObject(rep);
		av[0] = "EVAL";
		lv[0] = 4;
		av[1] = scripts[s];
		lv[1] = strlen(scripts[s]);
		rep = tsec__rd_call_by(r, argc, av, lv, idempotent, until, err);
	}
	if (av != argv) {
		free(av);
		free(lv);
	}
	return rep;
}

/* A script's error name ("EEXIST") as our code; 0 for "OK". */
/* A script's answer word (Lua strings come back as bulk strings). */
bool tsec__rd_says(const redisReply *rep, const char *word)
{
	return (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING) &&
	       !strcmp(rep->str, word);
}


int tsec__rd_verdict(const redisReply *rep, const char *what, struct tsec_error *err)
{
	return tsec__rd_verdict_of(rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING
			  ? rep->str : "", what, err);
}

/* A fenced script's answer about its lock ("L" + owned()'s), or NULL. */
const char *tsec__rd_lock_said(const redisReply *rep, const struct tsec__fence *f)
{
	return f && (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING) &&
	       rep->str[0] == 'L' ? rep->str + 1 : NULL;
}

int tsec__rd_verdict_of(const char *s, const char *what, struct tsec_error *err)
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
	if (!strcmp(s, "ECHANGED"))
		return tsec__seterr(err, TSEC_ECHANGED, what, "%s changed meanwhile", what);
	return tsec__seterr(err, TSEC_EIO, what, "redis answered unexpectedly");
}

static void rd_close(struct tsec__backend *b)
{
	struct redisbe *r = tsec__rd_rb_of(b);

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
		tsec__rd_free(r->pool[i]);
	tsec__rd_tls_close(r);
	pthread_mutex_destroy(&r->mu);
	sodium_memzero(r, sizeof(*r));
	free(r);
}

static void rd_note(struct tsec__backend *b, char *out, size_t n)
{
	snprintf(out, n, "%s", tsec__rd_rb_of(b)->note);
}

/* A server setting by CONFIG GET into out; false if refused (an ACL
 * without CONFIG, a managed redis). */
static bool config_get(redisContext *c, const char *name, char *out, size_t n)
{
	const char *av[3] = { "CONFIG", "GET", name };
	redisReply *rep = tsec__rd_command(c, 3, av, NULL);
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
	rep = tsec__rd_command(c, 3, (const char *[]){ "PUBLISH", chan, "" }, NULL);
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
		redisContext *sc = tsec__rd_dial(r, err);

		if (!sc)
			return TSEC_EIO;
		rep = tsec__rd_command(sc, 2, (const char *[]){ "SUBSCRIBE", chan }, NULL);
		refused = !tsec__rd_is_kind(rep, "subscribe");
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
		tsec__rd_free(sc);
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
	.get = tsec__rd_get,
	.get_many = tsec__rd_get_many,
	.kind = tsec__rd_kind,
	.stat = tsec__rd_stat,
	.list = tsec__rd_list,
	.del = tsec__rd_del,
	.move = tsec__rd_move,
	.put_many = tsec__rd_put_many,
	.lock_try = tsec__rd_lock_try,
	.lock_unwait = tsec__rd_lock_unwait,
	.lock_renew = tsec__rd_lock_renew,
	.lock_release = tsec__rd_lock_release,
};

/* Where r connects: "unix:/path" or "host:port" (ep checked as one). */
static int endpoint_of(struct redisbe *r, const char *ep, struct tsec_error *err)
{
	const char *colon = strrchr(ep, ':');
	char *end;
	long port;

	if (!strncmp(ep, "unix:", 5)) {
		snprintf(r->host, sizeof(r->host), "%s", ep + 5);
		return 0;
	}
	port = colon ? strtol(colon + 1, &end, 10) : 0;
	if (!colon || *end || port <= 0 || port > 65535 || (size_t)(colon - ep) >= sizeof(r->host))
		return tsec__seterr(err, TSEC_EINVAL, "endpoints", "redis endpoint '%.64s' is not "
				    "host:port", ep);
	snprintf(r->host, sizeof(r->host), "%.*s", (int)(colon - ep), ep);
	r->port = (int)port;
	return 0;
}

/* r's settings from o, its files read (TLS, password, encryption key). */
static int settings_of(struct redisbe *r, const struct tsec_store_opts *o,
		       struct tsec_error *err)
{
	uint32_t t = o->timeout_ms ? o->timeout_ms : TSEC__REMOTE_TIMEOUT_MS;
	int rc;

	r->tmo.tv_sec = t / 1000;
	r->tmo.tv_usec = (t % 1000) * 1000;
	if (o->username)
		snprintf(r->user, sizeof(r->user), "%s", o->username);
	if ((rc = endpoint_of(r, o->endpoints, err)) || (rc = db_of(o->params, &r->db, err)))
		return rc;
	if (((o->tls_ca || o->tls_cert || o->tls_key) &&
	     (rc = tsec__rd_tls_open(r, o->tls_ca, o->tls_cert, o->tls_key, err))) ||
	    (o->password_file &&
	     (rc = tsec__password_load(o->password_file, r->pass, sizeof(r->pass), err))) ||
	    (rc = tsec__prefix_norm(o->prefix, r->prefix, sizeof(r->prefix), err)) ||
	    (o->key_file && (rc = tsec__seal_load(&r->seal, o->key_file, err))))
		return rc;
	return 0;
}

int tsec__redis_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		     struct tsec_error *err)
{
	const char *ep = o->endpoints;
	struct redisbe *r;
	redisContext *c;
	int rc;

	*out = NULL;
	if (o->root || o->delay_us || o->request_max)
		return tsec__seterr(err, TSEC_EINVAL, "backend", "redis takes endpoints, prefix, "
				    "key_file, timeout_ms, username, password_file, tls_ca, tls_cert "
				    "and tls_key only");
	if ((o->tls_ca || o->tls_cert || o->tls_key) && ep && !strncmp(ep, "unix:", 5))
		return tsec__seterr(err, TSEC_EINVAL, "backend", "redis over a unix socket takes "
				    "no TLS settings");
	if (!ep || !*ep || strchr(ep, ','))
		return tsec__seterr(err, TSEC_EINVAL, "endpoints", "redis needs one endpoint, "
				    "\"host:port\" or \"unix:/path\" (one primary)");
	if (!(r = calloc(1, sizeof(*r))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	r->base.ops = &redis_ops;
	pthread_mutex_init(&r->mu, NULL);
	if ((rc = settings_of(r, o, err))) {
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
	if (!(c = tsec__rd_dial(r, err))) {
		rd_close(&r->base);
		return err->code ? err->code : TSEC_EIO;   /* as said: refused is not lost */
	}
	{
		struct nopipe np;

		tsec__rd_nopipe_on(&np);
		rc = probe(r, c, o->cache_bytes > 0, err);
		tsec__rd_nopipe_off(&np);
	}
	if (rc) {
		tsec__rd_free(c);
		rd_close(&r->base);
		return rc;
	}
	tsec__rd_give(r, c);
	*out = &r->base;
	return 0;
}
