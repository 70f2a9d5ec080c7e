/*
 * The store.h contract for locks, run unchanged over every backend and
 * over a LocalCache on each (tests/conformance_harness.c): one holder,
 * takeover after a lease ends, old owners refused, fences that increase
 * and fence writes, deadlines, contention, huge leases, wall clock steps
 * and waiters served in turn.
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
	/* In virtual time: the waiter's naps move the clock on, so the wait
	 * is exact and instant (it naps no further than the deadline). */
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


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_conf_one_holder_and_takeover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_fences, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_wall_clock_steps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_fenced_delete_move, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_contention, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_waiters_in_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_waiter_that_stops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_locks_outside_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conf_huge_leases, setup, teardown),
	};

	return conf_run("conformance: locks", tests, sizeof(tests) / sizeof(tests[0])) ? 1 : 0;
}
