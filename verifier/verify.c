/*
 * verify_module: sequential Evaluate and Check calls through the real
 * MemoryBus, every answer compared with what the example policy says,
 * latency percentiles, and the release budget gate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tinysecurity/bus.h"
#include "verifier/verify.h"

#define ENDPOINT "policy"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_us(const char *name, uint64_t *out, FILE *errf)
{
	const char *v = getenv(name);
	unsigned long long us;
	char *end;

	if (!v || !*v)
		return 0;
	errno = 0;
	us = strtoull(v, &end, 10);
	if (errno || *end || us == 0 || us > UINT64_MAX / 1000) {
		fprintf(errf, "verify_module: %s=%s is not a positive number of microseconds\n",
			name, v);
		return -1;
	}
	if (us * 1000 < *out)
		*out = us * 1000;
	else if (us * 1000 > *out)
		fprintf(errf, "verify_module: %s=%s cannot loosen the budget; keeping %llu us\n",
			name, v, (unsigned long long)(*out / 1000));
	return 0;
}

int tsec_verify_budget_from_env(struct tsec_verify_opts *o, FILE *errf)
{
	const char *b = getenv("TINYSECURITY_PERF_BUDGET");

	o->p50_ns = TSEC_BUDGET_P50_NS;
	o->p99_ns = TSEC_BUDGET_P99_NS;
	o->budget = b && strcmp(b, "0") != 0 && *b;
	if (parse_us("TINYSECURITY_PERF_BUDGET_P50_US", &o->p50_ns, errf) ||
	    parse_us("TINYSECURITY_PERF_BUDGET_P99_US", &o->p99_ns, errf))
		return -1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static uint64_t rank(const uint64_t *v, unsigned n, double q)
{
	size_t r;

	if (n == 0)
		return 0;
	r = (size_t)(q * n + 0.999999);
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	return v[r - 1];
}

void tsec_verify_stats(uint64_t *v, unsigned n, struct tsec_verify_stats *s)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	s->samples = n;
	s->p50_ns = rank(v, n, 0.50);
	s->p90_ns = rank(v, n, 0.90);
	s->p99_ns = rank(v, n, 0.99);
	s->p999_ns = n >= 1000 ? rank(v, n, 0.999) : 0;
	s->max_ns = n ? v[n - 1] : 0;
}

int tsec_verify_within(const struct tsec_verify_opts *o,
		       const struct tsec_verify_stats *s)
{
	return s->p50_ns <= o->p50_ns && s->p99_ns <= o->p99_ns;
}

/* ---- the workload: what the example policy must answer ---- */

static const struct tsec_str web_roles[] = { { "role:web", 8 } };

#define S(lit) { lit, sizeof(lit) - 1 }

static const struct tsec_request req_web_load = {
	.principal = S("svc:web-1"),
	.roles = web_roles,
	.nroles = 1,
	.action = S("storage.load"),
	.resource = S("certificates/acme-v02/example.com/example.com.crt"),
};

static const struct tsec_request req_list_key = {
	.principal = S("svc:acme-issuer"),
	.action = S("storage.list"),
	.resource = S("certificates/acme-v02/example.com/example.com.key"),
};

struct expect {
	uint8_t status;
	const char *rule;
};

static const struct expect exp_web = { TSEC_STATUS_ALLOWED, "web-reads-certs" };
static const struct expect exp_floor = { TSEC_STATUS_FLOOR, "keys-never-listed" };

static int matches(const struct tsec_decision *d, const struct expect *e)
{
	return d->status == e->status &&
	       d->allow == (e->status == TSEC_STATUS_ALLOWED) &&
	       d->nrules >= 1 && strcmp(d->rules[0], e->rule) == 0;
}

static void wrong(FILE *errf, const char *method, unsigned call,
		  const struct tsec_decision *d, const struct expect *e)
{
	fprintf(errf, "verify_module: wrong decision from %s (call %u): got %s (%s%s), want %s (%s)\n",
		method, call, tsec_status_reason(d->status),
		d->nrules ? d->rules[0] : "", d->detail,
		tsec_status_reason(e->status), e->rule);
}

