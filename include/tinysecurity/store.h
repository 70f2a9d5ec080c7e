/*
 * tinysecurity gated storage and locks.
 *
 * A store is keys and values on a backend (a folder on disk, etcd,
 * redis, memory; tsec_store_open_opts and its settings below),
 * reached only through these calls.  Every call names the calling
 * principal and is checked through the MemoryBus (the "policy" endpoint,
 * or the one given at open) before the backend is read or changed; a
 * deny returns TSEC_EDENIED, with the reason and the deciding rules in
 * err->msg, and changes nothing.  A key that breaks the key rules is
 * refused with TSEC_EKEY before the policy is asked.  Other errors:
 * TSEC_ENOENT (not found), TSEC_EEXIST (conflict), TSEC_EIO (the backend
 * failed), TSEC_EUNKNOWN (a write's outcome is unknown: a networked
 * backend stopped answering after it was sent), TSEC_ETOOBIG,
 * TSEC_EINCOMPLETE.
 *
 * Thread-safe: one store may be used from many threads.  On the file
 * backend files are written atomically (temporary file, sync, rename,
 * folder sync; docs/storage.md) with mode 0600, folders 0700.  Names
 * starting with ".tsec-" are the store's own (temporary files, journal,
 * locks) and are refused as keys on every backend.
 */
#ifndef TINYSECURITY_STORE_H
#define TINYSECURITY_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include "tinysecurity/bus.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tsec_store;

/*
 * Who calls.  Borrowed for the call.  call_ctx is the caller's own: the
 * store never reads it and hands it to the observer with each decision
 * it makes for this call (NULL when unused).
 */
struct tsec_principal {
	struct tsec_str id;
	const struct tsec_str *roles;
	uint32_t nroles;
	void *call_ctx;
};

#define TSEC_STORE_VALUE_MAX (16u << 20)  /* default largest value: 16 MiB */

/*
 * Opens a store on the folder `root` (created 0700 if missing), checking
 * through `bus` at `endpoint` (NULL: "policy").  The bus must outlive the
 * store.  Opening recovers the folder: transactions a crash interrupted
 * are completed or undone, and temporary files of dead writers removed.
 * Returns 0, TSEC_EIO, TSEC_ENOMEM or TSEC_EINVAL.
 */
TSEC_API int tsec_store_open(struct tsec_store **out, const char *root,
		    struct tsec_bus *bus, const char *endpoint,
		    struct tsec_error *err);

/*
 * Where a store keeps its values.  Zero every field you do not set: a
 * zero means the default.
 */
struct tsec_store_opts {
	/* sizeof(struct tsec_store_opts) the caller was built with, or 0 for
	 * TSEC_STORE_OPTS_MIN_SIZE (this struct's first size): see TSEC_OPTS_HAS. */
	size_t size;
	const char *backend;         /* "file" (default), "memory", "etcd" or
					"redis" */
	const char *root;            /* file: the folder */
	uint32_t delay_us;           /* memory: wait this long in each operation
					(a simulated remote store) */
	size_t cache_bytes;          /* > 0: a LocalCache of this many bytes of
					values in front of the backend */
	uint32_t cache_live_ms;      /* etcd, redis: a cached value is served
					only while the invalidation feed was
					proven live (a heartbeat seen back
					through it) within this; else reads
					go to the backend.  The bound on a
					hit's staleness.  0: 3000. */

