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
 * Backends (registry.c lists them; docs/HACKING.md says how to add
 * one): file/ (files under one folder), etcd/ and redis/ (a fleet),
 * memory/ (tests and benchmarks, with an injectable delay).
 * localcache.h is a decorator that caches any of them, subscribed to the
 * backend's feed (below) where it has one.
 *
 * This header is the contract and the registry only; the rules and
 * helpers backends share are in keys.h (parsed keys), lease.h (the lease
 * rules), gates.h (per-key gates) and fleet.h (what etcd and redis
 * share).
 */
#ifndef TSEC_STORAGE_BACKEND_H
#define TSEC_STORAGE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tinysecurity/store.h"
#include "broker/storage/keys.h"
#include "common/error.h"

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
	/* Unsorted; the store sorts.  TSEC_ENOENT, or TSEC_EINVAL for a value.
	 * A server's listing is read in pages, each starting strictly past
	 * the last (a page that does not is TSEC_EIO), at most
	 * TSEC__LIST_NAMES names in TSEC__LIST_PAGES pages (TSEC_ETOOBIG). */
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
	/*
	 * Optional (NULL: the backend forgets a waiter that stops trying on
	 * its own): a wait that ended unserved leaves name's queue now.
	 */
	void (*lock_unwait)(struct tsec__backend *b, const char *name, const uint8_t waiter[16]);
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


/* The bounds of one listing from a server (list above). */
#define TSEC__LIST_NAMES 1048576
#define TSEC__LIST_PAGES 1048576

/* A get_many's start: out[0..n) NULL and len[0..n) 0, or TSEC_EINVAL
 * for more than TSEC__GET_MANY_MAX keys. */
int tsec__values_begin(char **out, size_t *len, size_t n, struct tsec_error *err);

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
	TSEC__CAP_NETWORK = 16,      /* takes endpoints, prefix, TLS, auth */
};

struct tsec_store_opts;

/*
 * A backend's feed: what it tells a subscriber about changes the
 * subscriber did not make through it.  The LocalCache is one subscriber
 * (localcache_sink()); anything else that keeps derived state may be
 * another (tests/test_conformance.c subscribes a counter).  The backend
 * copies the sink; calls come from the backend's own threads (etcd,
 * redis) or from the writing thread (file), never under a lock of the
 * subscriber's, so each callback must be thread-safe and quick.
 */
struct tsec__feed_sink {
	/* key (the store's key, "a/b") was changed by another writer; NULL:
	 * changes may have been missed, so forget everything. */
	void (*changed)(void *ctx, const char *key);
	/* Optional.  A heartbeat sent at sent_ms (tsec__mono_ms) came back
	 * through the feed: every change acknowledged before sent_ms has been
	 * delivered. */
	void (*alive)(void *ctx, int64_t sent_ms);
	/* Optional.  The feed broke (why: what happened, may be NULL); it is
	 * being restarted.  Without it, changed(ctx, NULL) is called. */
	void (*dead)(void *ctx, const char *why);
	void *ctx;
	/* How stale the subscriber may be told it is: a heartbeat every
	 * bound_ms / 3.  0: TSEC__FEED_BOUND_MS. */
	uint32_t bound_ms;
};

#define TSEC__FEED_BOUND_MS 3000

/* What a backend calls: the sink's members, optional ones tolerated. */
static inline void tsec__feed_changed(const struct tsec__feed_sink *f, const char *key)
{
	if (f->changed)
		f->changed(f->ctx, key);
}

static inline void tsec__feed_alive(const struct tsec__feed_sink *f, int64_t sent_ms)
{
	if (f->alive)
		f->alive(f->ctx, sent_ms);
}

static inline void tsec__feed_dead(const struct tsec__feed_sink *f, const char *why)
{
	if (f->dead)
		f->dead(f->ctx, why);
	else
		tsec__feed_changed(f, NULL);
}

static inline uint32_t tsec__feed_bound(const struct tsec__feed_sink *f)
{
	return f->bound_ms ? f->bound_ms : TSEC__FEED_BOUND_MS;
}

struct tsec__backend_kind {
	const char *name;            /* what opts.backend / "backend" names */
	unsigned version;            /* TSEC__BACKEND_VERSION */
	unsigned caps;               /* TSEC__CAP_* */
	int (*open)(struct tsec__backend **out, const struct tsec_store_opts *o,
		    struct tsec_error *err);
	/* Optional: subscribes *sink (copied) to the backend's changes.
	 * With TSEC__CAP_SHARED: every key another writer changes, with
	 * heartbeats (alive) and breaks (dead); the backend's close stops
	 * the feed before it returns.  Without it (file): every key the
	 * backend changes behind its caller's back, a dead writer's group
	 * it rolls forward before a write; no heartbeats.  One subscriber
	 * per backend. */
	int (*feed)(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		    struct tsec_error *err);
	/* The names of opts.params it reads (tsec__param, common/opts.h),
	 * NULL-terminated; NULL: none.  Checked before open is called. */
	const char *const *params;
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
int tsec__file_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		    struct tsec_error *err);

/* memory.c: everything in memory; each operation first waits delay_us. */
int tsec__memory_open(struct tsec__backend **out, uint32_t delay_us,
		      struct tsec_error *err);

#endif
