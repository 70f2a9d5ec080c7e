/*
 * One conformance suite for the store.h contract, run unchanged over
 * every backend and over a LocalCache on each: errors, folders, listing,
 * move never replaces, groups all or nothing and serialised, one lock
 * holder, takeover after a lease ends, old owners refused, fences that
 * increase and fence writes, deadlines, and the cache's barrier.
 *
 * No assertion depends on speed: waits are bounded below by what the
 * code must wait for (a lease's end), never above.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include <sodium.h>

#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"

struct variant {
	const char *backend;
	size_t cache_bytes;
	const char *name;
};

static const struct variant *cur;
static struct tsec_principal app;
static struct tu_server etcd, redis;
static char cur_prefix[64];        /* the fleet backends' prefix of this test */

static int setup(void **state)
{
	struct tu_store *t = calloc(1, sizeof(*t));
	static int serial;
	char *prefix = cur_prefix;

	app = tu_who("svc:app");
	if (!strcmp(cur->backend, "etcd") || !strcmp(cur->backend, "redis")) {
		/* Each test in a prefix of its own on the shared server. */
		struct tsec_store_opts o = {
			.backend = cur->backend, .cache_bytes = cur->cache_bytes,
			.endpoints = cur->backend[0] == 'e' ? etcd.endpoints : redis.endpoints,
			.prefix = prefix,
			/* One machine, one clock: no allowance for skew. */
		};
		snprintf(cur_prefix, sizeof(cur_prefix), "conf/%d-%d", (int)getpid(), ++serial);
		tu_store_open_with(t, &o);
	} else {
		tu_store_open_on(t, cur->backend, cur->cache_bytes);
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	tsec__wall_skew_ms = 0;          /* a failed clock test leaves none behind */
	tu_store_close(*state);
	free(*state);
	return 0;
}

/*
 * Ends a lease: the injected clock moves past it, which ends it on every
 * backend whose leases this process times (file, memory, etcd's
 * deadline, its keeper); redis times its own, so its lock key goes as it
 * does at the lease's end (tu_redis_lease_end).  Then waits until a
 * fenced write is refused (on a key of its own).
 */
static void lease_ends(struct tsec_store *s, const struct tsec_lock *lk)
{
	struct tsec_put probe = { .key = "probe/lease", .value = "x", .len = 1 };
	struct tsec_error err;
	int rc = 0;

	tsec__clock_advance((int64_t)(lk->expires_ms - tsec__wall_ms()) + 1);
	if (!strcmp(cur->backend, "redis"))
		tu_redis_lease_end(&redis, cur_prefix, lk->name);
	TU_WAIT((rc = tsec_store_put_fenced(s, &app, lk, &probe, 1, &err)) ==
		TSEC_ENOTOWNER);
	assert_int_equal(rc, TSEC_ENOTOWNER);
}

static void put(struct tsec_store *s, const char *k, const char *v)
{
	struct tsec_error err;

	if (tsec_store_put(s, &app, k, v, strlen(v), &err))
		fail_msg("put %s: %s", k, err.msg);
}

static void want(struct tsec_store *s, const char *k, const char *v)
{
	struct tsec_error err;
	char *got;
	size_t n;

	if (tsec_store_get(s, &app, k, &got, &n, &err))
		fail_msg("get %s: %s (want '%s')", k, err.msg, v);
	assert_int_equal(n, strlen(v));
	assert_string_equal(got, v);
	free(got);
}

static void absent(struct tsec_store *s, const char *k)
{
	struct tsec_error err;
	char *got;
	size_t n;

	assert_int_equal(tsec_store_get(s, &app, k, &got, &n, &err), TSEC_ENOENT);
	assert_null(got);
}

static void test_conf_values_and_folders(void **state)
{
	struct tu_store *t = *state;
	struct tsec_stat st;
	struct tsec_error err;
	char *v;
	size_t n;
	int ex;

	absent(t->store, "v/a");
	put(t->store, "v/a", "one");
	want(t->store, "v/a", "one");
	put(t->store, "v/a", "two");               /* replace */
	want(t->store, "v/a", "two");
	put(t->store, "v/empty", "");
	want(t->store, "v/empty", "");
	assert_int_equal(tsec_store_exists(t->store, &app, "v/a", &ex, &err), 0);
	assert_true(ex);
	assert_int_equal(tsec_store_exists(t->store, &app, "v", &ex, &err), 0);
	assert_true(ex);                           /* a folder exists */
	{
		/* Many at once (one read on etcd): values only. */
		const char *keys[] = { "v/a", "v", "v/none", "v/empty" };
		int exs[4] = { 7, 7, 7, 7 };

		assert_int_equal(tsec_store_exists_many(t->store, &app, keys, 4, exs, &err), 0);
		assert_true(exs[0] == 1 && exs[1] == 0 && exs[2] == 0 && exs[3] == 1);
	}
	assert_int_equal(tsec_store_stat(t->store, &app, "v/a", &st, &err), 0);
	assert_int_equal(st.size, 3);
	assert_true(st.is_file);
	assert_true(st.mtime_ns > 0);
	{
		/* A folder's time is its newest value's, or later (issue 50:
		 * etcd and redis said 1970-01-01). */
		struct tsec_stat fst;
		int64_t a_mtime = st.mtime_ns;

		assert_int_equal(tsec_store_stat(t->store, &app, "v", &fst, &err), 0);
		assert_false(fst.is_file);
		if (fst.mtime_ns < a_mtime)
			fail_msg("folder v: mtime %lld, before its value's %lld",
				 (long long)fst.mtime_ns, (long long)a_mtime);
	}
	assert_int_equal(tsec_store_stat(t->store, &app, "v/none", &st, &err), TSEC_ENOENT);
	/* A folder is not a value, is never replaced by one, and a value
	 * cannot stand where a folder must. */
	assert_int_equal(tsec_store_get(t->store, &app, "v", &v, &n, &err), TSEC_EINVAL);
	assert_int_equal(tsec_store_put(t->store, &app, "v", "x", 1, &err), TSEC_EEXIST);
	assert_int_equal(tsec_store_put(t->store, &app, "v/a/below", "x", 1, &err), TSEC_EEXIST);
	want(t->store, "v/a", "two");
	/* Aliases of one key are one key. */
	put(t->store, "v//alias/./k", "aliased");
	want(t->store, "/v/alias/k", "aliased");
	/* Hostile keys never reach the backend. */
	assert_int_equal(tsec_store_put(t->store, &app, "../x", "x", 1, &err), TSEC_EKEY);
	assert_int_equal(tsec_store_put(t->store, &app, "v/.tsec-tmp-1", "x", 1, &err), TSEC_EKEY);
	assert_int_equal(tsec_store_get(t->store, &app, "", &v, &n, &err), TSEC_EKEY);
	/* A deny changes nothing. */
	assert_int_equal(tsec_store_put(t->store, &app, "frozen/x", "x", 1, &err), TSEC_EDENIED);
	absent(t->store, "frozen/x");
}

static void test_conf_list(void **state)
{
	struct tu_store *t = *state;
	struct tsec_strlist l;
	struct tsec_error err;

	/* The root of a new store lists as empty, every time. */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(tsec_store_list(t->store, &app, "", 0, &l, &err), 0);
		assert_int_equal(l.n, 0);
		tsec_strlist_free(&l);
	}
	put(t->store, "ls/b", "1");
	put(t->store, "ls/a", "1");
	put(t->store, "ls/sub/c", "1");
	put(t->store, "ls/sub/deeper/d", "1");
	put(t->store, "ls-sibling", "1");
	for (int i = 0; i < 2; i++) {            /* the same answer twice */
		assert_int_equal(tsec_store_list(t->store, &app, "ls", 0, &l, &err), 0);
		assert_int_equal(l.n, 3);
		assert_string_equal(l.v[0], "ls/a");
		assert_string_equal(l.v[1], "ls/b");
		assert_string_equal(l.v[2], "ls/sub/");
		tsec_strlist_free(&l);
	}
	assert_int_equal(tsec_store_list(t->store, &app, "ls", 1, &l, &err), 0);
	assert_int_equal(l.n, 4);
	assert_string_equal(l.v[3], "ls/sub/deeper/d");
	tsec_strlist_free(&l);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(tsec_store_list(t->store, &app, "", 0, &l, &err), 0);
		assert_int_equal(l.n, 2);
		assert_string_equal(l.v[0], "ls-sibling");
		assert_string_equal(l.v[1], "ls/");
		tsec_strlist_free(&l);
	}
	assert_int_equal(tsec_store_list(t->store, &app, "ls/a", 0, &l, &err), TSEC_EINVAL);
	assert_int_equal(tsec_store_list(t->store, &app, "nothing", 0, &l, &err), TSEC_ENOENT);
}

