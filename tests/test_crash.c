/*
 * The file backend across crashes and processes: a writer killed with
 * SIGKILL at random moments in a bounded loop leaves every group whole or
 * absent and every move under exactly one name once the store reopens,
 * with nothing left over; and six processes contending for one lock all
 * get it, one at a time.
 *
 * The kill points are random, the assertions are not: whatever moment a
 * kill hits, the state after recovery must be one of the allowed ones.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/wait.h"

#define ROUNDS 25
#define PAD 6000

static struct tsec_principal app;
static int ready[2];                 /* a child says "writing now" here */

static void say_ready(void)
{
	ssize_t r = write(ready[1], "r", 1);
	(void)r;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts))
		;
}

/* A store of our own on root, for a child or for recovery. */
static struct tsec_store *open_store(const char *root, struct tsec_bus **bus)
{
	struct tsec_store *s = NULL;
	struct tsec_error err;

	*bus = tu_bus_with_policy("tests/data/store_policy.json");
	if (tsec_store_open(&s, root, *bus, NULL, &err)) {
		fprintf(stderr, "open: %s\n", err.msg);
		return NULL;
	}
	return s;
}

/* The child: writes generation after generation of a 3-key group. */
static void group_writer(const char *root, unsigned long base)
{
	struct tsec_bus *bus;
	struct tsec_store *s = open_store(root, &bus);
	static char v[3][PAD + 32];
	struct tsec_error err;

	if (!s)
		_exit(3);
	say_ready();
	for (unsigned long gen = base;; gen++) {
		struct tsec_put p[3];
		static const char *const keys[3] = { "crash/a.crt-ish", "crash/b.key-ish",
						     "crash/c.json" };
		for (int i = 0; i < 3; i++) {
			int n = snprintf(v[i], sizeof(v[i]), "gen %lu\n", gen);
			memset(v[i] + n, 'x', PAD);
			p[i] = (struct tsec_put){ keys[i], v[i], (size_t)n + PAD };
		}
		if (tsec_store_put_many(s, &app, p, 3, &err))
			_exit(4);
	}
}

/* The generation a value holds, or 0 when absent. */
static unsigned long gen_of(struct tsec_store *s, const char *key)
{
	struct tsec_error err;
	unsigned long g = 0;
	size_t n;
	char *v;
	int rc = tsec_store_get(s, &app, key, &v, &n, &err);

	if (rc == TSEC_ENOENT)
		return 0;
	if (rc)
		fail_msg("get %s: %s", key, err.msg);
	assert_int_equal(n, strchr(v, '\n') - v + 1 + PAD);
	assert_int_equal(sscanf(v, "gen %lu", &g), 1);
	free(v);
	return g;
}

/* Waits for the child to start writing, then kills it a random moment
 * later. */
static void kill_at_random(pid_t pid)
{
	char c;
	int st;

	assert_int_equal(read(ready[0], &c, 1), 1);
	sleep_us((long)(random() % 20000));
	kill(pid, SIGKILL);
	assert_int_equal(tu_waitpid(pid, &st), pid);
	if (!WIFSIGNALED(st)) /* it was writing, not failing */
		fail_msg("the writer exited with %d before the kill", WEXITSTATUS(st));
}

static void test_crash_groups_whole_or_absent(void **state)
{
	struct tu_store t;
	unsigned long seen_max = 0;
	(void)state;

	tu_store_open(&t);
	srandom((unsigned)time(NULL) ^ (unsigned)getpid());
	for (int round = 0; round < ROUNDS; round++) {
		struct tsec_bus *bus;
		struct tsec_store *s;
		unsigned long a, b, c;
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0) /* each round's generations above every earlier round's */
			group_writer(t.root, (unsigned long)(round + 1) * 1000000000ul);
		kill_at_random(pid);
		/* Reopening recovers: whole groups only, nothing left over. */
		assert_non_null(s = open_store(t.root, &bus));
		a = gen_of(s, "crash/a.crt-ish");
		b = gen_of(s, "crash/b.key-ish");
		c = gen_of(s, "crash/c.json");
		if (a != b || b != c)
			fail_msg("round %d: a torn group: generations %lu %lu %lu", round, a, b, c);
		assert_true(a >= seen_max);  /* a committed group is never undone */
		seen_max = a;
		assert_int_equal(tu_count_litter(t.root), 0);
		tsec_store_close(&s);
		tsec_bus_free(&bus);
	}
	assert_true(seen_max > 0); /* the writer got somewhere */
	tu_store_close(&t);
}

