/*
 * The fleet backends beyond the conformance suite, against real servers
 * started here on loopback: two processes racing for one lock, a
 * three-member etcd cluster losing its leader mid-run, a LocalCache
 * seeing another writer's change, encryption at rest, etcd's request
 * limit, and options that are wrong.
 *
 * No assertion depends on speed: waits are bounded by generous deadlines
 * on things that must happen, never by how fast they happen.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "broker/storage/etcd/etcd_private.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/certgen.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"

static struct tu_server etcd, redis;
static struct tsec_principal app;
static int serial;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts))
		;
}

static struct tsec_store_opts opts_for(const char *backend, char *prefix, size_t cap)
{
	struct tsec_store_opts o = { .backend = backend, .prefix = prefix };

	snprintf(prefix, cap, "fleet/%d-%d", (int)getpid(), ++serial);
	o.endpoints = backend[0] == 'e' ? etcd.endpoints : redis.endpoints;
	return o;
}

/* ---- two processes x threads, one lock ---- */

struct shared {
	atomic_int inside, overlaps, rounds, backwards, stale_ok, errors;
	_Atomic uint64_t last_fence;
};

struct racer {
	struct tsec_store *s;
	struct shared *sh;
};

static void *racer(void *arg)
{
	struct racer *r = arg;
	struct tsec_lock lk, prev = { 0 };
	struct tsec_error err;
	struct tsec_put p = { "race/v", "x", 1 };

	for (int i = 0; i < 15; i++) {
		if (tsec_lock_acquire(r->s, &app, "race", 60000, 60000, &lk, &err)) {
			atomic_fetch_add(&r->sh->errors, 1);
			continue;
		}
		if (atomic_fetch_add(&r->sh->inside, 1))
			atomic_fetch_add(&r->sh->overlaps, 1);
		/* One holder at a time, so this read-then-write is the holder's. */
		if (lk.fence <= atomic_load(&r->sh->last_fence))
			atomic_fetch_add(&r->sh->backwards, 1);
		atomic_store(&r->sh->last_fence, lk.fence);
		if (tsec_store_put_fenced(r->s, &app, &lk, &p, 1, &err))
			atomic_fetch_add(&r->sh->errors, 1);
		/* An older holding of this thread is stale now: refused. */
		if (prev.fence && tsec_store_put_fenced(r->s, &app, &prev, &p, 1, &err) == 0)
			atomic_fetch_add(&r->sh->stale_ok, 1);
		atomic_fetch_sub(&r->sh->inside, 1);
		prev = lk;
		if (tsec_lock_release(r->s, &app, &lk, &err))
			atomic_fetch_add(&r->sh->errors, 1);
		atomic_fetch_add(&r->sh->rounds, 1);
	}
	return NULL;
}

static void race_on(const char *backend)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char prefix[64];
	struct tsec_store_opts o = opts_for(backend, prefix, sizeof(prefix));
	pid_t kid[2];

	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	for (int k = 0; k < 2; k++) {
		if ((kid[k] = fork()) == 0) {
			struct tu_store t;
			struct racer r;
			pthread_t th[4];

			tu_store_open_with(&t, &o);
			r.s = t.store;
			r.sh = sh;
			for (int i = 0; i < 4; i++)
				pthread_create(&th[i], NULL, racer, &r);
			for (int i = 0; i < 4; i++)
				pthread_join(th[i], NULL);
			tu_store_close(&t);
			_exit(0);
		}
		assert_true(kid[k] > 0);
	}
	for (int k = 0; k < 2; k++) {
		int st;

		assert_int_equal(tu_waitpid(kid[k], &st), kid[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_int_equal(atomic_load(&sh->rounds), 2 * 4 * 15);
	assert_int_equal(atomic_load(&sh->overlaps), 0);
	assert_int_equal(atomic_load(&sh->backwards), 0);
	assert_int_equal(atomic_load(&sh->stale_ok), 0);
	assert_int_equal(atomic_load(&sh->errors), 0);
	munmap(sh, sizeof(*sh));
}

static void test_race_etcd(void **state)
{
	(void)state;
	race_on("etcd");
}

static void test_race_redis(void **state)
{
	(void)state;
	race_on("redis");
}

/* ---- a LocalCache sees another writer's change ---- */

static void peer_change_on(const char *backend)
{
	char prefix[64];
	struct tsec_store_opts o = opts_for(backend, prefix, sizeof(prefix));
	struct tu_store cached, plain;
	struct tsec_error err;
	char *v = NULL;
	size_t n;
	int seen = 0;

	tu_store_open_with(&plain, &o);
	o.cache_bytes = 1 << 20;
	tu_store_open_with(&cached, &o);
	assert_int_equal(tsec_store_put(plain.store, &app, "peer/k", "one", 3, &err), 0);
	/* Read until the cache holds it (the watch may still be starting). */
	assert_int_equal(tsec_store_get(cached.store, &app, "peer/k", &v, &n, &err), 0);
	assert_string_equal(v, "one");
	free(v);
	assert_int_equal(tsec_store_put(plain.store, &app, "peer/k", "two", 3, &err), 0);
	TU_WAIT(seen) {
		assert_int_equal(tsec_store_get(cached.store, &app, "peer/k", &v, &n, &err), 0);
		seen = !strcmp(v, "two");
		free(v);
	}
	assert_true(seen);
	/* And a peer's delete. */
	assert_int_equal(tsec_store_delete(plain.store, &app, "peer", 1, &err), 0);
	seen = 0;
	TU_WAIT(seen) {
		seen = tsec_store_get(cached.store, &app, "peer/k", &v, &n, &err) == TSEC_ENOENT;
		if (!seen)
			free(v);
	}
	assert_true(seen);
	tu_store_close(&cached);
	tu_store_close(&plain);
}

static void test_peer_change_etcd(void **state)
{
	(void)state;
	peer_change_on("etcd");
}

static void test_peer_change_redis(void **state)
{
	(void)state;
	peer_change_on("redis");
}

/* ---- encryption at rest ---- */

static char *key_file(const char *dir, const char *name, const char *hex, int mode)
{
	char *path;
	int fd;

	assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, hex, strlen(hex)), (ssize_t)strlen(hex));
	fchmod(fd, (mode_t)mode);
	close(fd);
	return path;
}