static void test_conf_delete(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;

	put(t->store, "del/a", "1");
	put(t->store, "del/sub/b", "1");
	assert_int_equal(tsec_store_delete(t->store, &app, "del/a", 0, &err), 0);
	absent(t->store, "del/a");
	assert_int_equal(tsec_store_delete(t->store, &app, "del/a", 0, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_delete(t->store, &app, "del", 0, &err), TSEC_EINVAL);
	want(t->store, "del/sub/b", "1");
	assert_int_equal(tsec_store_delete(t->store, &app, "del", 1, &err), 0);
	absent(t->store, "del/sub/b");
}

static void test_conf_move(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;

	put(t->store, "mv/src", "source");
	put(t->store, "mv/dst", "destination");
	assert_int_equal(tsec_store_move(t->store, &app, "mv/src", "mv/dst", &err), TSEC_EEXIST);
	want(t->store, "mv/src", "source");
	want(t->store, "mv/dst", "destination");
	put(t->store, "mv/dir/f", "f");
	assert_int_equal(tsec_store_move(t->store, &app, "mv/dir", "mv/dir2", &err), TSEC_EINVAL);
	assert_int_equal(tsec_store_move(t->store, &app, "mv/src", "mv/dir", &err), TSEC_EEXIST);
	assert_int_equal(tsec_store_move(t->store, &app, "mv/src", "elsewhere/deep/new", &err), 0);
	want(t->store, "elsewhere/deep/new", "source");
	absent(t->store, "mv/src");
	assert_int_equal(tsec_store_move(t->store, &app, "mv/none", "mv/x", &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_move(t->store, &app, "mv/dst", "frozen/x", &err), TSEC_EDENIED);
	want(t->store, "mv/dst", "destination");
}

static void test_conf_group_all_or_nothing(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;
	struct tsec_put ok[3] = { { "tx/a", "A1", 2 }, { "tx/b", "B1", 2 }, { "tx/c/d", "C1", 2 } };
	struct tsec_put bad[3] = { { "tx/a", "A2", 2 }, { "tx/new", "N", 1 }, { "tx/c", "X", 1 } };
	struct tsec_put twice[2] = { { "tx/a", "1", 1 }, { "tx//a", "2", 1 } };

	assert_int_equal(tsec_store_put_many(t->store, &app, ok, 3, &err), 0);
	want(t->store, "tx/a", "A1");
	want(t->store, "tx/c/d", "C1");
	/* The last write cannot be made (a folder): none is. */
	assert_int_equal(tsec_store_put_many(t->store, &app, bad, 3, &err), TSEC_EEXIST);
	want(t->store, "tx/a", "A1");
	absent(t->store, "tx/new");
	assert_int_equal(tsec_store_put_many(t->store, &app, twice, 2, &err), TSEC_EINVAL);
	want(t->store, "tx/a", "A1");
}

/*
 * A group that keeps failing races plain puts of one of its keys: the
 * failed group must never write over a put it did not make.
 */
struct race {
	struct tsec_store *s;
	atomic_int stop, failed_groups;
};

static void *failing_groups(void *arg)
{
	struct race *r = arg;
	struct tsec_put g[2] = { { "race/a", "from-group", 10 }, { "race/dir", "x", 1 } };
	struct tsec_error err;

	while (!atomic_load(&r->stop))
		if (tsec_store_put_many(r->s, &app, g, 2, &err) == TSEC_EEXIST)
			atomic_fetch_add(&r->failed_groups, 1);
	return NULL;
}

static void test_conf_failed_group_loses_nothing(void **state)
{
	struct tu_store *t = *state;
	struct race r = { .s = t->store };
	pthread_t th;
	char v[32];

	put(t->store, "race/dir/inner", "1");        /* makes the group fail */
	assert_int_equal(pthread_create(&th, NULL, failing_groups, &r), 0);
	for (int i = 0; i < 300; i++) {
		snprintf(v, sizeof(v), "put-%d", i);
		put(t->store, "race/a", v);
		want(t->store, "race/a", v);
	}
	/* Let at least one group fail after the last put, then look again. */
	int seen = atomic_load(&r.failed_groups);
	TU_WAIT(atomic_load(&r.failed_groups) >= seen + 2);
	assert_true(atomic_load(&r.failed_groups) >= seen + 2);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	want(t->store, "race/a", "put-299");
}

static void test_conf_one_holder_and_takeover(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock a, b, c;
	struct tsec_error err;

	assert_int_equal(tsec_lock_acquire(t->store, &app, "one", 60000, 0, &a, &err), 0);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "one", 60000, &b, &err), TSEC_EBUSY);
	assert_int_equal(tsec_lock_renew(t->store, &app, &a, 60000, &err), 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), TSEC_ENOENT);
	/* A lease that ended is taken over; the old owner is powerless. */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "short", 30, 0, &a, &err), 0);
	lease_ends(t->store, &a);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "short", 60000, &b, &err), 0);
	assert_int_equal(tsec_lock_renew(t->store, &app, &a, 60000, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_release(t->store, &app, &b, &err), 0);
	/* Nobody took it: an ended lease still cannot be renewed or released. */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "lapsed", 30, 0, &c, &err), 0);
	lease_ends(t->store, &c);
	assert_int_equal(tsec_lock_renew(t->store, &app, &c, 60000, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_release(t->store, &app, &c, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "lapsed", 60000, &b, &err), 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &b, &err), 0);
}