	/* ---- etcd and redis ---- */
	const char *endpoints;       /* etcd: "http://h:2379,https://h2:2379"
					(tried in turn; failover per request);
					redis: "host:port" or "unix:/path" */
	const char *prefix;          /* every key lives under "<prefix>/";
					a key itself (default "tsec") */
	const char *key_file;        /* encryption at rest: a file of 32 bytes
					(or 64 hex digits), mode 0600; values
					are sealed with XChaCha20-Poly1305,
					the full key as associated data.  No
					default key. */
	uint32_t timeout_ms;         /* one call's deadline, failovers
					included (default 5000) */
	uint32_t clock_skew_ms;      /* retired, kept for the layout: must be
					0.  An etcd lock ends by etcd's lease
					of the lock itself; no broker's clock
					decides (issue 48). */
	size_t request_max;          /* etcd: largest request (default 1.5 MiB,
					etcd's --max-request-bytes); larger
					is TSEC_ETOOBIG */
	const char *tls_ca;          /* etcd https, redis (TLS when set): the
					CA file the server is verified by */
	const char *tls_cert;        /* etcd, redis: client certificate file */
	const char *tls_key;         /* etcd, redis: its private key file */
	const char *username;        /* etcd / redis authentication */
	const char *password_file;   /* a file whose first line is the password */

	/* ---- added after the first size (read when size covers it) ---- */
	const char *params;          /* the backend's own options by name, as a
					URI's query: "name=value&name=value",
					%XX escapes in a value ('&' is %26).
					redis: db=N (SELECT N; default 0).
					A name the backend does not take, or
					any on a backend that takes none, is
					TSEC_EINVAL. */
};

/* The first size of struct tsec_store_opts (what size 0 stands for). */
#define TSEC_STORE_OPTS_MIN_SIZE \
	(offsetof(struct tsec_store_opts, password_file) + sizeof(((struct tsec_store_opts *)0)->password_file))

/*
 * Opens a store on the backend `o` names (see tsec_store_open).  The
 * LocalCache serves repeated reads from memory and writes through.  Over
 * file and memory, use it only where this store is the one writer of its
 * keys; over etcd (a watch) and redis (a channel every write publishes
 * on) other writers' changes drop the cached values they touch.  An
 * unknown backend name, or an option the backend does not take, is
 * TSEC_EINVAL.
 */
TSEC_API int tsec_store_open_opts(struct tsec_store **out,
				  const struct tsec_store_opts *o,
				  struct tsec_bus *bus, const char *endpoint,
				  struct tsec_error *err);

/* What a store runs on, for health and metrics. */
struct tsec_store_info {
	char backend[16];            /* "file", "memory", "etcd", "redis" */
	char note[256];              /* what the operator should know: a redis
					without appendonly, ... ("" if none) */
	bool cached;                 /* a LocalCache is in front */
	bool feed;                   /* kept fresh by an invalidation feed */
	bool live;                   /* hits are served (no feed, or the feed
					proven live within bound_ms) */
	uint32_t bound_ms;           /* the bound on a hit's staleness */
	int64_t proven_ms_ago;       /* the feed's last proof; -1: never */
	uint64_t hits, misses;       /* reads served from memory / the backend */
	uint64_t cached_bytes;
	char why[192];               /* the feed's last failure, or "" */
};

/* Fills info.  Thread-safe. */
TSEC_API void tsec_store_info(struct tsec_store *s, struct tsec_store_info *info);

/*
 * Called after every policy check the store makes, with the requests (the
 * principal filled in), their decisions and the check's duration, and
 * the principal's call_ctx; for an
 * audit trail.  It runs in the calling thread, so it must be thread-safe
 * and quick.  Set it before the store is shared; NULL removes it.
 */
typedef void (*tsec_store_observer_fn)(void *ctx, void *call_ctx,
				       const struct tsec_request *reqs,
				       const struct tsec_decision *decisions,
				       size_t n, uint64_t latency_ns);

TSEC_API void tsec_store_set_observer(struct tsec_store *s, tsec_store_observer_fn fn,
			     void *ctx);

/*
 * Watches what other writers change in a shared store (etcd, redis):
 * fn(ctx, key) for each key another writer changed, key NULL when changes
 * may have been missed (the feed broke and was restarted: re-read what
 * you keep).  fn runs in the backend's feed thread: thread-safe, quick,
 * no call into the store.  At most 8 a store, for as long as it is open.
 * TSEC_EINVAL for a backend that tells nobody (files: read again).
 */
