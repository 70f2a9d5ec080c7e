/*
 * The remote certificate store's contract (issues 19 and 33), run on
 * every blob provider x coordinator pair docs/remote.md names: blobs in a
 * folder and in an S3-compatible server (s3rver, started here on
 * loopback behind the tests' SigV4-checking proxy), references in the
 * file, etcd and redis backends, each with and without a LocalCache; S3
 * by virtual host once; memory with memory.  And once per provider: a
 * 3-member etcd coordinator losing its leader during publishes.
 *
 *   TSEC_REMOTE_WRITE_FIXTURE=DIR test_remote   writes the fixture of
 *   this format (tests/data/remote-v2 is one; it is never rewritten).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "broker/remote/remote_private.h"
#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/certgen.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/remote.h"

struct variant {
	const char *blobs;           /* "file", "s3", "memory" */
	const char *coord;           /* "file", "etcd", "redis", "memory" */
	size_t cache_bytes;
	const char *name;
};

static const struct variant *cur;
static struct tu_server etcd, redis, s3;
static struct tsec_principal app, reader, issuer;

struct rt {
	struct tu_store t;
	struct tsec_remote *r;
	char keyfile[256], s3secret[256], blobs[512];
	char prefix[64];
	struct tsec_remote_opts o;
	struct tsec_store_opts so;   /* how the coordinator was opened */
};

/* A key file (0600) of 32 bytes in hex, from seed. */
static void write_key(const char *path, int seed)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	for (int i = 0; i < 32; i++)
		fprintf(f, "%02x", (unsigned)((seed * 37 + i * 11) & 0xff));
	fputc('\n', f);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
}

static void remote_open(struct rt *x, const struct tsec_remote_opts *o, struct tsec_remote **r)
{
	struct tsec_error err;

	if (tsec_remote_open(r, x->t.store, o, &err))
		fail_msg("remote open (%s): %s", cur->name, err.msg);
}

static int setup(void **state)
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

static int teardown(void **state)
{
	struct rt *x = *state;

	tsec_remote_close(&x->r);
	tu_store_close(&x->t);
	free(x);
	return 0;
}

/* A certificate for domain with its key and metadata; v varies it. */
struct cert {
	struct tsec_cert_files f;
};

static void make_cert(struct cert *c, const char *domain, int v)
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

static void same_files(const struct tsec_cert_files *a, const struct tsec_cert_files *b)
{
	assert_int_equal(a->cert_len, b->cert_len);
	assert_memory_equal(a->cert, b->cert, a->cert_len);
	assert_int_equal(a->key_len, b->key_len);
	assert_memory_equal(a->key, b->key, a->key_len);
	assert_int_equal(a->meta_len, b->meta_len);
	assert_memory_equal(a->meta, b->meta, a->meta_len);
}

static void publish_ok(struct rt *x, const struct tsec_lock *lk, const char *domain,
		       const struct cert *c, enum tsec_remote_outcome want)
{
	enum tsec_remote_outcome got;
	struct tsec_error err;

	if (tsec_remote_publish(x->r, &app, lk, "acme", domain, &c->f, &got, &err))
		fail_msg("publish %s (%s): %s", domain, cur->name, err.msg);
	if (want)
		assert_int_equal(got, want);
}

static void load_is(struct rt *x, const char *domain, const struct cert *c)
{
	struct tsec_cert_files got;
	struct tsec_error err;

	if (tsec_remote_load(x->r, &app, "acme", domain, &got, &err))
		fail_msg("load %s (%s): %s", domain, cur->name, err.msg);
	same_files(&got, &c->f);
	tsec_cert_files_free(&got);
}

struct counter {
	size_t n;
	char last[TSEC__BLOB_NAME_MAX + 1];
};

static int count_blob(void *ctx, const char *name, int64_t mtime_ms)
{
	struct counter *c = ctx;

	(void)mtime_ms;
	c->n++;
	snprintf(c->last, sizeof(c->last), "%s", name);
	return 0;
}

static size_t nblobs(struct rt *x)
{
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct counter c = { 0 };
	struct tsec_error err;

	assert_int_equal(b->ops->list(b, count_blob, &c, &err), 0);
	return c.n;
}

static void backend_put(struct tsec_store *s, const char *key, const char *v, size_t n);

/* The three reference keys of domain (acme issuer). */
static void ref_keys(const char *domain, char k[3][TSEC_KEY_MAX])
{
	assert_int_equal(tsec_cert_keys("acme", domain, k[0], k[1], k[2], TSEC_KEY_MAX), 0);
}

/* The raw text of a reference (or NULL). */
static char *raw_ref(struct rt *x, const char *domain, int which)
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
static void blob_of(struct rt *x, const char *domain, int which, char *out, size_t n)
{
	char *t = raw_ref(x, domain, which);
	json_t *j;

	assert_non_null(t);
	assert_non_null(j = json_loads(t, 0, NULL));
	snprintf(out, n, "%s", json_string_value(json_object_get(j, "blob")));
	json_decref(j);
	free(t);
}

static void free_cert(struct cert *c)
{
	tsec_cert_files_free(&c->f);
}

/* 1. What is published loads back, byte for byte; presence is exact. */
static void test_round_trip(void **state)
{
	struct rt *x = *state;
	struct cert a;
	struct tsec_error err;
	int ex = -1;

	make_cert(&a, "example.com", 0);
	assert_int_equal(tsec_remote_exists(x->r, &app, "acme", "example.com", &ex, &err), 0);
	assert_int_equal(ex, 0);
	publish_ok(x, NULL, "example.com", &a, TSEC_REMOTE_PUBLISHED);
	load_is(x, "example.com", &a);
	assert_int_equal(tsec_remote_exists(x->r, &app, "acme", "example.com", &ex, &err), 0);
	assert_int_equal(ex, 1);
	/* Exact: no prefix semantics. */
	assert_int_equal(tsec_remote_exists(x->r, &app, "acme", "example.co", &ex, &err), 0);
	assert_int_equal(ex, 0);
	assert_int_equal(tsec_remote_exists(x->r, &app, "acme", "ample.com", &ex, &err), 0);
	assert_int_equal(ex, 0);
	{
		struct tsec_cert_files none;
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "other.com", &none, &err),
				 TSEC_ENOENT);
	}
	/* A wildcard is its own name; the same content under it has blobs
	 * of its own (a blob belongs to one certificate). */
	publish_ok(x, NULL, "*.example.com", &a, TSEC_REMOTE_PUBLISHED);
	load_is(x, "*.example.com", &a);
	assert_int_equal(nblobs(x), 6);
	free_cert(&a);
}

/* 2. Publishing the current content again changes nothing. */
static void test_identical_republish(void **state)
{
	struct rt *x = *state;
	struct cert a;
	char *before[3], *after;

	make_cert(&a, "same.example", 1);
	publish_ok(x, NULL, "same.example", &a, TSEC_REMOTE_PUBLISHED);
	for (int i = 0; i < 3; i++)
		assert_non_null(before[i] = raw_ref(x, "same.example", i));
	publish_ok(x, NULL, "same.example", &a, TSEC_REMOTE_UNCHANGED);
	for (int i = 0; i < 3; i++) {
		assert_non_null(after = raw_ref(x, "same.example", i));
		assert_string_equal(after, before[i]);
		free(after);
		free(before[i]);
	}
	assert_int_equal(nblobs(x), 3);
	load_is(x, "same.example", &a);
	free_cert(&a);
}

/* 3. New content switches all three references at once. */
static void test_conflicting_republish(void **state)
{
	struct rt *x = *state;
	struct cert a, b;

	make_cert(&a, "flip.example", 0);
	make_cert(&b, "flip.example", 1);
	publish_ok(x, NULL, "flip.example", &a, TSEC_REMOTE_PUBLISHED);
	publish_ok(x, NULL, "flip.example", &b, TSEC_REMOTE_PUBLISHED);
	load_is(x, "flip.example", &b);
	/* The old blobs stay until swept; publishing the old content again
	 * finds them and verifies them. */
	assert_int_equal(nblobs(x), 6);
	publish_ok(x, NULL, "flip.example", &a, TSEC_REMOTE_PUBLISHED);
	load_is(x, "flip.example", &a);
	assert_int_equal(nblobs(x), 6);
	free_cert(&a);
	free_cert(&b);
}

static void die_now(void)
{
	raise(SIGKILL);
}

/* 4. A publisher killed (-9) between its blobs and its references:
 * readers see the old certificate, whole; the orphans are swept. */
static void test_torn_publish(void **state)
{
	struct rt *x = *state;
	struct cert a, b;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	pid_t pid;
	int st;

	if (!strcmp(cur->blobs, "memory"))
		skip();  /* the blobs die with the process */
	make_cert(&a, "torn.example", 0);
	make_cert(&b, "torn.example", 1);
	publish_ok(x, NULL, "torn.example", &a, TSEC_REMOTE_PUBLISHED);
	/* Another process, started afresh (exec: none of this one's threads,
	 * locks or connections), publishes b and is killed between its
	 * blobs and its references. */
	{
		static const char *const ext[3] = { "crt", "key", "json" };
		const char *d[3] = { b.f.cert, b.f.key, b.f.meta };
		size_t l[3] = { b.f.cert_len, b.f.key_len, b.f.meta_len };
		char path[300], cache[32];
		for (int i = 0; i < 3; i++) {
			FILE *f;
			snprintf(path, sizeof(path), "%s/b.%s", x->t.dir, ext[i]);
			assert_non_null(f = fopen(path, "w"));
			fwrite(d[i], 1, l[i], f);
			fclose(f);
		}
		snprintf(cache, sizeof(cache), "%zu", x->so.cache_bytes);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			setenv("TSEC_REMOTE_CHILD", x->t.dir, 1);
			setenv("TSEC_REMOTE_BACKEND", x->so.backend, 1);
			setenv("TSEC_REMOTE_ROOT", x->so.root ? x->so.root : "", 1);
			setenv("TSEC_REMOTE_ENDPOINTS", x->so.endpoints ? x->so.endpoints : "", 1);
			setenv("TSEC_REMOTE_PREFIX", x->so.prefix ? x->so.prefix : "", 1);
			setenv("TSEC_REMOTE_CACHE", cache, 1);
			setenv("TSEC_REMOTE_BLOBS", x->blobs, 1);
			setenv("TSEC_REMOTE_S3", x->o.s3_endpoint ? x->o.s3_endpoint : "", 1);
			setenv("TSEC_REMOTE_S3_VHOST", x->o.s3_virtual_host ? "1" : "", 1);
			execl("/proc/self/exe", "test_remote", (char *)NULL);
			_exit(127);
		}
	}
	assert_int_equal(tu_waitpid(pid, &st), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	load_is(x, "torn.example", &a);
	assert_int_equal(nblobs(x), 6);
	assert_int_equal(tsec_remote_sweep(x->r, 1000, &sw, &err), 0);
	assert_int_equal(sw.referenced, 3);
	assert_int_equal(sw.waiting, 3);
	assert_int_equal(sw.removed, 0);
	tsec__clock_advance(1001);
	assert_int_equal(tsec_remote_sweep(x->r, 1000, &sw, &err), 0);
	assert_int_equal(sw.removed, 3);
	assert_int_equal(nblobs(x), 3);
	load_is(x, "torn.example", &a);
	/* And the publish, made again, completes. */
	publish_ok(x, NULL, "torn.example", &b, TSEC_REMOTE_PUBLISHED);
	load_is(x, "torn.example", &b);
	free_cert(&a);
	free_cert(&b);
}