static void test_conf_fences(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock lk, old;
	struct tsec_error err;
	struct tsec_put p = { "fenced/v", "first", 5 };
	uint64_t last = 0;

	for (int i = 0; i < 20; i++) {
		assert_int_equal(tsec_lock_acquire(t->store, &app, "fence", 60000, 0, &lk, &err), 0);
		assert_true(lk.fence > last);            /* strictly increasing */
		last = lk.fence;
		assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	}
	/* A write fenced by the current holder is made. */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "fence", 60000, 0, &old, &err), 0);
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &old, &p, 1, &err), 0);
	want(t->store, "fenced/v", "first");
	/* After the lock changed hands, the old holder's write is refused
	 * in the same step, and nothing is written. */
	assert_int_equal(tsec_lock_release(t->store, &app, &old, &err), 0);
	assert_int_equal(tsec_lock_acquire(t->store, &app, "fence", 60000, 0, &lk, &err), 0);
	p.value = "stale";
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &old, &p, 1, &err), TSEC_ENOTOWNER);
	want(t->store, "fenced/v", "first");
	/* The right token with a wrong fence is refused too. */
	struct tsec_lock forged = lk;
	forged.fence = old.fence;
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &forged, &p, 1, &err), TSEC_ENOTOWNER);
	/* A fenced group is all or nothing like any other. */
	struct tsec_put g[2] = { { "fenced/a", "A", 1 }, { "fenced/b", "B", 1 } };
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &lk, g, 2, &err), 0);
	want(t->store, "fenced/b", "B");
	assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &lk, g, 2, &err), TSEC_ENOENT);
}

/*
 * A delete and a move fenced by a lock: made while the lock is held with
 * that token and fence, refused in the same step (nothing changes) once
 * it changed hands, was released, or with a forged fence (issue 17,
 * defect 12).
 */
static void test_conf_fenced_delete_move(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock old, lk, forged;
	struct tsec_error err;
	struct tsec_put p[3] = { { "fd/a", "A", 1 }, { "fd/b", "B", 1 }, { "fd/c/d", "D", 1 } };

	assert_int_equal(tsec_store_put_many(t->store, &app, p, 3, &err), 0);
	assert_int_equal(tsec_lock_acquire(t->store, &app, "fdm", 60000, 0, &old, &err), 0);
	assert_int_equal(tsec_store_move_fenced(t->store, &app, &old, "fd/a", "fd/a2", &err), 0);
	want(t->store, "fd/a2", "A");
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &old, "fd/a2", 0, &err), 0);
	absent(t->store, "fd/a2");
	/* The lock changes hands: the old holder changes nothing. */
	assert_int_equal(tsec_lock_release(t->store, &app, &old, &err), 0);
	assert_int_equal(tsec_lock_acquire(t->store, &app, "fdm", 60000, 0, &lk, &err), 0);
	assert_int_equal(tsec_store_move_fenced(t->store, &app, &old, "fd/b", "fd/b2", &err),
			 TSEC_ENOTOWNER);
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &old, "fd/b", 0, &err),
			 TSEC_ENOTOWNER);
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &old, "fd/c", 1, &err),
			 TSEC_ENOTOWNER);
	want(t->store, "fd/b", "B");
	want(t->store, "fd/c/d", "D");
	absent(t->store, "fd/b2");
	forged = lk;
	forged.fence = old.fence;
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &forged, "fd/b", 0, &err),
			 TSEC_ENOTOWNER);
	want(t->store, "fd/b", "B");
	/* The holder's recursive delete; the usual errors under a fence. */
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &lk, "fd/c", 1, &err), 0);
	absent(t->store, "fd/c/d");
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &lk, "fd/none", 0, &err),
			 TSEC_ENOENT);
	assert_int_equal(tsec_store_move_fenced(t->store, &app, &lk, "fd/none", "fd/x", &err),
			 TSEC_ENOENT);
	/* Released: refused as a fenced put is. */
	assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &lk, "fd/b", 0, &err),
			 TSEC_ENOENT);
	assert_int_equal(tsec_store_move_fenced(t->store, &app, &lk, "fd/b", "fd/b3", &err),
			 TSEC_ENOENT);
	want(t->store, "fd/b", "B");
	absent(t->store, "fd/b3");
}

static void test_conf_deadline(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock a, b;
	struct tsec_error err;
	int64_t t0, shift;

	assert_int_equal(tsec_lock_acquire(t->store, &app, "dl", 600000, 0, &a, &err), 0);
	/* In virtual time: exact and instant (see test_lock_deadline). */
	atomic_store(&tsec__clock_virtual, true);
	t0 = tsec__mono_ms();
	shift = tsec__clock_shift();
	assert_int_equal(tsec_lock_acquire(t->store, &app, "dl", 1000, 80, &b, &err), TSEC_ETIMEDOUT);
	atomic_store(&tsec__clock_virtual, false);
	assert_true(tsec__mono_ms() - t0 >= 80);
	assert_true(tsec__clock_shift() - shift <= 80);
	/* A huge timeout does not overflow: it waits, and the release ends it. */
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), 0);
	assert_int_equal(tsec_lock_acquire(t->store, &app, "dl", 1000, UINT64_MAX, &b, &err), 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &b, &err), 0);
}

