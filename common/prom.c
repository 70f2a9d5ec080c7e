/*
 * The stats reply in Prometheus's text format.  One renderer, used by
 * `tsec stats --prometheus` and by tsec-broker's metrics listener, so
 * both say the same thing.  Method names come from the broker's own
 * table; they are still escaped as label values must be.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/prom.h"
#include "common/stats.h"

const unsigned tsec__lat_bounds_us[TSEC_LAT_BUCKETS] = {
	10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000, 250000,
};

struct out {
	char *p;
	size_t n, cap;
	int bad;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->bad)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->bad = 1;
			return;
		}
		if ((size_t)n < o->cap - o->n) {
			o->n += (size_t)n;
			return;
		}
		{
			size_t nc = (o->cap + (size_t)n + 1) * 2;
			char *np = realloc(o->p, nc);
			if (!np) {
				o->bad = 1;
				return;
			}
			o->p = np;
			o->cap = nc;
		}
	}
}

/* A label value: backslash, quote and newline escaped. */
static void label(struct out *o, const char *s)
{
	for (; s && *s; s++)
		put(o, *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : "%c", *s);
}

/* What runs: the build and module, the policy's hash, revision and
 * time of loading. */
static void info(struct out *o, const json_t *v)
{
	put(o, "# HELP tsec_build_info The broker's build and its module.\n"
	    "# TYPE tsec_build_info gauge\ntsec_build_info{version=\"");
	label(o, json_string_value(json_object_get(v, "version")));
	put(o, "\",build=\"");
	label(o, json_string_value(json_object_get(v, "build")));
	put(o, "\",module=\"");
	label(o, json_string_value(json_object_get(v, "module")));
	put(o, "\"} 1\n# HELP tsec_policy_info The running policy.\n"
	    "# TYPE tsec_policy_info gauge\ntsec_policy_info{sha256=\"");
	label(o, json_string_value(json_object_get(v, "policy_sha256")));
	put(o, "\",revision=\"%lld\"} 1\n",
	    (long long)json_integer_value(json_object_get(v, "policy_revision")));
	put(o, "# HELP tsec_policy_revision The running policy's revision (-1: none).\n"
	    "# TYPE tsec_policy_revision gauge\ntsec_policy_revision %lld\n"
	    "# HELP tsec_policy_loaded_timestamp_seconds When the running policy was "
	    "loaded.\n# TYPE tsec_policy_loaded_timestamp_seconds gauge\n"
	    "tsec_policy_loaded_timestamp_seconds %.3f\n",
	    (long long)json_integer_value(json_object_get(v, "policy_revision")),
	    (double)json_integer_value(json_object_get(v, "policy_loaded_ms")) / 1000.0);
}

/* Calls by method, and each method's latency histogram. */
static void methods(struct out *o, const json_t *bym, const json_t *lat)
{
	const char *k;
	const json_t *v;

	put(o, "# HELP tsec_method_calls_total Calls by method.\n"
	    "# TYPE tsec_method_calls_total counter\n");
	json_object_foreach((json_t *)bym, k, v) {
		put(o, "tsec_method_calls_total{method=\"");
		label(o, k);
		put(o, "\"} %lld\n", (long long)json_integer_value(v));
	}
	put(o, "# HELP tsec_call_duration_seconds Time to answer a call, by method.\n"
	    "# TYPE tsec_call_duration_seconds histogram\n");
	json_object_foreach((json_t *)lat, k, v) {
		const json_t *cum = json_object_get(v, "cumulative");
		size_t nb = json_array_size(cum);

		for (size_t b = 0; b < nb; b++) {
			put(o, "tsec_call_duration_seconds_bucket{method=\"");
			label(o, k);
			if (b < TSEC_LAT_BUCKETS)
				put(o, "\",le=\"%g\"} %lld\n", tsec__lat_bounds_us[b] / 1e6,
				    (long long)json_integer_value(json_array_get(cum, b)));
			else
				put(o, "\",le=\"+Inf\"} %lld\n",
				    (long long)json_integer_value(json_array_get(cum, b)));
		}
		put(o, "tsec_call_duration_seconds_sum{method=\"");
		label(o, k);
		put(o, "\"} %.9f\n", (double)json_integer_value(json_object_get(v, "sum_ns")) / 1e9);
		put(o, "tsec_call_duration_seconds_count{method=\"");
		label(o, k);
		put(o, "\"} %lld\n", nb ? (long long)json_integer_value(json_array_get(cum, nb - 1)) : 0);
	}
}

char *tsec__prometheus(const json_t *st)
{
	static const struct {
		const char *key, *name, *type, *help;
	} plain[] = {
#define C(f, name, help) { #f, name, "counter", help },
#define R(f, name, type, help) { #f, name, type, help },
		TSEC_STAT_COUNTERS(C)
		TSEC_STAT_READ(R)
#undef C
#undef R
	};
	struct out o = { .cap = 4096 };
	const json_t *bym = json_object_get(st, "by_method"), *lat = json_object_get(st, "latency");
	const json_t *v;

	if (!(o.p = malloc(o.cap)))
		return NULL;
	o.p[0] = '\0';
	put(&o, "# HELP tsec_uptime_seconds Seconds since the broker started.\n"
	    "# TYPE tsec_uptime_seconds gauge\ntsec_uptime_seconds %.3f\n",
	    (double)json_integer_value(json_object_get(st, "uptime_ms")) / 1000.0);
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (json_object_get(st, plain[i].key))
			put(&o, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", plain[i].name,
			    plain[i].help, plain[i].name, plain[i].type, plain[i].name,
			    (long long)json_integer_value(json_object_get(st, plain[i].key)));
	if ((v = json_object_get(st, "info")))
		info(&o, v);
	methods(&o, bym, lat);
	if (o.bad) {
		free(o.p);
		return NULL;
	}
	return o.p;
}