/* Replaces blob name's bytes with what (as an attacker with write access
 * to the object store could). */
static void plant_blob(struct rt *x, const char *name, const void *what, size_t n)
{
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct tsec_error err;

	assert_int_equal(b->ops->del(b, name, &err), 0);
	assert_int_equal(b->ops->put_new(b, name, what, n, &err), 0);
}

/* 5. A blob altered in the object store is an error, never served. */
static void test_corrupted_blob(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct cert a, other;
	struct tsec_cert_files got;
	struct tsec_error err;
	char name[TSEC__BLOB_NAME_MAX + 1];
	uint8_t *raw;
	size_t n;

	make_cert(&a, "bad.example", 0);
	make_cert(&other, "bad.example", 1);
	publish_ok(x, NULL, "bad.example", &a, TSEC_REMOTE_PUBLISHED);
	for (int which = 0; which < 3; which++) {
		blob_of(x, "bad.example", which, name, sizeof(name));
		assert_int_equal(b->ops->get(b, name, 1 << 20, &raw, &n, &err), 0);
		/* One bit flipped at the end (the ciphertext's tag, or the
		 * plaintext). */
		raw[n - 1] ^= 1;
		plant_blob(x, name, raw, n);
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "bad.example", &got, &err),
				 TSEC_ECORRUPT);
		assert_null(got.cert);
		assert_null(got.key);
		raw[n - 1] ^= 1;
		plant_blob(x, name, raw, n);
		free(raw);
		load_is(x, "bad.example", &a);
	}
	/* Another certificate's blob under this one's name: refused; then
	 * a publish of the real content does not trust what sits there and
	 * writes it again (issue 33, item 5: it said "unchanged" and never
	 * repaired). */
	blob_of(x, "bad.example", 0, name, sizeof(name));
	{
		char hdr[5 + 4096];
		struct tsec_remote_stats st0, st1;
		memcpy(hdr, "TSB2\0", 5);
		memcpy(hdr + 5, other.f.cert, other.f.cert_len);
		plant_blob(x, name, hdr, 5 + other.f.cert_len);
		tsec_remote_stats(x->r, &st0);
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "bad.example", &got, &err),
				 TSEC_ECORRUPT);
		publish_ok(x, NULL, "bad.example", &a, TSEC_REMOTE_UNCHANGED);
		tsec_remote_stats(x->r, &st1);
		assert_true(st1.corrupt > st0.corrupt);
		assert_int_equal(st1.repaired, st0.repaired + 1);
		load_is(x, "bad.example", &a);
		/* A blob cut short, under a publish of new content that
		 * needs it: replaced too. */
		assert_int_equal(b->ops->get(b, name, 1 << 20, &raw, &n, &err), 0);
		plant_blob(x, name, raw, n / 2);
		free(raw);
		publish_ok(x, NULL, "bad.example", &other, TSEC_REMOTE_PUBLISHED);
		publish_ok(x, NULL, "bad.example", &a, TSEC_REMOTE_PUBLISHED);
		load_is(x, "bad.example", &a);
	}
	free_cert(&a);
	free_cert(&other);
}

/*
 * 5b. A reference whose size is not its blob's (only this store could
 * write one, with its key): an error naming both sizes (issue 33: it said
 * "0 bytes", read after the buffer was freed).
 */
static void test_size_mismatch_said(void **state)
{
	struct rt *x = *state;
	struct cert a;
	struct tsec_cert_files got;
	struct tsec_error err;
	struct tsec__ref ref;
	char k[3][TSEC_KEY_MAX], *t, *forged, want[64];

	make_cert(&a, "size.example", 0);
	publish_ok(x, NULL, "size.example", &a, TSEC_REMOTE_PUBLISHED);
	ref_keys("size.example", k);
	assert_non_null(t = raw_ref(x, "size.example", 2));
	assert_int_equal(tsec__ref_read(x->r, t, strlen(t), 2, k[2], &ref, &err), 0);
	free(t);
	ref.size += 7;
	assert_non_null(forged = tsec__ref_text(x->r, k[2], &ref));
	backend_put(x->t.store, k[2], forged, strlen(forged));
	free(forged);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "size.example", &got, &err),
			 TSEC_ECORRUPT);
	snprintf(want, sizeof(want), "is %zu bytes, its reference says %zu", a.f.meta_len,
		 a.f.meta_len + 7);
	if (!strstr(err.msg, want))
		fail_msg("'%s' does not say '%s'", err.msg, want);
	assert_null(got.meta);
	free_cert(&a);
}

/* 6. A blob missing from the object store: an error, never a partial
 * certificate. */
static void test_missing_blob(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct cert a;
	struct tsec_cert_files got;
	struct tsec_error err;
	char name[TSEC__BLOB_NAME_MAX + 1];

	make_cert(&a, "gone.example", 0);
	publish_ok(x, NULL, "gone.example", &a, TSEC_REMOTE_PUBLISHED);
	blob_of(x, "gone.example", 1, name, sizeof(name));
	assert_int_equal(b->ops->del(b, name, &err), 0);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "gone.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_non_null(strstr(err.msg, "missing"));
	assert_null(got.cert);
	/* Publishing it again puts the blob back (the references, already
	 * current, stay as they are). */
	publish_ok(x, NULL, "gone.example", &a, TSEC_REMOTE_UNCHANGED);
	load_is(x, "gone.example", &a);
	free_cert(&a);
}

/* 7. A publish whose undo copy would pass the bound is refused before
 * anything changes; the same under the bound goes through. */
static void test_rollback_bound(void **state)
{
	struct rt *x = *state;
	struct tsec_remote_opts o = x->o;
	struct tsec_remote *small = NULL;
	struct cert a, big;
	struct tsec_error err;
	int ex = -1;
	char *pad;

	tsec_remote_close(&x->r);     /* one memory provider at a time */
	o.txn_max = 16 * 1024;
	remote_open(x, &o, &small);
	make_cert(&a, "bound.example", 0);
	make_cert(&big, "bound.example", 1);
	/* Metadata of 14 KiB: under blob_max, over what the bound allows. */
	assert_non_null(pad = malloc(14 * 1024 + 1));
	memset(pad, ' ', 14 * 1024);
	pad[0] = '{';
	pad[14 * 1024 - 1] = '}';
	pad[14 * 1024] = 0;
	free(big.f.meta);
	big.f.meta = pad;
	big.f.meta_len = 14 * 1024;
	assert_int_equal(tsec_remote_publish(small, &app, NULL, "acme", "bound.example", &big.f,
					     NULL, &err), TSEC_ETOOBIG);
	assert_non_null(strstr(err.msg, "txn_max"));
	assert_int_equal(tsec_remote_exists(small, &app, "acme", "bound.example", &ex, &err), 0);
	assert_int_equal(ex, 0);
	x->r = small;
	assert_int_equal(nblobs(x), 0);
	publish_ok(x, NULL, "bound.example", &a, TSEC_REMOTE_PUBLISHED);
	/* A payload over blob_max: refused the same way. */
	o.txn_max = 0;
	o.blob_max = 1024;
	tsec_remote_close(&x->r);
	remote_open(x, &o, &x->r);
	assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", "bound.example", &big.f,
					     NULL, &err), TSEC_ETOOBIG);
	assert_int_equal(nblobs(x), strcmp(cur->blobs, "memory") ? 3 : 0);
	free_cert(&a);
	free_cert(&big);
}

/* ---- the fixtures ---- */

#define FIXTURE_V1 "tests/data/remote-v1"
#define FIXTURE_V2 "tests/data/remote-v2"

static char *slurp(const char *path, size_t *n)
{
	struct tsec_error err;
	char *t = NULL;

	if (tsec_read_file(path, 1 << 20, &t, n, &err))
		fail_msg("%s: %s", path, err.msg);
	return t;
}

/* A value written straight to the coordinator's backend, past the store
 * (an operator's restore, or a key no caller can name). */
static void backend_put(struct tsec_store *s, const char *key, const char *v, size_t n)
{
	struct tsec__skey sk;
	struct tsec__bput p;
	struct tsec_error err;

	assert_int_equal(tsec__skey_parse_any(key, &sk, &err), 0);
	p = (struct tsec__bput){ &sk, v, n };
	if (s->be->ops->put_many(s->be, &p, 1, NULL, NULL, &err))
		fail_msg("put %s: %s", key, err.msg);
}

static char *backend_get(struct tsec_store *s, const char *key, size_t *n)
{
	struct tsec__skey sk;
	struct tsec_error err;
	char *v = NULL;

	assert_int_equal(tsec__skey_parse_any(key, &sk, &err), 0);
	if (s->be->ops->get(s->be, &sk, 1 << 20, &v, n, &err))
		return NULL;
	return v;
}

#define RECORD_OF(d) ".tsec-remote/certificates/acme/" d

/*
 * Opens a store with the fixture dir's key (x->r), puts its blobs into
 * this provider and its references (and record, when it has one) into
 * this coordinator, byte for byte; the files it holds into *want.
 */