static void sealed_on(const char *backend)
{
	char prefix[64], dir[] = "/tmp/tsec-keys-XXXXXX";
	struct tsec_store_opts o = opts_for(backend, prefix, sizeof(prefix));
	struct tu_store a, b, plain;
	struct tsec_error err;
	char *v = NULL, *k1, *k2, *loose;
	size_t n;
	struct tsec_store *s;

	assert_non_null(mkdtemp(dir));
	k1 = key_file(dir, "k1", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 0600);
	k2 = key_file(dir, "k2", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100", 0600);
	loose = key_file(dir, "k3", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 0644);
	tu_store_open_with(&plain, &o);
	o.key_file = k1;
	tu_store_open_with(&a, &o);
	o.key_file = k2;
	tu_store_open_with(&b, &o);
	assert_int_equal(tsec_store_put(a.store, &app, "sec/key.pem", "PRIVATE", 7, &err), 0);
	assert_int_equal(tsec_store_get(a.store, &app, "sec/key.pem", &v, &n, &err), 0);
	assert_string_equal(v, "PRIVATE");
	free(v);
	/* Without the key, or with another, nothing is served. */
	assert_int_equal(tsec_store_get(plain.store, &app, "sec/key.pem", &v, &n, &err), TSEC_EIO);
	assert_null(v);
	assert_int_equal(tsec_store_get(b.store, &app, "sec/key.pem", &v, &n, &err), TSEC_EIO);
	/* A plain value planted where sealing is on is refused. */
	assert_int_equal(tsec_store_put(plain.store, &app, "sec/planted", "evil", 4, &err), 0);
	assert_int_equal(tsec_store_get(a.store, &app, "sec/planted", &v, &n, &err), TSEC_EIO);
	/* A sealed value moved keeps opening under its new key. */
	assert_int_equal(tsec_store_move(a.store, &app, "sec/key.pem", "sec/moved.pem", &err), 0);
	assert_int_equal(tsec_store_get(a.store, &app, "sec/moved.pem", &v, &n, &err), 0);
	assert_string_equal(v, "PRIVATE");
	free(v);
	/* A key file others may read is refused. */
	o.key_file = loose;
	assert_int_equal(tsec_store_open_opts(&s, &o, a.bus, NULL, &err), TSEC_EINVAL);
	assert_non_null(strstr(err.msg, "readable by others"));
	tu_store_close(&a);
	tu_store_close(&b);
	tu_store_close(&plain);
	free(k1);
	free(k2);
	free(loose);
	{
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		assert_int_equal(system(cmd), 0);
	}
}

static void test_sealed_etcd(void **state)
{
	(void)state;
	sealed_on("etcd");
}

static void test_sealed_redis(void **state)
{
	(void)state;
	sealed_on("redis");
}

/* ---- names planted in the backend never reach a listing ---- */

static void test_planted_names(void **state)
{
	static const char *const bad[] = { "a//b", "a/./b", "a/.tsec-x", "a/b\x01c", "../up" };
	struct tsec_store_opts o[2];
	char prefix[2][64];
	struct tsec_error err;

	(void)state;
	o[0] = opts_for("etcd", prefix[0], sizeof(prefix[0]));
	o[1] = opts_for("redis", prefix[1], sizeof(prefix[1]));
	for (int b = 0; b < 2; b++) {
		struct tu_store t;
		struct tsec_strlist l;
		redisContext *rc = NULL;

		tu_store_open_with(&t, &o[b]);
		assert_int_equal(tsec_store_put(t.store, &app, "a/good", "1", 1, &err), 0);
		if (b == 1) {
			struct timeval tv = { 2, 0 };
			rc = redisConnectWithTimeout("127.0.0.1", redis.client_port[0], tv);
			assert_true(rc && !rc->err);
		}
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			char k[128];
			int n = snprintf(k, sizeof(k), "%s/k/%s", prefix[b], bad[i]);

			if (b == 0) {
				assert_int_equal(tu_etcd_put_raw(&etcd, k, (size_t)n, "\x01planted"), 0);
			} else {
				char idx[96];
				redisReply *r;

				snprintf(idx, sizeof(idx), "%s/i", prefix[b]);
				r = redisCommand(rc, "SET %b planted", k, (size_t)n);
				freeReplyObject(r);
				r = redisCommand(rc, "ZADD %s 0 %s", idx, bad[i]);
				freeReplyObject(r);
			}
		}
		/* A name with a NUL in it, and one longer than any key. */
		{
			char k[1300], idx[96];
			int n = snprintf(k, sizeof(k), "%s/k/a/x", prefix[b]);

			k[n++] = '\0';
			k[n++] = 'y';
			if (b == 0) {
				assert_int_equal(tu_etcd_put_raw(&etcd, k, (size_t)n, "\x01x"), 0);
			} else {
				redisReply *r;
				size_t pl = strlen(prefix[b]) + 3;

				snprintf(idx, sizeof(idx), "%s/i", prefix[b]);
				r = redisCommand(rc, "ZADD %s 0 %b", idx, k + pl, (size_t)n - pl);
				freeReplyObject(r);
			}
			n = snprintf(k, sizeof(k), "%s/k/a/", prefix[b]);
			memset(k + n, 'z', 1200);
			n += 1200;
			k[n] = '\0';
			if (b == 0) {
				assert_int_equal(tu_etcd_put_raw(&etcd, k, (size_t)n, "\x01x"), 0);
			} else {
				redisReply *r = redisCommand(rc, "ZADD %s 0 %s", idx,
							     k + strlen(prefix[b]) + 3);
				freeReplyObject(r);
			}
		}
		redisFree(rc);
		assert_int_equal(tsec_store_list(t.store, &app, "", 1, &l, &err), 0);
		assert_int_equal(l.n, 1);
		assert_string_equal(l.v[0], "a/good");
		tsec_strlist_free(&l);
		assert_int_equal(tsec_store_list(t.store, &app, "a", 0, &l, &err), 0);
		assert_int_equal(l.n, 1);
		tsec_strlist_free(&l);
		tu_store_close(&t);
	}
}

