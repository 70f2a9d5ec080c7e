/*
 * The certificate cache: exact, wildcard and missed lookups, the order of
 * all matches, duplicates, eviction, filling from a store, and readers
 * running while a writer inserts and removes.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/certgen.h"
#include "tests/servers.h"
#include "tests/wait.h"
#include "tinysecurity/certcache.h"

static atomic_int freed;

/* A not_after far from any test's clock: these certificates stay live. */
#define LIVE ((int64_t)4102444800) /* 2100-01-01 */

static void count_free(void *data)
{
	(void)data;
	atomic_fetch_add(&freed, 1);
}

static void id_of(uint8_t id[32], int n)
{
	memset(id, 0, 32);
	id[0] = (uint8_t)n;
	id[1] = (uint8_t)(n >> 8);
	id[31] = 0xaa;
}

static void add(struct tsec_certcache *c, int n, const char *names_csv, void *data)
{
	const char *names[8];
	char *copy = strdup(names_csv), *save = NULL;
	struct tsec_error err;
	uint8_t id[32];
	size_t k = 0;

	for (char *t = strtok_r(copy, ",", &save); t && k < 8; t = strtok_r(NULL, ",", &save))
		names[k++] = t;
	id_of(id, n);
	if (tsec_certcache_insert_names(c, id, names, k, LIVE, data, &err))
		fail_msg("insert %d: %s", n, err.msg);
	free(copy);
}

static void test_certcache_lookups(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m, all[8];
	int one, two, three;
	(void)state;

	assert_int_equal(tsec_certcache_new(&c, 16, NULL), 0);
	add(c, 1, "example.com,*.example.com", &one);
	add(c, 2, "api.example.com", &two);
	add(c, 3, "*.example.com", &three);
	/* Exact beats wildcard; names compare without case. */
	assert_int_equal(tsec_certcache_lookup(c, "API.example.com", &m), 0);
	assert_ptr_equal(m.data, &two);
	assert_int_equal(tsec_certcache_lookup(c, "example.com", &m), 0);
	assert_ptr_equal(m.data, &one);
	/* Wildcard: one label only, oldest first. */
	assert_int_equal(tsec_certcache_lookup(c, "www.example.com", &m), 0);
	assert_ptr_equal(m.data, &one);
	assert_int_equal(tsec_certcache_lookup(c, "a.b.example.com", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, "example.org", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, "com", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, "", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, ".example.com", &m), TSEC_ENOENT);
	/* All matches: exact first, then wildcard, each oldest first. */
	assert_int_equal(tsec_certcache_lookup_all(c, "api.example.com", all, 8), 3);
	assert_ptr_equal(all[0].data, &two);
	assert_ptr_equal(all[1].data, &one);
	assert_ptr_equal(all[2].data, &three);
	assert_int_equal(tsec_certcache_lookup_all(c, "api.example.com", all, 1), 3);
	assert_int_equal(tsec_certcache_lookup_all(c, "nothing.test", all, 8), 0);
	/*
	 * certmagic's progressive rule: leftmost labels become "*", one more
	 * at a time; a "*" in an inner label alone never matches.
	 */
	add(c, 4, "www.*.test", &one);
	assert_int_equal(tsec_certcache_lookup(c, "www.site.test", &m), TSEC_ENOENT);
	add(c, 5, "*.*.deep.test", &two);
	assert_int_equal(tsec_certcache_lookup(c, "a.b.deep.test", &m), 0);
	assert_ptr_equal(m.data, &two);
	assert_int_equal(tsec_certcache_lookup(c, "b.deep.test", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, "x.a.b.deep.test", &m), TSEC_ENOENT);
	add(c, 6, "*.*.*.deep.test", &three);
	assert_int_equal(tsec_certcache_lookup_all(c, "x.a.b.deep.test", all, 8), 1);
	assert_ptr_equal(all[0].data, &three);
	tsec_certcache_free(&c);
	assert_null(c);
}

