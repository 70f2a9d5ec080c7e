/* Internal: the clocks every part reads, in one place. */
#ifndef TSEC_COMMON_CLOCK_H
#define TSEC_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds (durations, deadlines). */
static inline uint64_t tsec__mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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

/* Wall-clock time in unix milliseconds (leases, log lines). */
static inline int64_t tsec__wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + tsec__wall_skew_ms;
}

/*
 * "YYYY-MM-DDTHH:MM:SSZ" (RFC 3339, UTC, no fraction) as unix seconds;
 * -1 for anything else, an impossible date included.
 */
int64_t tsec__utc_parse(const char *s);

#endif