typedef void (*tsec_store_watch_fn)(void *ctx, const char *key);
TSEC_API int tsec_store_watch(struct tsec_store *s, tsec_store_watch_fn fn, void *ctx,
			      struct tsec_error *err);
/* Removes the watcher fn/ctx; once it returns, fn is not running and is
 * never called again for ctx. */
TSEC_API void tsec_store_unwatch(struct tsec_store *s, tsec_store_watch_fn fn, void *ctx);

/* Closes the store; sets *s to NULL.  Accepts NULL. */
TSEC_API void tsec_store_close(struct tsec_store **s);

/* Writes value[0..len) under key, replacing a file (never a folder). */
TSEC_API int tsec_store_put(struct tsec_store *s, const struct tsec_principal *who,
		   const char *key, const void *value, size_t len,
		   struct tsec_error *err);

/* Reads a value into a new buffer (*out, free() it; NUL-terminated). */
TSEC_API int tsec_store_get(struct tsec_store *s, const struct tsec_principal *who,
		   const char *key, char **out, size_t *len,
		   struct tsec_error *err);

/* *exists = whether key names a file or a folder. */
TSEC_API int tsec_store_exists(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int *exists, struct tsec_error *err);

/*
 * exists[i] = whether keys[i] names a file (not a folder), for n keys in
 * one policy batch; any invalid or denied key fails the whole call.
 */
TSEC_API int tsec_store_exists_many(struct tsec_store *s,
			   const struct tsec_principal *who,
			   const char *const *keys, size_t n, int *exists,
			   struct tsec_error *err);

/*
 * Deletes a file or, with recursive, a folder and everything under it (a
 * prefix).  The policy sees `recursive` before anything is looked at;
 * deleting a folder without it is refused (TSEC_EINVAL) and changes
 * nothing.  TSEC_ENOENT if nothing is there.
 */
TSEC_API int tsec_store_delete(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int recursive, struct tsec_error *err);

/* A list of keys, sorted; free with tsec_strlist_free. */
struct tsec_strlist {
	char **v;
	size_t n;
};

TSEC_API void tsec_strlist_free(struct tsec_strlist *l);

/*
 * Lists under prefix ("" for the root).  Flat: the files and folders
 * directly inside, folders as "prefix/name/"; recursive: every file
 * below, as full keys.  TSEC_ENOENT if prefix is missing, TSEC_EINVAL if
 * it is a file.
 */
TSEC_API int tsec_store_list(struct tsec_store *s, const struct tsec_principal *who,
		    const char *prefix, int recursive, struct tsec_strlist *out,
		    struct tsec_error *err);

struct tsec_stat {
	uint64_t size;
	int64_t mtime_ns;            /* unix time in nanoseconds */
	int is_file;                 /* 0: a folder */
};

TSEC_API int tsec_store_stat(struct tsec_store *s, const struct tsec_principal *who,
		    const char *key, struct tsec_stat *st,
		    struct tsec_error *err);

/*
 * Moves one value from src to dst.  Refuses folders (TSEC_EINVAL) and
 * never replaces dst (TSEC_EEXIST, src kept).  The policy checks both.
 */
TSEC_API int tsec_store_move(struct tsec_store *s, const struct tsec_principal *who,
		    const char *src, const char *dst, struct tsec_error *err);

/* One write of a transaction. */
struct tsec_put {
	const char *key;
	const void *value;
	size_t len;
};

/*
 * Writes n values together, all or nothing, a crash included: all are
 * checked first (any deny changes nothing), and either every key ends up
 * with its new value or every key keeps what it held.  Groups that share
 * a key run one after the other; disjoint groups run in parallel.
 */
TSEC_API int tsec_store_put_many(struct tsec_store *s, const struct tsec_principal *who,
			const struct tsec_put *puts, size_t n,
			struct tsec_error *err);