static void test_certcache_duplicates_and_remove(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m;
	struct tsec_error err;
	const char *names[] = { "dup.test", "DUP.test" };
	uint8_t id[32];
	int data;
	(void)state;

	atomic_store(&freed, 0);
	assert_int_equal(tsec_certcache_new(&c, 4, count_free), 0);
	id_of(id, 7);
	assert_int_equal(tsec_certcache_insert_names(c, id, names, 2, LIVE, &data, &err), 0);
	assert_int_equal(tsec_certcache_insert_names(c, id, names, 2, LIVE, &data, &err), TSEC_EEXIST);
	assert_int_equal(tsec_certcache_count(c), 1);
	assert_int_equal(tsec_certcache_lookup_all(c, "dup.test", &m, 1), 1); /* one name, once */
	assert_int_equal(tsec_certcache_remove(c, id), 0);
	assert_int_equal(atomic_load(&freed), 1);
	assert_int_equal(tsec_certcache_remove(c, id), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, "dup.test", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_count(c), 0);
	/* Bad input. */
	assert_int_equal(tsec_certcache_insert_names(c, id, names, 0, 0, NULL, &err), TSEC_EINVAL);
	const char *bad[] = { "" };
	assert_int_equal(tsec_certcache_insert_names(c, id, bad, 1, 0, NULL, &err), TSEC_ECERT);
	assert_int_equal(tsec_certcache_insert(c, "garbage", 7, NULL, &err), TSEC_ECERT);
	tsec_certcache_free(&c);
	assert_int_equal(tsec_certcache_new(&c, 0, NULL), TSEC_EINVAL);
	assert_null(c);
}

static void test_certcache_eviction(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m;
	int d[3];
	(void)state;

	atomic_store(&freed, 0);
	assert_int_equal(tsec_certcache_new(&c, 2, count_free), 0);
	add(c, 1, "one.test", &d[0]);
	add(c, 2, "two.test", &d[1]);
	add(c, 3, "three.test", &d[2]);
	assert_int_equal(tsec_certcache_count(c), 2);
	assert_int_equal(tsec_certcache_lookup(c, "one.test", &m), TSEC_ENOENT);
	assert_int_equal(atomic_load(&freed), 1);
	assert_int_equal(tsec_certcache_lookup(c, "two.test", &m), 0);
	assert_int_equal(tsec_certcache_lookup(c, "three.test", &m), 0);
	tsec_certcache_free(&c);
	assert_int_equal(atomic_load(&freed), 3);
}

static int64_t fake_now;

static int64_t fake_clock(void)
{
	return fake_now;
}

static void add_until(struct tsec_certcache *c, int n, const char *name, int64_t not_after,
		      void *data)
{
	struct tsec_error err;
	uint8_t id[32];

	id_of(id, n);
	if (tsec_certcache_insert_names(c, id, &name, 1, not_after, data, &err))
		fail_msg("insert %d: %s", n, err.msg);
}

/*
 * Expired certificates are never served nor counted, and a full cache
 * drops them before it evicts a live one (the oldest live one stays).
 */
