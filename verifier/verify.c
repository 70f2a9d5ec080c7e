/*
 * verify_module: sequential Evaluate and Check calls through the real
 * MemoryBus, every answer compared with what the example policy says,
 * latency percentiles, and the release budget gate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "common/wire.h"
#include "common/clock.h"
#include "verifier/verify.h"

#define ENDPOINT "policy"

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

/* ---- the workload: requests and what the policy must answer ---- */

#define WL_CHECK_MAX 16
#define WL_ROLES_MAX 8

struct expect {
	uint8_t status;
	char rule[TSEC_ID_MAX];      /* "" when any deciding rule will do */
};

struct workload {
	struct tsec_request ev;
	struct expect ev_exp;
	struct tsec_request ck[WL_CHECK_MAX];
	struct expect ck_exp[WL_CHECK_MAX];
	size_t nck;
	struct tsec_str roles[WL_CHECK_MAX + 1][WL_ROLES_MAX];
	json_t *root;                /* owns the strings the requests borrow */
};

#define S(lit) { lit, sizeof(lit) - 1 }

static const struct tsec_str web_roles[] = { S("role:web") };

/* The default: what the example policy must answer. */
static void workload_default(struct workload *w)
{
	static const struct tsec_request web_load = {
		.principal = S("svc:web-1"),
		.roles = web_roles,
		.nroles = 1,
		.action = S("storage.load"),
		.resource = S("certificates/acme-v02/example.com/example.com.crt"),
	};
	static const struct tsec_request list_key = {
		.principal = S("svc:acme-issuer"),
		.action = S("storage.list"),
		.resource = S("certificates/acme-v02/example.com/example.com.key"),
	};

	memset(w, 0, sizeof(*w));
	w->ev = web_load;
	w->ev_exp.status = TSEC_STATUS_ALLOWED;
	snprintf(w->ev_exp.rule, sizeof(w->ev_exp.rule), "web-reads-certs");
	w->ck[0] = web_load;
	w->ck_exp[0] = w->ev_exp;
	w->ck[1] = list_key;
	w->ck_exp[1].status = TSEC_STATUS_FLOOR;
	snprintf(w->ck_exp[1].rule, sizeof(w->ck_exp[1].rule), "keys-never-listed");
	w->nck = 2;
}

/* One entry: {"principal", "roles", "request", "expect": {"status", "rule"}}. */
static int workload_entry(json_t *o, struct tsec_request *r, struct expect *e,
			  struct tsec_str *roles, const char *where, FILE *errf)
{
	json_t *x = json_object_get(o, "expect"), *v;
	const char *st = json_string_value(json_object_get(x, "status"));
	const char *rule = json_string_value(json_object_get(x, "rule"));
	const char *p = json_string_value(json_object_get(o, "principal"));
	struct tsec_error err;
	size_t i;

	if (!p || !st) {
		fprintf(errf, "verify_module: workload %s needs \"principal\" and \"expect\": {\"status\"}\n", where);
		return -1;
	}
	if (tsec__request_from_json(json_object_get(o, "request"), r, true, &err)) {
		fprintf(errf, "verify_module: workload %s.request: %s: %s\n", where, err.where, err.msg);
		return -1;
	}
	r->principal = tsec_str_c(p);
	json_array_foreach(json_object_get(o, "roles"), i, v) {
		if (i >= WL_ROLES_MAX || !json_is_string(v)) {
			fprintf(errf, "verify_module: workload %s.roles: at most %d strings\n", where, WL_ROLES_MAX);
			return -1;
		}
		roles[i] = tsec_str_c(json_string_value(v));
		r->nroles = (uint32_t)i + 1;
	}
	r->roles = roles;
	memset(e, 0, sizeof(*e));
	for (unsigned sidx = 0; sidx <= TSEC_STATUS_DEFAULT; sidx++)
		if (!strcmp(st, tsec__status_name(sidx)))
			e->status = (uint8_t)sidx;
	if (!e->status) {
		fprintf(errf, "verify_module: workload %s.expect.status: one of invalid, floor, denied, allowed, default\n", where);
		return -1;
	}
	if (rule)
		snprintf(e->rule, sizeof(e->rule), "%s", rule);
	return 0;
}

/*
 * Reads a workload file: {"evaluate": ENTRY, "check": [ENTRY, ...]} with
 * 1 to 16 check entries, each ENTRY as workload_entry reads it.
 */