/* ---- limits and options ---- */

static void test_etcd_request_limit(void **state)
{
	char prefix[64], *big = malloc(8192);
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	struct tu_store t;
	struct tsec_error err;
	char *v = NULL;
	size_t n;

	(void)state;
	o.request_max = 4096;
	tu_store_open_with(&t, &o);
	memset(big, 'x', 8192);
	assert_int_equal(tsec_store_put(t.store, &app, "big/v", big, 8192, &err), TSEC_ETOOBIG);
	assert_int_equal(tsec_store_get(t.store, &app, "big/v", &v, &n, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_put(t.store, &app, "big/v", big, 1000, &err), 0);
	tu_store_close(&t);
	free(big);
}

static void test_bad_options(void **state)
{
	struct tsec_bus *bus = tu_bus_with_policy("tests/data/store_policy.json");
	struct tsec_store *s = NULL;
	struct tsec_error err;
	struct {
		struct tsec_store_opts o;
		const char *says;
	} bad[] = {
		{ { .backend = "etcd" }, "needs endpoints" },
		{ { .backend = "etcd", .endpoints = "ftp://127.0.0.1:1" }, "not http" },
		{ { .backend = "etcd", .endpoints = etcd.endpoints, .prefix = "../x" }, "invalid prefix" },
		{ { .backend = "etcd", .endpoints = etcd.endpoints, .root = "/tmp" }, "not root" },
		{ { .backend = "etcd", .endpoints = etcd.endpoints, .tls_cert = "/x" }, "needs its key" },
		{ { .backend = "redis", .endpoints = "127.0.0.1" }, "not host:port" },
		{ { .backend = "redis", .endpoints = "a:1,b:2" }, "one endpoint" },
		{ { .backend = "redis", .endpoints = redis.endpoints, .clock_skew_ms = 5 }, "retired" },
		{ { .backend = "etcd", .endpoints = etcd.endpoints, .clock_skew_ms = 1 }, "retired" },
		{ { .backend = "file", .root = "/tmp/x", .endpoints = "http://a" }, "takes no" },
		{ { .backend = "etcdd" }, "unknown backend" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(tsec_store_open_opts(&s, &bad[i].o, bus, NULL, &err), TSEC_EINVAL);
		if (!strstr(err.msg, bad[i].says))
			fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, bad[i].says);
		assert_null(s);
	}
	/* A redis that is not there is said at open, not at first use. */
	{
		struct tsec_store_opts o = { .backend = "redis", .endpoints = "127.0.0.1:1",
					     .timeout_ms = 500 };
		assert_int_equal(tsec_store_open_opts(&s, &o, bus, NULL, &err), TSEC_EIO);
	}
	tsec_bus_free(&bus);
}

/*
 * Opens a store with o, puts a/b and wants rc; when the put is made,
 * reads it back.  Closes the store.
 */
static void put_with(struct tsec_bus *bus, const struct tsec_store_opts *o, int want)
{
	struct tsec_store *s = NULL;
	struct tsec_error err;
	char *v = NULL;
	size_t n;

	assert_int_equal(tsec_store_open_opts(&s, o, bus, NULL, &err), 0);
	int rc = tsec_store_put(s, &app, "a/b", "x", 1, &err);
	assert_int_equal(rc, want);
	if (want == 0) {
		assert_int_equal(tsec_store_get(s, &app, "a/b", &v, &n, &err), 0);
		assert_string_equal(v, "x");
		free(v);
	}
	tsec_store_close(&s);
}

/* ---- etcd with authentication on ---- */

static void test_etcd_auth(void **state)
{
	struct tu_server a;
	char dir[] = "/tmp/tsec-auth-XXXXXX", prefix[] = "auth";
	struct tsec_store_opts o = { .backend = "etcd", .prefix = prefix, .username = "tsec" };
	struct tsec_bus *bus = tu_bus_with_policy("tests/data/store_policy.json");
	char *good, *bad;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(tu_etcd_start(&a, 1), 0);
	assert_int_equal(tu_etcd_enable_auth(&a, "tsec", "s3cret-pw"), 0);
	o.endpoints = a.endpoints;
	good = key_file(dir, "pw", "s3cret-pw\n", 0600);
	bad = key_file(dir, "wrong", "not-it\n", 0600);
	/* Without credentials etcd refuses, and so does the store. */
	o.username = NULL;
	put_with(bus, &o, TSEC_EDENIED);
	o.username = "tsec";
	o.password_file = bad;
	put_with(bus, &o, TSEC_EDENIED);
	o.password_file = good;
	put_with(bus, &o, 0);
	tsec_bus_free(&bus);
	tu_server_stop(&a);
	free(good);
	free(bad);
	{
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		assert_int_equal(system(cmd), 0);
	}
}

/* ---- etcd over TLS with client certificates ---- */

static void test_etcd_tls(void **state)
{
	struct tu_server t;
	char prefix[] = "tls", ca[128], cert[128], key[128];
	struct tsec_store_opts o = { .backend = "etcd", .prefix = prefix, .timeout_ms = 3000 };
	struct tsec_bus *bus = tu_bus_with_policy("tests/data/store_policy.json");

	(void)state;
	assert_int_equal(tu_etcd_start_tls(&t), 0);
	snprintf(ca, sizeof(ca), "%s/ca.pem", t.tls);
	snprintf(cert, sizeof(cert), "%s/client.pem", t.tls);
	snprintf(key, sizeof(key), "%s/client-key.pem", t.tls);
	o.endpoints = t.endpoints;
	assert_non_null(strstr(t.endpoints, "https://"));
	/* Without a client certificate the server refuses the handshake. */
	o.tls_ca = ca;
	put_with(bus, &o, TSEC_EIO);
	/* Without our CA the server's certificate is not trusted. */
	o.tls_ca = NULL;
	o.tls_cert = cert;
	o.tls_key = key;
	put_with(bus, &o, TSEC_EIO);
	o.tls_ca = ca;
	put_with(bus, &o, 0);
	tsec_bus_free(&bus);
	tu_server_stop(&t);
}

/* ---- a three-member etcd cluster loses its leader ---- */

struct fleet_run {
	struct tsec_store *s;
	atomic_int stop, acked, failed, overlaps, holds, lost;
	int acked_of[4];                 /* per writer: the last acknowledged i */
	/* Per holder: until when its lease surely lasts (wall ms), 0 if none. */
	_Atomic int64_t until[2];
};

struct holding {
	struct fleet_run *f;
	int id;
};

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct writer {
	struct fleet_run *f;
	int id;
};

static void *writer(void *arg)
{
	struct writer *w = arg;
	struct tsec_error err;
	char key[32], val[32];

	snprintf(key, sizeof(key), "ha/w%d", w->id);
	for (int i = 1; !atomic_load(&w->f->stop); i++) {
		snprintf(val, sizeof(val), "%d", i);
		if (tsec_store_put(w->f->s, &app, key, val, strlen(val), &err) == 0) {
			w->f->acked_of[w->id] = i;
			atomic_fetch_add(&w->f->acked, 1);
		} else {
			atomic_fetch_add(&w->f->failed, 1);
			i--;                     /* try the same value again */
		}
	}
	return NULL;
}

/*
 * Two holders take, renew and release one lock while the leader dies.  A
 * lease lasts at least its TTL from the start of the call that granted or
 * renewed it; a renew held up past the TTL by the failover loses the lock
 * (and is told so).  Two holders overlap only if one was granted the lock
 * before the other's lease could have ended.
 */
static void *holder(void *arg)
{
	struct holding *me = arg;
	struct fleet_run *f = me->f;
	struct tsec_error err;
	struct tsec_lock lk;

	while (!atomic_load(&f->stop)) {
		int64_t t0 = wall_ms(), t1;

		if (tsec_lock_acquire(f->s, &app, "ha", 3000, 2000, &lk, &err))
			continue;
		t1 = wall_ms();
		/* Granted by t1: the other's lease must have been able to end. */
		if (t1 < atomic_load(&f->until[!me->id]) - 5)
			atomic_fetch_add(&f->overlaps, 1);
		atomic_store(&f->until[me->id], t0 + 3000);
		atomic_fetch_add(&f->holds, 1);
		sleep_ms(10);            /* held a while: a second grant would show */
		if (tsec_lock_renew(f->s, &app, &lk, 3000, &err) == 0) {
			/* Held: free it at once, the other may take it then. */
			atomic_store(&f->until[me->id], 0);
		} else {
			/* Lost (a renew held up past the TTL): the bound from the
			 * grant still stands, and the lease may not end before it. */
			atomic_fetch_add(&f->lost, 1);
		}
		tsec_lock_release(f->s, &app, &lk, &err);
	}
	return NULL;
}

static void test_etcd_cluster_leader_dies(void **state)
{
	struct tu_server c;
	char prefix[64];
	struct tsec_store_opts o = { .backend = "etcd", .prefix = prefix };
	struct fleet_run f = { 0 };
	struct writer w[4];
	struct holding hd[2];
	pthread_t wt[4], ht[2];
	struct tu_store t;
	struct tsec_error err;
	int leader, before, holds_before;

	(void)state;
	assert_int_equal(tu_etcd_start(&c, 3), 0);
	snprintf(prefix, sizeof(prefix), "ha/%d", (int)getpid());
	o.endpoints = c.endpoints;
	o.timeout_ms = 10000;
	tu_store_open_with(&t, &o);
	f.s = t.store;
	for (int i = 0; i < 4; i++) {
		w[i] = (struct writer){ &f, i };
		pthread_create(&wt[i], NULL, writer, &w[i]);
	}
	for (int i = 0; i < 2; i++) {
		hd[i] = (struct holding){ &f, i };
		pthread_create(&ht[i], NULL, holder, &hd[i]);
	}
	/* Some work, then the leader dies with writes and leases in flight. */
	TU_WAIT(atomic_load(&f.acked) >= 100);
	TU_WAIT((leader = tu_etcd_leader(&c)) >= 0);
	assert_true(leader >= 0);
	tu_member_kill(&c, leader);
	before = atomic_load(&f.acked);
	holds_before = atomic_load(&f.holds);
	/* Service resumes: more writes and lock holdings are acknowledged. */
	TU_WAIT(atomic_load(&f.acked) >= before + 100 && atomic_load(&f.holds) >= holds_before + 5);
	atomic_store(&f.stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(wt[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(ht[i], NULL);
	assert_true(atomic_load(&f.acked) >= before + 100);
	assert_true(atomic_load(&f.holds) >= holds_before + 5);
	assert_int_equal(atomic_load(&f.overlaps), 0);
	/* No acknowledged write is lost: each key holds its last ack (or,
	 * for a write whose answer was lost, the one after it). */
	for (int i = 0; i < 4; i++) {
		char key[32], *v = NULL;
		size_t n;

		snprintf(key, sizeof(key), "ha/w%d", i);
		assert_int_equal(tsec_store_get(t.store, &app, key, &v, &n, &err), 0);
		assert_true(atol(v) == f.acked_of[i] || atol(v) == f.acked_of[i] + 1);
		free(v);
	}
	tu_store_close(&t);
	tu_server_stop(&c);
}

/*
 * Redis restarted without persistence (issue 17, defect 8): the fence
 * counter is lost with everything else, and fences went back to 1.  They
 * are floored at the server's clock, so they still increase.  The
 * store's pooled connections died with the server: the next write is
 * sent on a live one and succeeds, never "may or may not have been
 * applied" (defect 5).
 */
static void test_redis_restart_without_persistence(void **state)
{
	char prefix[64];
	struct tsec_store_opts o = opts_for("redis", prefix, sizeof(prefix));
	struct tsec_lock lk, again;
	struct tsec_put p = { "rs/v", "before", 6 };
	struct tsec_error err;
	struct tu_store t;
	char *v;
	size_t n;

	(void)state;
	tu_store_open_with(&t, &o);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tsec_lock_acquire(t.store, &app, "rs", 60000, 0, &lk, &err), 0);
		assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
	}
	assert_int_equal(tsec_lock_acquire(t.store, &app, "rs", 60000, 0, &lk, &err), 0);
	assert_int_equal(tsec_store_put_fenced(t.store, &app, &lk, &p, 1, &err), 0);
	/* With its data: the value and the lock stay. */
	assert_int_equal(tu_redis_restart(&redis, true), 0);
	assert_int_equal(tsec_store_get(t.store, &app, "rs/v", &v, &n, &err), 0);
	assert_string_equal(v, "before");
	free(v);
	assert_int_equal(tsec_lock_try_acquire(t.store, &app, "rs", 60000, &again, &err), TSEC_EBUSY);
	/* Without: everything is gone, and the fence still moves forward. */
	assert_int_equal(tu_redis_restart(&redis, false), 0);
	if (tsec_lock_acquire(t.store, &app, "rs", 60000, 0, &again, &err))
		fail_msg("acquire after a restart: %s", err.msg);
	assert_true(again.fence > lk.fence);
	/* The old holder's fenced write is refused; the new holder's made. */
	p.value = "stale";
	p.len = 5;
	assert_int_equal(tsec_store_put_fenced(t.store, &app, &lk, &p, 1, &err), TSEC_ENOTOWNER);
	p.value = "after";
	assert_int_equal(tsec_store_put_fenced(t.store, &app, &again, &p, 1, &err), 0);
	assert_int_equal(tsec_lock_release(t.store, &app, &again, &err), 0);
	tu_store_close(&t);
}

/*
 * A broker whose wall clock reads an hour ahead does not take over a lock
 * whose holder is alive, and renews it: on etcd a lock ends at the
 * deadline its own broker wrote, by that broker's monotonic clock, or
 * when etcd ends the lock's lease, never when a broker's wall clock says
 * so (issue 17, defect 7; issue 48, item 5: the opt-in that let a
 * taker's wall clock end it, clock_skew_ms, is retired).
 */
static void test_etcd_takeover_not_by_clock(void **state)
{
	char prefix[64];
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	struct tsec_lock lk, other;
	struct tsec_error err;
	struct tu_store t, skewed;
	int rc;

	(void)state;
	tu_store_open_with(&t, &o);
	tu_store_open_with(&skewed, &o);
	assert_int_equal(tsec_lock_acquire(t.store, &app, "clk", 60000, 0, &lk, &err), 0);
	tsec__wall_skew_ms = 3600 * 1000;
	rc = tsec_lock_try_acquire(skewed.store, &app, "clk", 60000, &other, &err);
	/* Busy, and its holder renews through the skewed broker (a renew
	 * refused there is rc 2: the clock's skew restored first). */
	if (rc == TSEC_EBUSY && tsec_lock_renew(skewed.store, &app, &lk, 60000, &err))
		rc = 2;
	tsec__wall_skew_ms = 0;
	assert_int_equal(rc, TSEC_EBUSY);
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 60000, &err), 0);
	assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
	/* A holder that dies: the lock is free once its deadline passes by
	 * the clock of the broker that wrote it (its keeper deletes it). */
	assert_int_equal(tsec_lock_acquire(t.store, &app, "clk", 1000, 0, &lk, &err), 0);
	TU_WAIT((rc = tsec_lock_try_acquire(skewed.store, &app, "clk", 60000, &other, &err)) !=
		TSEC_EBUSY);
	assert_int_equal(rc, 0);
	assert_true(other.fence > lk.fence);
	assert_int_equal(tsec_lock_release(skewed.store, &app, &other, &err), 0);
	tu_store_close(&skewed);
	tu_store_close(&t);
}

