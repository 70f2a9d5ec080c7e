/* Internal: the clocks every part reads, in one place. */
#ifndef TSEC_COMMON_CLOCK_H
#define TSEC_COMMON_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/*
 * For tests only: how far the test has moved time on, in milliseconds,
 * added to both clocks below and to nothing else.  Leases, locks, the
 * LocalCache's staleness bound and the broker's held-lock table all read
 * these clocks, so a test ends a lease by moving time past it
 * (tsec__clock_advance) instead of sleeping.  It never goes back.  0 in
 * every program; a relaxed load on each read.
 */
extern _Atomic int64_t tsec__clock_shift_ms;

static inline void tsec__clock_advance(int64_t ms)
{
	if (ms > 0)
		atomic_fetch_add_explicit(&tsec__clock_shift_ms, ms, memory_order_relaxed);
}

static inline int64_t tsec__clock_shift(void)
{
	return atomic_load_explicit(&tsec__clock_shift_ms, memory_order_relaxed);
}

/*
 * For tests only: when set, tsec__nap_ms moves the clock on instead of
 * sleeping, so a wait for a deadline runs at once and its length is
 * exact (a lock acquire's backoff).  Only for a test with one thread
 * waiting.  false in every program.
 */
extern _Atomic bool tsec__clock_virtual;

/*
 * The two sleeps; no part sleeps on its own (issue 37: private sleeps
 * bypassed the injected clock).
 *
 * tsec__nap_ns / tsec__nap_ms: a wait a caller's deadline measures (a
 * lock's backoff, a flock looked at again, an etcd retry).  In virtual
 * time they move the clock on instead (a part of a millisecond rounds
 * up to one), so the deadline is met at once and exactly.
 *
 * tsec__sleep_ns: real time whatever the clock: a background thread's
 * backoff (a feed reconnecting, which must not move a test's virtual
 * clock from its own thread) and the memory backend's simulated I/O.
 * Both go on after a signal until the time has passed.
 */
void tsec__nap_ns(uint64_t ns);
void tsec__nap_ms(int64_t ms);
void tsec__sleep_ns(uint64_t ns);

/* The time ms milliseconds from now on clock clk, as the absolute
 * timespec pthread's timed waits take. */
static inline struct timespec tsec__abstime(clockid_t clk, int64_t ms)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/* Monotonic time in nanoseconds (durations, deadlines). */
static inline uint64_t tsec__mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
	       (uint64_t)tsec__clock_shift() * 1000000u;
}

/* Monotonic time in milliseconds. */
static inline int64_t tsec__mono_ms(void)
{
	return (int64_t)(tsec__mono_ns() / 1000000u);
}

/*
 * For tests only: how far this process's wall clock reads ahead of the
 * machine's (a broker on another machine whose clock is wrong).  Set
 * before any thread reads the clock; 0 in every program.
 */
extern int64_t tsec__wall_skew_ms;

/* Wall-clock time in unix milliseconds (what callers are told, log lines;
 * no lease on one machine is judged by it). */
static inline int64_t tsec__wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + tsec__wall_skew_ms +
	       tsec__clock_shift();
}

/* The same in microseconds (fences). */
static inline uint64_t tsec__wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u +
	       (uint64_t)(tsec__wall_skew_ms + tsec__clock_shift()) * 1000u;
}

/*
 * Milliseconds since this machine booted (CLOCK_BOOTTIME, less this
 * process's time namespace's offset: the host's boot clock): the clock
 * every process on the machine shares, whatever namespace it runs in,
 * that never jumps (an NTP step, a wrong wall clock) and that counts a
 * suspend.  The file store's leases are judged on it, with the boot's id
 * (tsec__boot_id: another boot's value means nothing here).
 */
int64_t tsec__boot_ms(void);

/* This boot's id (/proc/sys/kernel/random/boot_id, 36 characters), read
 * once; "" when this process cannot tell which boot it runs in, or how
 * its boot clock reads against the machine's. */
const char *tsec__boot_id(void);

/* 0 when both are known; else -1 and why (into why[0..n)).  A part that
 * judges leases by the boot clock refuses to run without them. */
int tsec__boot_known(char *why, size_t n);

/* A time on the monotonic-style clock `now` reads, as unix milliseconds
 * on this process's wall clock (for callers): now_wall + (t - now). */
static inline int64_t tsec__wall_of(int64_t t, int64_t now)
{
	int64_t wall = tsec__wall_ms();

	if (t == INT64_MAX || t - now > INT64_MAX - wall)
		return INT64_MAX;
	return wall + (t - now);
}

/*
 * "YYYY-MM-DDTHH:MM:SSZ" (RFC 3339, UTC, no fraction) as unix seconds;
 * -1 for anything else, an impossible date included.
 */
int64_t tsec__utc_parse(const char *s);

#endif