static int workload_load(const char *path, struct workload *w, FILE *errf)
{
	json_error_t je;
	json_t *ck, *v;
	size_t i;
	char where[32];

	memset(w, 0, sizeof(*w));
	w->root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!w->root) {
		fprintf(errf, "verify_module: %s: line %d: %s\n", path, je.line, je.text);
		return -1;
	}
	ck = json_object_get(w->root, "check");
	if (!json_is_array(ck) || json_array_size(ck) == 0 || json_array_size(ck) > WL_CHECK_MAX) {
		fprintf(errf, "verify_module: %s: \"check\" must list 1-%d entries\n", path, WL_CHECK_MAX);
		return -1;
	}
	if (workload_entry(json_object_get(w->root, "evaluate"), &w->ev, &w->ev_exp,
			   w->roles[WL_CHECK_MAX], "evaluate", errf))
		return -1;
	json_array_foreach(ck, i, v) {
		snprintf(where, sizeof(where), "check[%zu]", i);
		if (workload_entry(v, &w->ck[i], &w->ck_exp[i], w->roles[i], where, errf))
			return -1;
	}
	w->nck = json_array_size(ck);
	return 0;
}

static int matches(const struct tsec_decision *d, const struct expect *e)
{
	return d->status == e->status &&
	       d->allow == (e->status == TSEC_STATUS_ALLOWED) &&
	       (!e->rule[0] || (d->nrules >= 1 && strcmp(d->rules[0], e->rule) == 0));
}

static void wrong(FILE *errf, const char *method, unsigned call,
		  const struct tsec_decision *d, const struct expect *e)
{
	fprintf(errf, "verify_module: wrong decision from %s (call %u): got %s (%s%s), want %s (%s)\n",
		method, call, tsec_status_reason(d->status),
		d->nrules ? d->rules[0] : "", d->detail,
		tsec_status_reason(e->status), e->rule[0] ? e->rule : "any rule");
}

/* One measured Evaluate; returns its time or 0 on a wrong answer. */
static uint64_t one_evaluate(struct tsec_bus *bus, const struct workload *w,
			     struct tsec_report *rep, unsigned call, FILE *errf)
{
	struct tsec_error err;
	uint64_t t0, t1;
	int rc;

	t0 = tsec__mono_ns();
	rc = tsec_bus_evaluate(bus, ENDPOINT, &w->ev, rep, &err);
	t1 = tsec__mono_ns();
	if (rc) {
		fprintf(errf, "verify_module: evaluate failed: %s\n", err.msg);
		return 0;
	}
	tsec__decision_seal(&rep->decision); /* outside the time taken */
	if (!matches(&rep->decision, &w->ev_exp)) {
		wrong(errf, "evaluate", call, &rep->decision, &w->ev_exp);
		return 0;
	}
	return t1 - t0 ? t1 - t0 : 1;
}

