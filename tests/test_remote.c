/*
 * The remote certificate store's contract (issues 19 and 33), run on
 * every blob provider x coordinator pair docs/remote.md names: blobs in a
 * folder and in an S3-compatible server (s3rver, started here on
 * loopback behind the tests' SigV4-checking proxy), references in the
 * file, etcd and redis backends, each with and without a LocalCache; S3
 * by virtual host once; memory with memory.  And once per provider: a
 * 3-member etcd coordinator losing its leader during publishes.  Hostile
 * stores (forged, replayed, torn and planted references and blobs) and
 * the sweep are in test_remote_attacks.c; both share
 * tests/remote_harness.c.
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
#include "tests/remote_harness.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/remote.h"

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
};

int main(void)
{
	const struct CMUnitTest leader[] = {
		cmocka_unit_test_setup_teardown(test_etcd_leader_loss, setup3, teardown),
	};
	const char *fx = getenv("TSEC_REMOTE_WRITE_FIXTURE");
	int failed;

	if (getenv("TSEC_REMOTE_CHILD"))
		return torn_child(getenv("TSEC_REMOTE_CHILD"));
	if (fx && *fx)
		return write_fixture(fx);
	if (remote_servers_start("remote"))
		return 1;
	failed = remote_run_variants(contract, sizeof(contract) / sizeof(contract[0]));
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
	remote_servers_stop();
	return failed ? 1 : 0;
}