/* One measured Evaluate; returns its time or 0 on a wrong answer. */
static uint64_t one_evaluate(struct tsec_bus *bus, struct tsec_report *rep,
			     unsigned call, FILE *errf)
{
	struct tsec_error err;
	uint64_t t0, t1;
	int rc;

	t0 = now_ns();
	rc = tsec_bus_evaluate(bus, ENDPOINT, &req_web_load, rep, &err);
	t1 = now_ns();
	if (rc) {
		fprintf(errf, "verify_module: evaluate failed: %s\n", err.msg);
		return 0;
	}
	if (!matches(&rep->decision, &exp_web)) {
		wrong(errf, "evaluate", call, &rep->decision, &exp_web);
		return 0;
	}
	return t1 - t0 ? t1 - t0 : 1;
}

static uint64_t one_check(struct tsec_bus *bus, unsigned call, FILE *errf)
{
	const struct tsec_request reqs[2] = { req_web_load, req_list_key };
	struct tsec_decision out[2];
	struct tsec_error err;
	uint64_t t0, t1;
	int rc;

	t0 = now_ns();
	rc = tsec_bus_check(bus, ENDPOINT, reqs, 2, out, &err);
	t1 = now_ns();
	if (rc) {
		fprintf(errf, "verify_module: check failed: %s\n", err.msg);
		return 0;
	}
	if (!matches(&out[0], &exp_web)) {
		wrong(errf, "check[0]", call, &out[0], &exp_web);
		return 0;
	}
	if (!matches(&out[1], &exp_floor)) {
		wrong(errf, "check[1]", call, &out[1], &exp_floor);
		return 0;
	}
	return t1 - t0 ? t1 - t0 : 1;
}

static void print_ns(FILE *out, uint64_t ns)
{
	if (ns < 10000)
		fprintf(out, " %8lluns", (unsigned long long)ns);
	else if (ns < 10000000)
		fprintf(out, " %8.1fus", ns / 1e3);
	else
		fprintf(out, " %8.1fms", ns / 1e6);
}

static void print_row(FILE *out, const char *name,
		      const struct tsec_verify_stats *s)
{
	fprintf(out, "%-9s %7u", name, s->samples);
	print_ns(out, s->first_ns);
	print_ns(out, s->p50_ns);
	print_ns(out, s->p90_ns);
	print_ns(out, s->p99_ns);
	if (s->samples >= 1000)
		print_ns(out, s->p999_ns);
	else
		fprintf(out, " %10s", "-");
	print_ns(out, s->max_ns);
	fputc('\n', out);
}

static void json_stats(FILE *out, const char *name,
		       const struct tsec_verify_stats *s, int comma)
{
	fprintf(out, "\"%s\": {\"samples\": %u, \"p50_ns\": %llu, \"p90_ns\": %llu, "
		"\"p99_ns\": %llu, \"p999_ns\": ", name, s->samples,
		(unsigned long long)s->p50_ns, (unsigned long long)s->p90_ns,
		(unsigned long long)s->p99_ns);
	if (s->samples >= 1000)
		fprintf(out, "%llu", (unsigned long long)s->p999_ns);
	else
		fputs("null", out);
	fprintf(out, ", \"max_ns\": %llu, \"first_ns\": %llu}%s",
		(unsigned long long)s->max_ns, (unsigned long long)s->first_ns,
		comma ? ", " : "");
}

static void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