/* Threads racing for one lock: one holder at a time, fences increase. */
struct contend {
	struct tsec_store *s;
	atomic_int inside, overlaps, rounds;
	_Atomic uint64_t last_fence;
	atomic_int fence_backwards;
};

static void *contender(void *arg)
{
	struct contend *c = arg;
	struct tsec_error err;
	struct tsec_lock lk;

	for (int i = 0; i < 25; i++) {
		if (tsec_lock_acquire(c->s, &app, "contended", 60000, 60000, &lk, &err))
			continue;
		if (atomic_fetch_add(&c->inside, 1))
			atomic_fetch_add(&c->overlaps, 1);
		if (lk.fence <= atomic_load(&c->last_fence))
			atomic_fetch_add(&c->fence_backwards, 1);
		atomic_store(&c->last_fence, lk.fence);
		atomic_fetch_sub(&c->inside, 1);
		tsec_lock_release(c->s, &app, &lk, &err);
		atomic_fetch_add(&c->rounds, 1);
	}
	return NULL;
}

static void test_conf_contention(void **state)
{
	struct tu_store *t = *state;
	struct contend c = { .s = t->store };
	pthread_t th[6];

	for (int i = 0; i < 6; i++)
		assert_int_equal(pthread_create(&th[i], NULL, contender, &c), 0);
	for (int i = 0; i < 6; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&c.rounds), 150);
	assert_int_equal(atomic_load(&c.overlaps), 0);
	assert_int_equal(atomic_load(&c.fence_backwards), 0);
}

/* A recursive delete is a barrier: nothing below it stays readable,
 * through any alias, cached or not. */
static void test_conf_prefix_delete_barrier(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;
	int ex;

	put(t->store, "bar/a", "1");
	put(t->store, "bar/sub/b", "2");
	want(t->store, "bar/a", "1");                  /* now cached, if a cache */
	want(t->store, "bar//sub/./b", "2");
	assert_int_equal(tsec_store_delete(t->store, &app, "bar", 1, &err), 0);
	absent(t->store, "bar/a");
	absent(t->store, "bar/sub/b");
	absent(t->store, "/bar/sub//b");
	assert_int_equal(tsec_store_exists(t->store, &app, "bar/a", &ex, &err), 0);
	assert_false(ex);
	/* And a moved value is not served from its old name. */
	put(t->store, "bar2/x", "moved");
	want(t->store, "bar2/x", "moved");
	assert_int_equal(tsec_store_move(t->store, &app, "bar2/x", "bar2/y", &err), 0);
	absent(t->store, "bar2/x");
	want(t->store, "bar2/y", "moved");
}

/*
 * Groups of keys of different lengths and shapes (issue 17, defect 16):
 * the memory backend sized a folder node for one key and filled it with
 * another's (a heap overflow ASan reports), and it accepted a group
 * whose keys are a value and a folder of each other.
 */
static void test_conf_group_shapes(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;
	struct tsec_put grow[3] = {
		{ "gs/a", "1", 1 },
		{ "gs/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/z/long-name", "2", 1 },
		{ "gs/bb/cc/dd/ee/ff/gg/hh/ii/jj/kk/ll/mm/nn/oo/pp/qq/rr/ss/tt", "3", 1 },
	};
	struct tsec_put nest[2] = { { "gn/a/b/c", "deep", 4 }, { "gn/a", "flat", 4 } };
	struct tsec_put nest2[2] = { { "gn/x", "flat", 4 }, { "gn/x/y", "deep", 4 } };
	int ex;

	assert_int_equal(tsec_store_put_many(t->store, &app, grow, 3, &err), 0);
	want(t->store, grow[1].key, "2");
	want(t->store, grow[2].key, "3");
	assert_int_equal(tsec_store_put_many(t->store, &app, nest, 2, &err), TSEC_EEXIST);
	assert_int_equal(tsec_store_put_many(t->store, &app, nest2, 2, &err), TSEC_EEXIST);
	absent(t->store, "gn/a/b/c");
	absent(t->store, "gn/x");
	assert_int_equal(tsec_store_exists(t->store, &app, "gn", &ex, &err), 0);
	assert_false(ex);
}

/*
 * Deleting a folder's last value leaves no folder behind: a value may
 * then stand where the folder stood (the file backend kept the empty
 * folder, and refused).
 */
static void test_conf_delete_leaves_no_folder(void **state)
{
	struct tu_store *t = *state;
	struct tsec_error err;
	int ex;

	put(t->store, "dl/a/b", "1");
	assert_int_equal(tsec_store_delete(t->store, &app, "dl/a/b", 0, &err), 0);
	assert_int_equal(tsec_store_exists(t->store, &app, "dl/a", &ex, &err), 0);
	assert_false(ex);
	put(t->store, "dl/a", "now a value");
	want(t->store, "dl/a", "now a value");
	put(t->store, "dl/p/q/r/s", "1");
	assert_int_equal(tsec_store_delete(t->store, &app, "dl/p/q/r/s", 0, &err), 0);
	put(t->store, "dl/p", "value");
	want(t->store, "dl/p", "value");
}

/*
 * Lock state lives outside the key space callers name (issue 17, defect
 * 1): with a lock held, no storage call reads, lists, overwrites or
 * deletes it, and a storage delete never frees the lock for another.
 */
static void test_conf_locks_outside_keys(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock a, b;
	struct tsec_strlist l;
	struct tsec_error err;
	char *v;
	size_t n;
	int ex;

	assert_int_equal(tsec_lock_acquire(t->store, &app, "X", 60000, 0, &a, &err), 0);
	assert_int_equal(tsec_store_get(t->store, &app, "locks/X.lock", &v, &n, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_get(t->store, &app, "locks/X", &v, &n, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_exists(t->store, &app, "locks", &ex, &err), 0);
	assert_false(ex);
	assert_int_equal(tsec_store_list(t->store, &app, "", 1, &l, &err), 0);
	for (size_t i = 0; i < l.n; i++)
		assert_true(strncmp(l.v[i], "locks/", 6) != 0);
	tsec_strlist_free(&l);
	assert_int_equal(tsec_store_delete(t->store, &app, "locks/X.lock", 0, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_delete(t->store, &app, "locks", 1, &err), TSEC_ENOENT);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "X", 60000, &b, &err), TSEC_EBUSY);
	/* A value named like the lock is an ordinary value beside it. */
	put(t->store, "locks/X.lock", "not a lock");
	want(t->store, "locks/X.lock", "not a lock");
	assert_int_equal(tsec_store_delete(t->store, &app, "locks", 1, &err), 0);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "X", 60000, &b, &err), TSEC_EBUSY);
	assert_int_equal(tsec_lock_renew(t->store, &app, &a, 60000, &err), 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), 0);
}

