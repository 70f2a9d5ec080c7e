/*
 * Internal: what the fleet backends (etcd/, redis/) share: the options
 * they read, the value envelope with optional encryption at rest
 * (envelope.c), and their constructors and feeds.  (Not the remote
 * certificate store: that is broker/remote/.)
 */
#ifndef TSEC_STORAGE_FLEET_H
#define TSEC_STORAGE_FLEET_H

#include <sodium.h>

#include "broker/storage/backend.h"
#include "common/secret.h"

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

/* Reads a key file into s (tsec__key32_load, common/secret.h). */
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


/* etcd.c and redis.c. */
int tsec__etcd_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		    struct tsec_error *err);
int tsec__redis_open(struct tsec__backend **out, const struct tsec_store_opts *o,
		     struct tsec_error *err);

/*
 * Starts the backend's feed to *sink (a thread that watches, one that
 * sends heartbeats); the backend's close stops it before returning.
 */
int tsec__etcd_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		    struct tsec_error *err);
int tsec__redis_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		     struct tsec_error *err);

#endif
