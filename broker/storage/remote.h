/*
 * Internal: what the fleet backends (etcd.c, redis.c) share: the options
 * they read, the value envelope (with optional encryption at rest) and
 * the invalidation feed that keeps a LocalCache over them honest.
 */
#ifndef TSEC_STORAGE_REMOTE_H
#define TSEC_STORAGE_REMOTE_H

#include <sodium.h>

#include "broker/storage/backend.h"

#define TSEC__REMOTE_TIMEOUT_MS 5000u
#define TSEC__ETCD_REQUEST_MAX ((size_t)3 << 19)   /* 1.5 MiB, etcd's default */
#define TSEC__PREFIX_DEFAULT "tsec"

/*
 * A stored value is an envelope: one format byte, the write time (unix
 * ns, 8 bytes little-endian), then the bytes, or with a key a 24-byte
 * nonce and the sealed bytes (16 bytes longer).  The associated data is
 * the backend key and the 9-byte header, so a sealed value moved or
 * copied under another key, or given another time, does not open.
 */
#define TSEC__ENV_PLAIN 0x01
#define TSEC__ENV_SEALED 0x02
#define TSEC__ENV_HDR 9
#define TSEC__ENV_OVERHEAD (TSEC__ENV_HDR + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + \
			    crypto_aead_xchacha20poly1305_ietf_ABYTES)

struct tsec__seal {
	bool on;
	uint8_t key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES];
};

/* Reads a key file (32 raw bytes or 64 hex digits, not readable by group
 * or others).  Returns 0 or TSEC_EINVAL / TSEC_EIO with err filled. */
int tsec__seal_load(struct tsec__seal *s, const char *path, struct tsec_error *err);

/* Wraps value[0..len) stored under bkey[0..bklen): *out is new (free()). */
int tsec__env_wrap(const struct tsec__seal *s, const char *bkey, size_t bklen,
		   const void *value, size_t len, int64_t mtime_ns,
		   uint8_t **out, size_t *outlen, struct tsec_error *err);

/*
 * Unwraps in place: on 0, *val points into env (len *len) and *mtime_ns
 * is set.  A value that is torn, planted, sealed under another key or
 * plain where sealing is on is TSEC_EIO, never served.
 */
int tsec__env_unwrap(const struct tsec__seal *s, const char *bkey, size_t bklen,
		     uint8_t *env, size_t envlen, uint8_t **val, size_t *len,
		     int64_t *mtime_ns, struct tsec_error *err);

/* Validates and normalises a prefix (a key, not the root) into out. */
int tsec__prefix_norm(const char *prefix, char *out, size_t outlen,
		      struct tsec_error *err);

/*
 * Whether a name found in a shared backend is a key the store could have
 * written (the key rules, normalised, no ".tsec-" segment unless
 * reserved_ok: a listing of the store's own records, below a reserved
 * key, which no caller can ask for).  Listings skip anything else: a key
 * planted there by another writer never reaches a caller.
 */
bool tsec__remote_name_ok(const char *k, size_t n, bool reserved_ok);

/* Reads the first line of a password file into out. */
int tsec__password_load(const char *path, char *out, size_t outlen,
			struct tsec_error *err);

/*
 * An invalidation feed: a backend that can tell of other writers'
 * changes calls fn(ctx, key) for each key a write touched (key is the
 * store's key, "a/b"), or with key NULL when it may have missed some
 * (every cached value is then dropped).
 */

/* localcache.c: subscribes the cache to its inner backend's feed. */
void tsec__localcache_invalidate(void *cache, const char *key);

/*
 * Feed liveness (localcache.c).  watched: a feed is attached; no hit is
 * served until the first proof.  alive: a heartbeat sent at sent_ms
 * (tsec__mono_ms) came back through the feed, so every invalidation of a
 * write acknowledged before sent_ms has been delivered; hits are served
 * until sent_ms + bound.  dead: the feed broke (why, if not NULL, is
 * shown in health); every value is dropped and no hit is served until
 * the next proof.  The feed sends a heartbeat every bound / 3.
 */
#define TSEC__FEED_BOUND_MS 3000
void tsec__localcache_watched(void *cache, uint32_t bound_ms);
uint32_t tsec__localcache_bound(void *cache);
void tsec__localcache_alive(void *cache, int64_t sent_ms);
void tsec__localcache_dead(void *cache, const char *why);

/* etcd.c and redis.c. */
int tsec__etcd_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		    struct tsec_error *err);
int tsec__redis_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		     struct tsec_error *err);

/*
 * Starts the backend's feed to fn (a thread that watches); the backend's
 * close stops it before returning.
 */
int tsec__etcd_feed(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		    struct tsec_error *err);
int tsec__redis_feed(struct tsec__backend *b, tsec__inval_fn fn, void *ctx,
		     struct tsec_error *err);

#endif