/*
 * A renew to a shorter lease shortens it on the server too (issue 34,
 * item 4): a lock taken for ten minutes and renewed to one second is
 * free for others about a second later on etcd (whose lease was kept at
 * ten minutes, so others waited that long) as on redis: only the server
 * and the broker that wrote the deadline end the lease.  The fence does not change.
 */
static void renew_shorter_on(const char *backend)
{
	char prefix[64];
	struct tsec_store_opts o = opts_for(backend, prefix, sizeof(prefix));
	struct tsec_lock lk, other;
	struct tsec_error err;
	struct tu_store t, peer;
	struct tsec_put p = { "short/v", "x", 1 };
	uint64_t fence;
	int rc;

	tu_store_open_with(&t, &o);
	tu_store_open_with(&peer, &o);
	assert_int_equal(tsec_lock_acquire(t.store, &app, "shorter", 600000, 0, &lk, &err), 0);
	fence = lk.fence;
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 1000, &err), 0);
	assert_int_equal(lk.fence, fence);
	assert_int_equal(tsec_store_put_fenced(t.store, &app, &lk, &p, 1, &err), 0);
	TU_WAIT((rc = tsec_lock_try_acquire(peer.store, &app, "shorter", 60000, &other, &err)) !=
		TSEC_EBUSY);
	assert_int_equal(rc, 0);
	assert_true(other.fence > fence);
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 1000, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_release(peer.store, &app, &other, &err), 0);
	/* Longer again, then shorter again: both moves keep the fence. */
	assert_int_equal(tsec_lock_acquire(t.store, &app, "again", 2000, 0, &lk, &err), 0);
	fence = lk.fence;
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 600000, &err), 0);
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 1000, &err), 0);
	assert_int_equal(tsec_store_put_fenced(t.store, &app, &lk, &p, 1, &err), 0);
	assert_int_equal(lk.fence, fence);
	TU_WAIT((rc = tsec_lock_try_acquire(peer.store, &app, "again", 60000, &other, &err)) !=
		TSEC_EBUSY);
	assert_int_equal(rc, 0);
	assert_int_equal(tsec_lock_release(peer.store, &app, &other, &err), 0);
	tu_store_close(&peer);
	tu_store_close(&t);
}

