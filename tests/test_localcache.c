/*
 * The LocalCache over a store (issues 21, 33, 47): a write racing a
 * cached read, a hit that never waits behind a slow backend, misses of
 * one key that coalesce into one read, a release that failed and is
 * tried again, a move onto an alias of the same value.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "common/clock.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tests/certgen.h"
#include "broker/storage/file/file_private.h"
#include "broker/storage/fleet.h"
#include "tests/store_fixture.h"
#include "broker/storage/localcache.h"

/*
 * LocalCache write-through race (issue 17, defect 2): a peer's write to
 * the key is applied, and its invalidation delivered, after our write
 * was applied but before its answer came back.  The cache kept our
 * value and shadowed the peer's for good.  The inner backend here is
 * the memory backend whose put_many plays the peer at that moment.
 */
static const struct tsec__backend_ops *mem_ops;
static void *race_cache;
static int race_armed;

static int racy_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
			 const struct tsec__fence *f, const struct tsec__guard *g,
			 struct tsec_error *err)
{
	int rc = mem_ops->put_many(b, p, n, f, g, err);

	if (rc == 0 && race_armed) {
		struct tsec__bput peer = { p[0].sk, "peer", 4 };
		race_armed = 0;
		assert_int_equal(mem_ops->put_many(b, &peer, 1, NULL, NULL, err), 0);
		tsec__localcache_invalidate(race_cache, p[0].sk->text);
	}
	return rc;
}

static void test_store_cache_write_race(void **state)
{
	static struct tsec__backend_ops racy;
	struct tsec__backend *mem, *cache;
	struct tsec__skey sk, other;
	struct tsec_error err;
	struct tsec__bput ours = { &sk, "ours", 4 };
	struct tsec__bput first = { &sk, "first", 5 };
	char *v;
	size_t n;

	(void)state;
	assert_int_equal(tsec__memory_open(&mem, 0, &err), 0);
	mem_ops = mem->ops;
	racy = *mem->ops;
	racy.put_many = racy_put_many;
	mem->ops = &racy;
	assert_int_equal(tsec__localcache_open(&cache, mem, 1 << 20, &err), 0);
	race_cache = cache;
	assert_int_equal(tsec__skey_parse("race/k", false, &sk, &err), 0);
	assert_int_equal(tsec__skey_parse("race/other", false, &other, &err), 0);
	/* Cached before, rewritten with the peer racing. */
	assert_int_equal(cache->ops->put_many(cache, &first, 1, NULL, NULL, &err), 0);
	assert_int_equal(cache->ops->get(cache, &sk, 1 << 20, &v, &n, &err), 0);
	assert_string_equal(v, "first");
	free(v);
	race_armed = 1;
	assert_int_equal(cache->ops->put_many(cache, &ours, 1, NULL, NULL, &err), 0);
	assert_int_equal(race_armed, 0);
	assert_int_equal(cache->ops->get(cache, &sk, 1 << 20, &v, &n, &err), 0);
	assert_string_equal(v, "peer");            /* the backend's value, not ours */
	free(v);
	/* Without a race, a write is cached as before: the next get is a hit
	 * even after the backend's value changed behind the cache's back. */
	assert_int_equal(cache->ops->put_many(cache, &ours, 1, NULL, NULL, &err), 0);
	{
		struct tsec__bput behind = { &sk, "behind", 6 };
		assert_int_equal(mem_ops->put_many(mem, &behind, 1, NULL, NULL, &err), 0);
	}
	assert_int_equal(cache->ops->get(cache, &sk, 1 << 20, &v, &n, &err), 0);
	assert_string_equal(v, "ours");
	free(v);
	cache->ops->close(cache);
}

/*
 * The memory backend with a get that can be held inside (as a slow
 * remote read), counting the reads that reach it, and a lock_release
 * that can fail once (as a lost connection).
 */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool hold;                   /* get waits while set */
	int inside;                  /* gets waiting inside */
	int reads;                   /* gets that reached the backend */
	int fail_release;            /* the next release fails this many times */
} slow = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0, 0 };
static const struct tsec__backend_ops *slow_inner;
static struct tsec__backend *slow_mem;       /* under the cache */

