/*
 * tinysecurity certificate cache: an in-memory index of certificates by
 * their DNS names, for hosts that serve TLS and must pick a certificate
 * for each handshake's server name.
 *
 * Readers never block each other and never wait for writers: a lookup
 * walks an index that writers change by publishing pointers, and memory a
 * writer unlinks is freed only after every reader that could see it has
 * left (readers announce themselves on per-thread-striped counters, so
 * threads on other cores do not share a cache line).  Writers (insert,
 * remove, eviction) are serialised among themselves and wait for readers
 * when they free.
 *
 * Names match by certmagic's progressive rule, without case: the name
 * itself, then the name with its leftmost label replaced by "*", then its
 * two leftmost labels, and so on: "*.example.com" serves
 * "api.example.com", not "a.b.example.com" nor "example.com";
 * "*.*.example.com" serves "a.b.example.com".  One trailing dot is
 * ignored ("example.com." is "example.com").  A certificate past its
 * not_after is never returned, and counts no more.
 */
#ifndef TINYSECURITY_CERTCACHE_H
#define TINYSECURITY_CERTCACHE_H

#include "tinysecurity/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tsec_certcache;

/* What a lookup returns: the certificate's SHA-256 (of its DER) and the
 * host's data given at insert. */
struct tsec_cert_match {
	uint8_t id[32];
	void *data;
	int64_t not_after;           /* unix seconds */
};

/*
 * A cache holding at most `capacity` certificates; every insert drops all
 * the expired ones, and a full cache evicts the oldest live one only when
 * none has expired.  free_data (may be NULL) is called on an entry's data
 * once it is out of the cache and no reader can see it.
 */
TSEC_API int tsec_certcache_new(struct tsec_certcache **out, size_t capacity,
		       void (*free_data)(void *data));

/* Frees the cache and every entry; no reader may be inside.  *c = NULL. */
TSEC_API void tsec_certcache_free(struct tsec_certcache **c);

/*
 * Inserts the first certificate of a PEM, indexed by its DNS SANs.
 * Returns 0, TSEC_EEXIST if the same certificate is already there (kept
 * once; `data` is not taken), TSEC_ECERT if the PEM does not parse or has
 * no DNS name, TSEC_ENOMEM.
 */
TSEC_API int tsec_certcache_insert(struct tsec_certcache *c, const char *pem,
			  size_t len, void *data, struct tsec_error *err);

/* The same with the names and identity given directly. */
TSEC_API int tsec_certcache_insert_names(struct tsec_certcache *c, const uint8_t id[32],
				const char *const *names, size_t nnames,
				int64_t not_after, void *data,
				struct tsec_error *err);

/* Removes a certificate by id; TSEC_ENOENT if absent. */
TSEC_API int tsec_certcache_remove(struct tsec_certcache *c, const uint8_t id[32]);

/* How many live (unexpired) certificates the cache holds; the expired
 * ones are dropped on the way. */
TSEC_API size_t tsec_certcache_count(struct tsec_certcache *c);

/*
 * The clock that decides expiry, in unix seconds (NULL: the system
 * clock).  For tests and for hosts with a clock of their own; set it
 * before the cache is shared.
 */
TSEC_API void tsec_certcache_set_clock(struct tsec_certcache *c, int64_t (*now)(void));

/*
 * A read section: between begin and end, what lookups return stays
 * valid (its data is not freed).  Outside one, a returned `data` may be
 * freed by a concurrent remove.  Sections nest; keep them short.
 */
TSEC_API unsigned tsec_certcache_read_begin(struct tsec_certcache *c);
TSEC_API void tsec_certcache_read_end(struct tsec_certcache *c, unsigned token);

/*
 * The certificate for a server name: of the live ones with the name
 * itself, the one that expires last; else of the wildcard ones of the
 * nearest level, the one that expires last (a renewal is served as soon
 * as it is inserted, whatever was inserted before).  Returns 0 or
 * TSEC_ENOENT.  Never blocks.
 */
