/*
 * verify_module's logic: percentiles, the budget's environment, the gate
 * failing on a module that is slow on purpose, and the refusal of debug
 * builds.  No assertion here depends on how fast this machine is: the slow
 * fixture sleeps twice the limit, and the fast runs have no budget.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/testutil.h"
#include "verifier/verify.h"

static struct tsec_verify_opts opts(const char *module)
{
	struct tsec_verify_opts o = {
		.module = module,
		.policy = "examples/policy.json",
		.calls = 20,
		.warmup = 2,
		.p50_ns = TSEC_BUDGET_P50_NS,
		.p99_ns = TSEC_BUDGET_P99_NS,
		.verifier_build = TSEC_BUILD_RELEASE,
	};
	return o;
}

static int run(const struct tsec_verify_opts *o, char *buf, size_t len)
{
	FILE *out = fmemopen(buf, len, "w");
	int rc;

	assert_non_null(out);
	rc = tsec_verify_run(o, out, stderr);
	fclose(out);
	return rc;
}

static void test_verifier_stats(void **state)
{
	uint64_t v[100];
	struct tsec_verify_stats s;
	(void)state;

	for (int i = 0; i < 100; i++)
		v[i] = (uint64_t)(100 - i);
	tsec_verify_stats(v, 100, &s);
	assert_int_equal(s.samples, 100);
	assert_int_equal(s.p50_ns, 50);
	assert_int_equal(s.p90_ns, 90);
	assert_int_equal(s.p99_ns, 99);
	assert_int_equal(s.p999_ns, 0); /* not reported below 1,000 samples */
	assert_int_equal(s.max_ns, 100);

	uint64_t w[2000];
	for (int i = 0; i < 2000; i++)
		w[i] = (uint64_t)i + 1;
	tsec_verify_stats(w, 2000, &s);
	assert_int_equal(s.p999_ns, 1998);
	assert_int_equal(s.p50_ns, 1000);
}

static void test_verifier_within(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	struct tsec_verify_stats s = { .p50_ns = TSEC_BUDGET_P50_NS, .p99_ns = TSEC_BUDGET_P99_NS };
	(void)state;

	assert_true(tsec_verify_within(&o, &s));
	s.p50_ns++;
	assert_false(tsec_verify_within(&o, &s));
	s.p50_ns--;
	s.p99_ns++;
	assert_false(tsec_verify_within(&o, &s));
}

static void test_verifier_env(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	FILE *devnull = fopen("/dev/null", "w");
	(void)state;

	unsetenv("TINYSECURITY_PERF_BUDGET");
	unsetenv("TINYSECURITY_PERF_BUDGET_P50_US");
	unsetenv("TINYSECURITY_PERF_BUDGET_P99_US");
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), 0);
	assert_false(o.budget);
	assert_int_equal(o.p50_ns, TSEC_BUDGET_P50_NS);
	assert_int_equal(o.p99_ns, TSEC_BUDGET_P99_NS);

	setenv("TINYSECURITY_PERF_BUDGET", "1", 1);
	setenv("TINYSECURITY_PERF_BUDGET_P50_US", "5", 1);
	setenv("TINYSECURITY_PERF_BUDGET_P99_US", "50", 1);
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), 0);
	assert_true(o.budget);
	assert_int_equal(o.p50_ns, 5000);
	assert_int_equal(o.p99_ns, 50000);

	/* The variables only tighten. */
	setenv("TINYSECURITY_PERF_BUDGET_P50_US", "5000", 1);
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), 0);
	assert_int_equal(o.p50_ns, TSEC_BUDGET_P50_NS);

	setenv("TINYSECURITY_PERF_BUDGET_P99_US", "ten", 1);
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), -1);
	setenv("TINYSECURITY_PERF_BUDGET_P99_US", "0", 1);
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), -1);

	setenv("TINYSECURITY_PERF_BUDGET", "0", 1);
	unsetenv("TINYSECURITY_PERF_BUDGET_P50_US");
	unsetenv("TINYSECURITY_PERF_BUDGET_P99_US");
	assert_int_equal(tsec_verify_budget_from_env(&o, devnull), 0);
	assert_false(o.budget);
	unsetenv("TINYSECURITY_PERF_BUDGET");
	fclose(devnull);
}

/* Without a budget the real module runs clean and reports both methods. */
static void test_verifier_runs(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	static char buf[8192];
	json_error_t jerr;
	json_t *j;
	(void)state;

	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_OK);
	assert_non_null(strstr(buf, "evaluate"));
	assert_non_null(strstr(buf, "check"));
	assert_non_null(strstr(buf, "not enforced"));

	o.json = 1;
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_OK);
	j = json_loads(buf, 0, &jerr);
	if (!j)
		fail_msg("not JSON: %s: %s", jerr.text, buf);
	assert_string_equal(json_string_value(json_object_get(j, "build")), "release");
	assert_string_equal(json_string_value(json_object_get(j, "module")), MODULE_PATH);
	json_t *ev = json_object_get(json_object_get(j, "methods"), "evaluate");
	json_t *ck = json_object_get(json_object_get(j, "methods"), "check");
	assert_int_equal(json_integer_value(json_object_get(ev, "samples")), 20);
	assert_int_equal(json_integer_value(json_object_get(ck, "samples")), 20);
	assert_true(json_is_null(json_object_get(ev, "p999_ns")));
	assert_true(json_integer_value(json_object_get(ck, "p50_ns")) > 0);
	assert_true(json_integer_value(json_object_get(ck, "first_ns")) > 0);
	assert_true(json_is_false(json_object_get(json_object_get(j, "budget"), "enabled")));
	json_decref(j);
}