static void test_etcd_renew_shorter(void **state)
{
	(void)state;
	renew_shorter_on("etcd");
}

static void test_redis_renew_shorter(void **state)
{
	(void)state;
	renew_shorter_on("redis");
}

/*
 * Redis keeps a lease longer than its holder is told: redis ends keys by
 * its host's wall clock, and a step forward of that clock (2.2 ms in one
 * second, seen in CI as a second grant in test_chaos_brokers_redis) must
 * not end a lease its holder still counts on.  Acquire and renew both set
 * the key's expiry past the lease by the margin.
 */
static void test_redis_lease_margin(void **state)
{
	char prefix[64], key[128];
	struct tsec_store_opts o = opts_for("redis", prefix, sizeof(prefix));
	struct timeval tv = { 5, 0 };
	struct tsec_lock lk;
	struct tsec_error err;
	struct tu_store t;
	redisContext *rc;
	redisReply *r;

	(void)state;
	tu_store_open_with(&t, &o);
	assert_non_null(rc = redisConnectWithTimeout("127.0.0.1", redis.client_port[0], tv));
	assert_int_equal(rc->err, 0);
	snprintf(key, sizeof(key), "%s/l/margin", prefix);
	assert_int_equal(tsec_lock_acquire(t.store, &app, "margin", 60000, 0, &lk, &err), 0);
	r = redisCommand(rc, "PTTL %s", key);
	assert_true(r && r->type == REDIS_REPLY_INTEGER);
	/* 60 s + 1.2 s + 20 ms less what passed since: more than 61 s. */
	assert_true(r->integer > 61000);
	freeReplyObject(r);
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 1000, &err), 0);
	r = redisCommand(rc, "PTTL %s", key);
	assert_true(r && r->type == REDIS_REPLY_INTEGER);
	assert_true(r->integer > 1000 && r->integer <= 1040);
	freeReplyObject(r);
	assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
	redisFree(rc);
	tu_store_close(&t);
}