static void plant_fixture(struct rt *x, const char *dir, struct tsec_cert_files *want)
{
	static const char *const kinds[3] = { "crt", "key", "meta" };
	static const char *const files[3] = { "cert.pem", "key.pem", "meta.json" };
	struct tsec_remote_opts o = x->o;
	char keys[3][TSEC_KEY_MAX], path[512], keyfile[300];
	struct tsec_error err;
	json_t *names;

	/* The fixture's key file, given the mode a key file needs. */
	snprintf(keyfile, sizeof(keyfile), "%s/fixture.key", x->t.dir);
	{
		size_t n;
		char *k;
		FILE *f = fopen(keyfile, "w");
		snprintf(path, sizeof(path), "%s/remote.key", dir);
		k = slurp(path, &n);
		assert_non_null(f);
		fwrite(k, 1, n, f);
		fclose(f);
		free(k);
		assert_int_equal(chmod(keyfile, 0600), 0);
	}
	tsec_remote_close(&x->r);
	o.key_file = keyfile;
	remote_open(x, &o, &x->r);
	/* The blob store the fixture's blobs were in was claimed by the
	 * coordinator that wrote them (a store with blobs and no claim is
	 * refused: test_claim_removed). */
	if (tsec__remote_claim(x->r, false, &err))
		fail_msg("claim: %s", err.msg);
	snprintf(path, sizeof(path), "%s/blobs.json", dir);
	assert_non_null(names = json_load_file(path, 0, NULL));
	ref_keys("fixture.example", keys);
	for (int i = 0; i < 3; i++) {
		const char *name = json_string_value(json_object_get(names, kinds[i]));
		struct tsec__blobs *b = tsec__remote_blobs(x->r);
		size_t n;
		char *raw;
		assert_non_null(name);
		snprintf(path, sizeof(path), "%s/blobs/%s", dir, name);
		raw = slurp(path, &n);
		assert_int_equal(b->ops->put_new(b, name, raw, n, &err), 0);
		free(raw);
		snprintf(path, sizeof(path), "%s/refs/%s", dir, kinds[i]);
		raw = slurp(path, &n);
		backend_put(x->t.store, keys[i], raw, n);
		free(raw);
	}
	json_decref(names);
	snprintf(path, sizeof(path), "%s/refs/record", dir);
	if (access(path, F_OK) == 0) {
		size_t n;
		char *raw = slurp(path, &n);
		backend_put(x->t.store, RECORD_OF("fixture.example"), raw, n);
		free(raw);
	}
	{
		char **w[3] = { &want->cert, &want->key, &want->meta };
		size_t *wl[3] = { &want->cert_len, &want->key_len, &want->meta_len };
		for (int i = 0; i < 3; i++) {
			snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
			*w[i] = slurp(path, wl[i]);
		}
	}
}

/* 8. Blobs, references and the record written by format 2 load in this
 * version, on every pair; republishing them is the same content. */
static void test_fixture_v2(void **state)
{
	struct rt *x = *state;
	struct tsec_cert_files want, got;
	struct tsec_error err;
	enum tsec_remote_outcome oc;

	plant_fixture(x, FIXTURE_V2, &want);
	if (tsec_remote_load(x->r, &app, "acme", "fixture.example", &got, &err))
		fail_msg("fixture v2 does not load (%s): %s", cur->name, err.msg);
	same_files(&got, &want);
	tsec_cert_files_free(&got);
	assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", "fixture.example", &want,
					     &oc, &err), 0);
	assert_int_equal(oc, TSEC_REMOTE_UNCHANGED);
	tsec_cert_files_free(&want);
}

/* 8b. Format 1 carried no authentication (no release wrote it): its
 * references are refused, saying so, and publishing the certificate
 * again makes it loadable. */
static void test_fixture_v1_refused(void **state)
{
	struct rt *x = *state;
	struct tsec_cert_files want, got;
	struct tsec_error err;
	enum tsec_remote_outcome oc;

	plant_fixture(x, FIXTURE_V1, &want);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "fixture.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_non_null(strstr(err.msg, "format-1"));
	assert_null(got.cert);
	assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", "fixture.example", &want,
					     &oc, &err), 0);
	assert_int_equal(oc, TSEC_REMOTE_PUBLISHED);
	if (tsec_remote_load(x->r, &app, "acme", "fixture.example", &got, &err))
		fail_msg("%s", err.msg);
	same_files(&got, &want);
	tsec_cert_files_free(&got);
	tsec_cert_files_free(&want);
}

/* Writes the fixture (TSEC_REMOTE_WRITE_FIXTURE=DIR): file blobs, a file
 * coordinator. */
static int write_fixture(const char *dir)
{
	static const char *const kinds[3] = { "crt", "key", "meta" };
	struct tu_store t;
	struct tsec_remote_opts o = { 0 };
	struct tsec_remote *r;
	struct tsec_error err;
	struct cert c;
	char path[512], blobs[512], keys[3][TSEC_KEY_MAX], cmd[1200];
	json_t *names = json_object();

	app = tu_who("svc:app");
	tu_store_open_on(&t, "file", 0);
	snprintf(path, sizeof(path), "mkdir -p %s/refs %s/blobs/crt %s/blobs/key %s/blobs/meta",
		 dir, dir, dir, dir);
	if (system(path))
		return 1;
	snprintf(path, sizeof(path), "%s/remote.key", dir);
	write_key(path, 19);
	snprintf(blobs, sizeof(blobs), "file:%s/b", t.dir);
	o.blobs = blobs;
	o.key_file = path;
	if (tsec_remote_open(&r, t.store, &o, &err) != 0)
		return fprintf(stderr, "%s\n", err.msg), 1;
	make_cert(&c, "fixture.example", 0);
	if (tsec_remote_publish(r, &app, NULL, "acme", "fixture.example", &c.f, NULL, &err))
		return fprintf(stderr, "%s\n", err.msg), 1;
	tsec_cert_keys("acme", "fixture.example", keys[0], keys[1], keys[2], TSEC_KEY_MAX);
	for (int i = 0; i <= 3; i++) {
		char *v;
		size_t n;
		FILE *f;
		json_t *j;
		if (!(v = backend_get(t.store, i < 3 ? keys[i] : RECORD_OF("fixture.example"), &n)))
			return 1;
		snprintf(path, sizeof(path), "%s/refs/%s", dir, i < 3 ? kinds[i] : "record");
		f = fopen(path, "w");
		fwrite(v, 1, n, f);
		fclose(f);
		if (i < 3) {
			j = json_loads(v, 0, NULL);
			json_object_set(names, kinds[i], json_object_get(j, "blob"));
			snprintf(cmd, sizeof(cmd), "cp %s/b/%s %s/blobs/%s", t.dir,
				 json_string_value(json_object_get(j, "blob")), dir,
				 json_string_value(json_object_get(j, "blob")));
			if (system(cmd))
				return 1;
			json_decref(j);
		}
		free(v);
	}
	snprintf(path, sizeof(path), "%s/blobs.json", dir);
	json_dump_file(names, path, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(names);
	{
		const char *fn[3] = { "cert.pem", "key.pem", "meta.json" };
		const char *d[3] = { c.f.cert, c.f.key, c.f.meta };
		size_t l[3] = { c.f.cert_len, c.f.key_len, c.f.meta_len };
		for (int i = 0; i < 3; i++) {
			FILE *f;
			snprintf(path, sizeof(path), "%s/%s", dir, fn[i]);
			f = fopen(path, "w");
			fwrite(d[i], 1, l[i], f);
			fclose(f);
		}
	}
	free_cert(&c);
	tsec_remote_close(&r);
	tu_store_close(&t);
	return 0;
}

/* 9. Archival moves only the key's reference; a name taken is refused;
 * the archived key is its publisher's alone. */
static void test_archival(void **state)
{
	struct rt *x = *state;
	struct cert a, b;
	struct tsec_cert_files got;
	struct tsec_error err;
	char *pem, *keyref;
	size_t n;

	make_cert(&a, "arch.example", 0);
	make_cert(&b, "arch.example", 1);
	publish_ok(x, NULL, "arch.example", &a, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_remote_archive_key(x->r, &app, NULL, "acme", "arch.example",
						 "2026-12", &err), 0);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "arch.example", &got, &err),
			 TSEC_EINCOMPLETE);
	/* exists and fetch give one answer (issue 51, item 15: exists said
	 * yes, and the fetch after it failed). */
	{
		int ex = 7;

		assert_int_equal(tsec_remote_exists(x->r, &app, "acme", "arch.example", &ex, &err),
				 0);
		assert_int_equal(ex, 0);
	}
	assert_int_equal(tsec_remote_load_archived(x->r, &app, "acme", "arch.example", "2026-12",
						   &pem, &n, &err), 0);
	assert_int_equal(n, a.f.key_len);
	assert_memory_equal(pem, a.f.key, n);
	free(pem);
	/* Readable by its publisher only: another principal the policy
	 * lets read everything still may not. */
	assert_int_equal(tsec_remote_load_archived(x->r, &reader, "acme", "arch.example",
						   "2026-12", &pem, &n, &err), TSEC_EDENIED);
	assert_null(pem);
	/* A new certificate, archived under the same name: refused, and its
	 * key stays where it is. */
	publish_ok(x, NULL, "arch.example", &b, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_remote_archive_key(x->r, &app, NULL, "acme", "arch.example",
						 "2026-12", &err), TSEC_EEXIST);
	assert_non_null(keyref = raw_ref(x, "arch.example", 1));
	free(keyref);
	load_is(x, "arch.example", &b);
	assert_int_equal(tsec_remote_load_archived(x->r, &app, "acme", "arch.example", "2026-12",
						   &pem, &n, &err), 0);
	assert_memory_equal(pem, a.f.key, n);
	free(pem);
	/* Names that are not one segment. */
	assert_int_equal(tsec_remote_archive_key(x->r, &app, NULL, "acme", "arch.example",
						 "../x", &err), TSEC_EKEY);
	assert_int_equal(tsec_remote_archive_key(x->r, &app, NULL, "acme", "arch.example", "",
						 &err), TSEC_EKEY);
	free_cert(&a);
	free_cert(&b);
}

struct racer {
	struct rt *x;
	const struct cert *c;
	int rounds, failures, conflicts;
	bool may_conflict;           /* another publishes other content */
	const struct cert *either[2];
	int mixed, loads;
	char first[300];             /* the first failure's code and message */
};

static void *publisher(void *arg)
{
	struct racer *p = arg;
	struct tsec_error err;
	int rc;

	for (int i = 0; i < p->rounds; i++) {
		rc = tsec_remote_publish(p->x->r, &app, NULL, "acme", "race.example", &p->c->f,
					 NULL, &err);
		/* Without a lock, other content switched first is a conflict
		 * the caller is told of, never a silent loss. */
		if (rc == TSEC_ECHANGED && p->may_conflict)
			p->conflicts++;
		else if (rc && !p->failures++)
			snprintf(p->first, sizeof(p->first), "%d %.200s (%.60s)", rc, err.msg,
				 err.where);
	}
	return NULL;
}

/* Both publishers' failures, with the first one's reason. */
static void no_failures(const struct racer *p)
{
	if (p[0].failures + p[1].failures)
		fail_msg("%d and %d publishes failed: %s%s", p[0].failures, p[1].failures,
			 p[0].first, p[1].first);
}

static bool same(const struct tsec_cert_files *a, const struct tsec_cert_files *b)
{
	return a->cert_len == b->cert_len && !memcmp(a->cert, b->cert, a->cert_len) &&
	       a->key_len == b->key_len && !memcmp(a->key, b->key, a->key_len) &&
	       a->meta_len == b->meta_len && !memcmp(a->meta, b->meta, a->meta_len);
}

