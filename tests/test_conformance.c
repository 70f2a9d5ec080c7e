/*
 * One conformance suite for the store.h contract, run unchanged over
 * every backend and over a LocalCache on each (tests/conformance_harness.c):
 * errors, folders, listing, move never replaces, groups all or nothing
 * and serialised, the store's records and guarded groups, the feed, and
 * the cache's barrier.  Locks are test_conformance_locks.c.
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
#include "tests/conformance_harness.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"

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
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_conf_values_and_folders, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_delete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_move, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_group_all_or_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_failed_group_loses_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_prefix_delete_barrier, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_group_shapes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_delete_leaves_no_folder, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_store_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_guarded_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_load_cert_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_load_cert_shapes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_feed_any_subscriber, setup, teardown),
	};

	return conf_run("conformance", tests, sizeof(tests) / sizeof(tests[0])) ? 1 : 0;
}