static uint64_t etcd_requests(const struct tu_store *t)
{
	return tsec__etcd_conn_requests(tsec__etcd_of(t->store->be)->c);
}

/*
 * Round trips of a lock on etcd.  Issue 36 made an acquire one txn on the
 * broker's shared lease; issue 48 put each lock on a lease of its own
 * again (a dead broker's lock blocked others for up to 4.4 TTLs on the
 * shared one, item 6), so: acquire is a lease and the create txn, renew a
 * lease and one txn, release one txn.  A try that finds the lock held
 * costs the lease and the txn; a name found held within the last second
 * is read first, one request per poll, and no lease is granted for it.
 */
static void test_etcd_lock_round_trips(void **state)
{
	char prefix[64];
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	struct tsec_lock lk, other;
	struct tsec_error err;
	struct tu_store t, peer;
	uint64_t n;
	int64_t t0;

	(void)state;
	tu_store_open_with(&t, &o);
	tu_store_open_with(&peer, &o);
	n = etcd_requests(&t);
	assert_int_equal(tsec_lock_try_acquire(t.store, &app, "trips", 60000, &lk, &err), 0);
	assert_int_equal(etcd_requests(&t) - n, 2);
	n = etcd_requests(&t);
	assert_int_equal(tsec_lock_renew(t.store, &app, &lk, 60000, &err), 0);
	assert_int_equal(etcd_requests(&t) - n, 2);
	n = etcd_requests(&t);
	assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
	assert_int_equal(etcd_requests(&t) - n, 1);
	/* Held by a peer: the lease and the txn; then one read per poll. */
	assert_int_equal(tsec_lock_try_acquire(peer.store, &app, "trips", 60000, &other, &err), 0);
	n = etcd_requests(&t);
	assert_int_equal(tsec_lock_try_acquire(t.store, &app, "trips", 60000, &lk, &err),
			 TSEC_EBUSY);
	assert_int_equal(etcd_requests(&t) - n, 2);
	t0 = tsec__mono_ms();
	n = etcd_requests(&t);
	assert_int_equal(tsec_lock_try_acquire(t.store, &app, "trips", 60000, &lk, &err),
			 TSEC_EBUSY);
	if (tsec__mono_ms() - t0 < TSEC__ETCD_BUSY_MS)   /* else it may look again */
		assert_int_equal(etcd_requests(&t) - n, 1);
	/* Freed: read, lease, txn; the lock is taken. */
	assert_int_equal(tsec_lock_release(peer.store, &app, &other, &err), 0);
	assert_int_equal(tsec_lock_try_acquire(t.store, &app, "trips", 60000, &lk, &err), 0);
	assert_true(lk.fence > other.fence);
	assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
	tu_store_close(&peer);
	tu_store_close(&t);
}

/* The etcd lease l of lock name is on (0: not held), read through t. */
static int64_t lock_lease(const struct tu_store *t, const char *name)
{
	struct etcd *e = tsec__etcd_of(t->store->be);
	char k[TSEC__BK_MAX];
	size_t kn = tsec__etcd_bk(e, 'l', name, k);
	json_t *ops = json_array(), *r;
	struct tsec_error err;
	int64_t lease;
	bool ok;

	json_array_append_new(ops, tsec__etcd_range(k, kn, false, false));
	assert_int_equal(tsec__etcd_txn(e, NULL, ops, NULL, TSEC__ETCD_IDEMPOTENT, &r, &ok, &err),
			 0);
	lease = tsec__jint(tsec__etcd_kv0(tsec__etcd_resp(r, 0, "response_range")), "lease", 0);
	json_decref(r);
	return lease;
}

/* How many deadlines t's keeper has yet to look at. */
static size_t held_count(const struct tu_store *t)
{
	struct etcd *e = tsec__etcd_of(t->store->be);
	size_t n;

	pthread_mutex_lock(&e->keep_mu);
	n = e->nheld;
	pthread_mutex_unlock(&e->keep_mu);
	return n;
}