static void *loader(void *arg)
{
	struct racer *p = arg;
	struct tsec_error err;

	for (int i = 0; i < p->rounds * 2; i++) {
		struct tsec_cert_files got;
		if (tsec_remote_load(p->x->r, &app, "acme", "race.example", &got, &err) == 0) {
			p->loads++;
			if (!same(&got, &p->either[0]->f) && !same(&got, &p->either[1]->f))
				p->mixed++;
			tsec_cert_files_free(&got);
		}
	}
	return NULL;
}

/* 10. Concurrent publishers: the same content (one writes each blob,
 * the other finds it and verifies it: never a conflict), then different
 * content (each publish lands or is told another landed first); a
 * reader meanwhile sees one whole certificate or the other, never a
 * mix. */
static void test_concurrent_publishers(void **state)
{
	struct rt *x = *state;
	struct cert a, b;
	pthread_t th[3];
	int rounds = strcmp(cur->coord, "file") && strcmp(cur->coord, "memory") ? 6 : 20;
	struct racer p[3] = {
		{ .x = x, .c = &a, .rounds = rounds }, { .x = x, .c = &a, .rounds = rounds },
		{ .x = x, .rounds = rounds, .either = { &a, &b } },
	};

	make_cert(&a, "race.example", 0);
	make_cert(&b, "race.example", 1);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, publisher, &p[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	no_failures(p);
	load_is(x, "race.example", &a);
	assert_int_equal(nblobs(x), 3);
	p[1].c = &b;
	p[0].may_conflict = p[1].may_conflict = true;
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, i == 2 ? loader : publisher, &p[i]),
				 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	no_failures(p);
	assert_int_equal(p[2].mixed, 0);
	assert_true(p[2].loads > 0);
	/* Whichever landed last is whole; a publish that lost removed the
	 * blobs it made, unless the other relies on them. */
	{
		struct tsec_cert_files got;
		struct tsec_error err;
		size_t nb = nblobs(x);
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "race.example", &got, &err), 0);
		assert_true(same(&got, &a.f) || same(&got, &b.f));
		tsec_cert_files_free(&got);
		assert_true(nb == 3 || nb == 6);
	}
	free_cert(&a);
	free_cert(&b);
}

/*
 * Ends a lease now, however long it was (issue 48, item 9: a lease of a
 * second ended under load before the publish made under it): the
 * injected clock moves past it, and redis, which times leases by its own
 * clock, loses the lock's key as it does at a lease's end.  Then waits
 * until a fenced write is refused.
 */
static void lease_ends(struct rt *x, const struct tsec_lock *lk)
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

/* 11. A publish fenced by the renewal lock, from a holder whose lease
 * ended and was taken over: refused, and no reference changes. */
static void test_stale_holder_fenced(void **state)
{
	struct rt *x = *state;
	struct cert a, b, c;
	struct tsec_lock old, now;
	struct tsec_error err;
	char *before, *after;

	make_cert(&a, "fence.example", 0);
	make_cert(&b, "fence.example", 1);
	make_cert(&c, "fence.example", 2);
	assert_int_equal(tsec_lock_acquire(x->t.store, &app, "renew-fence", 600000, 5000, &old,
					   &err), 0);
	publish_ok(x, &old, "fence.example", &a, TSEC_REMOTE_PUBLISHED);
	lease_ends(x, &old);
	assert_int_equal(tsec_lock_acquire(x->t.store, &app, "renew-fence", 60000, 60000, &now,
					   &err), 0);
	assert_non_null(before = raw_ref(x, "fence.example", 0));
	assert_int_equal(tsec_remote_publish(x->r, &app, &old, "acme", "fence.example", &b.f,
					     NULL, &err), TSEC_ENOTOWNER);
	assert_non_null(after = raw_ref(x, "fence.example", 0));
	assert_string_equal(before, after);
	free(before);
	free(after);
	load_is(x, "fence.example", &a);
	/* The refused publish left no blob behind. */
	assert_int_equal(nblobs(x), 3);
	publish_ok(x, &now, "fence.example", &c, TSEC_REMOTE_PUBLISHED);
	load_is(x, "fence.example", &c);
	assert_int_equal(tsec_lock_release(x->t.store, &app, &now, &err), 0);
	free_cert(&a);
	free_cert(&b);
	free_cert(&c);
}

/* 12. The sweeper removes a blob only once it has been unreferenced for
 * the whole grace period; one referenced again meanwhile stays. */
static void test_sweeper_grace(void **state)
{
	struct rt *x = *state;
	struct cert a, b, c;
	struct tsec_remote_sweep sw;
	struct tsec_error err;

	make_cert(&a, "sweep.example", 0);
	make_cert(&b, "sweep.example", 1);
	make_cert(&c, "sweep.example", 2);
	publish_ok(x, NULL, "sweep.example", &a, TSEC_REMOTE_PUBLISHED);
	publish_ok(x, NULL, "sweep.example", &b, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.blobs, 6);
	assert_int_equal(sw.referenced, 3);
	assert_int_equal(sw.waiting, 3);
	assert_int_equal(sw.removed, 0);
	/* Within the grace: a reader that read a's references before the
	 * switch still finds a's blobs. */
	tsec__clock_advance(59000);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.removed, 0);
	/* a is current again: its blobs are referenced, b's now wait. */
	publish_ok(x, NULL, "sweep.example", &a, TSEC_REMOTE_PUBLISHED);
	tsec__clock_advance(2000);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.removed, 0);
	assert_int_equal(sw.waiting, 3);
	tsec__clock_advance(60000);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.removed, 3);
	assert_int_equal(sw.referenced, 3);
	load_is(x, "sweep.example", &a);
	/* c is published (its blobs written) while a sweep runs with no
	 * grace: the publish puts back what the sweep took. */
	publish_ok(x, NULL, "sweep.example", &c, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), 0);
	load_is(x, "sweep.example", &c);
	/* Values that are not references (a certificate saved whole) are
	 * left alone and do not stop a sweep. */
	{
		struct cert w;
		make_cert(&w, "whole.example", 0);
		assert_int_equal(tsec_store_save_cert(x->t.store, &app, "acme", "whole.example",
						      &w.f, &err), 0);
		assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), 0);
		assert_int_equal(sw.referenced, 3);
		free_cert(&w);
	}
	free_cert(&a);
	free_cert(&b);
	free_cert(&c);
}

/* 13. Planted and hostile names: refused before any I/O, or ignored. */
static void test_planted_names(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	static const char *const bad[] = {
		"../etc/passwd", "crt/../../x", "crt/", "key/ABCDEF", "crt/zz",
		"meta/00000000000000000000000000000000000000000000000000000000000000000",
		"/crt/0000000000000000000000000000000000000000000000000000000000000000",
		"other/0000000000000000000000000000000000000000000000000000000000000000",
	};
	struct cert a;
	struct tsec_cert_files got;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	uint8_t *raw;
	size_t n;
	int ex;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(b->ops->put_new(b, bad[i], "x", 1, &err), TSEC_EKEY);
		assert_int_equal(b->ops->get(b, bad[i], 10, &raw, &n, &err), TSEC_EKEY);
		assert_int_equal(b->ops->del(b, bad[i], &err), TSEC_EKEY);
	}
	make_cert(&a, "plant.example", 0);
	static const char *const names[] = { "../x", "a/b", "", "x\ny" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", names[i], &a.f,
						     NULL, &err), TSEC_EKEY);
		assert_int_equal(tsec_remote_publish(x->r, &app, NULL, names[i], "ok.example",
						     &a.f, NULL, &err), TSEC_EKEY);
		assert_int_not_equal(tsec_remote_load(x->r, &app, "acme", names[i], &got, &err),
				     0);
		assert_int_not_equal(tsec_remote_exists(x->r, &app, names[i], "ok.example", &ex,
							&err), 0);
	}
	assert_int_equal(nblobs(x), 0);
	publish_ok(x, NULL, "plant.example", &a, TSEC_REMOTE_PUBLISHED);
	if (!strcmp(cur->blobs, "file")) {
		/* In the folder: junk, a link where a blob should be, a
		 * folder; none is reported, removed or followed. */
		char cmd[1024], name[TSEC__BLOB_NAME_MAX + 1];
		const char *dir = x->blobs + 5;
		blob_of(x, "plant.example", 0, name, sizeof(name));
		snprintf(cmd, sizeof(cmd),
			 "cd %s && echo junk > crt/notours && echo x > crt/%.64s && "
			 "mkdir key/%.64s && mv %s %s.real && ln -s /etc/passwd %s", dir,
			 "1111111111111111111111111111111111111111111111111111111111111111",
			 "2222222222222222222222222222222222222222222222222222222222222222",
			 name, name, name);
		assert_int_equal(system(cmd), 0);
		assert_int_not_equal(tsec_remote_load(x->r, &app, "acme", "plant.example", &got,
						      &err), 0);
		assert_null(got.cert);
		assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), 0);
		/* The stray file of a good name is a blob (unreferenced, so
		 * swept); the junk, the link and the folder are not. */
		snprintf(cmd, sizeof(cmd), "cd %s && test -e crt/notours && test -L %s && "
			 "test -d key/%.64s && ! test -e crt/%.64s", dir, name,
			 "2222222222222222222222222222222222222222222222222222222222222222",
			 "1111111111111111111111111111111111111111111111111111111111111111");
		assert_int_equal(system(cmd), 0);
		snprintf(cmd, sizeof(cmd), "cd %s && rm %s && mv %s.real %s", dir, name, name, name);
		assert_int_equal(system(cmd), 0);
		load_is(x, "plant.example", &a);
	}
	free_cert(&a);
}

/*
 * A symbolic link planted under a blob's name is damage like altered
 * bytes: load refuses it as corrupt, and a publish of the content
 * replaces it (issue 49, item 3: load and republish both failed, with an
 * I/O error).
 */
static void test_blob_link_repaired(void **state)
{
	struct rt *x = *state;
	struct tsec_remote_stats st0, st1;
	struct tsec_cert_files got;
	struct tsec_error err;
	char name[TSEC__BLOB_NAME_MAX + 1], path[1024];
	struct cert a;

	if (strcmp(cur->blobs, "file"))
		skip();
	make_cert(&a, "link.example", 0);
	publish_ok(x, NULL, "link.example", &a, TSEC_REMOTE_PUBLISHED);
	for (int which = 0; which < 2; which++) {
		blob_of(x, "link.example", which, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", x->blobs + 5, name);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(symlink("/etc/passwd", path), 0);
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "link.example", &got, &err),
				 TSEC_ECORRUPT);
		assert_null(got.cert);
		tsec_remote_stats(x->r, &st0);
		publish_ok(x, NULL, "link.example", &a, TSEC_REMOTE_UNCHANGED);
		tsec_remote_stats(x->r, &st1);
		assert_int_equal(st1.repaired, st0.repaired + 1);
		load_is(x, "link.example", &a);
	}
	free_cert(&a);
}