static int slow_get(struct tsec__backend *b, const struct tsec__skey *k, size_t max,
		    char **out, size_t *len, struct tsec_error *err)
{
	pthread_mutex_lock(&slow.mu);
	slow.reads++;
	slow.inside++;
	while (slow.hold)
		pthread_cond_wait(&slow.cv, &slow.mu);
	slow.inside--;
	pthread_mutex_unlock(&slow.mu);
	return slow_inner->get(b, k, max, out, len, err);
}

static int slow_release(struct tsec__backend *b, const char *name, const uint8_t token[16],
			struct tsec_error *err)
{
	pthread_mutex_lock(&slow.mu);
	if (slow.fail_release > 0) {
		slow.fail_release--;
		pthread_mutex_unlock(&slow.mu);
		return tsec__seterr(err, TSEC_EIO, name, "the connection was lost (test)");
	}
	pthread_mutex_unlock(&slow.mu);
	return slow_inner->lock_release(b, name, token, err);
}

static int slow_field(int *f)
{
	int v;

	pthread_mutex_lock(&slow.mu);
	v = *f;
	pthread_mutex_unlock(&slow.mu);
	return v;
}

static void slow_hold(bool on)
{
	pthread_mutex_lock(&slow.mu);
	slow.hold = on;
	pthread_cond_broadcast(&slow.cv);
	pthread_mutex_unlock(&slow.mu);
}

/* A LocalCache over the slow memory backend. */
static struct tsec__backend *slow_cache(void)
{
	static struct tsec__backend_ops ops;
	struct tsec__backend *mem, *cache;
	struct tsec_error err;

	assert_int_equal(tsec__memory_open(&mem, 0, &err), 0);
	slow_mem = mem;
	slow_inner = mem->ops;
	ops = *mem->ops;
	ops.get = slow_get;
	ops.lock_release = slow_release;
	mem->ops = &ops;
	assert_int_equal(tsec__localcache_open(&cache, mem, 1 << 20, &err), 0);
	slow.reads = 0;
	return cache;
}

struct reader {
	struct tsec__backend *cache;
	const struct tsec__skey *sk;
	atomic_int started, done;
	int rc;
	char value[32];
};

static void *read_one(void *arg)
{
	struct reader *r = arg;
	struct tsec_error err;
	char *v = NULL;
	size_t n;

	atomic_store(&r->started, 1);
	r->rc = r->cache->ops->get(r->cache, r->sk, 1 << 20, &v, &n, &err);
	if (!r->rc)
		snprintf(r->value, sizeof(r->value), "%s", v);
	free(v);
	atomic_store(&r->done, 1);
	return NULL;
}

/*
 * A hit never waits on I/O: with a miss held inside the backend, a hit
 * on another key answers (it took no lock the miss holds), and reads
 * nothing from the backend.
 */
static void test_localcache_hit_never_waits(void **state)
{
	struct tsec__backend *cache = slow_cache();
	struct tsec__skey hot, cold;
	struct tsec__bput p = { &hot, "hot", 3 };
	struct tsec_error err;
	struct reader miss = { .cache = cache, .sk = &cold }, hit = { .cache = cache, .sk = &hot };
	pthread_t tm, th;
	struct tsec__bput c = { &cold, "cold", 4 };

	(void)state;
	assert_int_equal(tsec__skey_parse("lc/hot", false, &hot, &err), 0);
	assert_int_equal(tsec__skey_parse("lc/cold", false, &cold, &err), 0);
	assert_int_equal(cache->ops->put_many(cache, &p, 1, NULL, NULL, &err), 0);
	/* The cold key is in the backend only. */
	assert_int_equal(slow_inner->put_many(slow_mem, &c, 1, NULL, NULL, &err), 0);
	slow_hold(true);
	assert_int_equal(pthread_create(&tm, NULL, read_one, &miss), 0);
	TU_WAIT(slow_field(&slow.inside) == 1);
	assert_int_equal(slow_field(&slow.inside), 1);
	assert_int_equal(pthread_create(&th, NULL, read_one, &hit), 0);
	TU_WAIT(atomic_load(&hit.done));
	/* Answered while the miss is still held in the backend. */
	assert_true(atomic_load(&hit.done));
	assert_int_equal(slow_field(&slow.inside), 1);
	assert_int_equal(hit.rc, 0);
	assert_string_equal(hit.value, "hot");
	slow_hold(false);
	pthread_join(tm, NULL);
	pthread_join(th, NULL);
	assert_int_equal(miss.rc, 0);
	assert_string_equal(miss.value, "cold");
	assert_int_equal(slow_field(&slow.reads), 1);    /* the miss; the hit read nothing */
	cache->ops->close(cache);
}