/*
 * Leases of any length (issue 17, defect 6): a ttl of UINT64_MAX, or a
 * deadline past 1e16 ms, is held, never read as ended.
 */
static void test_conf_huge_leases(void **state)
{
	static const uint64_t ttls[] = { UINT64_MAX, 10000000000000000ull, (uint64_t)INT64_MAX,
					 9999999999999999ull };
	struct tu_store *t = *state;
	struct tsec_lock a, b;
	struct tsec_error err;

	for (size_t i = 0; i < sizeof(ttls) / sizeof(ttls[0]); i++) {
		assert_int_equal(tsec_lock_acquire(t->store, &app, "forever", ttls[i], 0, &a, &err), 0);
		assert_true(a.expires_ms > 0);
		assert_int_equal(tsec_lock_try_acquire(t->store, &app, "forever", 1000, &b, &err),
				 TSEC_EBUSY);
		assert_int_equal(tsec_lock_renew(t->store, &app, &a, ttls[i], &err), 0);
		assert_int_equal(tsec_lock_try_acquire(t->store, &app, "forever", 1000, &b, &err),
				 TSEC_EBUSY);
		assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), 0);
	}
}

/*
 * A wall clock that steps (an hour ahead, then an hour back) neither ends
 * a live lease nor stretches an ended one (issue 34, item 3): file and
 * memory judge leases by the boot and monotonic clocks, redis and etcd
 * by the server's lease.  What the holder is told stays true on its own
 * clock: expires_ms on this process's wall clock, at most ttl ahead.
 */
static void test_conf_wall_clock_steps(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock a, b;
	struct tsec_error err;
	int64_t before, left;
	int rc;

	before = tsec__wall_ms();
	assert_int_equal(tsec_lock_acquire(t->store, &app, "clock", 60000, 0, &a, &err), 0);
	assert_true(a.expires_ms >= before + 60000 - 1000 && a.expires_ms <= tsec__wall_ms() + 60000);
	tsec__wall_skew_ms = 3600 * 1000;
	rc = tsec_lock_try_acquire(t->store, &app, "clock", 60000, &b, &err);
	assert_int_equal(rc, TSEC_EBUSY);
	assert_int_equal(tsec_lock_renew(t->store, &app, &a, 60000, &err), 0);
	left = a.expires_ms - tsec__wall_ms();
	assert_true(left > 0 && left <= 60000);
	tsec__wall_skew_ms = 0;
	assert_int_equal(tsec_lock_release(t->store, &app, &a, &err), 0);
	/* Back an hour: a 30 ms lease still ends 30 ms on. */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "clock", 30, 0, &a, &err), 0);
	tsec__wall_skew_ms = -3600 * 1000;
	tsec__clock_advance(31);
	TU_WAIT((rc = tsec_lock_try_acquire(t->store, &app, "clock", 60000, &b, &err)) != TSEC_EBUSY);
	assert_int_equal(rc, 0);
	if (tsec_lock_release(t->store, &app, &b, &err))
		fail_msg("release: %s", err.msg);
	tsec__wall_skew_ms = 0;
}

/*
 * The store's own records (the fleet's policy bundle) are ordinary values
 * under a reserved key (issue 18): compare-and-swap on every backend, and
 * no caller reaches them through a key, a listing or a lock name.
 */
static void test_conf_store_records(void **state)
{
	static const char *const hostile[] = { ".tsec-fleet/policy", ".tsec-fleet",
						"a/.tsec-fleet/policy" };
	struct tu_store *t = *state;
	struct tsec_strlist l;
	struct tsec_lock lk;
	struct tsec_error err;
	char *v = NULL;
	size_t n;

	assert_int_equal(tsec__store_record_get(t->store, "policy", &v, &n, &err), TSEC_ENOENT);
	assert_int_equal(tsec__store_record_cas(t->store, "policy", NULL, 0, "A", 1, &err), 0);
	assert_int_equal(tsec__store_record_cas(t->store, "policy", NULL, 0, "B", 1, &err),
			 TSEC_EBUSY);
	assert_int_equal(tsec__store_record_cas(t->store, "policy", "X", 1, "B", 1, &err),
			 TSEC_EBUSY);
	assert_int_equal(tsec__store_record_cas(t->store, "policy", "A", 1, "B", 1, &err), 0);
	/* A resend of a swap that was made: success, nothing changes. */
	assert_int_equal(tsec__store_record_cas(t->store, "policy", "A", 1, "B", 1, &err), 0);
	assert_int_equal(tsec__store_record_get(t->store, "policy", &v, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(v[0], 'B');
	free(v);
	assert_int_equal(tsec__store_record_put(t->store, "policy", "CC", 2, &err), 0);
	assert_int_equal(tsec__store_record_get(t->store, "policy", &v, &n, &err), 0);
	assert_int_equal(n, 2);
	free(v);
	assert_int_equal(tsec__store_record_get(t->store, "a/b", &v, &n, &err), TSEC_EINVAL);

	put(t->store, "plain", "x");
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		assert_int_equal(tsec_store_get(t->store, &app, hostile[i], &v, &n, &err), TSEC_EKEY);
		assert_int_equal(tsec_store_put(t->store, &app, hostile[i], "x", 1, &err), TSEC_EKEY);
		assert_int_equal(tsec_store_delete(t->store, &app, hostile[i], 1, &err), TSEC_EKEY);
		assert_int_equal(tsec_store_list(t->store, &app, hostile[i], 1, &l, &err), TSEC_EKEY);
	}
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, ".tsec-fleet", 1000, &lk, &err),
			 TSEC_EKEY);
	for (int rec = 0; rec < 2; rec++) {
		assert_int_equal(tsec_store_list(t->store, &app, "", rec, &l, &err), 0);
		assert_int_equal(l.n, 1);
		assert_true(!strncmp(l.v[0], "plain", 5));
		tsec_strlist_free(&l);
	}
}


/* A record of the store's own (the remote store's generations), read. */
static int record_read(struct tsec_store *s, const char *key, char **v, size_t *n)
{
	struct tsec__skey sk;
	struct tsec_error err;

	assert_int_equal(tsec__skey_parse_any(key, &sk, &err), 0);
	return s->be->ops->get(s->be, &sk, 1024, v, n, &err);
}