/* Opens a remote store on x's coordinator with key_file and blobs: its
 * error's code, the text in err. */
static int open_with(struct rt *x, const char *key, const char *blobs, struct tsec_error *err)
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

/*
 * The files a remote store is given are checked as the storage root is
 * (issue 49, item 3): a key file another user owns, one in a folder
 * others can write, one inside the storage root (where a principal
 * allowed storage.load on ** read the 32 bytes every key derives from)
 * or inside the blob folder; a blob folder others can write or another
 * user owns.  Each was accepted; each is refused, saying why.
 */
static void test_trusted_files(void **state)
{
	struct rt *x = *state;
	struct tsec_error err;
	char key[1400], dir[700], blobs[700];

	if (strcmp(cur->blobs, "file") || strcmp(cur->coord, "file") || cur->cache_bytes)
		skip();
	/* The key file inside the storage root: refused. */
	snprintf(key, sizeof(key), "%s/remote.key", x->t.root);
	write_key(key, 1);
	assert_int_equal(open_with(x, key, x->blobs, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "inside the store's root"));
	/* ... or deeper, or inside the blob folder. */
	snprintf(dir, sizeof(dir), "%s/certificates", x->t.root);
	mkdir(dir, 0700);
	snprintf(key, sizeof(key), "%s/certificates/remote.key", x->t.root);
	write_key(key, 1);
	assert_int_equal(open_with(x, key, x->blobs, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "inside the store's root"));
	snprintf(key, sizeof(key), "%s/remote.key", x->blobs + 5);
	write_key(key, 1);
	assert_int_equal(open_with(x, key, x->blobs, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "inside the blob folder"));
	assert_int_equal(unlink(key), 0);
	/* In a folder others can write. */
	snprintf(dir, sizeof(dir), "%s/open", x->t.dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(chmod(dir, 0777), 0);
	snprintf(key, sizeof(key), "%s/remote.key", dir);
	write_key(key, 1);
	assert_int_not_equal(open_with(x, key, x->blobs, &err), 0);
	assert_non_null(strstr(err.msg, "others can write"));
	/* A blob folder others can write. */
	snprintf(blobs, sizeof(blobs), "file:%s/openblobs", x->t.dir);
	assert_int_equal(mkdir(blobs + 5, 0700), 0);
	assert_int_equal(chmod(blobs + 5, 0777), 0);
	assert_int_not_equal(open_with(x, x->keyfile, blobs, &err), 0);
	assert_non_null(strstr(err.msg, "others can write"));
	/* A blob folder whose kind folder was opened to others. */
	snprintf(blobs, sizeof(blobs), "%s/crt", x->blobs + 5);
	assert_int_equal(chmod(blobs, 0777), 0);
	assert_int_not_equal(open_with(x, x->keyfile, x->blobs, &err), 0);
	assert_int_equal(chmod(blobs, 0700), 0);
	if (geteuid() == 0) {
		/* Another user's key file, and another user's blob folder. */
		assert_int_equal(chown(x->keyfile, 65534, 65534), 0);
		assert_int_not_equal(open_with(x, x->keyfile, x->blobs, &err), 0);
		assert_non_null(strstr(err.msg, "belongs to uid 65534"));
		assert_int_equal(chown(x->keyfile, 0, 0), 0);
		snprintf(blobs, sizeof(blobs), "file:%s/theirs", x->t.dir);
		assert_int_equal(mkdir(blobs + 5, 0700), 0);
		assert_int_equal(chown(blobs + 5, 65534, 65534), 0);
		assert_int_not_equal(open_with(x, x->keyfile, blobs, &err), 0);
		assert_non_null(strstr(err.msg, "belongs to uid 65534"));
	}
	/* The good ones still open. */
	if (open_with(x, x->keyfile, x->blobs, &err))
		fail_msg("a good key file and blob folder: %s", err.msg);
}

/* 14. Private keys sealed (or not); either loads; another key file
 * opens nothing. */
static void test_encryption_on_off(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct tsec_remote_opts o = x->o;
	struct tsec_remote *plain = NULL, *other = NULL;
	struct cert a, c;
	struct tsec_cert_files got;
	struct tsec_error err;
	char name[TSEC__BLOB_NAME_MAX + 1], otherkey[300];
	uint8_t *raw;
	size_t n;

	make_cert(&a, "seal.example", 0);
	publish_ok(x, NULL, "seal.example", &a, TSEC_REMOTE_PUBLISHED);
	blob_of(x, "seal.example", 1, name, sizeof(name));
	assert_int_equal(b->ops->get(b, name, 1 << 20, &raw, &n, &err), 0);
	assert_null(memmem(raw, n, "PRIVATE KEY", 11));
	assert_int_equal(n, 5 + 24 + a.f.key_len + 16);
	free(raw);
	blob_of(x, "seal.example", 0, name, sizeof(name));
	assert_int_equal(b->ops->get(b, name, 1 << 20, &raw, &n, &err), 0);
	assert_non_null(memmem(raw, n, "BEGIN CERTIFICATE", 17));
	free(raw);
	if (!strcmp(cur->blobs, "memory")) {
		free_cert(&a);
		return;  /* one process, one memory: no second store to share it */
	}
	o.plain_keys = true;
	remote_open(x, &o, &plain);
	make_cert(&c, "plain.example", 1);
	if (tsec_remote_publish(plain, &app, NULL, "acme", "plain.example", &c.f, NULL, &err))
		fail_msg("%s", err.msg);
	blob_of(x, "plain.example", 1, name, sizeof(name));
	assert_int_equal(b->ops->get(b, name, 1 << 20, &raw, &n, &err), 0);
	assert_non_null(memmem(raw, n, "PRIVATE KEY", 11));
	free(raw);
	/* Each store reads what the other wrote. */
	load_is(x, "plain.example", &c);
	assert_int_equal(tsec_remote_load(plain, &app, "acme", "seal.example", &got, &err), 0);
	same_files(&got, &a.f);
	tsec_cert_files_free(&got);
	/* Another key: nothing verifies. */
	snprintf(otherkey, sizeof(otherkey), "%s/other.key", x->t.dir);
	write_key(otherkey, 2);
	o.plain_keys = false;
	o.key_file = otherkey;
	remote_open(x, &o, &other);
	assert_int_equal(tsec_remote_load(other, &app, "acme", "seal.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_int_equal(tsec_remote_load(other, &app, "acme", "plain.example", &got, &err),
			 TSEC_ECORRUPT);
	tsec_remote_close(&plain);
	tsec_remote_close(&other);
	free_cert(&a);
	free_cert(&c);
}

/* 15. The policy decides on the logical keys and judges the certificate
 * published, not the reference written; a denial writes nothing. */
static void test_policy_judges_content(void **state)
{
	struct rt *x = *state;
	struct cert ok, wrong;
	struct tsec_cert_files got;
	struct tsec_error err;
	int ex;

	make_cert(&ok, "judged.example", 0);
	make_cert(&wrong, "someone-else.example", 0);
	/* svc:issuer may store a certificate that covers its domain. */
	assert_int_equal(tsec_remote_publish(x->r, &issuer, NULL, "acme", "judged.example",
					     &wrong.f, NULL, &err), TSEC_EDENIED);
	assert_int_equal(nblobs(x), 0);
	if (tsec_remote_publish(x->r, &issuer, NULL, "acme", "judged.example", &ok.f, NULL, &err))
		fail_msg("issuer publish: %s", err.msg);
	/* svc:reader may load, not publish. */
	assert_int_equal(tsec_remote_publish(x->r, &reader, NULL, "acme", "judged.example",
					     &wrong.f, NULL, &err), TSEC_EDENIED);
	assert_int_equal(tsec_remote_load(x->r, &reader, "acme", "judged.example", &got, &err),
			 0);
	same_files(&got, &ok.f);
	tsec_cert_files_free(&got);
	/* Nobody else may even ask. */
	{
		struct tsec_principal who = tu_who("svc:stranger");
		assert_int_equal(tsec_remote_load(x->r, &who, "acme", "judged.example", &got, &err),
				 TSEC_EDENIED);
		assert_int_equal(tsec_remote_exists(x->r, &who, "acme", "judged.example", &ex,
						    &err), TSEC_EDENIED);
	}
	free_cert(&ok);
	free_cert(&wrong);
}

/* 16. References torn by hand (from two publishes) are never served as
 * one certificate. */
static void test_torn_references(void **state)
{
	struct rt *x = *state;
	struct cert a, b;
	struct tsec_cert_files got;
	struct tsec_error err;
	char k[3][TSEC_KEY_MAX], *refb;

	make_cert(&a, "mix.example", 0);
	make_cert(&b, "mix.example", 1);
	publish_ok(x, NULL, "mix.example", &b, TSEC_REMOTE_PUBLISHED);
	assert_non_null(refb = raw_ref(x, "mix.example", 1));
	publish_ok(x, NULL, "mix.example", &a, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_cert_keys("acme", "mix.example", k[0], k[1], k[2], TSEC_KEY_MAX),
			 0);
	assert_int_equal(tsec_store_put(x->t.store, &app, k[1], refb, strlen(refb), &err), 0);
	free(refb);
	/* One of the older set among the current one's: not the record's
	 * generation, so refused at once (the three and the record are read
	 * as of one moment: no publish tears them). */
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "mix.example", &got, &err),
			 TSEC_EROLLBACK);
	assert_non_null(strstr(err.msg, "generation"));
	assert_null(got.cert);
	/* A reference that is not one, and one of a later format. */
	publish_ok(x, NULL, "mix.example", &a, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_store_put(x->t.store, &app, k[2], "{\"tsec_ref\": 2}", 15, &err),
			 0);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "mix.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_non_null(strstr(err.msg, "malformed"));
	assert_int_equal(tsec_store_put(x->t.store, &app, k[2], "{\"tsec_ref\": 3}", 15, &err),
			 0);
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "mix.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_non_null(strstr(err.msg, "later version"));
	publish_ok(x, NULL, "mix.example", &a, TSEC_REMOTE_PUBLISHED);
	load_is(x, "mix.example", &a);
	free_cert(&a);
	free_cert(&b);
}



/*
 * 17. A reference is valid only where the store wrote it, for that
 * certificate (issue 33, item 1): references written by hand through
 * plain storage naming another tenant's blobs, another certificate's
 * references copied, and an archived key's `by` changed are each
 * refused, never served.  Before, the forged set loaded b.example's
 * private key for a principal confined to a.example.
 */
