/* verify_module: command-line front of verifier/verify.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/module.h"
#include "verifier/verify.h"

#define DEFAULT_POLICY "examples/policy.json"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: verify_module [options] MODULE.so\n"
		"       verify_module [options] [--archive] URL NAME DIGEST\n"
		"\n"
		"Loads MODULE.so through the MemoryBus and times sequential Evaluate\n"
		"and Check calls, checking every answer against the example policy.\n"
		"\n"
		"  --policy FILE   policy to load (default: %s)\n"
		"  --workload FILE requests and the answers the policy must give\n"
		"                  (default: built in, for the example policy; see\n"
		"                  examples/workload.json)\n"
		"  --calls N       measured calls per method (default: 500)\n"
		"  --warmup N      warm-up rounds before measuring (default: 100)\n"
		"  --json          print one JSON object instead of the table\n"
		"  --csv           print latency rows as the benchmarks do (for perf/abba.sh)\n"
		"  --archive URL NAME DIGEST  fetch URL/NAME (file, http, https), check its\n"
		"                  SHA-256 against DIGEST, unpack it privately and time the\n"
		"                  module inside (with its policy.json unless --policy)\n"
		"  --max-unpacked MiB, --max-entry MiB, --max-entries N\n"
		"                  archive bounds, counted while unpacking (defaults 512 MiB,\n"
		"                  256 MiB, 10000)\n"
		"  -h, --help      this text\n"
		"\n"
		"Environment:\n"
		"  TINYSECURITY_PERF_BUDGET=1          fail (exit 1) when p50 > %llu us or\n"
		"                                      p99 > %llu us; refuse debug builds (exit 2)\n"
		"  TINYSECURITY_PERF_BUDGET_P50_US=N   tighten the p50 limit\n"
		"  TINYSECURITY_PERF_BUDGET_P99_US=N   tighten the p99 limit\n",
		DEFAULT_POLICY, TSEC_BUDGET_P50_NS / 1000, TSEC_BUDGET_P99_NS / 1000);
}

static int count(const char *flag, const char *v, unsigned *out)
{
	unsigned long n;
	char *end;

	if (!v) {
		fprintf(stderr, "verify_module: %s needs a value\n", flag);
		return -1;
	}
	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || *end || !*v || n > 100000000ul) {
		fprintf(stderr, "verify_module: %s: '%s' is not a count\n", flag, v);
		return -1;
	}
	*out = (unsigned)n;
	return 0;
}

/* The values of the options that take one; 0, or -1 when refused (said). */
static int option_value(int argc, char **argv, int *i, struct tsec_verify_opts *o,
			const char *archive[3])
{
	const char *a = argv[*i];

	if (!strcmp(a, "--policy") || !strcmp(a, "--workload")) {
		if (*i + 1 >= argc) {
			fprintf(stderr, "verify_module: %s needs a file\n", a);
			return -1;
		}
		if (a[2] == 'p') {
			o->policy = argv[++*i];
			o->policy_given = 1;
		} else {
			o->workload = argv[++*i];
		}
	} else if (!strcmp(a, "--archive")) {
		if (*i + 3 >= argc) {
			fprintf(stderr, "verify_module: --archive needs URL NAME DIGEST\n");
			return -1;
		}
		for (int k = 0; k < 3; k++)
			archive[k] = argv[++*i];
	} else if (!strcmp(a, "--calls") || !strcmp(a, "--warmup")) {
		return count(a, *i + 1 < argc ? argv[++*i] : NULL,
			     a[2] == 'c' ? &o->calls : &o->warmup);
	} else if (!strcmp(a, "--max-unpacked") || !strcmp(a, "--max-entry")) {
		unsigned mib;

		if (count(a, *i + 1 < argc ? argv[++*i] : NULL, &mib) || mib == 0)
			return -1;
		*(a[6] == 'u' ? &o->max_unpacked : &o->max_entry) = (uint64_t)mib << 20;
	} else if (!strcmp(a, "--max-entries")) {
		if (count(a, *i + 1 < argc ? argv[++*i] : NULL, &o->max_entries) || !o->max_entries)
			return -1;
	} else {
		fprintf(stderr, "verify_module: unknown option %s\n", a);
		usage(stderr);
		return -1;
	}
	return 0;
}

/* One value is a module; three are an archive, as --archive takes them
 * (the published form: URL, file name, SHA-256).  0, or -1 (said). */
static int take_values(struct tsec_verify_opts *o, const char *archive[3],
		       const char *const pos[3], int npos)
{
	if (npos == 1 && !archive[0]) {
		o->module = pos[0];
	} else if (npos == 3 && !archive[0]) {
		for (int k = 0; k < 3; k++)
			archive[k] = pos[k];
	} else if (npos) {
		fprintf(stderr, "verify_module: %s; give MODULE.so, or URL NAME DIGEST%s\n",
			archive[0] ? "--archive takes no other values" : "two values",
			archive[0] ? "" : " (with or without --archive)");
		return -1;
	}
	if (!o->module && !archive[0]) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *archive[3] = { NULL, NULL, NULL }, *pos[3];
	int npos = 0;
	struct tsec_verify_opts o = {
		.policy = DEFAULT_POLICY,
		.calls = 500,
		.warmup = 100,
		.verifier_build = TSEC_BUILD_THIS,
	};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("verify_module %s (%s build)\n", TSEC_VERSION,
			       tsec_build_name(TSEC_BUILD_THIS));
			return 0;
		} else if (!strcmp(a, "--json")) {
			o.json = 1;
		} else if (!strcmp(a, "--csv")) {
			o.csv = 1;
		} else if (a[0] == '-') {
			if (option_value(argc, argv, &i, &o, archive))
				return TSEC_VERIFY_EXIT_REFUSED;
		} else if (npos < 3) {
			pos[npos++] = a;
		} else {
			fprintf(stderr, "verify_module: too many values: give MODULE.so, or URL NAME "
				"DIGEST\n");
			return TSEC_VERIFY_EXIT_REFUSED;
		}
	}
	if (take_values(&o, archive, pos, npos) || tsec_verify_budget_from_env(&o, stderr))
		return TSEC_VERIFY_EXIT_REFUSED;
	if (archive[0])
		return tsec_verify_archive(&o, archive[0], archive[1], archive[2], stdout, stderr);
	return tsec_verify_run(&o, stdout, stderr);
}
