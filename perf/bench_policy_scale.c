/*
 * bench_policy_scale: how Check and compilation scale with policy size.
 *
 *   build/release/bench_policy_scale [MODULE.so [SIZES...]]
 *
 * For each size N (default 10 100 1000 10000 100000) it generates a policy
 * of N rules with distinct principals, roles, resources and domains
 * (floors, denies and allows; some rules for every principal), reloads the
 * module's endpoint with it through the bus (compile_ms: the reload's wall
 * time, JSON parse included), records the growth of resident memory over
 * the previous size's policy (rss_kib: VmRSS after minus before; can be
 * negative when the old, larger-or-smaller policy is freed), and times
 * 20,000 Checks of a batch of two (one allowed by a rule in the middle of
 * the policy, one denied by a floor).
 *
 * Output: one CSV row per size: rules,compile_ms,rss_kib,check_p50_ns,check_p99_ns
 *
 * Then the shapes built to exhaust a compiler, one row each
 * (shape,compile_ms,rss_kib,check_p50_ns): one rule naming 3,000
 * principals and 3,000 resources; 80,000 rules on one resource; 10,000
 * rules on one general glob after "**", asked with a 24-segment key;
 * 32,000 rules, each its own glob under one node.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/bus.h"
#include "perf/benchutil.h"

#define CALLS 20000

struct buf {
	char *p;
	size_t n, cap;
};

__attribute__((format(printf, 2, 3)))
static void add(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < b->cap - b->n)
			break;
		b->cap = b->cap * 2 + 4096;
		if (!(b->p = realloc(b->p, b->cap)))
			exit(2);
	}
	b->n += (size_t)n;
}

enum { FLOOR, DENY, ALLOW_STAR, ALLOW_ROLE, ALLOW_SVC };

static int kind_of(unsigned i)
{
	if (i % 50 == 0)
		return FLOOR;
	if (i % 10 == 0)
		return DENY;
	if (i % 7 == 0)
		return ALLOW_STAR;
	return i % 2 ? ALLOW_ROLE : ALLOW_SVC;
}

static void gen(struct buf *b, unsigned n)
{
	const char *sep = "";

	b->n = 0;
	add(b, "{\"version\": 1, \"floor\": [");
	for (unsigned i = 0; i < n; i++) {
		if (kind_of(i) != FLOOR)
			continue;
		add(b, "%s{\"id\": \"f%u\", \"action\": [\"storage.delete\", \"storage.list\"], "
		    "\"resource\": [\"tenants/t%u/**\"]}", sep, i, i);
		sep = ",";
	}
	add(b, "], \"rules\": [");
	sep = "";
	for (unsigned i = 0; i < n; i++) {
		switch (kind_of(i)) {
		case FLOOR:
			continue;
		case DENY:
			add(b, "%s{\"id\": \"d%u\", \"effect\": \"deny\", \"principal\": [\"svc:t%u\"], "
			    "\"action\": [\"storage.delete\"], \"resource\": [\"certificates/iss%u/d%u.example/*\"], "
			    "\"when\": {\"recursive\": true}}", sep, i, i, i % 5, i);
			break;
		case ALLOW_STAR:
			add(b, "%s{\"id\": \"s%u\", \"effect\": \"allow\", "
			    "\"action\": [\"storage.load\"], \"resource\": [\"public/p%u/*\"]}", sep, i, i);
			break;
		default:
			add(b, "%s{\"id\": \"a%u\", \"effect\": \"allow\", \"principal\": [\"%s:t%u\"], "
			    "\"action\": [\"storage.load\", \"storage.exists\"], "
			    "\"resource\": [\"certificates/iss%u/d%u.example/*.crt\", \"ocsp/d%u.example-*\"], "
			    "\"domain\": [\"d%u.example\", \"*.d%u.example\"], \"when\": {\"size_max\": 65536}}",
			    sep, i, kind_of(i) == ALLOW_ROLE ? "role" : "svc", i, i % 5, i, i, i, i);
			break;
		}
		sep = ",";
	}
	add(b, "]}");
}

/* Policies of n rules for each size: compile time, memory, and Check of
 * two (an allow found among n, a floor). */