static void test_forged_references(void **state)
{
	struct rt *x = *state;
	struct tsec_principal tenant = tu_who("svc:tenant-a");
	struct tsec__blobs *bl = tsec__remote_blobs(x->r);
	struct cert b;
	struct tsec_cert_files got;
	struct tsec_error err;
	char ka[3][TSEC_KEY_MAX], kb[3][TSEC_KEY_MAX], *refb[3];
	size_t lens[3];

	struct tsec_remote_stats st0, st1;

	make_cert(&b, "b.example", 0);
	publish_ok(x, NULL, "b.example", &b, TSEC_REMOTE_PUBLISHED);
	lens[0] = b.f.cert_len, lens[1] = b.f.key_len, lens[2] = b.f.meta_len;
	tsec_remote_stats(x->r, &st0);
	ref_keys("a.example", ka);
	ref_keys("b.example", kb);
	/* The tenant may not read b.example at all. */
	assert_int_equal(tsec_remote_load(x->r, &tenant, "acme", "b.example", &got, &err),
			 TSEC_EDENIED);
	/* 1: references by hand, naming b's blobs (listed from the object
	 * store: names only), with the sizes their lengths give. */
	{
		struct tsec_put p[3];
		char text[3][512];
		for (int i = 0; i < 3; i++) {
			char name[TSEC__BLOB_NAME_MAX + 1];
			blob_of(x, "b.example", i, name, sizeof(name));
			snprintf(text[i], sizeof(text[i]), "{\"tsec_ref\":1,\"gen\":\"%032d\","
				 "\"blob\":\"%s\",\"size\":%zu,\"by\":\"svc:tenant-a\"}", 7, name,
				 lens[i]);
			p[i] = (struct tsec_put){ ka[i], text[i], strlen(text[i]) };
		}
		assert_int_equal(tsec_store_put_many(x->t.store, &tenant, p, 3, &err), 0);
	}
	assert_int_not_equal(tsec_remote_load(x->r, &tenant, "acme", "a.example", &got, &err), 0);
	assert_null(got.key);
	assert_int_equal(err.code, TSEC_ECORRUPT);
	/* 2: b's own references, copied byte for byte under a.example. */
	for (int i = 0; i < 3; i++) {
		assert_non_null(refb[i] = raw_ref(x, "b.example", i));
		assert_int_equal(tsec_store_put(x->t.store, &tenant, ka[i], refb[i], strlen(refb[i]),
						&err), 0);
	}
	assert_int_equal(tsec_remote_load(x->r, &tenant, "acme", "a.example", &got, &err),
			 TSEC_ECORRUPT);
	assert_null(got.key);
	/* Nor does it count as there. */
	{
		int ex = -1;
		assert_int_not_equal(tsec_remote_exists(x->r, &tenant, "acme", "a.example", &ex,
							&err) == 0 && ex == 1, 1);
	}
	/* 3: an archived key whose `by` names another principal, one the
	 * policy lets read the archive (svc:reader): only the key's
	 * publisher may, and `by` alone said who that is. */
	assert_int_equal(tsec_remote_archive_key(x->r, &app, NULL, "acme", "b.example", "old",
						 &err), 0);
	{
		char ak[TSEC_KEY_MAX], *t, *by, forged[1024];
		size_t n;
		char *pem = NULL;
		snprintf(ak, sizeof(ak), "certificates/acme/b.example/archive/old.key");
		assert_int_equal(tsec_store_get(x->t.store, &app, ak, &t, &n, &err), 0);
		assert_non_null(by = strstr(t, "svc:app"));
		snprintf(forged, sizeof(forged), "%.*ssvc:reader%s", (int)(by - t), t, by + 7);
		free(t);
		assert_int_equal(tsec_store_put(x->t.store, &app, ak, forged, strlen(forged), &err),
				 0);
		assert_int_equal(tsec_remote_load_archived(x->r, &reader, "acme", "b.example",
							   "old", &pem, &n, &err), TSEC_ECORRUPT);
		assert_null(pem);
		assert_int_not_equal(tsec_remote_load_archived(x->r, &app, "acme", "b.example",
							       "old", &pem, &n, &err), 0);
		assert_null(pem);
	}
	/* Each refusal counted: the hand-written set, the copied one (load
	 * and presence), the two archived loads. */
	tsec_remote_stats(x->r, &st1);
	assert_true(st1.refused >= st0.refused + 5);
	for (int i = 0; i < 3; i++)
		free(refb[i]);
	free_cert(&b);
	(void)bl;
}

/*
 * 18. Rollback (issue 33, item 2): an older, whole set of references
 * put back is refused, never served; a republish over it refuses too,
 * until the current content is published again.
 */
static void test_replayed_references(void **state)
{
	struct rt *x = *state;
	struct cert a, b;
	struct tsec_cert_files got;
	struct tsec_error err;
	char k[3][TSEC_KEY_MAX], *old[3];

	make_cert(&a, "replay.example", 0);
	make_cert(&b, "replay.example", 1);
	publish_ok(x, NULL, "replay.example", &a, TSEC_REMOTE_PUBLISHED);
	for (int i = 0; i < 3; i++)
		assert_non_null(old[i] = raw_ref(x, "replay.example", i));
	publish_ok(x, NULL, "replay.example", &b, TSEC_REMOTE_PUBLISHED);
	ref_keys("replay.example", k);
	{
		struct tsec_put p[3];
		for (int i = 0; i < 3; i++)
			p[i] = (struct tsec_put){ k[i], old[i], strlen(old[i]) };
		assert_int_equal(tsec_store_put_many(x->t.store, &app, p, 3, &err), 0);
	}
	assert_int_not_equal(tsec_remote_load(x->r, &app, "acme", "replay.example", &got, &err),
			     0);
	assert_null(got.cert);
	assert_non_null(strstr(err.msg, "generation"));
	/* The current content published again: whole and current. */
	publish_ok(x, NULL, "replay.example", &b, TSEC_REMOTE_PUBLISHED);
	load_is(x, "replay.example", &b);
	/*
	 * The coordinator itself put back as it was (a restore from a
	 * backup, a failover that lost the last writes): references and
	 * record agree, but this process has seen a later record, so it
	 * refuses.  The bound, as stated in docs/remote.md: a process that
	 * never saw the later record (a broker started after the restore)
	 * trusts the coordinator, which is the source of truth.
	 */
	{
		struct tsec_remote_stats st0, st1;
		char *rec_old = NULL, *rec_now;
		size_t rn = 0, n;
		publish_ok(x, NULL, "replay.example", &a, TSEC_REMOTE_PUBLISHED);
		for (int i = 0; i < 3; i++) {
			free(old[i]);
			assert_non_null(old[i] = raw_ref(x, "replay.example", i));
		}
		assert_non_null(rec_old = backend_get(x->t.store, RECORD_OF("replay.example"), &rn));
		publish_ok(x, NULL, "replay.example", &b, TSEC_REMOTE_PUBLISHED);
		assert_non_null(rec_now = backend_get(x->t.store, RECORD_OF("replay.example"), &n));
		assert_string_not_equal(rec_now, rec_old);
		free(rec_now);
		for (int i = 0; i < 3; i++)
			backend_put(x->t.store, k[i], old[i], strlen(old[i]));
		backend_put(x->t.store, RECORD_OF("replay.example"), rec_old, rn);
		tsec_remote_stats(x->r, &st0);
		assert_int_equal(tsec_remote_load(x->r, &app, "acme", "replay.example", &got, &err),
				 TSEC_EROLLBACK);
		assert_non_null(strstr(err.msg, "went back"));
		tsec_remote_stats(x->r, &st1);
		assert_int_equal(st1.rollbacks, st0.rollbacks + 1);
		/* A publish refuses to build on it too. */
		assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", "replay.example", &b.f,
						     NULL, &err), TSEC_EROLLBACK);
		tsec__remote_forget_seen(x->r);
		load_is(x, "replay.example", &a);
		free(rec_old);
	}
	for (int i = 0; i < 3; i++)
		free(old[i]);
	free_cert(&a);
	free_cert(&b);
}

struct rival {
	struct rt *x;
	const struct cert *c;
	int rc;
	enum tsec_remote_outcome oc;
};

/* Held inside a publish, between its blobs and its switch: the rival
 * publishes then. */
static struct rival *rival_now;

static void rival_publishes(void)
{
	struct rival *v = rival_now;
	struct tsec_error err;

	if (!v)
		return;
	rival_now = NULL;
	v->rc = tsec_remote_publish(v->x->r, &issuer, NULL, "acme", "rival.example", &v->c->f,
				    &v->oc, &err);
}

/*
 * 19. Two publishers without the renewal lock (issue 33, item 5): the
 * one whose switch comes second over the state it read is told so
 * (TSEC_ECHANGED), not "published"; the first's certificate stays.
 * The same content twice is not a conflict.
 */