struct casser {
	struct tsec_store *s;
	int rounds, done, changed;
	char first[200];
};

/* Adds one to the counter record, rounds times, each by a guarded group
 * over what it read (again when another got in first). */
static void *cas_counter(void *arg)
{
	struct casser *c = arg;
	struct tsec_error err;

	for (int i = 0; i < c->rounds; i++) {
		for (;;) {
			char *v = NULL, next[24], mine[32];
			size_t n = 0;
			int rc = record_read(c->s, ".tsec-test/counter", &v, &n), x = 0;
			if (rc == 0)
				x = atoi(v);
			else if (rc != TSEC_ENOENT && !c->first[0])
				snprintf(c->first, sizeof(c->first), "read: %d", rc);
			snprintf(next, sizeof(next), "%d", x + 1);
			snprintf(mine, sizeof(mine), "%d", x + 1);
			struct tsec_put p = { "cas/last", mine, strlen(mine) };
			struct tsec__guarded rec = { ".tsec-test/counter", next, strlen(next),
						     rc == 0 ? v : NULL, rc == 0 ? n : 0 };
			rc = tsec__store_put_checked(c->s, NULL, &p, 1, &rec, &err);
			free(v);
			if (rc == 0) {
				c->done++;
				break;
			}
			if (rc != TSEC_ECHANGED) {
				if (!c->first[0])
					snprintf(c->first, sizeof(c->first), "%d %.150s", rc, err.msg);
				return NULL;
			}
			c->changed++;
		}
	}
	return NULL;
}

/*
 * A group guarded by a record of the store's own (backend contract 4):
 * applied only while the record holds what the writer read, in the same
 * step as the write; a failed guard changes nothing; concurrent
 * read-and-swap writers lose no update.
 */
static void test_conf_guarded_group(void **state)
{
	struct tu_store *t = *state;
	struct tsec_put p = { "cas/value", "one", 3 };
	struct tsec__guarded rec = { ".tsec-test/g", "1", 1, NULL, 0 };
	struct tsec_error err;
	struct tsec_lock lk;
	char *v = NULL;
	size_t n;

	assert_int_equal(tsec__store_put_checked(t->store, NULL, &p, 1, &rec, &err), 0);
	want(t->store, "cas/value", "one");
	assert_int_equal(record_read(t->store, ".tsec-test/g", &v, &n), 0);
	assert_memory_equal(v, "1", 1);
	free(v);
	/* "Absent" no longer holds: nothing of the group is written. */
	p.value = "two";
	rec.value = "2";
	assert_int_equal(tsec__store_put_checked(t->store, NULL, &p, 1, &rec, &err), TSEC_ECHANGED);
	assert_non_null(strstr(err.where, ".tsec-test/g"));
	want(t->store, "cas/value", "one");
	/* Another old value: the same. */
	rec.old = "0";
	rec.oldlen = 1;
	assert_int_equal(tsec__store_put_checked(t->store, NULL, &p, 1, &rec, &err), TSEC_ECHANGED);
	rec.old = "11";
	rec.oldlen = 2;
	assert_int_equal(tsec__store_put_checked(t->store, NULL, &p, 1, &rec, &err), TSEC_ECHANGED);
	want(t->store, "cas/value", "one");
	assert_int_equal(record_read(t->store, ".tsec-test/g", &v, &n), 0);
	assert_memory_equal(v, "1", 1);
	free(v);
	/* The value read: applied. */
	rec.old = "1";
	rec.oldlen = 1;
	assert_int_equal(tsec__store_put_checked(t->store, NULL, &p, 1, &rec, &err), 0);
	want(t->store, "cas/value", "two");
	/* Guarded and fenced: both must hold. */
	/* (A lease the work under it cannot outlast on a loaded machine:
	 * lease_ends ends it.) */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "cas-lock", 600000, 5000, &lk, &err), 0);
	p.value = "three";
	p.len = 5;
	rec.old = "2";
	rec.value = "3";
	assert_int_equal(tsec__store_put_checked(t->store, &lk, &p, 1, &rec, &err), 0);
	want(t->store, "cas/value", "three");
	lease_ends(t->store, &lk);
	p.value = "four";
	p.len = 4;
	rec.old = "3";
	rec.value = "4";
	assert_int_equal(tsec__store_put_checked(t->store, &lk, &p, 1, &rec, &err), TSEC_ENOTOWNER);
	want(t->store, "cas/value", "three");
	/* Read-and-swap from several threads: every increment lands once. */
	{
		bool net = !strcmp(cur->backend, "etcd") || !strcmp(cur->backend, "redis");
		struct casser c[4];
		pthread_t th[4];
		int total = 0;
		for (int i = 0; i < 4; i++) {
			c[i] = (struct casser){ .s = t->store, .rounds = net ? 8 : 40 };
			assert_int_equal(pthread_create(&th[i], NULL, cas_counter, &c[i]), 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			if (c[i].first[0])
				fail_msg("thread %d: %s", i, c[i].first);
			total += c[i].done;
		}
		assert_int_equal(total, 4 * c[0].rounds);
		assert_int_equal(record_read(t->store, ".tsec-test/counter", &v, &n), 0);
		assert_int_equal(atoi(v), total);
		free(v);
	}
}

/*
 * A subscriber that is not a LocalCache: what a backend's feed tells
 * anything (backend.h, struct tsec__feed_sink).  Counts what it hears.
 */
struct counter_sink {
	atomic_int changed, forget, alive;
	atomic_int saw_key;              /* the key written */
};

static void count_changed(void *ctx, const char *key)
{
	struct counter_sink *c = ctx;

	if (!key)
		atomic_fetch_add(&c->forget, 1);
	else if (atomic_fetch_add(&c->changed, 1), !strcmp(key, "feed/probe"))
		atomic_store(&c->saw_key, 1);
}

static void count_alive(void *ctx, int64_t sent_ms)
{
	(void)sent_ms;
	atomic_fetch_add(&((struct counter_sink *)ctx)->alive, 1);
}

/*
 * Over a shared backend, a second instance of it (as another broker's)
 * subscribed with a sink of its own hears the store's write and proves
 * itself alive: the feed calls only what the sink gives it, never the
 * LocalCache's functions on a context it does not own.  Without dead(),
 * a break is told as changed(NULL).  On backends without a feed for
 * other writers (file, memory) there is nothing to hear.
 */