static void test_certcache_expiry(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m, all[4];
	int y, x, z;
	(void)state;

	atomic_store(&freed, 0);
	fake_now = 50;
	assert_int_equal(tsec_certcache_new(&c, 2, count_free), 0);
	tsec_certcache_set_clock(c, fake_clock);
	add_until(c, 1, "y.test", 1000, &y);       /* the oldest, long-lived */
	add_until(c, 2, "x.test", 100, &x);        /* expires at 100 */
	assert_int_equal(tsec_certcache_count(c), 2);
	assert_int_equal(tsec_certcache_lookup(c, "x.test", &m), 0);
	fake_now = 100;                            /* not_after reached */
	assert_int_equal(tsec_certcache_lookup(c, "x.test", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup_all(c, "x.test", all, 4), 0);
	/* Full: the expired one makes room, the oldest live one stays. */
	add_until(c, 3, "z.test", 1000, &z);
	assert_int_equal(atomic_load(&freed), 1);
	assert_int_equal(tsec_certcache_lookup(c, "y.test", &m), 0);
	assert_ptr_equal(m.data, &y);
	assert_int_equal(tsec_certcache_lookup(c, "z.test", &m), 0);
	assert_int_equal(tsec_certcache_count(c), 2);
	/* Counting drops the expired: only the live are counted. */
	fake_now = 1000;
	assert_int_equal(tsec_certcache_count(c), 0);
	assert_int_equal(atomic_load(&freed), 3);
	/* A wildcard that expired serves nothing either. */
	add_until(c, 4, "*.w.test", 999, &x);
	assert_int_equal(tsec_certcache_lookup(c, "a.w.test", &m), TSEC_ENOENT);
	tsec_certcache_free(&c);
}

/*
 * Issue 37: an insert reclaims every expired entry it meets, not only
 * the one it needs room for: four expired, one insert, all four freed
 * (before, one: freed was 1 and count 4 before the count call).
 */
static void test_certcache_insert_reclaims_all(void **state)
{
	struct tsec_certcache *c;
	int d;
	(void)state;

	atomic_store(&freed, 0);
	fake_now = 50;
	assert_int_equal(tsec_certcache_new(&c, 5, count_free), 0);
	tsec_certcache_set_clock(c, fake_clock);
	add_until(c, 1, "a.test", 100, &d);
	add_until(c, 2, "b.test", 100, &d);
	add_until(c, 3, "c.test", 100, &d);
	add_until(c, 4, "d.test", 100, &d);
	add_until(c, 5, "e.test", 1000, &d);
	fake_now = 200;
	add_until(c, 6, "f.test", 1000, &d);
	assert_int_equal(atomic_load(&freed), 4);
	/* Not full either: an insert into a cache with room reclaims too. */
	add_until(c, 7, "g.test", 300, &d);
	fake_now = 400;
	add_until(c, 8, "h.test", 1000, &d);
	assert_int_equal(atomic_load(&freed), 5);
	assert_int_equal(tsec_certcache_count(c), 3);
	tsec_certcache_free(&c);
}

/* A fully qualified name (one trailing dot) is the same host, both at
 * lookup and at insert; two dots are not a name. */
static void test_certcache_trailing_dot(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m;
	int one, two;
	(void)state;

	assert_int_equal(tsec_certcache_new(&c, 4, NULL), 0);
	add(c, 1, "example.com,*.example.com", &one);
	add(c, 2, "Other.Test.", &two);
	assert_int_equal(tsec_certcache_lookup(c, "example.com.", &m), 0);
	assert_ptr_equal(m.data, &one);
	assert_int_equal(tsec_certcache_lookup(c, "WWW.example.com.", &m), 0);
	assert_ptr_equal(m.data, &one);
	assert_int_equal(tsec_certcache_lookup(c, "other.test", &m), 0);
	assert_ptr_equal(m.data, &two);
	assert_int_equal(tsec_certcache_lookup(c, "other.test.", &m), 0);
	assert_int_equal(tsec_certcache_lookup(c, "example.com..", &m), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_lookup(c, ".", &m), TSEC_ENOENT);
	tsec_certcache_free(&c);
}

/* Failures in a row per name: backoff doubling from 60 s to a day at
 * most, forgotten on success or when a certificate for the name comes,
 * bounded to capacity names. */
static void test_certcache_failure_backoff(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_failure f;
	int d;
	(void)state;

	fake_now = 1000;
	assert_int_equal(tsec_certcache_new(&c, 2, NULL), 0);
	tsec_certcache_set_clock(c, fake_clock);
	assert_int_equal(tsec_certcache_failure(c, "a.test", &f), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_failed(c, "A.test.", &f), 0);
	assert_int_equal(f.failures, 1);
	assert_int_equal(f.last, 1000);
	assert_int_equal(f.retry_at, 1060);
	fake_now = 1100;
	assert_int_equal(tsec_certcache_failed(c, "a.test", &f), 0);
	assert_int_equal(f.failures, 2);
	assert_int_equal(f.retry_at, 1220);
	for (int i = 0; i < 40; i++)
		assert_int_equal(tsec_certcache_failed(c, "a.test", NULL), 0);
	assert_int_equal(tsec_certcache_failure(c, "a.test", &f), 0);
	assert_int_equal(f.failures, 42);
	assert_int_equal(f.retry_at, 1100 + 86400);
	tsec_certcache_succeeded(c, "a.test");
	assert_int_equal(tsec_certcache_failure(c, "a.test", &f), TSEC_ENOENT);
	/* A certificate for the name ends its failures. */
	assert_int_equal(tsec_certcache_failed(c, "b.test", NULL), 0);
	add_until(c, 1, "b.test", 5000, &d);
	assert_int_equal(tsec_certcache_failure(c, "b.test", &f), TSEC_ENOENT);
	/* Bounded: the third name drops the first recorded. */
	assert_int_equal(tsec_certcache_failed(c, "x.test", NULL), 0);
	assert_int_equal(tsec_certcache_failed(c, "y.test", NULL), 0);
	assert_int_equal(tsec_certcache_failed(c, "z.test", NULL), 0);
	assert_int_equal(tsec_certcache_failure(c, "x.test", &f), TSEC_ENOENT);
	assert_int_equal(tsec_certcache_failure(c, "y.test", &f), 0);
	assert_int_equal(tsec_certcache_failure(c, "z.test", &f), 0);
	assert_int_equal(tsec_certcache_failed(c, "", NULL), TSEC_EINVAL);
	assert_int_equal(tsec_certcache_failure(c, NULL, &f), TSEC_EINVAL);
	tsec_certcache_free(&c);
}

struct seen {
	int n;
	char names[8][64];
	int64_t not_after[8];
	int stop_after;
};

static int seen_one(void *arg, const struct tsec_cert_entry *e)
{
	struct seen *s = arg;

	if (s->n < 8) {
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s%s%s", e->names[0],
			 e->nnames > 1 ? "," : "", e->nnames > 1 ? e->names[1] : "");
		s->not_after[s->n] = e->not_after;
	}
	s->n++;
	return s->stop_after && s->n == s->stop_after;
}