static void test_publishers_conflict(void **state)
{
	struct rt *x = *state;
	struct cert a, b, c;
	struct tsec_error err;
	struct rival v;
	enum tsec_remote_outcome oc = 0;
	int rc;

	make_cert(&a, "rival.example", 0);
	make_cert(&b, "rival.example", 1);
	make_cert(&c, "rival.example", 2);
	publish_ok(x, NULL, "rival.example", &a, TSEC_REMOTE_PUBLISHED);
	v = (struct rival){ .x = x, .c = &b, .rc = -999 };
	rival_now = &v;
	tsec__remote_after_blobs_hook = rival_publishes;
	rc = tsec_remote_publish(x->r, &app, NULL, "acme", "rival.example", &c.f, &oc, &err);
	tsec__remote_after_blobs_hook = NULL;
	assert_int_equal(v.rc, 0);
	assert_int_equal(v.oc, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(rc, TSEC_ECHANGED);
	assert_int_equal(oc, 0);
	load_is(x, "rival.example", &b);
	/* The same content from both: one publishes, the other finds it. */
	v = (struct rival){ .x = x, .c = &c, .rc = -999 };
	rival_now = &v;
	tsec__remote_after_blobs_hook = rival_publishes;
	rc = tsec_remote_publish(x->r, &app, NULL, "acme", "rival.example", &c.f, &oc, &err);
	tsec__remote_after_blobs_hook = NULL;
	assert_int_equal(v.rc, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(oc, TSEC_REMOTE_UNCHANGED);
	load_is(x, "rival.example", &c);
	free_cert(&a);
	free_cert(&b);
	free_cert(&c);
}


/*
 * 20. The grace outlives the sweeper (issue 33, item 4): a blob first
 * seen unreferenced by one sweep is removed by a sweep of another
 * process (here another store object, as a restarted broker or another
 * broker of the fleet) once the grace has passed, not before.  Before,
 * the first sighting lived in the sweeper's memory: one `tsec cert sweep
 * 86400000` removed nothing, ever, and a restart forgot every sighting.
 */
static void test_sweep_grace_kept(void **state)
{
	struct rt *x = *state;
	struct tsec_remote *other = NULL;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	struct cert a, b;

	if (!strcmp(cur->blobs, "memory"))
		skip();  /* another store object has other memory */
	make_cert(&a, "kept.example", 0);
	make_cert(&b, "kept.example", 1);
	publish_ok(x, NULL, "kept.example", &a, TSEC_REMOTE_PUBLISHED);
	publish_ok(x, NULL, "kept.example", &b, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.waiting, 3);
	assert_int_equal(sw.removed, 0);
	tsec_remote_close(&x->r);
	remote_open(x, &x->o, &other);
	x->r = other;
	/* Within the grace: still there. */
	tsec__clock_advance(30000);
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.removed, 0);
	assert_int_equal(sw.waiting, 3);
	/* Past it, counted from the first sighting, by the other store. */
	tsec__clock_advance(30001);
	if (tsec_remote_sweep(x->r, 60000, &sw, &err))
		fail_msg("sweep: %s", err.msg);
	assert_int_equal(sw.removed, 3);
	assert_int_equal(sw.waiting, 0);
	assert_int_equal(nblobs(x), 3);
	load_is(x, "kept.example", &b);
	free_cert(&a);
	free_cert(&b);
}

static const struct tsec__blob_ops *real_ops;
static int failing_del(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	(void)b;
	return tsec__seterr(err, TSEC_EIO, name, "scripted: the store refused to delete %s", name);
}

/*
 * 21. A blob the store refuses to remove is counted and the sweep is an
 * error that says so (issue 33: a DELETE that failed left "removed 0"
 * and success); nothing is lost, and the next sweep removes it.
 */
static void test_sweep_failures_said(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *b = tsec__remote_blobs(x->r);
	struct tsec__blob_ops broken;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	struct cert a, c;

	make_cert(&a, "fail.example", 0);
	make_cert(&c, "fail.example", 1);
	publish_ok(x, NULL, "fail.example", &a, TSEC_REMOTE_PUBLISHED);
	publish_ok(x, NULL, "fail.example", &c, TSEC_REMOTE_PUBLISHED);
	real_ops = b->ops;
	broken = *b->ops;
	broken.del = failing_del;
	b->ops = &broken;
	assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), TSEC_EIO);
	b->ops = real_ops;
	assert_int_equal(sw.failed, 3);
	assert_int_equal(sw.removed, 0);
	assert_non_null(strstr(err.msg, "3 due could not be removed"));
	assert_non_null(strstr(err.msg, "scripted"));
	assert_int_equal(nblobs(x), 6);
	load_is(x, "fail.example", &c);
	assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), 0);
	assert_int_equal(sw.removed, 3);
	assert_int_equal(nblobs(x), 3);
	free_cert(&a);
	free_cert(&c);
}

/*
 * 22. A publisher killed mid-write (its temporary written, not yet
 * linked) leaves a temporary the sweep removes, once its writer's owner
 * flock is free; a live writer's temporary is kept (issue 33, item 4:
 * 11 of 30 kills left .tsec-tmp-blob-* that no sweep removed).
 */
static void test_sweep_litter(void **state)
{
	struct rt *x = *state;
	struct tsec__blobs *mine = tsec__remote_blobs(x->r);
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	char owner[64], path[700], live[700];
	const char *dir = x->blobs + 5;
	pid_t pid;
	int st;

	if (strcmp(cur->blobs, "file"))
		skip();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A provider of its own, a temporary half written, then
		 * killed: its owner file stays, its flock goes. */
		struct tsec__blobs *b;
		struct tsec_remote_opts o = { 0 };
		FILE *f;
		if (tsec__blobs_file_open(&b, dir, &o, &err))
			_exit(1);
		tsec__blobs_file_owner(b, owner, sizeof(owner));
		snprintf(path, sizeof(path), "%s/key/.tsec-tmp-%s-0123456789abcdef", dir, owner);
		if (!(f = fopen(path, "w")))
			_exit(1);
		fputs("half a sealed key", f);
		fclose(f);
		raise(SIGKILL);
		_exit(1);
	}
	assert_int_equal(tu_waitpid(pid, &st), pid);
	assert_true(WIFSIGNALED(st));
	/* A live writer's temporary: this store's own provider, mid-write. */
	tsec__blobs_file_owner(mine, owner, sizeof(owner));
	snprintf(live, sizeof(live), "%s/crt/.tsec-tmp-%s-fedcba9876543210", dir, owner);
	{
		FILE *f = fopen(live, "w");
		assert_non_null(f);
		fputs("being written", f);
		fclose(f);
	}
	/* And one named the way versions before owners named them. */
	snprintf(path, sizeof(path), "%s/meta/.tsec-tmp-blob-00112233aabbccdd", dir);
	{
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fclose(f);
	}
	assert_int_equal(tsec_remote_sweep(x->r, 60000, &sw, &err), 0);
	assert_int_equal(sw.litter, 2);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(access(live, F_OK), 0);
	{
		char cmd[800];
		snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/key | grep tsec-tmp)\"", dir);
		assert_int_equal(system(cmd), 0);
		/* The dead owner's file went too; ours stays. */
		snprintf(cmd, sizeof(cmd), "test \"$(ls %s/.tsec-owners | wc -l)\" = 1", dir);
		assert_int_equal(system(cmd), 0);
	}
	unlink(live);
}

/*
 * A removed claim does not hand the blob store to another coordinator
 * (issue 49, item 4: with .tsec-claim deleted, the other coordinator
 * claimed the store on its next sweep and removed the first one's 3 live
 * blobs).  The other's sweep and publish are refused, the first one's
 * blobs all load, and the first one puts its claim back (its coordinator
 * recorded the claim).
 */
static void test_claim_removed(void **state)
{
	struct rt *x = *state;
	struct tu_store second;
	struct tsec_remote *r2 = NULL;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	struct cert a, b;
	char path[1024];

	if (strcmp(cur->blobs, "file"))
		skip();
	make_cert(&a, "kept.example", 0);
	make_cert(&b, "taker.example", 1);
	publish_ok(x, NULL, "kept.example", &a, TSEC_REMOTE_PUBLISHED);
	snprintf(path, sizeof(path), "%s/.tsec-claim", x->blobs + 5);
	assert_int_equal(unlink(path), 0);
	tu_store_open_on(&second, "file", 0);
	/* The first coordinator's record of its claim, copied into the
	 * second's (a record is bound to its store's key): no claim either. */
	if (!strcmp(cur->coord, "file")) {
		char cmd[2048];
		snprintf(cmd, sizeof(cmd), "mkdir -p %s/.tsec-remote && cp %s/.tsec-remote/blob-claim-* "
			 "%s/.tsec-remote/", second.root, x->t.root, second.root);
		assert_int_equal(system(cmd), 0);
	}
	if (tsec_remote_open(&r2, second.store, &x->o, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(tsec_remote_sweep(r2, 0, &sw, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "holds blobs but no claim"));
	assert_int_equal(sw.removed, 0);
	assert_int_equal(tsec_remote_publish(r2, &app, NULL, "acme", "taker.example", &b.f, NULL,
					     &err), TSEC_EINVAL);
	load_is(x, "kept.example", &a);
	/* The first coordinator's sweep puts the claim back and removes
	 * nothing live; the other is still refused. */
	assert_int_equal(tsec_remote_sweep(x->r, 0, &sw, &err), 0);
	assert_int_equal(sw.removed, 0);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(tsec_remote_sweep(r2, 0, &sw, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "another coordinator"));
	load_is(x, "kept.example", &a);
	tsec_remote_close(&r2);
	tu_store_close(&second);
	free_cert(&a);
	free_cert(&b);
}

/*
 * Rollback recovery without a restart (issue 49, item 5): a record that
 * went back is refused for load and publish until tsec_remote_recover
 * accepts it, and then both work; a record removed by hand no longer
 * restarts the sequence at 1 (one publish worked, then the certificate
 * was stuck, refused as a rollback).
 */
static void test_recover_in_place(void **state)
{
	static const char *const ext[] = { "crt", "key", "json" };
	struct rt *x = *state;
	struct tsec_cert_files got;
	struct tsec_error err;
	struct cert a, b, c;
	char *saved[4], key[128];
	size_t n[4];
	uint64_t was, now;

	make_cert(&a, "back.example", 0);
	make_cert(&b, "back.example", 1);
	make_cert(&c, "back.example", 2);
	publish_ok(x, NULL, "back.example", &a, TSEC_REMOTE_PUBLISHED);
	/* The backup: A's references and record. */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "certificates/acme/back.example/back.example.%s",
			 i < 3 ? ext[i] : "");
		assert_non_null(saved[i] = backend_get(x->t.store, i < 3 ? key :
						       RECORD_OF("back.example"), &n[i]));
	}
	publish_ok(x, NULL, "back.example", &b, TSEC_REMOTE_PUBLISHED);
	load_is(x, "back.example", &b);
	/* The restore. */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "certificates/acme/back.example/back.example.%s",
			 i < 3 ? ext[i] : "");
		backend_put(x->t.store, i < 3 ? key : RECORD_OF("back.example"), saved[i], n[i]);
		free(saved[i]);
	}
	assert_int_equal(tsec_remote_load(x->r, &app, "acme", "back.example", &got, &err),
			 TSEC_EROLLBACK);
	assert_int_equal(tsec_remote_publish(x->r, &app, NULL, "acme", "back.example", &c.f, NULL,
					     &err), TSEC_EROLLBACK);
	/* Accepted: A served, then C published over it. */
	if (tsec_remote_recover(x->r, "acme", "back.example", &was, &now, &err))
		fail_msg("recover (%s): %s", cur->name, err.msg);
	assert_int_equal(was, 1);
	assert_true(now >= 2 + TSEC_REMOTE_RECOVER_GAP);
	load_is(x, "back.example", &a);
	publish_ok(x, NULL, "back.example", &c, TSEC_REMOTE_PUBLISHED);
	load_is(x, "back.example", &c);
	/* The record removed by hand: a publish continues past what was
	 * seen, and the next one too. */
	{
		struct tsec__skey sk;
		assert_int_equal(tsec__skey_parse_any(RECORD_OF("back.example"), &sk, &err), 0);
		assert_int_equal(x->t.store->be->ops->del(x->t.store->be, &sk, 0, NULL, &err), 0);
	}
	publish_ok(x, NULL, "back.example", &b, TSEC_REMOTE_PUBLISHED);
	load_is(x, "back.example", &b);
	publish_ok(x, NULL, "back.example", &a, TSEC_REMOTE_PUBLISHED);
	load_is(x, "back.example", &a);
	free_cert(&a);
	free_cert(&b);
	free_cert(&c);
}

/*
 * 23. Two coordinators sharing one blob store (issue 33, item 4): the
 * second is refused, saying why, so neither's sweep removes the other's
 * live blobs; before, a sweep through one deleted the other's.
 */
