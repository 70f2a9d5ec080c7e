/* The remote store suites' harness (tests/remote_harness.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/certgen.h"
#include "tests/remote_harness.h"
#include "tests/wait.h"


const struct variant *cur;
struct tu_server etcd, redis, s3;
struct tsec_principal app, reader, issuer;


/* A key file (0600) of 32 bytes in hex, from seed. */
void write_key(const char *path, int seed)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	for (int i = 0; i < 32; i++)
		fprintf(f, "%02x", (unsigned)((seed * 37 + i * 11) & 0xff));
	fputc('\n', f);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
}

void remote_open(struct rt *x, const struct tsec_remote_opts *o, struct tsec_remote **r)
{
	struct tsec_error err;

	if (tsec_remote_open(r, x->t.store, o, &err))
		fail_msg("remote open (%s): %s", cur->name, err.msg);
}

int setup(void **state)
{
	struct rt *x = calloc(1, sizeof(*x));
	static int serial;

	app = tu_who("svc:app");
	reader = tu_who("svc:reader");
	issuer = tu_who("svc:issuer");
	snprintf(x->prefix, sizeof(x->prefix), "rt%d-%d", (int)getpid(), ++serial);
	if (!strcmp(cur->coord, "etcd") || !strcmp(cur->coord, "redis")) {
		struct tsec_store_opts o = {
			.backend = cur->coord, .cache_bytes = cur->cache_bytes,
			.endpoints = cur->coord[0] == 'e' ? etcd.endpoints : redis.endpoints,
			.prefix = x->prefix,
		};
		tu_store_open_with(&x->t, &o);
		x->so = o;
	} else {
		tu_store_open_on(&x->t, cur->coord, cur->cache_bytes);
		x->so = (struct tsec_store_opts){ .backend = cur->coord, .root = x->t.root,
						  .cache_bytes = cur->cache_bytes };
	}
	snprintf(x->keyfile, sizeof(x->keyfile), "%s/remote.key", x->t.dir);
	write_key(x->keyfile, 1);
	x->o.key_file = x->keyfile;
	if (!strcmp(cur->blobs, "file")) {
		snprintf(x->blobs, sizeof(x->blobs), "file:%s/blobs", x->t.dir);
	} else if (!strncmp(cur->blobs, "s3", 2)) {
		FILE *f;
		snprintf(x->s3secret, sizeof(x->s3secret), "%s/s3.secret", x->t.dir);
		assert_non_null(f = fopen(x->s3secret, "w"));
		fputs("S3RVER\n", f);
		fclose(f);
		assert_int_equal(chmod(x->s3secret, 0600), 0);
		snprintf(x->blobs, sizeof(x->blobs), "s3://tsec-test/%s", x->prefix);
		x->o.s3_endpoint = s3.url[0];
		if (!strcmp(cur->blobs, "s3-vhost")) {
			x->o.s3_endpoint = s3.url[1];
			x->o.s3_virtual_host = true;
		}
		x->o.s3_access_key = "S3RVER";
		x->o.s3_secret_file = x->s3secret;
	} else {
		snprintf(x->blobs, sizeof(x->blobs), "memory:");
	}
	x->o.blobs = x->blobs;
	remote_open(x, &x->o, &x->r);
	/* Listings of S3 in pages of 3 keys, so that every sweep and count
	 * here pages through s3rver (issue 49, item 8: none had). */
	if (!strncmp(cur->blobs, "s3", 2))
		tsec__blobs_s3_page_keys(tsec__remote_blobs(x->r), 3);
	*state = x;
	return 0;
}

int teardown(void **state)
{
	struct rt *x = *state;

	tsec_remote_close(&x->r);
	tu_store_close(&x->t);
	free(x);
	return 0;
}


void make_cert(struct cert *c, const char *domain, int v)
{
	char meta[128];

	memset(c, 0, sizeof(*c));
	c->f.cert = tu_cert(v % 2 ? "ec-p384" : "ec-p256", domain, -60, 86400L * (30 + v),
			    &c->f.cert_len);
	c->f.key = tu_key_pem(v % 2 ? "ec-p384" : "ec-p256", &c->f.key_len);
	snprintf(meta, sizeof(meta), "{\"sans\": [\"%s\"], \"v\": %d}", domain, v);
	c->f.meta = strdup(meta);
	c->f.meta_len = strlen(meta);
}