static int sizes(struct tsec_bus *bus, struct buf *bp, int argc, char **argv)
{
	static const unsigned defaults[] = { 10, 100, 1000, 10000, 100000 };
	static uint64_t v[CALLS];
	unsigned nsizes = argc > 2 ? (unsigned)(argc - 2) : 5;
	struct tsec_error err;
	struct buf b = *bp;
	int rc = 0;

	for (unsigned s = 0; s < nsizes; s++) {
		unsigned n = argc > 2 ? (unsigned)strtoul(argv[2 + s], NULL, 10) : defaults[s];
		unsigned target = n / 2;
		char principal[32], resource[96], floorres[64];
		struct tsec_str roles[1];
		struct tsec_request reqs[2];
		struct tsec_decision out[2];
		uint64_t t0, compile_ns;
		long rss0, rss1;

		while (target < n && kind_of(target) != ALLOW_SVC && kind_of(target) != ALLOW_ROLE)
			target++;
		if (n < 2 || target >= n) {
			fprintf(stderr, "bench_policy_scale: size %u too small\n", n);
			rc = 2;
			goto out;
		}
		gen(&b, n);
		rss0 = bench_rss_kib();
		t0 = bench_now();
		if (tsec_bus_reload(bus, "policy", b.p, b.n, &err)) {
			fprintf(stderr, "bench_policy_scale: %s %s\n", err.where, err.msg);
			rc = 2;
			goto out;
		}
		compile_ns = bench_now() - t0;
		rss1 = bench_rss_kib();

		memset(reqs, 0, sizeof(reqs));
		snprintf(principal, sizeof(principal), "svc:t%u", target);
		snprintf(resource, sizeof(resource),
			 "certificates/iss%u/d%u.example/d%u.example.crt",
			 target % 5, target, target);
		snprintf(floorres, sizeof(floorres), "tenants/t0/x");
		roles[0] = tsec_str_c(principal + 4);
		reqs[0].principal = tsec_str_c(principal);
		if (kind_of(target) == ALLOW_ROLE) {
			reqs[0].roles = roles;
			reqs[0].nroles = 1;
		}
		reqs[0].action = tsec_str_c("storage.load");
		reqs[0].resource = tsec_str_c(resource);
		reqs[1].principal = tsec_str_c(principal);
		reqs[1].action = tsec_str_c("storage.delete");
		reqs[1].resource = tsec_str_c(floorres);

		for (unsigned i = 0; i < CALLS + 2000; i++) {
			t0 = bench_now();
			tsec_bus_check(bus, "policy", reqs, 2, out, &err);
			if (i >= 2000)
				v[i - 2000] = bench_now() - t0;
			if (out[0].status != TSEC_STATUS_ALLOWED ||
			    out[1].status != TSEC_STATUS_FLOOR) {
				fprintf(stderr, "bench_policy_scale: wrong answer at %u rules: %s / %s\n",
					n, out[0].detail, out[1].detail);
				rc = 1;
				goto out;
			}
		}
		printf("%u,%.2f,%ld,", n, compile_ns / 1e6, rss1 - rss0);
		printf("%llu,", (unsigned long long)bench_quantile(v, CALLS, 0.5));
		printf("%llu\n", (unsigned long long)bench_quantile(v, CALLS, 0.99));
		fflush(stdout);
	}
out:
	*bp = b;
	return rc;
}

/* Policies of one shape each (wide lists, many siblings, long keys):
 * compile time, memory and Check. */