/* A snapshot: every live certificate, oldest first, the expired dropped;
 * the callback can stop it. */
static void test_certcache_snapshot(void **state)
{
	struct tsec_certcache *c;
	struct seen s = { 0 };
	int d;
	(void)state;

	atomic_store(&freed, 0);
	fake_now = 10;
	assert_int_equal(tsec_certcache_new(&c, 8, count_free), 0);
	tsec_certcache_set_clock(c, fake_clock);
	assert_int_equal(tsec_certcache_snapshot(c, seen_one, &s), 0);
	add(c, 1, "One.test,*.one.test", &d);
	add_until(c, 2, "gone.test", 20, &d);
	add_until(c, 3, "two.test", 50, &d);
	fake_now = 30;
	assert_int_equal(tsec_certcache_snapshot(c, seen_one, &s), 2);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.names[0], "one.test,*.one.test");
	assert_string_equal(s.names[1], "two.test");
	assert_int_equal(s.not_after[1], 50);
	assert_int_equal(atomic_load(&freed), 1);
	memset(&s, 0, sizeof(s));
	s.stop_after = 1;
	assert_int_equal(tsec_certcache_snapshot(c, seen_one, &s), 1);
	assert_int_equal(tsec_certcache_snapshot(NULL, seen_one, &s), 0);
	tsec_certcache_free(&c);
}

static void test_certcache_pem_and_store(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m;
	struct tsec_error err;
	struct tu_store t;
	struct tsec_principal issuer = tu_who("svc:issuer");
	struct tsec_cert_files f = { 0 };
	size_t len, skipped = 99;
	char *pem = tu_cert("ec-p256", "pem.example.com,*.pem.example.com", -60, 86400, &len);
	(void)state;

	assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
	assert_int_equal(tsec_certcache_insert(c, pem, len, NULL, &err), 0);
	assert_int_equal(tsec_certcache_insert(c, pem, len, NULL, &err), TSEC_EEXIST);
	assert_int_equal(tsec_certcache_lookup(c, "x.pem.example.com", &m), 0);
	assert_true(m.not_after > 0);
	free(pem);
	pem = tu_cert("ec-p256", NULL, -60, 86400, &len);
	assert_int_equal(tsec_certcache_insert(c, pem, len, NULL, &err), TSEC_ECERT);
	free(pem);
	tsec_certcache_free(&c);

	/* Fill from a store, read through its policy. */
	tu_store_open(&t);
	f.cert = tu_cert("ec-p256", "stored.example.com", -60, 86400, &f.cert_len);
	f.key = tu_key_pem("ec-p256", &f.key_len);
	f.meta = strdup("{}");
	f.meta_len = 2;
	assert_int_equal(tsec_store_save_cert(t.store, &issuer, "acme", "stored.example.com", &f, &err), 0);
	assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
	assert_int_equal(tsec_certcache_fill(c, t.store, &issuer, &skipped, &err), 0);
	assert_int_equal(skipped, 0);
	assert_int_equal(tsec_certcache_count(c), 1);
	assert_int_equal(tsec_certcache_lookup(c, "stored.example.com", &m), 0);
	tsec_certcache_free(&c);
	/* A caller the policy does not let list gets the deny. */
	assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
	struct tsec_principal nobody = tu_who("svc:nobody");
	assert_int_equal(tsec_certcache_fill(c, t.store, &nobody, NULL, &err), TSEC_EDENIED);
	tsec_certcache_free(&c);
	tsec_cert_files_free(&f);
	tu_store_close(&t);
}

