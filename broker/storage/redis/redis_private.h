/*
 * Internal: what the redis backend's files share (redis.c: connections,
 * scripts, open and close; redis_kv.c: values, folders, listings;
 * redis_lock.c: locks and the invalidation feed).
 */
#ifndef TSEC_STORAGE_REDIS_PRIVATE_H
#define TSEC_STORAGE_REDIS_PRIVATE_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "broker/storage/fleet.h"
#include "common/clock.h"

#define POOL 32
#define PAGE 1000
/* The most one reply may hold (redis.c): elements (a listing's page is
 * PAGE names; an MGET TSEC__GET_MANY_MAX values), string bytes (an MGET
 * of the largest values, and some), and bytes buffered for one element
 * not yet whole (the largest value, a 32 MiB record, and some). */
/* The least a lease is kept past what its holder is told (redis_lock.c). */
#define TSEC__RD_LEASE_MARGIN_MS 20
#define TSEC__RD_ELEMENTS_MAX (1u << 16)
#define TSEC__RD_REPLY_MAX ((size_t)(TSEC__GET_MANY_MAX + 2) * TSEC_STORE_VALUE_MAX)
#define TSEC__RD_BULK_MAX ((size_t)(32u << 20) + (64u << 10))
#define BK_MAX (2 * TSEC_KEY_MAX + 8)

enum { S_PUT, S_DEL, S_MOVE, S_ACQUIRE, S_RENEW, S_RELEASE, S_UNWAIT, S_COUNT };


struct redisbe {
	struct tsec__backend base;
	char host[256];
	int port;                    /* 0: host is a unix socket path */
	struct timeval tmo;
	char user[256], pass[512];
	long db;                     /* params db=N: SELECTed on each connection */
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
	struct tsec__feed_sink sink;   /* the feed's subscriber */
	char note[256];              /* what its configuration promises */
	struct ssl_ctx_st *tls;      /* SSL_CTX with TLS (redis_tls.c), NULL: plain */
};

/* Around each command: SIGPIPE blocked, and one it raised taken back. */
struct nopipe {
	sigset_t old;
};

struct redisbe *tsec__rd_rb_of(struct tsec__backend *b);
/* redisGetReply within the bounds above (redis.c); REDIS_OK or
 * REDIS_ERR with c->err set. */
int tsec__rd_reply(redisContext *c, redisReply **out);
/* A command and its reply, bounded so; NULL with c->err set. */
redisReply *tsec__rd_command(redisContext *c, int argc, const char **argv, const size_t *lens);
/* redis_reply.c: whether c's error is a reply refused for its size
 * (this thread's). */
bool tsec__rd_refused_reply(const redisContext *c);
/* Refuses the reply c is reading for its size (an unfinished element past
 * TSEC__RD_BULK_MAX): c->err set, tsec__rd_refused_reply then true. */
void tsec__rd_refuse(redisContext *c);
/* Gives c's reader the functions that count a reply's elements and bytes
 * against the bounds above; false if this hiredis cannot take them. */
bool tsec__rd_cap(redisContext *c);
/* redis_tls.c: every byte of every connection goes through these. */
int tsec__rd_tls_open(struct redisbe *r, const char *ca, const char *cert, const char *key,
		      struct tsec_error *err);
void tsec__rd_tls_close(struct redisbe *r);
int tsec__rd_tls_start(struct redisbe *r, redisContext *c, struct tsec_error *err);
void tsec__rd_free(redisContext *c);
int tsec__rd_write(redisContext *c);
int tsec__rd_read(redisContext *c);
/* Bytes already decrypted and waiting (poll on the socket misses them). */
bool tsec__rd_pending(const redisContext *c);

size_t tsec__rd_bk_of(const struct redisbe *r, const char *key, char *out);

void tsec__rd_nopipe_on(struct nopipe *np);

void tsec__rd_nopipe_off(struct nopipe *np);

/*
 * Every call has one budget, timeout_ms, from its start (an "until" on
 * tsec__mono_ms): connecting, sending, a second connection after a dead
 * pooled one and a script's NOSCRIPT resend all come out of it, so no
 * call takes longer than timeout_ms (issue 34, item 6).
 */
int64_t tsec__rd_until(const struct redisbe *r);

/* A new connection within the whole timeout_ms (the feed, open). */
redisContext *tsec__rd_dial(struct redisbe *r, struct tsec_error *err);

/* A pooled or new connection, its timeouts set to what is left. */
redisContext *tsec__rd_take(struct redisbe *r, int64_t until, struct tsec_error *err);

/* Why a command on c failed (e: errno right after it), in err: a timeout
 * named as one; a write's outcome unknown.  Returns the code. */
int tsec__rd_lost(struct redisbe *r, const redisContext *c, int e, bool idempotent,
		  struct tsec_error *err);
/* Whether the command on c failed for want of an answer in time. */
bool tsec__rd_timed_out(const redisContext *c, int e);

void tsec__rd_give(struct redisbe *r, redisContext *c);

redisReply *tsec__rd_call(struct redisbe *r, int argc, const char **argv, const size_t *lens,
			bool idempotent, struct tsec_error *err);
redisReply *tsec__rd_call_by(struct redisbe *r, int argc, const char **argv,
			     const size_t *lens, bool idempotent, int64_t until,
			     struct tsec_error *err);

int tsec__rd_failed(const struct tsec_error *err);

redisReply *tsec__rd_script(struct redisbe *r, int s, int nargs, const char **args,
			  const size_t *lens, bool idempotent, struct tsec_error *err);

bool tsec__rd_says(const redisReply *rep, const char *word);

int tsec__rd_verdict(const redisReply *rep, const char *what, struct tsec_error *err);

const char *tsec__rd_lock_said(const redisReply *rep, const struct tsec__fence *f);

int tsec__rd_verdict_of(const char *s, const char *what, struct tsec_error *err);

int tsec__rd_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err);

int tsec__rd_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		      size_t max, char **out, size_t *len, struct tsec_error *err);
int tsec__rd_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err);

int tsec__rd_stat(struct tsec__backend *b, const struct tsec__skey *sk, struct tsec_stat *st,
		   struct tsec_error *err);

int tsec__rd_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err);

void tsec__rd_fence_args(const struct tsec__fence *f, const char **args, size_t *lens,
		       char fence[24]);

int tsec__rd_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err);

int tsec__rd_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *g,
		       struct tsec_error *err);

int tsec__rd_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err);

void tsec__rd_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16]);
int tsec__rd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err);

int tsec__rd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			 uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err);

int tsec__rd_lock_release(struct tsec__backend *b, const char *name, const uint8_t token[16],
			   struct tsec_error *err);

bool tsec__rd_is_kind(const redisReply *rep, const char *kind);

#endif
