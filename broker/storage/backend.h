/*
 * Internal: the backend interface under the gated store, in the spirit of
 * SQLite's VFS and certmagic's Storage / Locker / TryLocker /
 * LockLeaseRenewer.  The store (store.c, lock.c) validates keys, asks the
 * policy once per call and takes the per-key gates; a backend only keeps
 * values and leases.  Keys reach a backend parsed and normalised
 * (struct tsec__skey); lock names are one key segment.
 *
 * Every backend keeps the same promises, checked by one conformance suite
 * (tests/test_conformance.c):
 * - put_many is all-or-nothing, across a crash too;
 * - move never replaces its destination and leaves the value under
 *   exactly one name;
 * - a lease has one holder; renew and release by a holder whose lease
 *   ended fail; every acquire returns a fence, strictly increasing per
 *   lock name;
 * - a fenced write is applied only while the lease it names is held,
 *   checked in the same step as the write.
 *
 * Backends (registry.c lists them): file/ (files under one folder),
 * etcd/ and redis/ (a fleet), memory/ (tests and benchmarks, with an
 * injectable delay), and localcache.c, a decorator that caches any of
 * them.
 */
#ifndef TSEC_STORAGE_BACKEND_H
#define TSEC_STORAGE_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "broker/storage/store_private.h"

/* One write of a group. */
struct tsec__bput {
	const struct tsec__skey *sk;
	const void *value;
	size_t len;
};

/* "Only if lock `name` is still held with this token and fence." */
struct tsec__fence {
	const char *name;
	uint8_t token[16];
	uint64_t fence;
};

/*
 * "Only if key sk holds exactly value[0..len), or nothing when value is
 * NULL": a compare-and-swap, checked in the same step as the write it
 * guards.  A group whose guard fails changes nothing and is
 * TSEC_ECHANGED.  The remote certificate store keeps its generations
 * this way (a publish applies only over the state it read).
 */
struct tsec__guard {
	const struct tsec__skey *sk;
	const void *value;
	size_t len;
};

/* What an acquire hands back. */
struct tsec__lease {
	uint8_t token[16];
	uint64_t fence;
	int64_t expires_ms;          /* unix milliseconds, this process's wall clock */
};

struct tsec__backend;

/*
 * Every function returns 0 or a negative TSEC_E* code with err filled.
 * All are thread-safe.  Values are at most `max` bytes (TSEC_ETOOBIG).
 */
struct tsec__backend_ops {
	const char *name;
	void (*close)(struct tsec__backend *b);
	/* Optional: what the operator should know about this backend's
	 * promises as configured (a redis without appendonly), into out. */
	void (*note)(struct tsec__backend *b, char *out, size_t n);
	/* *out is new (free() it), NUL-terminated.  TSEC_ENOENT if absent;
	 * TSEC_EINVAL for a folder. */
	int (*get)(struct tsec__backend *b, const struct tsec__skey *k, size_t max,
		   char **out, size_t *len, struct tsec_error *err);
	/* *kind: 0 nothing, 1 a value, 2 a folder. */
	int (*kind)(struct tsec__backend *b, const struct tsec__skey *k, int *kind,
		    struct tsec_error *err);
	int (*stat)(struct tsec__backend *b, const struct tsec__skey *k,
		    struct tsec_stat *st, struct tsec_error *err);
	/* Unsorted; the store sorts.  TSEC_ENOENT, or TSEC_EINVAL for a value. */
	int (*list)(struct tsec__backend *b, const struct tsec__skey *prefix,
		    int recursive, struct tsec_strlist *out, struct tsec_error *err);
	/* A value, or with recursive a folder and everything below it; with
	 * f, only while f's lease is held (checked in the same step). */
	int (*del)(struct tsec__backend *b, const struct tsec__skey *k, int recursive,
		   const struct tsec__fence *f, struct tsec_error *err);
	/* One value; TSEC_EEXIST if dst exists, TSEC_EINVAL for a folder;
	 * with f, as del. */
	int (*move)(struct tsec__backend *b, const struct tsec__skey *src,
		    const struct tsec__skey *dst, const struct tsec__fence *f,
		    struct tsec_error *err);
	/*
	 * All or nothing; with f, only while f's lease is held; with g, only
	 * while g holds (TSEC_ECHANGED otherwise), both checked in the same
	 * step as the write.  The store has checked the group: no key twice,
	 * no key a folder of another.
	 */
	int (*put_many)(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
			const struct tsec__fence *f, const struct tsec__guard *g,
			struct tsec_error *err);
	/*
	 * One attempt: takes the lock if it is free (or its lease ended) and
	 * no other live waiter is queued before `waiter` (NULL: take only if
	 * nobody waits).  TSEC_EBUSY otherwise, after queueing `waiter` when
	 * the queue slot is free, so that waiters are served in turn.
	 */
	int (*lock_try)(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
			const uint8_t *waiter, struct tsec__lease *out,
			struct tsec_error *err);
	/* TSEC_ENOTOWNER when the token differs or the lease has ended. */
	int (*lock_renew)(struct tsec__backend *b, const char *name,
			  const uint8_t token[16], uint64_t ttl_ms, int64_t *expires_ms,
			  struct tsec_error *err);
	int (*lock_release)(struct tsec__backend *b, const char *name,
			    const uint8_t token[16], struct tsec_error *err);
	/*
	 * Keys k[0..n) (n <= TSEC__GET_MANY_MAX) read as of one moment: no
	 * group (put_many) lands between two of them, from this process or
	 * any other, so a certificate and its key always come from one
	 * write.  out[i] is new (free()) and NUL-terminated, or NULL where
	 * the key holds no value (absent, or a folder); anything else (a
	 * planted file, a value over max, I/O) fails the whole read, with
	 * nothing left allocated.
	 */
	int (*get_many)(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
			size_t max, char **out, size_t *len, struct tsec_error *err);
	/*
	 * Optional: file[i] = whether k[i] holds a value (not a folder), for
	 * n <= TSEC__GET_MANY_MAX keys in one round trip where the backend
	 * is remote.  NULL: the store asks kind() of each key.
	 */
	int (*files_many)(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
			  int *file, struct tsec_error *err);
};