static void test_conf_feed_any_subscriber(void **state)
{
	struct tu_store *t = *state;
	const struct tsec__backend_kind *bk = tsec__backend_find(cur->backend);
	struct counter_sink c = { 0 };
	struct tsec__feed_sink sink = { .changed = count_changed, .alive = count_alive,
					.ctx = &c, .bound_ms = 300 };
	struct tsec_store_opts o = {
		.backend = cur->backend, .endpoints = cur->backend[0] == 'e' ? etcd.endpoints
									     : redis.endpoints,
		.prefix = cur_prefix,
	};
	struct tsec__backend *other = NULL;
	struct tsec_error err;

	assert_non_null(bk);
	if (!(bk->caps & TSEC__CAP_SHARED)) {
		assert_true(!bk->feed || bk->caps & TSEC__CAP_ROOT);
		return;
	}
	assert_non_null(bk->feed);
	assert_int_equal(bk->open(&other, &o, &err), 0);
	assert_int_equal(bk->feed(other, &sink, &err), 0);
	/* Alive first: changes acknowledged after that are delivered. */
	TU_WAIT(atomic_load(&c.alive) > 0);
	put(t->store, "feed/probe", "v");
	TU_WAIT(atomic_load(&c.saw_key));
	assert_true(atomic_load(&c.changed) >= 1);
	other->ops->close(other);
}

/* How long a queued waiter stays first without asking again: lease.c's
 * 250 ms (file, memory), redis's 1,000 ms, etcd's lease of 2 s. */
static int64_t waiter_fresh_ms(void)
{
	return cur->backend[0] == 'e' ? 2000 : cur->backend[0] == 'r' ? 1000 : 250;
}

static int64_t real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One try on the backend as waiter w (NULL: a try that does not wait);
 * a lock it got is given back at once when `keep` is false. */
static int try_as(struct tsec__backend *be, const char *name, const uint8_t *w, bool keep,
		  struct tsec__lease *got)
{
	struct tsec_error err;
	int rc = be->ops->lock_try(be, name, 60000, w, got, &err);

	if (rc == 0 && !keep)
		assert_int_equal(be->ops->lock_release(be, name, got->token, &err), 0);
	return rc;
}

/*
 * Waiters are served in the order they came (backend.h), on every
 * backend: with w1 then w2 queued on a held lock, once it is released
 * neither a try that does not wait nor w2 takes it before w1, and after
 * w1 it is w2's: on etcd and redis, a queue, without w2 asking again; on
 * file and memory, one queue slot, which w2 takes when it asks while w1
 * holds the lock (lease.c).  A round decides only when it ran within the time a
 * queued waiter stays first without asking; a slower one proves nothing
 * and runs again on a name of its own, so no speed decides the test.
 */
static void test_conf_waiters_in_turn(void **state)
{
	struct tu_store *t = *state;
	struct tsec__backend *be = t->store->be;
	struct tsec__lease a, b;
	struct tsec_error err;
	uint8_t w1[16], w2[16];
	int rn = -1, r2 = -1, r1 = -1, rn2 = -1, r2b = -1, rounds = 0;
	bool decided = false, fifo = cur->backend[0] == 'e' || cur->backend[0] == 'r';
	char name[32];

	TU_WAIT(decided) {
		int64_t t0;

		snprintf(name, sizeof(name), "turn-%d", ++rounds);
		randombytes_buf(w1, sizeof(w1));
		randombytes_buf(w2, sizeof(w2));
		assert_int_equal(try_as(be, name, NULL, true, &a), 0);
		t0 = real_ms();
		assert_int_equal(try_as(be, name, w1, true, &b), TSEC_EBUSY);
		assert_int_equal(try_as(be, name, w2, true, &b), TSEC_EBUSY);
		assert_int_equal(be->ops->lock_release(be, name, a.token, &err), 0);
		rn = try_as(be, name, NULL, false, &b);
		r2 = try_as(be, name, w2, false, &b);
		r1 = try_as(be, name, w1, true, &a);
		if (real_ms() - t0 >= waiter_fresh_ms() / 2) {
			if (r1 == 0)
				be->ops->lock_release(be, name, a.token, &err);
			continue;                /* too slow to say: again */
		}
		/* One queue slot (lease.c): w2 takes it once w1 left it. */
		if (!fifo)
			assert_int_equal(try_as(be, name, w2, true, &b), TSEC_EBUSY);
		t0 = real_ms();                  /* (w2 asked just before) */
		assert_int_equal(be->ops->lock_release(be, name, a.token, &err), 0);
		rn2 = try_as(be, name, NULL, false, &b);
		r2b = try_as(be, name, w2, false, &b);
		decided = real_ms() - t0 < waiter_fresh_ms() / 2;
	}
	assert_true(decided);
	print_message("%s: decided in round %d\n", cur->name, rounds);
	assert_int_equal(rn, TSEC_EBUSY);        /* w1 and w2 wait: a try waits its turn */
	assert_int_equal(r2, TSEC_EBUSY);        /* w1 came first */
	assert_int_equal(r1, 0);
	assert_int_equal(rn2, TSEC_EBUSY);       /* w2 waits still */
	assert_int_equal(r2b, 0);
}

/*
 * A waiter that stops asking does not keep a lock from others: one whose
 * wait ended unserved leaves the queue at once where the backend can be
 * told (etcd, redis), and any waiter is dropped once it has not asked for
 * its time (lease.c's by the injected clock; redis and etcd by the
 * server's, bounded below by it).
 */
static void test_conf_waiter_that_stops(void **state)
{
	struct tu_store *t = *state;
	struct tsec__backend *be = t->store->be;
	struct tsec__lease a, b;
	struct tsec_error err;
	uint8_t w[16];
	int rc = -1;

	randombytes_buf(w, sizeof(w));
	assert_int_equal(try_as(be, "stops", NULL, true, &a), 0);
	assert_int_equal(try_as(be, "stops", w, true, &b), TSEC_EBUSY);
	assert_int_equal(be->ops->lock_release(be, "stops", a.token, &err), 0);
	if (be->ops->lock_unwait) {
		be->ops->lock_unwait(be, "stops", w);
		assert_int_equal(try_as(be, "stops", NULL, false, &b), 0);
		/* Again, the waiter now just gone quiet. */
		randombytes_buf(w, sizeof(w));
		assert_int_equal(try_as(be, "stops", NULL, true, &a), 0);
		assert_int_equal(try_as(be, "stops", w, true, &b), TSEC_EBUSY);
		assert_int_equal(be->ops->lock_release(be, "stops", a.token, &err), 0);
	}
	tsec__clock_advance(waiter_fresh_ms() + 1);
	TU_WAIT((rc = try_as(be, "stops", NULL, false, &b)) == 0);
	assert_int_equal(rc, 0);
}