void same_files(const struct tsec_cert_files *a, const struct tsec_cert_files *b)
{
	assert_int_equal(a->cert_len, b->cert_len);
	assert_memory_equal(a->cert, b->cert, a->cert_len);
	assert_int_equal(a->key_len, b->key_len);
	assert_memory_equal(a->key, b->key, a->key_len);
	assert_int_equal(a->meta_len, b->meta_len);
	assert_memory_equal(a->meta, b->meta, a->meta_len);
}

void publish_ok(struct rt *x, const struct tsec_lock *lk, const char *domain,
		       const struct cert *c, enum tsec_remote_outcome want)
{
	enum tsec_remote_outcome got;
	struct tsec_error err;

	if (tsec_remote_publish(x->r, &app, lk, "acme", domain, &c->f, &got, &err))
		fail_msg("publish %s (%s): %s", domain, cur->name, err.msg);
	if (want)
		assert_int_equal(got, want);
}

void load_is(struct rt *x, const char *domain, const struct cert *c)
{
	struct tsec_cert_files got;
	struct tsec_error err;

	if (tsec_remote_load(x->r, &app, "acme", domain, &got, &err))
		fail_msg("load %s (%s): %s", domain, cur->name, err.msg);
	same_files(&got, &c->f);
	tsec_cert_files_free(&got);
}


int count_blob(void *ctx, const char *name, int64_t mtime_ms)
{
	struct counter *c = ctx;

	(void)mtime_ms;
	c->n++;
	snprintf(c->last, sizeof(c->last), "%s", name);
	return 0;
}

size_t nblobs(struct rt *x)
{
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct counter c = { 0 };
	struct tsec_error err;

	assert_int_equal(b->ops->list(b, count_blob, &c, &err), 0);
	return c.n;
}

/* The three reference keys of domain (acme issuer). */
void ref_keys(const char *domain, char k[3][TSEC_KEY_MAX])
{
	assert_int_equal(tsec_cert_keys("acme", domain, k[0], k[1], k[2], TSEC_KEY_MAX), 0);
}

/* The raw text of a reference (or NULL). */
char *raw_ref(struct rt *x, const char *domain, int which)
{
	char k[3][TSEC_KEY_MAX];
	struct tsec_error err;
	char *v = NULL;
	size_t n;

	assert_int_equal(tsec_cert_keys("acme", domain, k[0], k[1], k[2], TSEC_KEY_MAX), 0);
	if (tsec_store_get(x->t.store, &app, k[which], &v, &n, &err))
		return NULL;
	return v;
}

/* The blob a reference names. */
void blob_of(struct rt *x, const char *domain, int which, char *out, size_t n)
{
	char *t = raw_ref(x, domain, which);
	json_t *j;

	assert_non_null(t);
	assert_non_null(j = json_loads(t, 0, NULL));
	snprintf(out, n, "%s", json_string_value(json_object_get(j, "blob")));
	json_decref(j);
	free(t);
}

void free_cert(struct cert *c)
{
	tsec_cert_files_free(&c->f);
}

/* Replaces blob name's bytes with what (as an attacker with write access
 * to the object store could). */
void plant_blob(struct rt *x, const char *name, const void *what, size_t n)
{
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct tsec_error err;

	assert_int_equal(b->ops->del(b, name, &err), 0);
	assert_int_equal(b->ops->put_new(b, name, what, n, &err), 0);
}

char *slurp(const char *path, size_t *n)
{
	struct tsec_error err;
	char *t = NULL;

	if (tsec_read_file(path, 1 << 20, &t, n, &err))
		fail_msg("%s: %s", path, err.msg);
	return t;
}

/* A value written straight to the coordinator's backend, past the store
 * (an operator's restore, or a key no caller can name). */
void backend_put(struct tsec_store *s, const char *key, const char *v, size_t n)
{
	struct tsec__skey sk;
	struct tsec__bput p;
	struct tsec_error err;

	assert_int_equal(tsec__skey_parse_any(key, &sk, &err), 0);
	p = (struct tsec__bput){ &sk, v, n };
	if (s->be->ops->put_many(s->be, &p, 1, NULL, NULL, &err))
		fail_msg("put %s: %s", key, err.msg);
}

char *backend_get(struct tsec_store *s, const char *key, size_t *n)
{
	struct tsec__skey sk;
	struct tsec_error err;
	char *v = NULL;

	assert_int_equal(tsec__skey_parse_any(key, &sk, &err), 0);
	if (s->be->ops->get(s->be, &sk, 1 << 20, &v, n, &err))
		return NULL;
	return v;
}