/* The child: moves one value back and forth. */
static void mover(const char *root)
{
	struct tsec_bus *bus;
	struct tsec_store *s = open_store(root, &bus);
	struct tsec_error err;

	if (!s)
		_exit(3);
	say_ready();
	for (;;) {
		/* From wherever the last run left it. */
		int a = tsec_store_move(s, &app, "mv/one", "mv/two", &err);
		int b = a && a != TSEC_ENOENT ? a : tsec_store_move(s, &app, "mv/two", "mv/one", &err);
		if (b && b != TSEC_ENOENT) {
			fprintf(stderr, "move: %s\n", err.msg);
			_exit(4);
		}
	}
}

static void test_crash_move_one_name(void **state)
{
	struct tu_store t;
	struct tsec_error err;
	(void)state;

	tu_store_open(&t);
	assert_int_equal(tsec_store_put(t.store, &app, "mv/one", "moving", 6, &err), 0);
	for (int round = 0; round < ROUNDS; round++) {
		struct tsec_bus *bus;
		struct tsec_store *s;
		int one, two;
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			mover(t.root);
		kill_at_random(pid);
		assert_non_null(s = open_store(t.root, &bus));
		assert_int_equal(tsec_store_exists(s, &app, "mv/one", &one, &err), 0);
		assert_int_equal(tsec_store_exists(s, &app, "mv/two", &two, &err), 0);
		if (one + two != 1)
			fail_msg("round %d: the value is under %d names", round, one + two);
		assert_int_equal(tu_count_litter(t.root), 0);
		tsec_store_close(&s);
		tsec_bus_free(&bus);
	}
	tu_store_close(&t);
}

/* Six processes, one lock: each gets it, never two at once. */
#define PROCS 6
#define WANT_EACH 3

struct shared {
	atomic_int inside, overlaps, stop;
	atomic_int got[PROCS];
};

static void contender(const char *root, struct shared *sh, int me)
{
	struct tsec_bus *bus;
	struct tsec_store *s = open_store(root, &bus);
	struct tsec_error err;
	struct tsec_lock lk;

	if (!s)
		_exit(3);
	while (!atomic_load(&sh->stop)) {
		if (tsec_lock_acquire(s, &app, "fair", 10000, 1000, &lk, &err))
			continue;
		if (atomic_fetch_add(&sh->inside, 1))
			atomic_fetch_add(&sh->overlaps, 1);
		sleep_us(500);
		atomic_fetch_sub(&sh->inside, 1);
		if (tsec_lock_release(s, &app, &lk, &err))
			_exit(5);
		atomic_fetch_add(&sh->got[me], 1);
	}
	_exit(0);
}

static void test_crash_lock_fair_across_processes(void **state)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct tu_store t;
	pid_t pid[PROCS];
	int all = 0;
	(void)state;

	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	tu_store_open(&t);
	for (int i = 0; i < PROCS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			contender(t.root, sh, i);
	}
	/* Until every process had its turns (within the wait's deadline:
	 * the liveness bound, far above what any machine needs). */
	TU_WAIT(all) {
		all = 1;
		for (int i = 0; i < PROCS; i++)
			all &= atomic_load(&sh->got[i]) >= WANT_EACH;
	}
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < PROCS; i++) {
		int st;
		assert_int_equal(tu_waitpid(pid[i], &st), pid[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	for (int i = 0; i < PROCS; i++)
		if (atomic_load(&sh->got[i]) < WANT_EACH)
			fail_msg("process %d got the lock %d times in 20 s", i,
				 atomic_load(&sh->got[i]));
	assert_int_equal(atomic_load(&sh->overlaps), 0);
	tu_store_close(&t);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crash_groups_whole_or_absent),
		cmocka_unit_test(test_crash_move_one_name),
		cmocka_unit_test(test_crash_lock_fair_across_processes),
	};

	app = tu_who("svc:app");
	if (pipe(ready))
		return 2;
	return cmocka_run_group_tests_name("crash", tests, NULL, NULL);
}