/*
 * Of several live certificates for one name, the one that expires last
 * is served, whatever the order they came in (issue 50: after a renewal
 * the oldest inserted, with 10 days left, was served over the renewal's
 * 90).  Exact names still come before wildcards.
 */
static void test_certcache_best_served(void **state)
{
	struct tsec_certcache *c;
	struct tsec_cert_match m;
	struct tsec_error err;
	size_t l10, l90, lw;
	char *c10 = tu_cert("ec-p256", "best.example.com", -60, 10 * 86400, &l10);
	char *c90 = tu_cert("ec-p256", "best.example.com", -60, 90 * 86400, &l90);
	char *cw = tu_cert("ec-p256", "*.example.com", -60, 365 * 86400, &lw);
	(void)state;

	for (int order = 0; order < 2; order++) {
		int64_t t90;

		assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
		assert_int_equal(tsec_certcache_insert(c, order ? c90 : c10, order ? l90 : l10,
						       NULL, &err), 0);
		assert_int_equal(tsec_certcache_insert(c, order ? c10 : c90, order ? l10 : l90,
						       NULL, &err), 0);
		assert_int_equal(tsec_certcache_insert(c, cw, lw, NULL, &err), 0);
		assert_int_equal(tsec_certcache_lookup(c, "best.example.com", &m), 0);
		t90 = m.not_after;
		if (t90 < (int64_t)time(NULL) + 80 * 86400)
			fail_msg("order %d: the certificate with %lld s left was served",
				 order, (long long)(t90 - time(NULL)));
		/* The wildcard lasts longer, but the exact name comes first. */
		assert_int_equal(tsec_certcache_lookup(c, "other.example.com", &m), 0);
		assert_true(m.not_after > t90);
		tsec_certcache_free(&c);
	}
	free(c10);
	free(c90);
	free(cw);
}

/* A store on the test's etcd, in a prefix of this test's. */
static void etcd_store(struct tu_store *t, const struct tu_server *etcd)
{
	struct tsec_store_opts o = { .backend = "etcd", .endpoints = etcd->endpoints,
				     .prefix = "follow" };

	tu_store_open_with(t, &o);
}

#define RENEW_KEY "certificates/acme/renew.example.com/renew.example.com.crt"

/* In a child process (another writer, as another host would be): puts
 * pem at RENEW_KEY, or deletes it when pem is NULL. */