/* A certificate, its private key and its metadata. */
struct tsec_cert_files {
	char *cert;                  /* PEM */
	size_t cert_len;
	char *key;                   /* PEM */
	size_t key_len;
	char *meta;                  /* JSON */
	size_t meta_len;
};

/* Frees the buffers and zeroes the struct. */
TSEC_API void tsec_cert_files_free(struct tsec_cert_files *f);

/*
 * The keys of a certificate: certificates/<issuer>/<d>/<d>.{crt,key,json}
 * with d the domain in lower case and "*" written "wildcard_".  Writes
 * the three keys into crt, key and meta (each of size n).  Returns 0 or
 * TSEC_EKEY (issuer or domain unusable).
 */
TSEC_API int tsec_cert_keys(const char *issuer, const char *domain, char *crt,
		   char *key, char *meta, size_t n);

/*
 * Saves a certificate's three files as one transaction; the policy sees
 * the PEM of the certificate (cert_pem) with the .crt write.
 */
TSEC_API int tsec_store_save_cert(struct tsec_store *s, const struct tsec_principal *who,
			 const char *issuer, const char *domain,
			 const struct tsec_cert_files *files,
			 struct tsec_error *err);

/*
 * Loads them: 0 with all three, TSEC_ENOENT when none exists,
 * TSEC_EINCOMPLETE when only some do.
 */
TSEC_API int tsec_store_load_cert(struct tsec_store *s, const struct tsec_principal *who,
			 const char *issuer, const char *domain,
			 struct tsec_cert_files *files, struct tsec_error *err);

/* ---- locks ---- */

#define TSEC_LOCK_NAME_MAX 200

/*
 * What the holder of a lock keeps: the name, its secret owner token, and
 * the fence: a number that grows with every acquire of this name, so a
 * write made under an old lease can be told from one made under the
 * current one (see tsec_store_put_fenced).
 */
struct tsec_lock {
	char name[TSEC_LOCK_NAME_MAX + 1];
	uint8_t token[16];
	int64_t expires_ms;          /* lease end, unix milliseconds */
	uint64_t fence;
};

/*
 * Takes the lock `name` (one key segment; the policy sees the resource
 * "locks/<name>" with ttl_ms) for a lease of ttl_ms, waiting until
 * timeout_ms has passed (one deadline for every attempt and every wait;
 * any value, however large, is safe).  An expired lease is taken over.
 * TSEC_ETIMEDOUT when the deadline passes.
 */
TSEC_API int tsec_lock_acquire(struct tsec_store *s, const struct tsec_principal *who,
		      const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
		      struct tsec_lock *out, struct tsec_error *err);

/* Takes the lock only if it is free now; TSEC_EBUSY otherwise. */
TSEC_API int tsec_lock_try_acquire(struct tsec_store *s,
			  const struct tsec_principal *who, const char *name,
			  uint64_t ttl_ms, struct tsec_lock *out,
			  struct tsec_error *err);

/*
 * A wait for a lock made in the caller's own event loop, one attempt at
 * a time, so that a waiting call holds no thread (tsec-broker parks its
 * lock waits this way):
 *
 *	rc = tsec_lock_wait_begin(s, who, name, ttl_ms, timeout_ms, &w, &lk, &err);
 *	while (rc == TSEC_EBUSY) {
 *		... other work for w.pause_ms milliseconds ...
 *		rc = tsec_lock_wait_step(s, who, &w, &lk, &err);
 *	}
 *
 * begin checks the name and asks the policy, then makes the first
 * attempt; each step asks the policy again (as `who`) if a policy was
 * loaded or reloaded on the store's bus since it was last asked, so a
 * reload that takes the lock away ends the wait with TSEC_EDENIED
 * (tsec_lock_acquire waits the same way).  Each step is one
 * more attempt as the same waiter, which keeps the lock's one queue slot
 * while it asks again within 250 ms (waiters are then served before
 * newcomers).  Returns 0 (acquired, *out filled), TSEC_EBUSY (held: step
 * again after w->pause_ms), TSEC_ETIMEDOUT (timeout_ms passed, no
 * attempt after it) or another error.  w is plain data: it may be copied
 * and stepped from another thread, one step at a time.
 */