/* Ends an etcd lease now, as etcd does when its broker stops keeping it. */
static void lease_end(const struct tu_store *t, int64_t lease)
{
	struct etcd *e = tsec__etcd_of(t->store->be);
	json_t *req = json_pack("{so}", "ID", tsec__jnum(lease)), *r;
	struct tsec_error err;

	assert_int_equal(tsec__etcd_post(e->c, "/v3/lease/revoke", req, TSEC__ETCD_IDEMPOTENT, 0, 0,
					 &r, &err), 0);
	json_decref(r);
}

/* etcd's view of a lease: its granted TTL in seconds (0: gone), and how
 * many keys it carries, each checked to be one of want[0..nwant). */
static int64_t lease_granted(const struct tu_store *t, int64_t lease, const char *const *want,
			     size_t nwant, size_t *nkeys)
{
	struct etcd *e = tsec__etcd_of(t->store->be);
	json_t *req = json_pack("{sosb}", "ID", tsec__jnum(lease), "keys", 1), *r, *keys, *k;
	struct tsec_error err;
	int64_t granted;
	size_t i;

	assert_int_equal(tsec__etcd_post(e->c, "/v3/lease/timetolive", req, TSEC__ETCD_IDEMPOTENT, 0, 0,
					 &r, &err), 0);
	granted = tsec__jint(r, "grantedTTL", 0);
	if (tsec__jint(r, "TTL", 0) < 0)
		granted = 0;
	keys = json_object_get(r, "keys");
	*nkeys = json_array_size(keys);
	json_array_foreach(keys, i, k) {
		size_t j;

		/* etcd gives the keys in base64, as it takes them. */
		for (j = 0; j < nwant; j++) {
			char b64[2 * TSEC__BK_MAX];

			sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)want[j],
					  strlen(want[j]), sodium_base64_VARIANT_ORIGINAL);
			if (!strcmp(b64, json_string_value(k)))
				break;
		}
		if (j == nwant)
			fail_msg("lease %lld carries a key not the lock's: %s", (long long)lease,
				 json_string_value(k));
	}
	json_decref(r);
	return granted;
}

/*
 * A lock on etcd lives on a lease of its own (issue 48, item 6), granted
 * for its TTL in whole seconds, carrying its two keys and nothing else,
 * kept alive by nothing but its holder's renewals (each puts it on a
 * fresh lease of the renewal's TTL).  So a lock whose broker is gone ends
 * when etcd ends that lease, ceil(TTL) seconds after its last acquire or
 * renewal by etcd's clock, and never before its deadline.  It lived on
 * the broker's shared lease of a power of two seconds at least 1.5 TTLs,
 * kept alive every quarter of it: a dead broker's lock blocked others
 * for 1.6 to 4.4 TTLs.
 */