static void other_writer(const struct tu_server *etcd, const char *pem, size_t len)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct tu_store t;
		struct tsec_principal app = tu_who("svc:app");
		struct tsec_error err;
		int rc;

		etcd_store(&t, etcd);
		rc = pem ? tsec_store_put(t.store, &app, RENEW_KEY, pem, len, &err)
			 : tsec_store_delete(t.store, &app, RENEW_KEY, 0, &err);
		tu_store_close(&t);
		_exit(rc ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static int64_t served(struct tsec_certcache *c)
{
	struct tsec_cert_match m;

	return tsec_certcache_lookup(c, "renew.example.com", &m) ? 0 : m.not_after;
}

/*
 * A cache following a store over etcd sees a renewal another process
 * stored: the renewal is served and the certificate it renews is gone;
 * a deletion removes it.  A cache cannot follow a file store.
 */
static void test_certcache_follows_renewal(void **state)
{
	struct tu_server etcd = { 0 };
	struct tsec_certcache *c;
	struct tsec_error err;
	struct tu_store t, files;
	struct tsec_principal reader = tu_who("svc:reader");
	size_t l10, l90;
	char *c10 = tu_cert("ec-p256", "renew.example.com", -60, 10 * 86400, &l10);
	char *c90 = tu_cert("ec-p256", "renew.example.com", -60, 90 * 86400, &l90);
	int64_t now = (int64_t)time(NULL);
	(void)state;

	if (tu_etcd_start(&etcd, 1))
		fail_msg("cannot start etcd (scripts/deps.sh servers installs it)");
	other_writer(&etcd, c10, l10);
	etcd_store(&t, &etcd);
	assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
	assert_int_equal(tsec_certcache_follow(c, t.store, &reader, &err), 0);
	assert_int_equal(tsec_certcache_follow(c, t.store, &reader, &err), TSEC_EEXIST);
	assert_true(served(c) > now && served(c) < now + 11 * 86400);

	other_writer(&etcd, c90, l90);
	TU_WAIT(served(c) > now + 80 * 86400);
	assert_true(served(c) > now + 80 * 86400);
	TU_WAIT(tsec_certcache_count(c) == 1);
	assert_int_equal(tsec_certcache_count(c), 1);   /* the renewed one went */

	other_writer(&etcd, NULL, 0);
	TU_WAIT(served(c) == 0);
	assert_int_equal(served(c), 0);
	tsec_certcache_free(&c);                          /* stops following */
	tu_store_close(&t);
	tu_server_stop(&etcd);

	tu_store_open(&files);
	assert_int_equal(tsec_certcache_new(&c, 8, NULL), 0);
	assert_int_equal(tsec_certcache_follow(c, files.store, &reader, &err), TSEC_EINVAL);
	tsec_certcache_free(&c);
	tu_store_close(&files);
	free(c10);
	free(c90);
}

struct rw {
	struct tsec_certcache *c;
	atomic_int stop;
	atomic_long lookups, misses;
};

/* Waits until the readers have made another `more` lookups: interleaving
 * by count, so no timing decides the test. */
static void await_lookups(struct rw *rw, long more)
{
	long want = atomic_load(&rw->lookups) + more;

	while (atomic_load(&rw->lookups) < want)
		sched_yield();
}

static void *reader(void *arg)
{
	struct rw *rw = arg;
	struct tsec_cert_match all[4];

	while (!atomic_load(&rw->stop)) {
		struct tsec_cert_match m;
		unsigned tok = tsec_certcache_read_begin(rw->c);
		/* The stable certificate is always there, exact and wildcard. */
		if (tsec_certcache_lookup(rw->c, "stable.test", &m) ||
		    *(int *)m.data != 42 ||
		    tsec_certcache_lookup(rw->c, "x.stable.test", &m))
			atomic_fetch_add(&rw->misses, 1);
		tsec_certcache_lookup_all(rw->c, "churn.test", all, 4);
		tsec_certcache_read_end(rw->c, tok);
		atomic_fetch_add(&rw->lookups, 1);
	}
	return NULL;
}

/* Four readers while one writer inserts, evicts and removes. */
static void test_certcache_readers_and_writer(void **state)
{
	struct rw rw = { 0 };
	pthread_t th[4];
	static int stable = 42;
	(void)state;

	atomic_store(&freed, 0);
	assert_int_equal(tsec_certcache_new(&rw.c, 8, count_free), 0);
	add(rw.c, 1000, "stable.test,*.stable.test", &stable);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, reader, &rw), 0);
	await_lookups(&rw, 4);
	for (int i = 0; i < 2000; i++) {
		uint8_t id[32];
		int *d = malloc(sizeof(int));
		if (i % 100 == 0)
			await_lookups(&rw, 1); /* readers run between the writes */
		*d = i;
		add(rw.c, i % 5, "churn.test", d);
		id_of(id, i % 5);
		assert_int_equal(tsec_certcache_remove(rw.c, id), 0);
		free(d);
	}
	atomic_store(&rw.stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&rw.misses), 0);
	assert_true(atomic_load(&rw.lookups) > 0);
	assert_int_equal(tsec_certcache_count(rw.c), 1);
	tsec_certcache_free(&rw.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_certcache_lookups),
		cmocka_unit_test(test_certcache_duplicates_and_remove),
		cmocka_unit_test(test_certcache_eviction),
		cmocka_unit_test(test_certcache_expiry),
		cmocka_unit_test(test_certcache_insert_reclaims_all),
		cmocka_unit_test(test_certcache_trailing_dot),
		cmocka_unit_test(test_certcache_failure_backoff),
		cmocka_unit_test(test_certcache_snapshot),
		cmocka_unit_test(test_certcache_pem_and_store),
		cmocka_unit_test(test_certcache_best_served),
		cmocka_unit_test(test_certcache_follows_renewal),
		cmocka_unit_test(test_certcache_readers_and_writer),
	};
	return cmocka_run_group_tests_name("certcache", tests, NULL, NULL);
}
