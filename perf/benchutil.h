/* Shared helpers of the microbenchmarks: clock, percentiles, CSV. */
#ifndef TSEC_BENCHUTIL_H
#define TSEC_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tinysecurity/types.h"

/*
 * The requests bench_bus and bench_instructions time: [0] is allowed by a
 * rule (svc:web-1 with role web loads a certificate), [1] is denied by a
 * floor (listing keys) on the example policy.
 */
extern const struct tsec_request bench_reqs[2];

/* Monotonic time in nanoseconds. */
uint64_t bench_now(void);

/* Cost of one bench_now() call, median of many, in nanoseconds. */
uint64_t bench_timer_overhead(void);

/*
 * Sorts v[0..n) and prints one CSV row
 * "case,samples,first_ns,p50_ns,p90_ns,p99_ns,p999_ns,max_ns"
 * (p999 empty below 1,000 samples).
 */
void bench_print_latency(const char *name, uint64_t first_ns, uint64_t *v,
			 size_t n);

/* Sorts v[0..n) and returns its nearest-rank quantile q. */
uint64_t bench_quantile(uint64_t *v, size_t n, double q);

/*
 * The module this benchmark times: $TSEC_BENCH_MODULE, or else
 * libtinysecurity_module.so in $TSEC_BENCH_DIR (the build folder of the
 * side perf/abba.sh runs: one driver for both sides), or else beside the
 * benchmark's own program, whatever the working directory.
 */
const char *bench_module(void);

/* The tsec-broker of the same build: in $TSEC_BENCH_DIR, else beside the
 * benchmark's own program. */
const char *bench_broker(void);

/* A loopback TCP port free a moment ago (exits when there is none). */
int bench_free_port(void);

/* How long a broker may take to answer or to stop, in seconds. */
#define BENCH_BROKER_WAIT_S 30

/*
 * Starts this build's tsec-broker with `config` (its stderr to `log`, or
 * /dev/null when NULL) and returns once it answers "health" on `endpoint`
 * (an ipc endpoint this uid may use).  Exits with a message when the
 * broker dies first or does not answer within BENCH_BROKER_WAIT_S: a
 * benchmark never waits on a broker that is gone.
 */
pid_t bench_broker_start(const char *config, const char *endpoint, const char *log);

/*
 * SIGTERM, then waits up to BENCH_BROKER_WAIT_S for the broker to end
 * (SIGKILL after that).  0 when it ended with status 0, else -1 with a
 * message on stderr.
 */
int bench_broker_stop(pid_t pid);

/* Resident set size of this process in KiB, from /proc/self/status. */
long bench_rss_kib(void);

#endif
