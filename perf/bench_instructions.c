/*
 * bench_instructions: N Checks of two and N Evaluates through the bus, for
 * callgrind to count (perf/instructions.sh runs it twice, with N and 2N,
 * and divides the difference by N, so loading and setup cancel out).
 *
 *   build/release/bench_instructions MODULE.so POLICY N
 *
 * The requests are bench_reqs (benchutil.c), as bench_bus times them: a
 * Check of a rule allow and a floor deny, and an Evaluate of the allowed
 * one; each by the endpoint's name, then through its handle.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tinysecurity/bus.h"
#include "perf/benchutil.h"



/* Kept apart so callgrind can count each by name (--toggle-collect). */
__attribute__((noinline)) void instr_check2(struct tsec_bus *bus, struct tsec_decision *d);
__attribute__((noinline)) void instr_evaluate(struct tsec_bus *bus, struct tsec_report *rep);
__attribute__((noinline)) void instr_check2_handle(struct tsec_endpoint *ep, struct tsec_decision *d);
__attribute__((noinline)) void instr_evaluate_handle(struct tsec_endpoint *ep, struct tsec_report *rep);

void instr_check2(struct tsec_bus *bus, struct tsec_decision *d)
{
	struct tsec_error err;

	if (tsec_bus_check(bus, "policy", bench_reqs, 2, d, &err))
		abort();
}

void instr_evaluate(struct tsec_bus *bus, struct tsec_report *rep)
{
	struct tsec_error err;

	if (tsec_bus_evaluate(bus, "policy", &bench_reqs[0], rep, &err))
		abort();
}

/* The same through the endpoint's handle (no lookup by name). */
void instr_check2_handle(struct tsec_endpoint *ep, struct tsec_decision *d)
{
	struct tsec_error err;

	if (tsec_endpoint_check(ep, bench_reqs, 2, d, &err))
		abort();
}

void instr_evaluate_handle(struct tsec_endpoint *ep, struct tsec_report *rep)
{
	struct tsec_error err;

	if (tsec_endpoint_evaluate(ep, &bench_reqs[0], rep, &err))
		abort();
}

int main(int argc, char **argv)
{
	static struct tsec_report rep;
	struct tsec_decision d[2];
	struct tsec_bus *bus = NULL;
	struct tsec_endpoint *ep;
	struct tsec_error err;
	long n;

	if (argc != 4 || (n = atol(argv[3])) <= 0) {
		fprintf(stderr, "usage: bench_instructions MODULE.so POLICY N\n");
		return 2;
	}
	if (tsec_bus_new(&bus) || tsec_bus_load_file(bus, "policy", argv[1], argv[2], &err)) {
		fprintf(stderr, "bench_instructions: %s\n", bus ? err.msg : "no memory");
		return 2;
	}
	for (long i = 0; i < n; i++)
		instr_check2(bus, d);
	for (long i = 0; i < n; i++)
		instr_evaluate(bus, &rep);
	ep = tsec_bus_endpoint(bus, "policy");
	for (long i = 0; i < n; i++)
		instr_check2_handle(ep, d);
	for (long i = 0; i < n; i++)
		instr_evaluate_handle(ep, &rep);
	tsec_bus_free(&bus);
	return 0;
}