/*
 * Ends a lease now, however long it was (issue 48, item 9: a lease of a
 * second ended under load before the publish made under it): the
 * injected clock moves past it, and redis, which times leases by its own
 * clock, loses the lock's key as it does at a lease's end.  Then waits
 * until a fenced write is refused.
 */
void lease_ends(struct rt *x, const struct tsec_lock *lk)
{
	struct tsec_put probe = { .key = "probe/lease", .value = "x", .len = 1 };
	struct tsec_store *s = x->t.store;
	struct tsec_error err;
	int rc = 0;

	tsec__clock_advance((int64_t)(lk->expires_ms - tsec__wall_ms()) + 1);
	if (!strcmp(cur->coord, "redis"))
		tu_redis_lease_end(&redis, x->prefix, lk->name);
	TU_WAIT((rc = tsec_store_put_fenced(s, &app, lk, &probe, 1, &err)) == TSEC_ENOTOWNER);
	assert_int_equal(rc, TSEC_ENOTOWNER);
}

/* Opens a remote store on x's coordinator with key_file and blobs: its
 * error's code, the text in err. */
int open_with(struct rt *x, const char *key, const char *blobs, struct tsec_error *err)
{
	struct tsec_remote_opts o = x->o;
	struct tsec_remote *r = NULL;
	int rc;

	o.key_file = key;
	o.blobs = blobs;
	rc = tsec_remote_open(&r, x->t.store, &o, err);
	tsec_remote_close(&r);
	return rc;
}


int remote_servers_start(const char *suite)
{
	if (tu_etcd_start(&etcd, 1) == 0 && tu_redis_start(&redis) == 0 && tu_s3_start(&s3) == 0)
		return 0;
	fprintf(stderr, "%s: cannot start etcd, redis-server and s3rver "
		"(scripts/deps.sh servers installs them)\n", suite);
	remote_servers_stop();
	return -1;
}

void remote_servers_stop(void)
{
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	tu_server_stop(&s3);
}

int remote_run_variants(const struct CMUnitTest *tests, size_t n)
{
	/* Every provider x coordinator pair docs/remote.md names: blobs in a
	 * folder or S3 (path-style), references in file, etcd or redis, each
	 * with and without a LocalCache; S3 by virtual host once (an
	 * addressing, not another provider); memory with memory. */
	static const struct variant variants[] = {
		{ "file", "file", 0, "remote: file blobs, file coordinator" },
		{ "file", "file", 1 << 20, "remote: file blobs, LocalCache over file" },
		{ "file", "etcd", 0, "remote: file blobs, etcd" },
		{ "file", "etcd", 1 << 20, "remote: file blobs, LocalCache over etcd" },
		{ "file", "redis", 0, "remote: file blobs, redis" },
		{ "file", "redis", 1 << 20, "remote: file blobs, LocalCache over redis" },
		{ "s3", "file", 0, "remote: s3 blobs, file coordinator" },
		{ "s3", "file", 1 << 20, "remote: s3 blobs, LocalCache over file" },
		{ "s3", "etcd", 0, "remote: s3 blobs, etcd" },
		{ "s3", "etcd", 1 << 20, "remote: s3 blobs, LocalCache over etcd" },
		{ "s3", "redis", 0, "remote: s3 blobs, redis" },
		{ "s3", "redis", 1 << 20, "remote: s3 blobs, LocalCache over redis" },
		{ "s3-vhost", "file", 1 << 20, "remote: s3 blobs by virtual host, LocalCache over file" },
		{ "memory", "memory", 0, "remote: memory blobs, memory coordinator" },
	};
	const char *schemes[16];
	size_t ns = tsec__blobs_schemes(schemes, 16);
	int failed = 0;

	/* HACKING's recipe for a blob provider, checked: each provider's
	 * scheme ("s3://") has a variant ("s3"). */
	for (size_t p = 0; p < ns; p++) {
		size_t len = strcspn(schemes[p], ":");
		bool have = false;

		for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]) && !have; v++)
			have = strlen(variants[v].blobs) == len &&
			       !strncmp(variants[v].blobs, schemes[p], len);
		if (!have) {
			fprintf(stderr, "remote: the blob provider %s has no variant in "
				"remote_run_variants (tests/remote_harness.c; docs/HACKING.md, "
				"\"A blob provider\")\n", schemes[p]);
			return 1;
		}
	}
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		cur = &variants[v];
		failed += _cmocka_run_group_tests(cur->name, tests, n, NULL, NULL);
	}
	return failed;
}
