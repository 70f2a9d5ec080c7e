/* Internal: the limits the certificate cache's two files share. */
#ifndef TSEC_CERTCACHE_PRIVATE_H
#define TSEC_CERTCACHE_PRIVATE_H

#define NAME_MAX_LEN 253         /* a DNS name's longest text form */
#define NAMES_MAX 100            /* names indexed per certificate */

#include <stddef.h>
#include <stdint.h>

struct tsec_certcache;
struct tsec_error;
struct tsec__follow;

/* tsec_certcache_insert, with the certificate's id (its DER's SHA-256)
 * into id even when it was there already (TSEC_EEXIST). */
int tsec__certcache_insert_id(struct tsec_certcache *c, const char *pem, size_t len,
			      void *data, uint8_t id[32], struct tsec_error *err);

/* The cache's follower slot (certcache_follow.c keeps it). */
struct tsec__follow **tsec__certcache_follow_slot(struct tsec_certcache *c);

/*
 * The failure backoff's table (certcache_fails.c), names lower-cased
 * (low[0..n), hash h) by the cache, which holds its writers' mutex
 * around every call.
 */
struct tsec__fail;
struct tsec_cert_failure;
struct tsec__fails {
	struct tsec__fail **tab;     /* nbuckets, a power of two */
	struct tsec__fail *oldest, *newest;
	size_t mask, n, capacity;
};

/* 0 or TSEC_ENOMEM. */
int tsec__fails_init(struct tsec__fails *t, size_t nbuckets, size_t capacity);
void tsec__fails_fini(struct tsec__fails *t);
/* One more failure for the name at now (the first recorded name goes
 * when full): 0 or TSEC_ENOMEM; what it says into out (if given). */
int tsec__fails_add(struct tsec__fails *t, const char *low, size_t n, uint64_t h, int64_t now,
		    struct tsec_cert_failure *out);
/* The name's failures into out: 0, or TSEC_ENOENT when it has none. */
int tsec__fails_get(const struct tsec__fails *t, const char *low, size_t n, uint64_t h,
		    struct tsec_cert_failure *out);
/* The name's failures end (a certificate for it, or a success). */
void tsec__fails_drop(struct tsec__fails *t, const char *low, size_t n, uint64_t h);

#endif
