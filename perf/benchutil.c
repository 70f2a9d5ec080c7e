#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf/benchutil.h"

#define S(lit) { lit, sizeof(lit) - 1 }

static const struct tsec_str web_role[] = { S("role:web") };

const struct tsec_request bench_reqs[2] = {
	{ .principal = S("svc:web-1"), .roles = web_role, .nroles = 1,
	  .action = S("storage.load"),
	  .resource = S("certificates/acme-v02/example.com/example.com.crt") },
	{ .principal = S("svc:acme-issuer"), .action = S("storage.list"),
	  .resource = S("certificates/acme-v02/example.com/example.com.key") },
};

uint64_t bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t rank(const uint64_t *v, size_t n, double q)
{
	size_t r = (size_t)(q * (double)n + 0.999999);
	if (n == 0)
		return 0;
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	return v[r - 1];
}

uint64_t bench_quantile(uint64_t *v, size_t n, double q)
{
	qsort(v, n, sizeof(*v), cmp);
	return rank(v, n, q);
}

uint64_t bench_timer_overhead(void)
{
	enum { N = 10001 };
	static uint64_t v[N];
	for (int i = 0; i < N; i++) {
		uint64_t t0 = bench_now();
		v[i] = bench_now() - t0;
	}
	return bench_quantile(v, N, 0.5);
}

void bench_print_latency(const char *name, uint64_t first_ns, uint64_t *v,
			 size_t n)
{
	qsort(v, n, sizeof(*v), cmp);
	printf("%s,%zu,%llu,%llu,%llu,%llu,", name, n,
	       (unsigned long long)first_ns,
	       (unsigned long long)rank(v, n, 0.5),
	       (unsigned long long)rank(v, n, 0.9),
	       (unsigned long long)rank(v, n, 0.99));
	if (n >= 1000)
		printf("%llu", (unsigned long long)rank(v, n, 0.999));
	printf(",%llu\n", (unsigned long long)(n ? v[n - 1] : 0));
}

long bench_rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0) {
			kib = strtol(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kib;
}

/* name beside this program, into buf: build/release/NAME when the
 * program's own path cannot be read. */
static const char *beside(char *buf, size_t cap, const char *name)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	char *slash;

	buf[n > 0 ? n : 0] = '\0';
	if (n <= 0 || !(slash = strrchr(buf, '/')) ||
	    strlen(name) >= cap - (size_t)(slash + 1 - buf)) {
		snprintf(buf, cap, "build/release/%s", name);
		return buf;
	}
	snprintf(slash + 1, cap - (size_t)(slash + 1 - buf), "%s", name);
	return buf;
}

const char *bench_module(void)
{
	static char path[4096];
	const char *env = getenv("TSEC_BENCH_MODULE");

	if (env && *env)
		return env;
	return path[0] ? path : beside(path, sizeof(path), "libtinysecurity_module.so");
}

const char *bench_broker(void)
{
	static char path[4096];

	return path[0] ? path : beside(path, sizeof(path), "tsec-broker");
}
