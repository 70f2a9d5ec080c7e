/*
 * bench_calls: N Checks of one request through a running tsec-broker, one
 * at a time, for callgrind to count the broker's side
 * (perf/broker_instructions.sh runs the broker under callgrind twice, for
 * N and 2N calls, and divides the difference by N).
 *
 *   build/release/bench_calls ENDPOINT N
 *
 * The request is bench_reqs[0] (benchutil.c), the rule allow bench_bus
 * times; the endpoint is an ipc one the broker admits this user on.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tinysecurity/client.h"
#include "perf/benchutil.h"

int main(int argc, char **argv)
{
	struct tsec_client_opts o = { .timeout_ms = 60000 };
	struct tsec_client *c;
	struct tsec_decision d;
	struct tsec_error err;
	long n;

	if (argc != 3 || (n = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: bench_calls ENDPOINT N\n");
		return 2;
	}
	o.endpoint = argv[1];
	if (tsec_client_open(&c, &o, &err)) {
		fprintf(stderr, "bench_calls: %s\n", err.msg);
		return 2;
	}
	for (long i = 0; i < n; i++)
		if (tsec_client_check(c, &bench_reqs[0], 1, &d, &err) || !d.allow) {
			fprintf(stderr, "bench_calls: call %ld: %s\n", i, err.msg);
			tsec_client_close(&c);
			return 1;
		}
	tsec_client_close(&c);
	printf("bench_calls: %ld calls answered\n", n);
	return 0;
}
