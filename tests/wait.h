/*
 * Waiting in tests: for a condition, never for a time.
 *
 *	TU_WAIT(stat_of("reloads") > before);
 *	assert_true(stat_of("reloads") > before);
 *
 * polls the condition, backing off from 1 ms to 20 ms between looks,
 * until it holds or TU_WAIT_SECONDS pass (a deadline for a test that
 * would otherwise hang, far beyond what any machine needs; the assert
 * after it names the failure).  A pause between looks only spaces them:
 * what decides the test is the condition.  To end a lease, move the
 * injected clock on (tsec__clock_advance) instead.
 */
#ifndef TSEC_TESTS_WAIT_H
#define TSEC_TESTS_WAIT_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#ifndef TU_WAIT_SECONDS
#define TU_WAIT_SECONDS 120
#endif

struct tu_waiter {
	struct timespec until;
	long pause_us;
};

static inline struct tu_waiter tu_wait_begin(int seconds)
{
	struct tu_waiter w = { .pause_us = 1000 };

	/* The machine's own monotonic clock: the injected one moves when a
	 * test says so, and a deadline must not. */
	clock_gettime(CLOCK_MONOTONIC, &w.until);
	w.until.tv_sec += seconds;
	return w;
}

/* true: look again (after a pause); false: the deadline passed. */
static inline bool tu_wait_more(struct tu_waiter *w)
{
	struct timespec now, ts;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec > w->until.tv_sec ||
	    (now.tv_sec == w->until.tv_sec && now.tv_nsec >= w->until.tv_nsec))
		return false;
	ts.tv_sec = 0;
	ts.tv_nsec = w->pause_us * 1000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	if (w->pause_us < 20000)
		w->pause_us *= 2;
	return true;
}

#define TU_WAIT_S(cond, seconds) \
	for (struct tu_waiter tu_w_ = tu_wait_begin(seconds); !(cond) && tu_wait_more(&tu_w_);)
#define TU_WAIT(cond) TU_WAIT_S(cond, TU_WAIT_SECONDS)

/*
 * waitpid for a process that should end by itself (a broker told to stop,
 * a child that finishes its part): its pid, with its status in *st, or
 * -1 when it is still running at the deadline; then every thread of it is
 * shown with its stack (where gdb is installed) and it is killed, so the
 * test fails saying where the process was instead of hanging.
 */
static inline pid_t tu_waitpid(pid_t pid, int *st)
{
	pid_t r = 0;
	char cmd[1024];

	TU_WAIT((r = waitpid(pid, st, WNOHANG)) != 0);
	if (r != 0)
		return r;
	fprintf(stderr, "process %d did not end in %d s; its stacks, and those of the "
		"processes under it:\n", (int)pid, TU_WAIT_SECONDS);
	snprintf(cmd, sizeof(cmd),
		 "command -v gdb > /dev/null || exit 0; "
		 "for p in %d $(pgrep -P %d) $(for c in $(pgrep -P %d); do pgrep -P $c; done); do "
		 "echo \"--- pid $p: $(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)\"; "
		 "timeout 60 gdb -p $p -batch -nx -ex 'thread apply all bt' 2>&1 | "
		 "grep -E '^(Thread|#)'; done >&2", (int)pid, (int)pid, (int)pid);
	if (system(cmd) < 0)
		fprintf(stderr, "(cannot run gdb)\n");
	kill(pid, SIGKILL);
	waitpid(pid, st, 0);
	return -1;
}

#endif