static int shapes(struct tsec_bus *bus, struct buf *bp)
{
	struct tsec_error err;
	struct buf b = *bp;
	int rc = 0;

	printf("shape,compile_ms,rss_kib,check_p50_ns\n");
	for (int shape = 0; shape < 4; shape++) {
		struct tsec_request r;
		struct tsec_decision d;
		long rss0 = bench_rss_kib();
		uint64_t t0, compile_ns;
		static uint64_t lat[CALLS];

		b.n = 0;
		if (shape == 0) {
			add(&b, "{\"version\": 1, \"rules\": [{\"id\": \"wide\", \"effect\": \"allow\","
			    " \"action\": [\"storage.load\"], \"principal\": [");
			for (int i = 0; i < 3000; i++)
				add(&b, "%s\"svc:p%d\"", i ? "," : "", i);
			add(&b, "], \"resource\": [");
			for (int i = 0; i < 3000; i++)
				add(&b, "%s\"certificates/r%d/x/*/y.crt\"", i ? "," : "", i);
			add(&b, "]}]}");
		} else if (shape == 3) {
			/* Distinct glob siblings under one node (issue 21: was
			 * quadratic, 32,000 rules 1.56 s). */
			add(&b, "{\"version\": 1, \"rules\": [");
			for (int i = 0; i < 32000; i++)
				add(&b, "%s{\"id\": \"s%d\", \"effect\": \"allow\", \"action\":"
				    " [\"storage.load\"], \"resource\": [\"certificates/d%d-*/**\"]}",
				    i ? "," : "", i, i);
			add(&b, "]}");
		} else if (shape == 2) {
			add(&b, "{\"version\": 1, \"rules\": [");
			for (int i = 0; i < 10000; i++)
				add(&b, "%s{\"id\": \"g%d\", \"effect\": \"allow\", \"action\":"
				    " [\"storage.load\"], \"resource\": [\"**/*aaaaaaaaab*\"]}",
				    i ? "," : "", i);
			add(&b, "]}");
		} else {
			add(&b, "{\"version\": 1, \"rules\": [");
			for (int i = 0; i < 80000; i++)
				add(&b, "%s{\"id\": \"r%d\", \"effect\": \"allow\", \"action\":"
				    " [\"storage.load\"], \"resource\": [\"certificates/one/x/a/y.crt\"]}",
				    i ? "," : "", i);
			add(&b, "]}");
		}
		t0 = bench_now();
		if (tsec_bus_reload(bus, "policy", b.p, b.n, &err)) {
			fprintf(stderr, "bench_policy_scale: shape %d: %s %s\n", shape, err.where, err.msg);
			rc = 1;
			goto out;
		}
		compile_ns = bench_now() - t0;
		static char longkey[4096];
		if (!longkey[0]) {
			size_t o = 0;
			for (int i = 0; i < 24; i++)
				o += (size_t)snprintf(longkey + o, sizeof(longkey) - o, "%saaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
						      i ? "/" : "");
		}
		memset(&r, 0, sizeof(r));
		r.principal = tsec_str_c("svc:p2999");
		r.action = tsec_str_c("storage.load");
		r.resource = tsec_str_c(shape == 3 ? "certificates/d31999-x/y/z.crt"
					: shape == 2 ? longkey : shape ? "certificates/one/x/a/y.crt"
					      : "certificates/r2999/x/a/y.crt");
		for (int i = 0; i < CALLS; i++) {
			t0 = bench_now();
			if (tsec_bus_check(bus, "policy", &r, 1, &d, &err) || !d.allow)
				abort();
			lat[i] = bench_now() - t0;
		}
		printf("%s,%.2f,%ld,%llu\n", shape == 3 ? "rules_32000_glob_siblings"
					      : shape == 2 ? "rules_10000_one_glob_long_key"
					      : shape ? "rules_80000_one_resource"
						      : "principals_3000_x_resources_3000",
		       compile_ns / 1e6, bench_rss_kib() - rss0,
		       (unsigned long long)bench_quantile(lat, CALLS, 0.5));
	}
out:
	*bp = b;
	return rc;
}

int main(int argc, char **argv)
{
	const char *module = argc > 1 ? argv[1] : bench_module();
	const char *seed = "{\"version\": 1}";
	struct tsec_bus *bus = NULL;
	struct tsec_module_info info;
	struct tsec_error err;
	struct buf b = { 0 };
	int rc;

	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", module, seed, strlen(seed), &err)) {
		fprintf(stderr, "bench_policy_scale: cannot load %s\n", module);
		return 2;
	}
	tsec_bus_info(bus, "policy", &info);
	printf("# bench_policy_scale: module %s build, bench %s build, %d checks of 2 per size\n",
	       tsec_build_name(info.build), tsec_build_name(TSEC_BUILD_THIS), CALLS);
	printf("rules,compile_ms,rss_kib,check_p50_ns,check_p99_ns\n");
	rc = sizes(bus, &b, argc, argv);
	if (!rc)
		rc = shapes(bus, &b);
	free(b.p);
	tsec_bus_free(&bus);
	return rc;
}

