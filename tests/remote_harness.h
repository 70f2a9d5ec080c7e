/*
 * The remote store suites' harness (tests/test_remote.c, the contract of
 * publish and load; tests/test_remote_attacks.c, hostile stores and the
 * sweep): the variants of blob provider x coordinator, their servers, a
 * store and a remote store opened per case, and the helpers the cases
 * share.
 */
#ifndef TSEC_TESTS_REMOTE_HARNESS_H
#define TSEC_TESTS_REMOTE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "broker/remote/remote_private.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tinysecurity/remote.h"

struct variant {
	const char *blobs;           /* "file", "s3", "memory" */
	const char *coord;           /* "file", "etcd", "redis", "memory" */
	size_t cache_bytes;
	const char *name;
};
struct rt {
	struct tu_store t;
	struct tsec_remote *r;
	char keyfile[256], s3secret[256], blobs[512];
	char prefix[64];
	struct tsec_remote_opts o;
	struct tsec_store_opts so;   /* how the coordinator was opened */
};
/* A certificate for domain with its key and metadata; v varies it. */
struct cert {
	struct tsec_cert_files f;
};
struct counter {
	size_t n;
	char last[TSEC__BLOB_NAME_MAX + 1];
};

extern const struct variant *cur;
extern struct tu_server etcd, redis, s3;
extern struct tsec_principal app, reader, issuer;

#define RECORD_OF(d) ".tsec-remote/certificates/acme/" d

void write_key(const char *path, int seed);
void remote_open(struct rt *x, const struct tsec_remote_opts *o, struct tsec_remote **r);
int setup(void **state);
int teardown(void **state);
void make_cert(struct cert *c, const char *domain, int v);
void same_files(const struct tsec_cert_files *a, const struct tsec_cert_files *b);
void publish_ok(struct rt *x, const struct tsec_lock *lk, const char *domain,
		const struct cert *c, enum tsec_remote_outcome want);
void load_is(struct rt *x, const char *domain, const struct cert *c);
int count_blob(void *ctx, const char *name, int64_t mtime_ms);
size_t nblobs(struct rt *x);
void ref_keys(const char *domain, char k[3][TSEC_KEY_MAX]);
char *raw_ref(struct rt *x, const char *domain, int which);
void blob_of(struct rt *x, const char *domain, int which, char *out, size_t n);
void free_cert(struct cert *c);
void plant_blob(struct rt *x, const char *name, const void *what, size_t n);
char *slurp(const char *path, size_t *n);
void backend_put(struct tsec_store *s, const char *key, const char *v, size_t n);
char *backend_get(struct tsec_store *s, const char *key, size_t *n);
void lease_ends(struct rt *x, const struct tsec_lock *lk);
int open_with(struct rt *x, const char *key, const char *blobs, struct tsec_error *err);

/* Starts etcd, redis-server and s3rver for the variants (0), or says why
 * not (-1, all stopped); and stops them. */
int remote_servers_start(const char *suite);
void remote_servers_stop(void);
/* Runs tests[0..n) once on every variant docs/remote.md names; how many
 * groups failed. */
int remote_run_variants(const struct CMUnitTest *tests, size_t n);

#endif