/* A policy that answers otherwise fails the run: answers are checked. */
static void test_verifier_wrong_answers(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	static char buf[4096];
	(void)state;

	o.policy = "tests/data/decision_policy.json";
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_FAIL);
	o.policy = "no/such/policy.json";
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
	o.policy = "examples/policy.json";
	o.module = FIXTURE("not_elf");
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
}

/* A workload file brings another policy's requests and answers. */
static void test_verifier_workload(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	static char buf[8192];
	char path[] = "/tmp/tsec-workload-XXXXXX";
	FILE *f;
	int fd;
	(void)state;

	o.policy = "tests/data/decision_policy.json";
	o.workload = "tests/data/workload_decision.json";
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_OK);
	assert_non_null(strstr(buf, "batch of 3"));
	/* The same requests against the example policy answer otherwise. */
	o.policy = "examples/policy.json";
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_FAIL);
	/* A malformed workload is refused before anything runs. */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fputs("{\"evaluate\": {\"principal\": \"x\"}, \"check\": []}", f);
	fclose(f);
	o.workload = path;
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
	o.workload = "no/such/workload.json";
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
	unlink(path);
}

static void test_verifier_refuses_debug(void **state)
{
	struct tsec_verify_opts o = opts(MODULE_PATH);
	static char buf[4096];
	(void)state;

	o.budget = 1;
	o.verifier_build = TSEC_BUILD_DEBUG;
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
	assert_string_equal(buf, ""); /* nothing measured, nothing printed */

	o.verifier_build = TSEC_BUILD_RELEASE;
	o.module = FIXTURE("mod_proxy");
	setenv("TSEC_FIXTURE_BUILD", "debug", 1);
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_REFUSED);
	assert_string_equal(buf, "");
	unsetenv("TSEC_FIXTURE_BUILD");
}

/* A module twice as slow as the p50 limit fails the gate. */
static void test_verifier_slow_fails(void **state)
{
	struct tsec_verify_opts o = opts(FIXTURE("mod_proxy"));
	static char buf[4096];
	(void)state;

	o.calls = 5;
	o.warmup = 0;
	o.budget = 1;
	setenv("TSEC_FIXTURE_BUILD", "release", 1);
	setenv("TSEC_FIXTURE_DELAY_US", "2000", 1);
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_FAIL);
	assert_non_null(strstr(buf, "FAIL"));
	/* The same module, not enforced, reports and passes. */
	o.budget = 0;
	assert_int_equal(run(&o, buf, sizeof(buf)), TSEC_VERIFY_EXIT_OK);
	unsetenv("TSEC_FIXTURE_DELAY_US");
	unsetenv("TSEC_FIXTURE_BUILD");
}

/* The program itself: a debug verify_module refuses the budget run. */
static void test_verifier_program(void **state)
{
	int st;
	(void)state;

	st = system("TINYSECURITY_PERF_BUDGET=1 " TSEC_BUILD_DIR "/verify_module "
		    MODULE_PATH " >/dev/null 2>&1");
	assert_true(WIFEXITED(st));
	if (TSEC_BUILD_THIS == TSEC_BUILD_DEBUG)
		assert_int_equal(WEXITSTATUS(st), TSEC_VERIFY_EXIT_REFUSED);
	st = system(TSEC_BUILD_DIR "/verify_module --calls 10 --warmup 1 "
		    MODULE_PATH " >/dev/null 2>&1");
	assert_int_equal(WEXITSTATUS(st), 0);
	st = system(TSEC_BUILD_DIR "/verify_module --calls x " MODULE_PATH " >/dev/null 2>&1");
	assert_int_equal(WEXITSTATUS(st), TSEC_VERIFY_EXIT_REFUSED);
	st = system(TSEC_BUILD_DIR "/verify_module >/dev/null 2>&1");
	assert_int_equal(WEXITSTATUS(st), TSEC_VERIFY_EXIT_REFUSED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verifier_stats),
		cmocka_unit_test(test_verifier_within),
		cmocka_unit_test(test_verifier_env),
		cmocka_unit_test(test_verifier_runs),
		cmocka_unit_test(test_verifier_wrong_answers),
		cmocka_unit_test(test_verifier_workload),
		cmocka_unit_test(test_verifier_refuses_debug),
		cmocka_unit_test(test_verifier_slow_fails),
		cmocka_unit_test(test_verifier_program),
	};
	return cmocka_run_group_tests_name("verifier", tests, NULL, NULL);
}