struct tsec_lock_wait {
	char name[TSEC_LOCK_NAME_MAX + 1];
	uint64_t ttl_ms;
	int64_t deadline_ns;         /* monotonic clock */
	uint32_t backoff_ms;         /* grows from 1 to 50 */
	uint32_t pause_ms;           /* before the next step */
	uint8_t waiter[16];          /* this wait's id in the lock's queue */
	uint64_t policy_gen;         /* the bus's policies when last asked */
};

TSEC_API int tsec_lock_wait_begin(struct tsec_store *s, const struct tsec_principal *who,
				  const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
				  struct tsec_lock_wait *w, struct tsec_lock *out,
				  struct tsec_error *err);
TSEC_API int tsec_lock_wait_step(struct tsec_store *s, const struct tsec_principal *who,
				 struct tsec_lock_wait *w,
				 struct tsec_lock *out, struct tsec_error *err);
/*
 * Ends a wait without the lock (its caller went away, or cancelled it):
 * it leaves the lock's queue now, so the waiter behind it is served next
 * rather than after the queue forgets it.  No policy is asked (leaving
 * takes nothing).  w is not stepped again.
 */
TSEC_API void tsec_lock_wait_abandon(struct tsec_store *s, const struct tsec_lock_wait *w);

/*
 * Extends the lease of a lock this caller holds to now + ttl_ms.
 * TSEC_ENOTOWNER when the lease has ended (whether or not someone took
 * the lock since) or the lock holds another token.  Tokens are compared
 * in constant time.
 */
TSEC_API int tsec_lock_renew(struct tsec_store *s, const struct tsec_principal *who,
		    struct tsec_lock *lk, uint64_t ttl_ms,
		    struct tsec_error *err);

/*
 * Releases a lock this caller holds: TSEC_ENOTOWNER as renew, and
 * TSEC_ENOENT when it was released already, on every backend
 * (test_conf_one_holder_and_takeover).
 */
TSEC_API int tsec_lock_release(struct tsec_store *s, const struct tsec_principal *who,
		      const struct tsec_lock *lk, struct tsec_error *err);

/*
 * tsec_store_put_many made only while lk is still held with its token
 * and fence, checked and written as one step (the If-Match of storage):
 * a holder whose lease ended, or who was overtaken, gets TSEC_ENOTOWNER
 * and nothing is written.
 */
TSEC_API int tsec_store_put_fenced(struct tsec_store *s,
				   const struct tsec_principal *who,
				   const struct tsec_lock *lk,
				   const struct tsec_put *puts, size_t n,
				   struct tsec_error *err);

/*
 * The same fence for the other writes: a delete, a move and a
 * certificate's three files are made only while lk is still held with
 * its token and fence, checked in the same step as the write on every
 * backend (under the lock file's flock; in the etcd txn; in the redis
 * script; under the memory store's lock).  TSEC_ENOTOWNER otherwise,
 * and nothing changes.
 */
TSEC_API int tsec_store_delete_fenced(struct tsec_store *s,
				      const struct tsec_principal *who,
				      const struct tsec_lock *lk, const char *key,
				      int recursive, struct tsec_error *err);
TSEC_API int tsec_store_move_fenced(struct tsec_store *s,
				    const struct tsec_principal *who,
				    const struct tsec_lock *lk, const char *src,
				    const char *dst, struct tsec_error *err);
TSEC_API int tsec_store_save_cert_fenced(struct tsec_store *s,
					 const struct tsec_principal *who,
					 const struct tsec_lock *lk, const char *issuer,
					 const char *domain,
					 const struct tsec_cert_files *f,
					 struct tsec_error *err);

#ifdef __cplusplus
}
#endif

#endif