int tsec_verify_run(const struct tsec_verify_opts *o, FILE *out, FILE *errf)
{
	struct tsec_verify_stats ev = { 0 }, ck = { 0 };
	struct tsec_module_info info;
	struct tsec_report *rep = NULL;
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	uint64_t *tev = NULL, *tck = NULL;
	int rc = TSEC_VERIFY_EXIT_REFUSED, pass;

	if (!o->module || !o->policy || o->calls == 0) {
		fprintf(errf, "verify_module: need a module, a policy and --calls >= 1\n");
		goto out;
	}
	if (o->budget && o->verifier_build != TSEC_BUILD_RELEASE) {
		fprintf(errf, "verify_module: refusing to time a %s build of verify_module "
			"with TINYSECURITY_PERF_BUDGET set; build with MODE=release\n",
			tsec_build_name(o->verifier_build));
		goto out;
	}
	rep = malloc(sizeof(*rep));
	tev = malloc(sizeof(*tev) * o->calls);
	tck = malloc(sizeof(*tck) * o->calls);
	if (!rep || !tev || !tck || tsec_bus_new(&bus)) {
		fprintf(errf, "verify_module: out of memory\n");
		goto out;
	}
	if (tsec_bus_load_file(bus, ENDPOINT, o->module, o->policy, &err)) {
		fprintf(errf, "verify_module: cannot load: %s (%s)\n", err.msg,
			tsec_strerror(err.code));
		goto out;
	}
	tsec_bus_info(bus, ENDPOINT, &info);
	if (o->budget && info.build != TSEC_BUILD_RELEASE) {
		fprintf(errf, "verify_module: refusing to time a %s build of module %s "
			"with TINYSECURITY_PERF_BUDGET set; build with MODE=release\n",
			tsec_build_name(info.build), o->module);
		goto out;
	}

	rc = TSEC_VERIFY_EXIT_FAIL;
	/* The very first call of each method is reported on its own. */
	if (!(ev.first_ns = one_evaluate(bus, rep, 0, errf)) ||
	    !(ck.first_ns = one_check(bus, 0, errf)))
		goto out;
	for (unsigned i = 0; i < o->warmup; i++)
		if (!one_evaluate(bus, rep, i, errf) || !one_check(bus, i, errf))
			goto out;
	/* Sequential: all Evaluate calls, then all Check calls. */
	for (unsigned i = 0; i < o->calls; i++)
		if (!(tev[i] = one_evaluate(bus, rep, i, errf)))
			goto out;
	for (unsigned i = 0; i < o->calls; i++)
		if (!(tck[i] = one_check(bus, i, errf)))
			goto out;
	{
		uint64_t f1 = ev.first_ns, f2 = ck.first_ns;
		tsec_verify_stats(tev, o->calls, &ev);
		tsec_verify_stats(tck, o->calls, &ck);
		ev.first_ns = f1;
		ck.first_ns = f2;
	}
	pass = tsec_verify_within(o, &ev) && tsec_verify_within(o, &ck);

	if (o->json) {
		fprintf(out, "{\"build\": \"%s\", \"module_build\": \"%s\", \"module\": ",
			tsec_build_name(o->verifier_build), tsec_build_name(info.build));
		json_string(out, o->module);
		fputs(", \"methods\": {", out);
		json_stats(out, "evaluate", &ev, 1);
		json_stats(out, "check", &ck, 0);
		fprintf(out, "}, \"budget\": {\"enabled\": %s, \"p50_ns\": %llu, "
			"\"p99_ns\": %llu, \"pass\": %s}}\n",
			o->budget ? "true" : "false",
			(unsigned long long)o->p50_ns, (unsigned long long)o->p99_ns,
			pass ? "true" : "false");
	} else {
		fprintf(out, "module   %s (%s %s, %s build, ABI %u.%u)\n", o->module,
			info.name, info.version, tsec_build_name(info.build),
			info.abi_major, info.abi_minor);
		fprintf(out, "verifier %s build; policy %s\n",
			tsec_build_name(o->verifier_build), o->policy);
		fprintf(out, "workload %u sequential calls per method after %u warm-up rounds;\n"
			"         evaluate = 1 request, check = batch of 2 (rule allow + floor deny)\n\n",
			o->calls, o->warmup);
		fprintf(out, "%-9s %7s %10s %10s %10s %10s %10s %10s\n", "method",
			"samples", "first", "p50", "p90", "p99", "p99.9", "max");
		print_row(out, "evaluate", &ev);
		print_row(out, "check", &ck);
		fprintf(out, "\nbudget   p50 <= %llu us, p99 <= %llu us: %s\n",
			(unsigned long long)(o->p50_ns / 1000),
			(unsigned long long)(o->p99_ns / 1000),
			!o->budget ? (pass ? "within (not enforced)" : "exceeded (not enforced)")
				   : pass ? "PASS" : "FAIL");
	}
	if (o->budget && !pass) {
		fprintf(errf, "verify_module: over budget: evaluate p50 %llu ns p99 %llu ns, "
			"check p50 %llu ns p99 %llu ns; limits p50 %llu ns p99 %llu ns\n",
			(unsigned long long)ev.p50_ns, (unsigned long long)ev.p99_ns,
			(unsigned long long)ck.p50_ns, (unsigned long long)ck.p99_ns,
			(unsigned long long)o->p50_ns, (unsigned long long)o->p99_ns);
		rc = TSEC_VERIFY_EXIT_FAIL;
		goto out;
	}
	rc = TSEC_VERIFY_EXIT_OK;
out:
	tsec_bus_free(&bus);
	free(rep);
	free(tev);
	free(tck);
	return rc;
}