static void test_etcd_lock_lease_of_its_own(void **state)
{
	char prefix[64], l[TSEC__BK_MAX], d[TSEC__BK_MAX];
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	const char *mine[2] = { l, d };
	struct tsec_lock lk, other, keep;
	struct tsec_error err;
	struct tu_store t, peer;
	int64_t t0, lease, moved;
	size_t nkeys;
	int rc;

	(void)state;
	tu_store_open_with(&t, &o);
	tu_store_open_with(&peer, &o);
	tsec__etcd_bk(tsec__etcd_of(t.store->be), 'l', "own", l);
	tsec__etcd_bk(tsec__etcd_of(t.store->be), 'd', "own", d);
	/* Another lock held meanwhile: it must not share the lease. */
	assert_int_equal(tsec_lock_acquire(t.store, &app, "bystander", 60000, 0, &keep, &err), 0);
	assert_int_equal(tsec_lock_acquire(t.store, &app, "own", 3000, 0, &lk, &err), 0);
	lease = lock_lease(&t, "own");
	assert_true(lease != 0);
	assert_int_equal(lease_granted(&t, lease, mine, 2, &nkeys), 3);
	assert_int_equal(nkeys, 2);
	/* Renewed through the peer: a fresh lease of the renewal's TTL. */
	assert_int_equal(tsec_lock_renew(peer.store, &app, &lk, 5000, &err), 0);
	moved = lock_lease(&peer, "own");
	assert_true(moved != 0 && moved != lease);
	assert_int_equal(lease_granted(&peer, moved, mine, 2, &nkeys), 5);
	assert_int_equal(nkeys, 2);
	lease_granted(&peer, lease, mine, 2, &nkeys);
	assert_int_equal(nkeys, 0);      /* the old one carries nothing */
	/* t's keeper, at the deadline it wrote, leaves the lock alone (and
	 * keeps the bystander's deadline, a minute on). */
	TU_WAIT(held_count(&t) == 1);
	assert_int_equal(tsec_lock_renew(peer.store, &app, &lk, 5000, &err), 0);
	/* etcd ends the lock's lease: the lock is gone with it. */
	lease_end(&peer, lock_lease(&peer, "own"));
	assert_int_equal(tsec_lock_renew(peer.store, &app, &lk, 5000, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_acquire(peer.store, &app, "own", 5000, 0, &lk, &err), 0);
	assert_int_equal(tsec_lock_release(peer.store, &app, &lk, &err), 0);
	assert_int_equal(tsec_lock_release(t.store, &app, &keep, &err), 0);

	/* Its broker gone (t's keeper stops with it): etcd ends the lock by
	 * its lease, never before its deadline. */
	assert_int_equal(tsec_lock_acquire(t.store, &app, "orphan", 2000, 0, &lk, &err), 0);
	t0 = tsec__mono_ms();
	tu_store_close(&t);
	TU_WAIT((rc = tsec_lock_try_acquire(peer.store, &app, "orphan", 60000, &other, &err)) !=
		TSEC_EBUSY);
	assert_int_equal(rc, 0);
	fprintf(stderr, "etcd: a lock of 2000 ms whose broker went was free %lld ms after it "
		"was taken\n", (long long)(tsec__mono_ms() - t0));
	assert_true(tsec__mono_ms() - t0 >= 2000);
	assert_true(other.fence > lk.fence);
	assert_int_equal(tsec_lock_release(peer.store, &app, &other, &err), 0);
	tu_store_close(&peer);
}

/*
 * Waits are served in turn across brokers (etcd_queue.c): a wait queued
 * through one broker is overtaken neither by a try through another nor
 * by the holder asking again.  A round decides only when it ran within
 * half the shortest time etcd keeps a waiter's entry (2 s); a slower one
 * runs again on a name of its own.
 */
static void test_etcd_queue_across_brokers(void **state)
{
	char prefix[64], name[32];
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	struct tsec_lock held, lk, other;
	struct tsec_lock_wait w;
	struct tsec_error err;
	struct tu_store t, peer;
	int rounds = 0, rn = -1, rh = -1, rw = -1;
	bool decided = false;

	(void)state;
	tu_store_open_with(&t, &o);
	tu_store_open_with(&peer, &o);
	TU_WAIT(decided) {
		struct timespec a, b;

		snprintf(name, sizeof(name), "queue-%d", ++rounds);
		assert_int_equal(tsec_lock_acquire(peer.store, &app, name, 60000, 0, &held, &err), 0);
		clock_gettime(CLOCK_MONOTONIC, &a);
		assert_int_equal(tsec_lock_wait_begin(t.store, &app, name, 60000, 60000, &w, &lk,
						      &err), TSEC_EBUSY);
		assert_int_equal(tsec_lock_release(peer.store, &app, &held, &err), 0);
		if (!(rn = tsec_lock_try_acquire(peer.store, &app, name, 60000, &other, &err)))
			tsec_lock_release(peer.store, &app, &other, &err);
		if (!(rh = tsec_lock_try_acquire(t.store, &app, name, 60000, &other, &err)))
			tsec_lock_release(t.store, &app, &other, &err);
		rw = tsec_lock_wait_step(t.store, &app, &w, &lk, &err);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (!rw)
			assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
		decided = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 1000;
	}
	assert_int_equal(rn, TSEC_EBUSY);
	assert_int_equal(rh, TSEC_EBUSY);
	assert_int_equal(rw, 0);
	tu_store_close(&peer);
	tu_store_close(&t);
}

/*
 * A whole renewal turn on etcd, as bench_turn makes it (lock, the three
 * files' existence in one read, load, save as one transaction, release):
 * 6 requests, the lock's lease among them (issue 36 made it 5 on the
 * broker's shared lease, and issue 48 gave each lock its own again; it
 * was 8 in process and 10 through the broker before issue 36).
 */
static void test_etcd_turn_round_trips(void **state)
{
	char prefix[64], crt[256], key[256], meta[256];
	struct tsec_store_opts o = opts_for("etcd", prefix, sizeof(prefix));
	struct tsec_cert_files f = { 0 }, got;
	struct tsec_lock lk;
	struct tsec_error err;
	struct tu_store t;
	int ex[3];
	uint64_t n;

	(void)state;
	assert_int_equal(tsec_cert_keys("acme", "turn.example", crt, key, meta, sizeof(crt)), 0);
	f.cert = tu_cert("ec-p256", "turn.example", -60, 86400 * 30, NULL);
	assert_non_null(f.cert);
	f.cert_len = strlen(f.cert);
	f.key = tu_key_pem("ec-p256", &f.key_len);
	f.meta = strdup("{\"sans\":[\"turn.example\"]}");
	f.meta_len = strlen(f.meta);
	tu_store_open_with(&t, &o);
	assert_int_equal(tsec_store_save_cert(t.store, &app, "acme", "turn.example", &f, &err), 0);
	for (int turn = 0; turn < 2; turn++) {
		n = etcd_requests(&t);
		assert_int_equal(tsec_lock_acquire(t.store, &app, "turn.example", 60000, 10000,
						   &lk, &err), 0);
		assert_int_equal(tsec_store_exists_many(t.store, &app,
							(const char *[]){ crt, key, meta }, 3,
							ex, &err), 0);
		assert_true(ex[0] && ex[1] && ex[2]);
		assert_int_equal(tsec_store_load_cert(t.store, &app, "acme", "turn.example", &got,
						      &err), 0);
		tsec_cert_files_free(&got);
		assert_int_equal(tsec_store_save_cert(t.store, &app, "acme", "turn.example", &f,
						      &err), 0);
		assert_int_equal(tsec_lock_release(t.store, &app, &lk, &err), 0);
		n = etcd_requests(&t) - n;
		fprintf(stderr, "etcd renewal turn %d: %llu requests\n", turn,
			(unsigned long long)n);
		assert_true(n <= 6u);
	}
	tsec_cert_files_free(&f);
	tu_store_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_race_etcd),
		cmocka_unit_test(test_race_redis),
		cmocka_unit_test(test_peer_change_etcd),
		cmocka_unit_test(test_peer_change_redis),
		cmocka_unit_test(test_sealed_etcd),
		cmocka_unit_test(test_sealed_redis),
		cmocka_unit_test(test_planted_names),
		cmocka_unit_test(test_etcd_request_limit),
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_etcd_auth),
		cmocka_unit_test(test_etcd_tls),
		cmocka_unit_test(test_etcd_cluster_leader_dies),
		cmocka_unit_test(test_redis_restart_without_persistence),
		cmocka_unit_test(test_etcd_takeover_not_by_clock),
		cmocka_unit_test(test_etcd_renew_shorter),
		cmocka_unit_test(test_redis_renew_shorter),
		cmocka_unit_test(test_redis_lease_margin),
		cmocka_unit_test(test_etcd_lock_lease_of_its_own),
		cmocka_unit_test(test_etcd_queue_across_brokers),
		cmocka_unit_test(test_etcd_lock_round_trips),
		cmocka_unit_test(test_etcd_turn_round_trips),
	};
	int failed;

	app = tu_who("svc:app");
	if (tu_etcd_start(&etcd, 1) || tu_redis_start(&redis)) {
		fprintf(stderr, "fleet: cannot start etcd and redis-server "
			"(scripts/deps.sh servers installs them)\n");
		tu_server_stop(&etcd);
		tu_server_stop(&redis);
		return 1;
	}
	failed = cmocka_run_group_tests_name("fleet: etcd and redis", tests, NULL, NULL);
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	return failed ? 1 : 0;
}
