/* Internal: what etcd.c, etcd_lock.c and etcd_feed.c share. */
#ifndef TSEC_STORAGE_ETCD_PRIVATE_H
#define TSEC_STORAGE_ETCD_PRIVATE_H

#include <stdatomic.h>

#include "broker/storage/etcd/etcd_http.h"
#include "common/clock.h"

/* "<prefix>/x/<key>" */
#define TSEC__BK_MAX (2 * TSEC_KEY_MAX + 8)
#define TSEC__BEATS 16                  /* heartbeats remembered */

#define TSEC__ETCD_BUSY_SLOTS 64
#define TSEC__ETCD_BUSY_MS 1000
#define TSEC__ETCD_WAITERS 64           /* waits queued at once (etcd_queue.c) */

struct tsec__etcd_held;

/* A wait queued on a lock (etcd_queue.c); lease 0: a free place. */
struct tsec__etcd_waiter {
	uint8_t id[16];
	int64_t lease, rev;     /* its entry's lease and create_revision */
	int64_t kept_at;        /* when its lease was last granted or kept alive (monotonic ms) */
	int64_t ttl_ms;         /* the TTL etcd answered then */
};

struct etcd {
	struct tsec__backend base;
	struct tsec__etcd_conn *c;
	char prefix[TSEC_KEY_MAX + 1];
	size_t plen;
	struct tsec__seal seal;
	size_t max_ops;
	/* when a lock hashing to each slot was last found held (monotonic
	 * ms): such a name is looked at before a lease is granted for it */
	_Atomic int64_t busy_at[TSEC__ETCD_BUSY_SLOTS];
	/* the invalidation feed */
	pthread_t feed;
	atomic_bool feed_on;
	struct tsec__feed_sink sink;   /* the feed's subscriber */
	/* its heartbeat (etcd_feed.c): P/b/feed = "<beat_id>:<seq>" */
	pthread_t beat;
	bool beat_on, beat_init;
	pthread_mutex_t beat_mu;
	pthread_cond_t beat_cv;
	char beat_id[17];
	char beat_key[TSEC__BK_MAX];
	size_t beat_klen;
	uint64_t beat_seq;
	struct { uint64_t seq; int64_t at; } ring[TSEC__BEATS];
	_Atomic int64_t proven, watch_since;
	/* the deadlines this broker wrote and their keeper (etcd_keeper.c),
	 * under keep_mu */
	pthread_mutex_t keep_mu;
	pthread_cond_t keep_cv;
	pthread_t keeper;
	bool keep_on, keep_stopped;
	struct tsec__etcd_held *held;
	size_t nheld, capheld;
	/* the waits queued on locks (etcd_queue.c), under keep_mu too */
	struct tsec__etcd_waiter waiters[TSEC__ETCD_WAITERS];
};

struct etcd *tsec__etcd_of(struct tsec__backend *b);

/* The feed's reader of one watch answer (ctx: the struct etcd): each
 * changed key below the prefix to the sink, our heartbeats as alive,
 * created, compacted or canceled as "forget everything"; 1 to start the
 * watch again.  Exported for fuzz_etcd. */
int tsec__etcd_on_result(void *ctx, json_t *res);

/* Writes "<prefix>/<ns>/<key>" into out (TSEC__BK_MAX); returns its length. */
size_t tsec__etcd_bk(const struct etcd *e, char ns, const char *key, char *out);

/* A request_range op on k, or with below on [k/, k0); count_only: keys
 * only, at most one. */
json_t *tsec__etcd_range(const char *k, size_t n, bool below, bool count_only);
/* A compare on k (or [k/, k0)): target VERSION/CREATE/MOD/VALUE, result
 * EQUAL/GREATER/LESS/NOT_EQUAL, val consumed. */
json_t *tsec__etcd_cmp(const char *k, size_t n, bool below, const char *target,
		       const char *result, json_t *val);