#define CONF_TESTS(name) \
	const struct CMUnitTest name[] = { \
		cmocka_unit_test_setup_teardown(test_conf_values_and_folders, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_list, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_delete, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_move, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_group_all_or_nothing, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_failed_group_loses_nothing, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_one_holder_and_takeover, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_fences, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_wall_clock_steps, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_fenced_delete_move, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_deadline, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_contention, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_waiters_in_turn, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_waiter_that_stops, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_prefix_delete_barrier, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_group_shapes, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_delete_leaves_no_folder, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_locks_outside_keys, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_huge_leases, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_store_records, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_guarded_group, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_load_cert_whole, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_load_cert_shapes, setup, teardown), \
		cmocka_unit_test_setup_teardown(test_conf_feed_any_subscriber, setup, teardown), \
	}

/*
 * load_cert over what it may find, the same on every backend: all three
 * (loaded), none (absent), and a folder where the key should be (counted
 * as missing: incomplete, never read as a value).
 */
static void test_conf_load_cert_shapes(void **state)
{
	struct tu_store *t = *state;
	struct tsec_cert_files f;
	struct tsec_error err;

	put(t->store, "certificates/acme/f.org/f.org.crt", "c");
	put(t->store, "certificates/acme/f.org/f.org.key/inner", "x");
	put(t->store, "certificates/acme/f.org/f.org.json", "m");
	assert_int_equal(tsec_store_load_cert(t->store, &app, "acme", "f.org", &f, &err),
			 TSEC_EINCOMPLETE);
	assert_null(f.cert);
	assert_int_equal(tsec_store_load_cert(t->store, &app, "acme", "none.org", &f, &err),
			 TSEC_ENOENT);
	put(t->store, "certificates/acme/g.org/g.org.crt", "c");
	put(t->store, "certificates/acme/g.org/g.org.key", "k");
	put(t->store, "certificates/acme/g.org/g.org.json", "m");
	assert_int_equal(tsec_store_load_cert(t->store, &app, "acme", "g.org", &f, &err), 0);
	assert_string_equal(f.key, "k");
	tsec_cert_files_free(&f);
}

/*
 * A certificate read while it is replaced: load_cert answers the three
 * files of one write, never the certificate of one and the key of
 * another (a TLS host would serve a certificate with a key that does not
 * match it).  Bounded by counts: the writer replaces the three files
 * CERT_WRITES times as one group; the reader reads until it is done.
 */
enum { CERT_WRITES = 300 };

struct rewriter {
	struct tsec_store *s;
	atomic_int done;
	int rc;
};

static void *rewrite_cert(void *arg)
{
	struct rewriter *r = arg;
	char v[3][32];
	struct tsec_put p[3] = {
		{ "certificates/acme/whole.org/whole.org.crt", v[0], 0 },
		{ "certificates/acme/whole.org/whole.org.key", v[1], 0 },
		{ "certificates/acme/whole.org/whole.org.json", v[2], 0 },
	};
	struct tsec_error err;

	for (int i = 1; i <= CERT_WRITES && !r->rc; i++) {
		for (int j = 0; j < 3; j++)
			p[j].len = (size_t)snprintf(v[j], sizeof(v[j]), "%c-%d", "ckm"[j], i);
		r->rc = tsec_store_put_many(r->s, &app, p, 3, &err);
	}
	atomic_store(&r->done, 1);
	return NULL;
}

static void test_conf_load_cert_whole(void **state)
{
	struct tu_store *t = *state;
	struct rewriter r = { .s = t->store };
	unsigned long reads = 0, torn = 0;
	char first[160] = "";
	pthread_t th;

	{
		struct tsec_put p[3] = {
			{ "certificates/acme/whole.org/whole.org.crt", "c-0", 3 },
			{ "certificates/acme/whole.org/whole.org.key", "k-0", 3 },
			{ "certificates/acme/whole.org/whole.org.json", "m-0", 3 },
		};
		struct tsec_error err;
		assert_int_equal(tsec_store_put_many(t->store, &app, p, 3, &err), 0);
	}
	assert_int_equal(pthread_create(&th, NULL, rewrite_cert, &r), 0);
	while (!atomic_load(&r.done)) {
		struct tsec_cert_files f;
		struct tsec_error err;
		int rc = tsec_store_load_cert(t->store, &app, "acme", "whole.org", &f, &err);

		reads++;
		if (rc) {
			if (!torn++)
				snprintf(first, sizeof(first), "error %d: %.100s", rc, err.msg);
			continue;
		}
		if (strcmp(f.cert + 1, f.key + 1) || strcmp(f.cert + 1, f.meta + 1)) {
			if (!torn++)
				snprintf(first, sizeof(first), "%.20s, %.20s, %.20s", f.cert, f.key,
					 f.meta);
		}
		tsec_cert_files_free(&f);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(r.rc, 0);
	if (torn)
		fail_msg("%lu of %lu reads were not one write's three files; first: %s", torn,
			 reads, first);
}

int main(void)
{
	static const struct variant variants[] = {
		{ "file", 0, "conformance: file" },
		{ "memory", 0, "conformance: memory" },
		{ "file", 1 << 20, "conformance: LocalCache over file" },
		{ "memory", 1 << 20, "conformance: LocalCache over memory" },
		{ "etcd", 0, "conformance: etcd" },
		{ "etcd", 1 << 20, "conformance: LocalCache over etcd" },
		{ "redis", 0, "conformance: redis" },
		{ "redis", 1 << 20, "conformance: LocalCache over redis" },
	};
	CONF_TESTS(tests);
	int failed = 0;

	/* The real servers, on loopback, for the whole run. */
	if (tu_etcd_start(&etcd, 1) || tu_redis_start(&redis)) {
		fprintf(stderr, "conformance: cannot start etcd and redis-server "
			"(scripts/deps.sh servers installs them)\n");
		tu_server_stop(&etcd);
		tu_server_stop(&redis);
		return 1;
	}
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		cur = &variants[v];
		failed += _cmocka_run_group_tests(cur->name, tests, sizeof(tests) / sizeof(tests[0]),
						  NULL, NULL);
	}
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	return failed ? 1 : 0;
}