TSEC_API int tsec_certcache_lookup(struct tsec_certcache *c, const char *name,
			  struct tsec_cert_match *out);

/*
 * Every certificate for a server name, exact matches first, then
 * wildcard ones, each group oldest first; up to max into out.  Returns how
 * many matched in all (may exceed max).
 */
TSEC_API size_t tsec_certcache_lookup_all(struct tsec_certcache *c, const char *name,
				 struct tsec_cert_match *out, size_t max);

/*
 * Failure backoff, per name (as certmagic waits before it asks an ACME
 * CA again for a name that failed): failures in a row, the last one's
 * time (the cache's clock) and when to try again, 60 s after the first,
 * doubling each time, at most a day after the last.  Names are matched
 * as lookups match them exactly (case and one trailing dot ignored); at
 * most `capacity` names are kept, the first recorded dropped first.
 */
struct tsec_cert_failure {
	unsigned failures;
	int64_t last;                /* unix seconds */
	int64_t retry_at;            /* unix seconds: not before */
};

/* Records a failure for name; its state after, in *out (may be NULL).
 * 0, TSEC_EINVAL (no name or too long), TSEC_ENOMEM. */
TSEC_API int tsec_certcache_failed(struct tsec_certcache *c, const char *name,
				   struct tsec_cert_failure *out);

/* Name's failure state: 0, TSEC_ENOENT (none since its last success),
 * TSEC_EINVAL. */
TSEC_API int tsec_certcache_failure(struct tsec_certcache *c, const char *name,
				    struct tsec_cert_failure *out);

/* Forgets name's failures; inserting a certificate for it does too. */
TSEC_API void tsec_certcache_succeeded(struct tsec_certcache *c, const char *name);

/* One live certificate as a snapshot sees it. */
struct tsec_cert_entry {
	uint8_t id[32];
	void *data;
	int64_t not_after;           /* unix seconds */
	const char *const *names;    /* lower case, as indexed */
	size_t nnames;
};

/*
 * Calls each(arg, entry) for every live certificate, oldest first,
 * dropping the expired ones on the way; each returns non-zero to stop.
 * Runs under the writers' lock: each must not call into the cache, and
 * what it is given is valid only during the call.  Returns how many it
 * was called for.
 */
TSEC_API size_t tsec_certcache_snapshot(struct tsec_certcache *c,
					int (*each)(void *arg, const struct tsec_cert_entry *e),
					void *arg);

/*
 * Keeps c in step with a shared store (etcd, redis): fills it as
 * tsec_certcache_fill does, then a thread of its own reads again each
 * certificate key (certificates/<issuer>/<domain>/<domain>.crt) the
 * store's feed says another writer changed: a renewal replaces the
 * certificate read from that key before, a deletion removes it, and a
 * feed that broke reads every key again.  `who` (borrowed: it must
 * outlive the following) reads through the store's policy.  Until
 * tsec_certcache_unfollow or tsec_certcache_free; the store must stay
 * open as long.  TSEC_EINVAL for a store that tells nobody what others
 * change (files: call tsec_certcache_fill again), TSEC_EEXIST when c
 * already follows one.
 */
TSEC_API int tsec_certcache_follow(struct tsec_certcache *c, struct tsec_store *s,
				   const struct tsec_principal *who, struct tsec_error *err);
/* Stops following (waits for a read in progress); accepts a cache that
 * follows nothing. */
TSEC_API void tsec_certcache_unfollow(struct tsec_certcache *c);

/*
 * Inserts every certificate (certificates/<issuer>/<domain>/<domain>.crt)
 * of a store, read as `who` through the store's policy checks.  Returns
 * 0 or the first error of the listing; certificates that do not parse are
 * skipped and counted in *skipped (may be NULL).
 */
TSEC_API int tsec_certcache_fill(struct tsec_certcache *c, struct tsec_store *s,
			const struct tsec_principal *who, size_t *skipped,
			struct tsec_error *err);

#ifdef __cplusplus
}
#endif

#endif
