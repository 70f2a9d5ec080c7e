/*
 * bench_bus: Check (a batch of two) and Evaluate through the MemoryBus on
 * the example policy, 100,000 timed calls each after a warm-up.
 *
 *   build/release/bench_bus [MODULE.so [POLICY.json [CALLS]]]
 *
 * Prints throughput rows (case,sample,iterations,elapsed_ns,ns_per_op:
 * 5 samples of CALLS back-to-back calls, no per-call clock) and latency
 * percentiles (each call timed alone; includes one clock read, whose cost
 * is printed first).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tinysecurity/bus.h"
#include "perf/benchutil.h"



static struct tsec_bus *bus;
static struct tsec_report rep;

static void check2(void)
{
	struct tsec_decision out[2];
	struct tsec_error err;
	if (tsec_bus_check(bus, "policy", bench_reqs, 2, out, &err) ||
	    out[0].status != TSEC_STATUS_ALLOWED || out[1].status != TSEC_STATUS_FLOOR) {
		fprintf(stderr, "bench_bus: wrong check answer\n");
		exit(1);
	}
}

static void evaluate(void)
{
	struct tsec_error err;
	if (tsec_bus_evaluate(bus, "policy", &bench_reqs[0], &rep, &err) ||
	    rep.decision.status != TSEC_STATUS_ALLOWED) {
		fprintf(stderr, "bench_bus: wrong evaluate answer\n");
		exit(1);
	}
}

static void run(const char *name, void (*fn)(void), size_t calls, uint64_t *v)
{
	uint64_t first, t0;

	t0 = bench_now();
	fn();
	first = bench_now() - t0;
	for (size_t i = 0; i < 10000; i++)
		fn();
	for (int s = 0; s < 5; s++) {
		t0 = bench_now();
		for (size_t i = 0; i < calls; i++)
			fn();
		t0 = bench_now() - t0;
		printf("%s,%d,%zu,%llu,%.1f\n", name, s, calls,
		       (unsigned long long)t0, (double)t0 / (double)calls);
	}
	for (size_t i = 0; i < calls; i++) {
		t0 = bench_now();
		fn();
		v[i] = bench_now() - t0;
	}
	printf("latency,");
	bench_print_latency(name, first, v, calls);
}

int main(int argc, char **argv)
{
	const char *module = argc > 1 ? argv[1] : bench_module();
	const char *policy = argc > 2 ? argv[2] : "examples/policy.json";
	size_t calls = argc > 3 ? strtoul(argv[3], NULL, 10) : 100000;
	struct tsec_module_info info;
	struct tsec_error err;
	uint64_t *v;

	if (calls == 0 || !(v = malloc(calls * sizeof(*v))) || tsec_bus_new(&bus))
		return 2;
	if (tsec_bus_load_file(bus, "policy", module, policy, &err)) {
		fprintf(stderr, "bench_bus: %s\n", err.msg);
		return 2;
	}
	tsec_bus_info(bus, "policy", &info);
	printf("# bench_bus: module %s (%s build), bench %s build, policy %s\n",
	       module, tsec_build_name(info.build),
	       tsec_build_name(TSEC_BUILD_THIS), policy);
	printf("# clock read overhead p50: %llu ns (included in latency rows)\n",
	       (unsigned long long)bench_timer_overhead());
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	printf("# latency rows: latency,case,samples,first_ns,p50_ns,p90_ns,p99_ns,p999_ns,max_ns\n");
	run("check2", check2, calls, v);
	run("evaluate", evaluate, calls, v);
	tsec_bus_free(&bus);
	free(v);
	return 0;
}