static void test_shared_blob_store(void **state)
{
	struct rt *x = *state;
	struct tu_store second;
	struct tsec_remote *r2 = NULL;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	struct cert a, b;

	if (!strcmp(cur->blobs, "memory"))
		skip();
	make_cert(&a, "one.example", 0);
	make_cert(&b, "two.example", 1);
	publish_ok(x, NULL, "one.example", &a, TSEC_REMOTE_PUBLISHED);
	/* Another coordinator (a file store of its own), the same blobs. */
	tu_store_open_on(&second, "file", 0);
	if (tsec_remote_open(&r2, second.store, &x->o, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(tsec_remote_publish(r2, &app, NULL, "acme", "two.example", &b.f, NULL,
					     &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "another coordinator"));
	assert_int_equal(tsec_remote_sweep(r2, 0, &sw, &err), TSEC_EINVAL);
	assert_int_equal(sw.removed, 0);
	load_is(x, "one.example", &a);
	tsec_remote_close(&r2);
	tu_store_close(&second);
	free_cert(&a);
	free_cert(&b);
}

static int observed_batches, observed_decisions;

static void observe(void *ctx, void *call_ctx, const struct tsec_request *reqs,
		    const struct tsec_decision *decisions, size_t n, uint64_t latency_ns)
{
	(void)ctx;
	(void)call_ctx;
	(void)reqs;
	(void)decisions;
	(void)latency_ns;
	observed_batches++;
	observed_decisions += (int)n;
}

/* 17. A publish asks the policy once: one decision per logical key, so
 * the decision log holds each once (it was asked twice, before the blobs
 * and again with the references, and logged twice). */
static void test_one_decision_per_key(void **state)
{
	struct rt *x = *state;
	struct cert a, b;

	make_cert(&a, "once.example", 0);
	make_cert(&b, "once.example", 1);
	tsec_store_set_observer(x->t.store, observe, NULL);
	observed_batches = observed_decisions = 0;
	publish_ok(x, NULL, "once.example", &a, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(observed_batches, 1);
	assert_int_equal(observed_decisions, 3);
	observed_batches = observed_decisions = 0;
	publish_ok(x, NULL, "once.example", &a, TSEC_REMOTE_UNCHANGED);
	publish_ok(x, NULL, "once.example", &b, TSEC_REMOTE_PUBLISHED);
	assert_int_equal(observed_batches, 2);
	assert_int_equal(observed_decisions, 6);
	observed_batches = observed_decisions = 0;
	load_is(x, "once.example", &b);
	assert_int_equal(observed_batches, 1);
	assert_int_equal(observed_decisions, 3);
	tsec_store_set_observer(x->t.store, NULL, NULL);
	free_cert(&a);
	free_cert(&b);
}

#define CONTRACT(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

static const struct CMUnitTest contract[] = {
	CONTRACT(test_round_trip),
	CONTRACT(test_identical_republish),
	CONTRACT(test_conflicting_republish),
	CONTRACT(test_torn_publish),
	CONTRACT(test_corrupted_blob),
	CONTRACT(test_size_mismatch_said),
	CONTRACT(test_missing_blob),
	CONTRACT(test_rollback_bound),
	CONTRACT(test_fixture_v2),
	CONTRACT(test_fixture_v1_refused),
	CONTRACT(test_archival),
	CONTRACT(test_concurrent_publishers),
	CONTRACT(test_stale_holder_fenced),
	CONTRACT(test_sweeper_grace),
	CONTRACT(test_planted_names),
	CONTRACT(test_blob_link_repaired),
	CONTRACT(test_trusted_files),
	CONTRACT(test_encryption_on_off),
	CONTRACT(test_policy_judges_content),
	CONTRACT(test_torn_references),
	CONTRACT(test_one_decision_per_key),
	CONTRACT(test_forged_references),
	CONTRACT(test_replayed_references),
	CONTRACT(test_publishers_conflict),
	CONTRACT(test_sweep_grace_kept),
	CONTRACT(test_sweep_failures_said),
	CONTRACT(test_sweep_litter),
	CONTRACT(test_shared_blob_store),
	CONTRACT(test_claim_removed),
	CONTRACT(test_recover_in_place),
};

/* ---- a 3-member etcd coordinator losing its leader ---- */

static struct tu_server etcd3;

static int setup3(void **state)
{
	struct rt *x;

	setup(state);
	x = *state;
	/* Reopen the coordinator on the 3-member cluster. */
	tsec_remote_close(&x->r);
	tsec_store_close(&x->t.store);
	{
		struct tsec_store_opts o = { .backend = "etcd", .endpoints = etcd3.endpoints,
					     .prefix = x->prefix,
					     .timeout_ms = 20000 };
		struct tsec_error err;
		if (tsec_store_open_opts(&x->t.store, &o, x->t.bus, NULL, &err))
			fail_msg("%s", err.msg);
	}
	remote_open(x, &x->o, &x->r);
	return 0;
}

/* Publishes while the leader is killed: every publish that said so took
 * effect, and what loads afterwards is one of the published certificates,
 * whole. */
static void test_etcd_leader_loss(void **state)
{
	struct rt *x = *state;
	struct cert c[8];
	struct tsec_cert_files got;
	struct tsec_error err;
	int last_ok = -1, leader = -1;

	for (int i = 0; i < 8; i++)
		make_cert(&c[i], "leader.example", i);
	for (int i = 0; i < 8; i++) {
		if (i == 3) {
			TU_WAIT((leader = tu_etcd_leader(&etcd3)) >= 0);
			assert_true(leader >= 0);
			tu_member_kill(&etcd3, leader);
		}
		if (tsec_remote_publish(x->r, &app, NULL, "acme", "leader.example", &c[i].f, NULL,
					&err) == 0)
			last_ok = i;
		else
			fprintf(stderr, "publish %d during the election: %s\n", i, err.msg);
	}
	assert_true(last_ok >= 4);
	TU_WAIT(tsec_remote_load(x->r, &app, "acme", "leader.example", &got, &err) == 0);
	same_files(&got, &c[last_ok].f);
	tsec_cert_files_free(&got);
	assert_int_equal(tu_member_restart(&etcd3, leader), 0);
	for (int i = 0; i < 8; i++)
		free_cert(&c[i]);
}

/*
 * The torn publisher (test_torn_publish), run in a process of its own:
 * publishes $TSEC_REMOTE_CHILD/b.{crt,key,json} as torn.example on the
 * coordinator and blobs the environment names, and is killed between its
 * blobs and its references.
 */
static int torn_child(const char *dir)
{
	struct tsec_store_opts so = {
		.backend = getenv("TSEC_REMOTE_BACKEND"), .root = getenv("TSEC_REMOTE_ROOT"),
		.endpoints = getenv("TSEC_REMOTE_ENDPOINTS"), .prefix = getenv("TSEC_REMOTE_PREFIX"),
		.cache_bytes = (size_t)atol(getenv("TSEC_REMOTE_CACHE")),
	};
	struct tsec_remote_opts ro = { .blobs = getenv("TSEC_REMOTE_BLOBS") };
	struct tsec_bus *bus = tu_bus_with_policy("tests/data/store_policy.json");
	struct tsec_cert_files f;
	struct tsec_store *s = NULL;
	struct tsec_remote *r = NULL;
	struct tsec_error err;
	char key[300], secret[300], path[300];

	app = tu_who("svc:app");
	if (!*so.root)
		so.root = NULL;
	if (!*so.endpoints)
		so.endpoints = NULL;
	if (!*so.prefix)
		so.prefix = NULL;
	snprintf(key, sizeof(key), "%s/remote.key", dir);
	snprintf(secret, sizeof(secret), "%s/s3.secret", dir);
	ro.key_file = key;
	if (*getenv("TSEC_REMOTE_S3")) {
		ro.s3_endpoint = getenv("TSEC_REMOTE_S3");
		ro.s3_access_key = "S3RVER";
		ro.s3_secret_file = secret;
		ro.s3_virtual_host = *getenv("TSEC_REMOTE_S3_VHOST") != 0;
	}
	snprintf(path, sizeof(path), "%s/b.crt", dir);
	tsec_read_file(path, 1 << 20, &f.cert, &f.cert_len, &err);
	snprintf(path, sizeof(path), "%s/b.key", dir);
	tsec_read_file(path, 1 << 20, &f.key, &f.key_len, &err);
	snprintf(path, sizeof(path), "%s/b.json", dir);
	tsec_read_file(path, 1 << 20, &f.meta, &f.meta_len, &err);
	if (tsec_store_open_opts(&s, &so, bus, NULL, &err) || tsec_remote_open(&r, s, &ro, &err)) {
		fprintf(stderr, "torn publisher: %s\n", err.msg);
		return 4;
	}
	tsec__remote_after_blobs_hook = die_now;
	tsec_remote_publish(r, &app, NULL, "acme", "torn.example", &f, NULL, &err);
	fprintf(stderr, "torn publisher: not killed (%s)\n", err.msg);
	return 3;
}

int main(void)
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
	const struct CMUnitTest leader[] = {
		cmocka_unit_test_setup_teardown(test_etcd_leader_loss, setup3, teardown),
	};
	const char *fx = getenv("TSEC_REMOTE_WRITE_FIXTURE");
	int failed = 0;

	if (getenv("TSEC_REMOTE_CHILD"))
		return torn_child(getenv("TSEC_REMOTE_CHILD"));
	if (fx && *fx)
		return write_fixture(fx);
	if (tu_etcd_start(&etcd, 1) || tu_redis_start(&redis) || tu_s3_start(&s3)) {
		fprintf(stderr, "remote: cannot start etcd, redis-server and s3rver "
			"(scripts/deps.sh servers installs them)\n");
		tu_server_stop(&etcd);
		tu_server_stop(&redis);
		tu_server_stop(&s3);
		return 1;
	}
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		cur = &variants[v];
		failed += _cmocka_run_group_tests(cur->name, contract,
						  sizeof(contract) / sizeof(contract[0]), NULL, NULL);
	}
	if (tu_etcd_start(&etcd3, 3) == 0) {
		static const struct variant lv[] = {
			{ "file", "etcd", 0, "remote: file blobs, 3-member etcd losing its leader" },
			{ "s3", "etcd", 0, "remote: s3 blobs, 3-member etcd losing its leader" },
		};
		for (size_t v = 0; v < 2; v++) {
			cur = &lv[v];
			failed += _cmocka_run_group_tests(cur->name, leader, 1, NULL, NULL);
		}
		tu_server_stop(&etcd3);
	} else {
		fprintf(stderr, "remote: cannot start a 3-member etcd\n");
		failed++;
	}
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	tu_server_stop(&s3);
	return failed ? 1 : 0;
}
