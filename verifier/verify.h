/*
 * verify_module as a library, so tests drive the same code the program
 * runs.  The budget constants live here and nowhere else.
 */
#ifndef TSEC_VERIFY_H
#define TSEC_VERIFY_H

#include <stdint.h>
#include <stdio.h>

/* Release budget: a method fails when p50 or p99 is above these. */
#define TSEC_BUDGET_P50_NS 1000000ull   /* 1 ms */
#define TSEC_BUDGET_P99_NS 10000000ull  /* 10 ms */

#define TSEC_VERIFY_EXIT_OK 0
#define TSEC_VERIFY_EXIT_FAIL 1         /* over budget or wrong decision */
#define TSEC_VERIFY_EXIT_REFUSED 2      /* usage, load error, debug build */

struct tsec_verify_opts {
	const char *module;
	const char *policy;
	unsigned calls;                 /* measured calls per method */
	unsigned warmup;
	int json;
	int csv;                        /* latency rows as the benchmarks print them */
	int budget;                     /* enforce the budget */
	uint64_t p50_ns;                /* limits in force */
	uint64_t p99_ns;
	uint32_t verifier_build;        /* TSEC_BUILD_* of the verifier */
	int policy_given;               /* --policy was given */
	const char *workload;           /* requests and expected answers, or NULL */
	/* Archive mode's bounds, counted while unpacking (0: the default). */
	uint64_t max_unpacked;          /* bytes in all */
	uint64_t max_entry;             /* bytes in one entry */
	unsigned max_entries;
	/* Archive mode: the "archive" member (JSON text) that --json puts in
	 * the one object it prints, or NULL. */
	const char *archive_json;
};

#define TSEC_VERIFY_MAX_UNPACKED (512ull << 20)
#define TSEC_VERIFY_MAX_ENTRY (256ull << 20)
#define TSEC_VERIFY_MAX_ENTRIES 10000u

/* Percentiles of one method, in nanoseconds. */
struct tsec_verify_stats {
	unsigned samples;
	uint64_t first_ns, p50_ns, p90_ns, p99_ns, p999_ns, max_ns;
};

/*
 * Fills o->budget, o->p50_ns and o->p99_ns from TINYSECURITY_PERF_BUDGET,
 * TINYSECURITY_PERF_BUDGET_P50_US and TINYSECURITY_PERF_BUDGET_P99_US.
 * The _US variables may only tighten the limits.  Returns 0, or -1 after
 * printing why to errf when a variable is malformed.
 */
int tsec_verify_budget_from_env(struct tsec_verify_opts *o, FILE *errf);

/*
 * Computes percentiles over v[0..n) (sorted in place); first_ns is left
 * to the caller.  n may be 0.
 */
void tsec_verify_stats(uint64_t *v, unsigned n, struct tsec_verify_stats *s);

/* Whether s passes the limits in o. */
int tsec_verify_within(const struct tsec_verify_opts *o,
		       const struct tsec_verify_stats *s);

/*
 * Loads o->module through a MemoryBus with o->policy, checks builds when
 * the budget is on, runs the workload and prints the report to out.
 * Returns a TSEC_VERIFY_EXIT_* code.
 */
int tsec_verify_run(const struct tsec_verify_opts *o, FILE *out, FILE *errf);

/*
 * Fetches URL/NAME (file://, http://, https://), refuses it unless its
 * SHA-256 is DIGEST (hex), unpacks it into a private temporary folder
 * (refusing absolute paths, ".." and links leaving it), times fetch,
 * verify, unpack, load and the first call, then runs tsec_verify_run on
 * the module it holds (with its policy.json unless o->policy_given).
 * The folder is removed afterwards.  Returns a TSEC_VERIFY_EXIT_* code.
 */
int tsec_verify_archive(const struct tsec_verify_opts *o, const char *url,
			const char *name, const char *digest, FILE *out,
			FILE *errf);

#endif