/* A request_delete_range op on k. */
json_t *tsec__etcd_del_op(const char *k, size_t n);
/* The i-th answer of a txn, of kind "response_range" etc. */
json_t *tsec__etcd_resp(const json_t *txn, size_t i, const char *kind);
/* The first kv of a range answer, or NULL. */
const json_t *tsec__etcd_kv0(const json_t *range);
/* One txn (all three arrays consumed; NULL for none). */
int tsec__etcd_txn(struct etcd *e, json_t *cmp, json_t *ok, json_t *ko, int retry,
		   json_t **resp, bool *succeeded, struct tsec_error *err);

/* etcd_lock.c */
int tsec__etcd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
			const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err);
int tsec__etcd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			  uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err);
int tsec__etcd_lock_release(struct tsec__backend *b, const char *name,
			    const uint8_t token[16], struct tsec_error *err);
/* Adds f's compares to cmp (and to ko the TSEC__ETCD_FENCE_READS reads
 * that say why they failed). */
#define TSEC__ETCD_FENCE_READS 2
void tsec__etcd_fence_cmp(struct etcd *e, const struct tsec__fence *f, json_t *cmp, json_t *ko);
/* After a failed fenced txn: TSEC_ENOTOWNER / TSEC_ENOENT if the lock was
 * the cause, else 0. */
int tsec__etcd_fence_why(struct etcd *e, const struct tsec__fence *f, const json_t *resp,
			 struct tsec_error *err);

/* etcd_keeper.c */
/* Mutex and condition of the keeper (the thread starts at first use). */
void tsec__etcd_keeper_init(struct etcd *e);
/* A new lease for a lock of ttl_ms: whole seconds, rounded up. */
int tsec__etcd_lock_lease(struct etcd *e, uint64_t ttl_ms, int64_t *lease,
			  struct tsec_error *err);
/* This broker wrote deadline ds (until: monotonic ms) for name's token:
 * the keeper deletes the lock then if d is still ds. */
int tsec__etcd_held_add(struct etcd *e, const char *name, const uint8_t token[16],
			const char *ds, int64_t until, struct tsec_error *err);
/* Forgets every deadline written for name's token (released, renewed). */
void tsec__etcd_held_drop(struct etcd *e, const char *name, const uint8_t token[16]);
/* Whether this broker wrote deadline ds for name's token and it passed. */
bool tsec__etcd_held_due(struct etcd *e, const char *name, const uint8_t token[16],
			 const char *ds);
/* Deletes name's lock if it still holds token and ds; whether etcd
 * answered. */
bool tsec__etcd_reap(struct etcd *e, const char *name, const uint8_t token[16], const char *ds);
/* POSTs a lease grant (id 0, ttl_s) or keepalive (id) to path: etcd's
 * answer's ID and TTL (0 when it no longer has the lease). */
int tsec__etcd_lease_post(struct etcd *e, const char *path, int64_t id, int64_t ttl_s,
			  int64_t *got_id, int64_t *got_ttl, struct tsec_error *err);
/* Stops the keeper, leaving the locks to their holders and leases. */
void tsec__etcd_keeper_stop(struct etcd *e);

/* etcd_queue.c: the order waiters are served in */
/* Waiter's entry in name's queue: P/q/<name>/<waiter in hex>. */
size_t tsec__etcd_qkey(const struct etcd *e, const char *name, const uint8_t waiter[16],
		       char *out);
/* The create_revision of waiter's entry, when it is queued; else 0. */
int64_t tsec__etcd_queued(struct etcd *e, const uint8_t *waiter);
/* After a try found the lock held or waited for: waiter joins name's
 * queue, or keeps its place (its lease kept alive when due). */
void tsec__etcd_queue_wait(struct etcd *e, const char *name, const uint8_t *waiter);
/* Waiter is no longer queued (served, or its entry found gone). */
void tsec__etcd_queue_forget(struct etcd *e, const uint8_t *waiter);
/* A wait ended unserved: its entry is deleted now, not at its lease's end. */
void tsec__etcd_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16]);

/* etcd_feed.c */
void tsec__etcd_feed_stop(struct etcd *e);

/* etcd.c: 0 nothing, 1 a value, 2 a folder (the backend's kind). */
int tsec__et_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		  struct tsec_error *err);
/* etcd_list.c: the backend's list. */
int tsec__et_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  struct tsec_strlist *out, struct tsec_error *err);


#endif