/*
 * Concurrent misses of one key make one backend read: the others wait
 * on the key's gate and find what it cached.
 */
static void test_localcache_misses_coalesce(void **state)
{
	enum { N = 6 };
	struct tsec__backend *cache = slow_cache();
	struct tsec__skey k;
	struct tsec__bput p = { &k, "value", 5 };
	struct tsec_error err;
	struct reader r[N];
	pthread_t th[N];

	(void)state;
	assert_int_equal(tsec__skey_parse("lc/shared", false, &k, &err), 0);
	assert_int_equal(slow_inner->put_many(slow_mem, &p, 1, NULL, NULL, &err), 0);
	slow_hold(true);
	for (int i = 0; i < N; i++) {
		r[i] = (struct reader){ .cache = cache, .sk = &k };
		assert_int_equal(pthread_create(&th[i], NULL, read_one, &r[i]), 0);
	}
	for (int i = 0; i < N; i++)
		TU_WAIT(atomic_load(&r[i].started));
	TU_WAIT(slow_field(&slow.inside) >= 1);
	/* Let the others reach the gate (or, without one, the backend)
	 * before the first read is let go; what decides is the count. */
	for (int i = 0; i < 1000; i++)
		sched_yield();
	slow_hold(false);
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(r[i].rc, 0);
		assert_string_equal(r[i].value, "value");
	}
	assert_int_equal(slow_field(&slow.reads), 1);
	cache->ops->close(cache);
}

/*
 * A release that fails (the backend lost its connection) leaves the
 * lock held by its owner, who can release it again; only then may
 * another take it.
 */
static void test_localcache_failed_release_retryable(void **state)
{
	struct tsec__backend *cache = slow_cache();
	struct tsec__lease mine, theirs;
	struct tsec_error err;

	(void)state;
	assert_int_equal(cache->ops->lock_try(cache, "lc-lock", 60000, NULL, &mine, &err), 0);
	slow.fail_release = 1;
	assert_int_equal(cache->ops->lock_release(cache, "lc-lock", mine.token, &err), TSEC_EIO);
	assert_int_equal(cache->ops->lock_try(cache, "lc-lock", 60000, NULL, &theirs, &err),
			 TSEC_EBUSY);
	assert_int_equal(cache->ops->lock_release(cache, "lc-lock", mine.token, &err), 0);
	assert_int_equal(cache->ops->lock_try(cache, "lc-lock", 60000, NULL, &theirs, &err), 0);
	assert_true(theirs.fence > mine.fence);
	assert_int_equal(cache->ops->lock_release(cache, "lc-lock", theirs.token, &err), 0);
	cache->ops->close(cache);
}

/*
 * A move onto its own alias ("a//b" is "a/b") refuses and loses
 * nothing, through the store and the cache, with the cache warm.
 */
static void test_localcache_move_onto_alias(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store_opts o = { .backend = "memory", .cache_bytes = 1 << 20 };
	static const char *const aliases[] = { "alias//value", "alias/./value", "./alias/value" };
	struct tsec_store *s;
	struct tsec_error err;

	assert_int_equal(tsec_store_open_opts(&s, &o, t->bus, NULL, &err), 0);
	put(s, "alias/value", "kept");
	check_value(s, "alias/value", "kept");               /* cached */
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
		int rc = tsec_store_move(s, &app, "alias/value", aliases[i], &err);

		if (rc == 0)
			fail_msg("move onto its alias %s succeeded", aliases[i]);
		check_value(s, "alias/value", "kept");
		rc = tsec_store_move(s, &app, aliases[i], "alias/value", &err);
		if (rc == 0)
			fail_msg("move of alias %s onto itself succeeded", aliases[i]);
		check_value(s, "alias/value", "kept");
	}
	tsec_store_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_cache_write_race),
		cmocka_unit_test(test_localcache_hit_never_waits),
		cmocka_unit_test(test_localcache_misses_coalesce),
		cmocka_unit_test(test_localcache_failed_release_retryable),
		cmocka_unit_test(test_localcache_move_onto_alias),
	};
	return cmocka_run_group_tests_name("store: the LocalCache", tests, setup, teardown);
}