#define TSEC__GET_MANY_MAX 8

/* A get_many's start: out[0..n) NULL and len[0..n) 0, or TSEC_EINVAL
 * for more than TSEC__GET_MANY_MAX keys. */
int tsec__values_begin(char **out, size_t *len, size_t n, struct tsec_error *err);
/* Frees out[0..n) of a get_many and clears them and len[0..n). */
void tsec__values_free(char **out, size_t *len, size_t n);

struct tsec__backend {
	const struct tsec__backend_ops *ops;
};

/* ---- registry.c: the backends, listed once ---- */

/*
 * The version of this contract a backend implements: a backend built
 * against another version is not listed (a change to the ops above that
 * an old backend would get wrong bumps it), as sqlite3_vfs.iVersion.
 */
/* 2: the fleet's records became ordinary values under a reserved key
 * (records.c); meta_get and meta_put are gone.  3: get_many, several
 * keys read as of one moment (load_cert).  4: put_many takes a guard (a
 * compare-and-swap on one key, the remote store's generations). */
#define TSEC__BACKEND_VERSION 4

enum {
	TSEC__CAP_SERVED = 1,        /* tsec-broker's configuration may name it */
	TSEC__CAP_DURABLE = 2,       /* an acknowledged write survives a crash
					(redis: only with appendfsync always, said
					at open in its note) */
	TSEC__CAP_ROOT = 4,          /* needs a folder (opts.root) */
	TSEC__CAP_SHARED = 8,        /* other brokers write it too: a LocalCache
					needs its feed; a fleet can share its
					policy through it (records.c) */
	TSEC__CAP_REMOTE = 16,       /* takes endpoints, prefix, TLS, auth */
};

struct tsec_store_opts;
typedef void (*tsec__inval_fn)(void *ctx, const char *key);

struct tsec__backend_kind {
	const char *name;            /* what opts.backend / "backend" names */
	unsigned version;            /* TSEC__BACKEND_VERSION */
	unsigned caps;               /* TSEC__CAP_* */
	int (*open)(struct tsec__backend **out, const struct tsec_store_opts *o,
		    struct tsec_error *err);
	/* With TSEC__CAP_SHARED: calls fn(ctx, key) for every key another
	 * writer changes (a LocalCache's invalidations).  Without it
	 * (file): for every key the backend changes behind its caller's
	 * back, a dead writer's group it rolls forward before a write. */
	int (*feed)(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		    struct tsec_error *err);
};

extern const struct tsec__backend_kind tsec__backends[];
extern const size_t tsec__nbackends;

/* The backend of that name, or NULL. */
const struct tsec__backend_kind *tsec__backend_find(const char *name);

/* The names of the backends that have every cap in caps, into out[0..max);
 * how many. */
size_t tsec__backend_names(unsigned caps, const char **out, size_t max);

/* file.c: values under root; recovers its journal and litter on open. */
int tsec__file_open(struct tsec__backend **out, const char *root,
		    struct tsec_error *err);
int tsec__file_feed(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		    struct tsec_error *err);

/* memory.c: everything in memory; each operation first waits delay_us. */
int tsec__memory_open(struct tsec__backend **out, uint32_t delay_us,
		      struct tsec_error *err);

/* localcache.c: caches `inner` (owned), at most max_bytes of values. */
struct tsec_store_info;
void tsec__localcache_info(struct tsec__backend *cache, struct tsec_store_info *info);
const struct tsec__backend *tsec__localcache_inner(const struct tsec__backend *cache);
/*
 * A hit and nothing else: the value of key if the cache holds it now
 * (1, *out new), 0 when it does not (nothing is read from the backend,
 * no gate is taken), -1 when out of memory.  Never waits on I/O.
 */
int tsec__localcache_peek(struct tsec__backend *cache, const struct tsec__skey *k, size_t max,
			  char **out, size_t *len);