static uint64_t one_check(struct tsec_bus *bus, const struct workload *w,
			  unsigned call, FILE *errf)
{
	struct tsec_decision out[WL_CHECK_MAX];
	struct tsec_error err;
	uint64_t t0, t1;
	int rc;

	t0 = tsec__mono_ns();
	rc = tsec_bus_check(bus, ENDPOINT, w->ck, w->nck, out, &err);
	t1 = tsec__mono_ns();
	if (rc) {
		fprintf(errf, "verify_module: check failed: %s\n", err.msg);
		return 0;
	}
	for (size_t i = 0; i < w->nck; i++)
		tsec__decision_seal(&out[i]);
	for (size_t i = 0; i < w->nck; i++) {
		if (!matches(&out[i], &w->ck_exp[i])) {
			char what[32];
			snprintf(what, sizeof(what), "check[%zu]", i);
			wrong(errf, what, call, &out[i], &w->ck_exp[i]);
			return 0;
		}
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

static void csv_row(FILE *out, const char *name, const struct tsec_verify_stats *s)
{
	fprintf(out, "latency,%s,%u,%llu,%llu,%llu,%llu,", name, s->samples,
		(unsigned long long)s->first_ns, (unsigned long long)s->p50_ns,
		(unsigned long long)s->p90_ns, (unsigned long long)s->p99_ns);
	if (s->samples >= 1000)
		fprintf(out, "%llu", (unsigned long long)s->p999_ns);
	fprintf(out, ",%llu\n", (unsigned long long)s->max_ns);
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

static void print_json_string(FILE *out, const char *s)
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

/* The measurements, as CSV rows, one JSON object, or a table. */
static void report(const struct tsec_verify_opts *o, FILE *out,
		   const struct tsec_module_info *info, const struct workload *w,
		   const struct tsec_verify_stats *ev,
		   const struct tsec_verify_stats *ck, int pass)
{
	if (o->csv) {
		fputs("# latency rows: latency,case,samples,first_ns,p50_ns,p90_ns,p99_ns,"
		      "p999_ns,max_ns\n", out);
		csv_row(out, "evaluate", ev);
		csv_row(out, "check", ck);
	} else if (o->json) {
		fprintf(out, "{\"build\": \"%s\", \"module_build\": \"%s\", \"module\": ",
			tsec_build_name(o->verifier_build), tsec_build_name(info->build));
		print_json_string(out, o->module);
		fputs(", \"methods\": {", out);
		json_stats(out, "evaluate", ev, 1);
		json_stats(out, "check", ck, 0);
		fprintf(out, "}, \"budget\": {\"enabled\": %s, \"p50_ns\": %llu, "
			"\"p99_ns\": %llu, \"pass\": %s}",
			o->budget ? "true" : "false",
			(unsigned long long)o->p50_ns, (unsigned long long)o->p99_ns,
			pass ? "true" : "false");
		if (o->archive_json)
			fprintf(out, ", \"archive\": %s", o->archive_json);
		fputs("}\n", out);
	} else {
		fprintf(out, "module   %s (%s %s, %s build, ABI %u.%u)\n", o->module,
			info->name, info->version, tsec_build_name(info->build),
			info->abi_major, info->abi_minor);
		fprintf(out, "verifier %s build; policy %s\n",
			tsec_build_name(o->verifier_build), o->policy);
		fprintf(out, "workload %s: %u sequential calls per method after %u warm-up rounds;\n"
			"         evaluate = 1 request, check = batch of %zu\n\n",
			o->workload ? o->workload : "built in (example policy)", o->calls,
			o->warmup, w->nck);
		fprintf(out, "%-9s %7s %10s %10s %10s %10s %10s %10s\n", "method",
			"samples", "first", "p50", "p90", "p99", "p99.9", "max");
		print_row(out, "evaluate", ev);
		print_row(out, "check", ck);
		fprintf(out, "\nbudget   p50 <= %llu us, p99 <= %llu us: %s\n",
			(unsigned long long)(o->p50_ns / 1000),
			(unsigned long long)(o->p99_ns / 1000),
			!o->budget ? (pass ? "within (not enforced)" : "exceeded (not enforced)")
				   : pass ? "PASS" : "FAIL");
}
}

int tsec_verify_run(const struct tsec_verify_opts *o, FILE *out, FILE *errf)
{
	struct tsec_verify_stats ev = { 0 }, ck = { 0 };
	struct workload w = { .root = NULL };
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
	if (!o->workload)
		workload_default(&w);
	else if (workload_load(o->workload, &w, errf))
		goto out;
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
	if (!(ev.first_ns = one_evaluate(bus, &w, rep, 0, errf)) ||
	    !(ck.first_ns = one_check(bus, &w, 0, errf)))
		goto out;
	for (unsigned i = 0; i < o->warmup; i++)
		if (!one_evaluate(bus, &w, rep, i, errf) || !one_check(bus, &w, i, errf))
			goto out;
	/* Sequential: all Evaluate calls, then all Check calls. */
	for (unsigned i = 0; i < o->calls; i++)
		if (!(tev[i] = one_evaluate(bus, &w, rep, i, errf)))
			goto out;
	for (unsigned i = 0; i < o->calls; i++)
		if (!(tck[i] = one_check(bus, &w, i, errf)))
			goto out;
	{
		uint64_t f1 = ev.first_ns, f2 = ck.first_ns;
		tsec_verify_stats(tev, o->calls, &ev);
		tsec_verify_stats(tck, o->calls, &ck);
		ev.first_ns = f1;
		ck.first_ns = f2;
	}
	pass = tsec_verify_within(o, &ev) && tsec_verify_within(o, &ck);

	report(o, out, &info, &w, &ev, &ck, pass);
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
	json_decref(w.root);
	free(rep);
	free(tev);
	free(tck);
	return rc;
}