int tsec__localcache_open(struct tsec__backend **out, struct tsec__backend *inner,
			  size_t max_bytes, struct tsec_error *err);

/* ---- keys.c: what the backends' listings and groups share ---- */

/* Appends "k[0..n)suffix" to l (capacity *cap, grown by doubling); -1
 * without memory. */
int tsec__strlist_add(struct tsec_strlist *l, size_t *cap, const char *k, size_t n,
		      const char *suffix);

/* Whether the parsed key lies below the folder (folder + "/"), from
 * their lengths. */
static inline bool tsec__skey_below(const struct tsec__skey *key, const struct tsec__skey *folder)
{
	return key->tlen > folder->tlen && key->text[folder->tlen] == '/' &&
	       !memcmp(key->text, folder->text, folder->tlen);
}

/* ---- lease.c: the lease rules every backend applies ---- */

/*
 * A lock's state as a backend keeps it.  Its times are on the clock the
 * backend judges leases by, never the wall clock (which steps and which
 * another process may read an hour apart): the boot clock on the file
 * store, the monotonic clock in memory.
 */
struct tsec__lease_state {
	uint8_t token[16];           /* all zero: free */
	uint64_t fence;              /* the last fence handed out */
	int64_t expires_ms;
	uint8_t waiter[16];          /* the queued waiter, all zero: none */
	int64_t waiter_seen_ms;      /* when it last asked */
};

/*
 * Decides one acquire attempt on *st at now_ms on its clock: 0 and *out
 * when taken (st updated), TSEC_EBUSY when not (st may have queued the
 * waiter).  *dirty says whether st changed and must be written back.
 */
int tsec__lease_try(struct tsec__lease_state *st, const uint8_t *waiter,
		    uint64_t ttl_ms, int64_t now_ms, struct tsec__lease *out,
		    bool *dirty);

/* 0 when token holds a live lease in st; TSEC_ENOENT when nobody holds
 * it, else TSEC_ENOTOWNER (another token, or the lease ended). */
int tsec__lease_owned(const struct tsec__lease_state *st, const uint8_t token[16],
		      int64_t now_ms, const char *name, struct tsec_error *err);

/* The same for a fenced write: token, fence and a live lease. */
int tsec__lease_fenced(const struct tsec__lease_state *st, const struct tsec__fence *f,
		       int64_t now_ms, struct tsec_error *err);

/* Marks st released (the fence is kept for the next holder). */
void tsec__lease_release(struct tsec__lease_state *st);

/* now + ms, saturating. */
int64_t tsec__deadline_after(int64_t now, uint64_t ms);

/*
 * Milliseconds from then to now; INT64_MAX (long ago) when then is
 * negative or in the future, as a time read from a planted or torn lock
 * file may be: never an overflow.
 */
static inline int64_t tsec__ms_since(int64_t now, int64_t then)
{
	return then < 0 || then > now ? INT64_MAX : now - then;
}

/*
 * A 64-bit hash of p[0..n), eight bytes a step (keys run 30-80 bytes; a
 * byte-at-a-time hash costs several times more).  Not for adversaries'
 * collisions: chains stay short because keys come from the key rules and
 * callers the policy allowed.
 */
static inline uint64_t tsec__strhash(const char *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w = 0;
	uint32_t a, b;

	if (n >= 8) {
		/* The last step reads the last eight bytes, overlapping the
		 * one before: no copy of a variable length (a call). */
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&w, p + i, 8);
			h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
			h ^= h >> 31;
		}
		memcpy(&w, p + n - 8, 8);
	} else if (n >= 4) {
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		w = (uint64_t)a << 32 | b;
	} else if (n) {
		w = (uint64_t)(unsigned char)p[0] << 16 |
		    (uint64_t)(unsigned char)p[n / 2] << 8 | (unsigned char)p[n - 1];
	}
	h = (h ^ w) * 0x94d049bb133111ebull;
	h ^= h >> 29;
	return h ^ (h >> 32);
}

/* ---- gates.c: per-key gates for the store and the cache ---- */

#define TSEC__GATES 1024

struct tsec__gates {
	pthread_mutex_t m[TSEC__GATES];
};

void tsec__gates_init(struct tsec__gates *g);
void tsec__gates_destroy(struct tsec__gates *g);

/* A set of gates to hold together, in one canonical (ascending) order. */
struct tsec__gateset {
	uint16_t idx[8];
	uint16_t *v;                 /* idx or a larger allocation */
	size_t n;
	bool all;                    /* every gate (a prefix barrier) */
};

/* The gate of one normalised key. */
uint16_t tsec__gate_of(const char *key);

/*
 * Takes the gates of keys[0..n) (sorted, each once), or every gate when
 * n is (size_t)-1, so reversed or aliased groups cannot deadlock.
 * TSEC_ENOMEM only for groups of more than 8 keys.
 */
int tsec__gates_lock(struct tsec__gates *g, const char *const *keys, size_t n,
		     struct tsec__gateset *set);
void tsec__gates_unlock(struct tsec__gates *g, struct tsec__gateset *set);

#endif
