/*
 * Reload under load: callers never fail and always see one whole policy;
 * a policy that does not compile leaves the old one serving; a module that
 * is not concurrency-safe is serialised by the bus.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

#define CALLERS 4
#define RELOADS 300

/* Two policies that allow the same request through different rules, and
 * deny a second one through different floors. */
static const char *policy_a =
	"{\"version\": 1, \"floor\": [{\"id\": \"fa\", \"action\": [\"storage.delete\"], \"resource\": [\"**\"]}],"
	" \"rules\": [{\"id\": \"a\", \"effect\": \"allow\", \"principal\": [\"svc:x\"],"
	" \"action\": [\"storage.load\"], \"resource\": [\"ocsp/*\"]}]}";
static const char *policy_b =
	"{\"version\": 1, \"floor\": [{\"id\": \"fb\", \"action\": [\"storage.delete\"], \"resource\": [\"ocsp/**\"]}],"
	" \"rules\": [{\"id\": \"b\", \"effect\": \"allow\", \"principal\": [\"*\"],"
	" \"action\": [\"storage.load\", \"storage.exists\"], \"resource\": [\"ocsp/x\"]},"
	" {\"id\": \"b2\", \"effect\": \"allow\", \"principal\": [\"svc:y\"],"
	" \"action\": [\"storage.load\"], \"resource\": [\"**\"]}]}";

struct shared {
	struct tsec_bus *bus;
	atomic_int stop;
	atomic_uint calls, failures, mixed;
};

static void *caller(void *arg)
{
	struct shared *sh = arg;
	const struct tsec_request reqs[2] = {
		{ .principal = tsec_str_c("svc:x"), .action = tsec_str_c("storage.load"),
		  .resource = tsec_str_c("ocsp/x") },
		{ .principal = tsec_str_c("svc:x"), .action = tsec_str_c("storage.delete"),
		  .resource = tsec_str_c("ocsp/x") },
	};
	static __thread struct tsec_report rep;

	while (!atomic_load(&sh->stop)) {
		struct tsec_decision d[2];
		struct tsec_error err;

		if (tsec_bus_check(sh->bus, "policy", reqs, 2, d, &err) ||
		    d[0].status != TSEC_STATUS_ALLOWED || d[1].status != TSEC_STATUS_FLOOR) {
			atomic_fetch_add(&sh->failures, 1);
			continue;
		}
		/* Both answers of one batch come from the same policy. */
		if ((d[0].rules[0][0] == 'a') != (d[1].rules[0][1] == 'a'))
			atomic_fetch_add(&sh->mixed, 1);
		if (tsec_bus_evaluate(sh->bus, "policy", &reqs[0], &rep, &err) ||
		    rep.decision.status != TSEC_STATUS_ALLOWED)
			atomic_fetch_add(&sh->failures, 1);
		atomic_fetch_add(&sh->calls, 1);
	}
	return NULL;
}

static void test_reload_under_load(void **state)
{
	struct shared sh = { 0 };
	pthread_t t[CALLERS];
	struct tsec_error err;
	unsigned bad_reloads = 0;
	(void)state;

	sh.bus = tu_bus_with_text(policy_a);
	for (int i = 0; i < CALLERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, caller, &sh), 0);
	for (int i = 0; i < RELOADS; i++) {
		const char *p = i % 2 ? policy_a : policy_b;
		/*
		 * Each reload waits for a call to finish after the one before,
		 * so calls and reloads interleave however the scheduler runs
		 * the threads (no timing decides this test).
		 */
		unsigned seen = atomic_load(&sh.calls) + atomic_load(&sh.failures);
		while (atomic_load(&sh.calls) + atomic_load(&sh.failures) == seen)
			sched_yield();
		assert_int_equal(tsec_bus_reload(sh.bus, "policy", p, strlen(p), &err), 0);
		if (i % 10 == 0) {
			/* A broken policy is refused and changes nothing. */
			const char *bad = "{\"version\": 1, \"rules\": [{\"id\": \"x\"}]}";
			if (tsec_bus_reload(sh.bus, "policy", bad, strlen(bad), &err) == TSEC_EPOLICY)
				bad_reloads++;
		}
	}
	atomic_store(&sh.stop, 1);
	for (int i = 0; i < CALLERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(bad_reloads, RELOADS / 10);
	assert_int_equal(atomic_load(&sh.failures), 0);
	assert_int_equal(atomic_load(&sh.mixed), 0);
	assert_true(atomic_load(&sh.calls) > 0);
	tsec_bus_free(&sh.bus);
}

static void test_reload_bad_keeps_old(void **state)
{
	struct tsec_bus *bus = tu_bus_with_text(policy_a);
	const struct tsec_request r = { .principal = tsec_str_c("svc:y"),
					.action = tsec_str_c("storage.load"),
					.resource = tsec_str_c("anything/at/all") };
	struct tsec_decision d;
	struct tsec_error err;
	(void)state;

	assert_int_equal(tsec_bus_reload(bus, "policy", "not json", 8, &err), TSEC_EPOLICY);
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
	assert_int_equal(tsec_bus_reload(bus, "policy", policy_b, strlen(policy_b), &err), 0);
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	assert_string_equal(d.rules[0], "b2");
	assert_int_equal(tsec_bus_reload(bus, "nope", policy_b, strlen(policy_b), &err), TSEC_ENOENT);
	tsec_bus_free(&bus);
}

/* A handle taken before a reload answers with the policy after it. */
static void test_reload_behind_handle(void **state)
{
	struct tsec_bus *bus = tu_bus_with_text(policy_a);
	struct tsec_endpoint *ep = tsec_bus_endpoint(bus, "policy");
	const struct tsec_request r = { .principal = tsec_str_c("svc:y"),
					.action = tsec_str_c("storage.load"),
					.resource = tsec_str_c("anything/at/all") };
	static struct tsec_report rep;
	struct tsec_decision d = { .allow = 1 };
	struct tsec_error err;
	(void)state;

	assert_non_null(ep);
	assert_ptr_equal(tsec_bus_endpoint(bus, "policy"), ep);
	assert_int_equal(tsec_endpoint_check(ep, &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
	assert_int_equal(tsec_bus_reload(bus, "policy", policy_b, strlen(policy_b), &err), 0);
	assert_int_equal(tsec_endpoint_check(ep, &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	assert_int_equal(tsec_endpoint_evaluate(ep, &r, &rep, &err), 0);
	assert_string_equal(rep.decision.rules[0], "b2");
	/* No endpoint, no handle; a call without one denies. */
	assert_null(tsec_bus_endpoint(bus, "nope"));
	assert_null(tsec_bus_endpoint(NULL, "policy"));
	assert_null(tsec_bus_endpoint(bus, NULL));
	d.allow = 1;
	d.status = TSEC_STATUS_ALLOWED;
	assert_int_equal(tsec_endpoint_check(NULL, &r, 1, &d, &err), TSEC_EINVAL);
	assert_int_equal(d.allow, 0);
	assert_int_equal(d.status, TSEC_STATUS_NONE);
	rep.decision.allow = 1;
	assert_int_equal(tsec_endpoint_evaluate(NULL, &r, &rep, &err), TSEC_EINVAL);
	assert_int_equal(rep.decision.allow, 0);
	assert_int_equal(tsec_endpoint_check(ep, NULL, 1, &d, &err), TSEC_EINVAL);
	assert_int_equal(tsec_endpoint_check(ep, &r, 0, &d, &err), TSEC_EINVAL);
	assert_int_equal(tsec_endpoint_check(ep, &r, 1, NULL, &err), TSEC_EINVAL);
	assert_int_equal(tsec_endpoint_evaluate(ep, &r, NULL, &err), TSEC_EINVAL);
	tsec_bus_free(&bus);
}

static void *serial_caller(void *arg)
{
	struct tsec_bus *bus = arg;
	struct tsec_endpoint *ep = tsec_bus_endpoint(bus, "serial");
	const struct tsec_request r = { .principal = tsec_str_c("svc:x") };
	struct tsec_decision d;
	struct tsec_error err;

	/* By name and through the handle: both take the module's lock. */
	for (int i = 0; i < 200; i++) {
		if (i % 2)
			tsec_bus_check(bus, "serial", &r, 1, &d, &err);
		else
			tsec_endpoint_check(ep, &r, 1, &d, &err);
	}
	return NULL;
}

static void test_reload_serial_module(void **state)
{
	struct tsec_bus *bus = NULL;
	struct tsec_report rep;
	struct tsec_error err;
	struct tsec_module_info info;
	const struct tsec_request r = { .principal = tsec_str_c("svc:x") };
	pthread_t t[CALLERS];
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	assert_int_equal(tsec_bus_load(bus, "serial", FIXTURE("mod_serial"), "", 0, &err), 0);
	assert_int_equal(tsec_bus_info(bus, "serial", &info), 0);
	assert_false(info.caps & TSEC_MODULE_CONCURRENT);
	for (int i = 0; i < CALLERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, serial_caller, bus), 0);
	for (int i = 0; i < CALLERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(tsec_bus_evaluate(bus, "serial", &r, &rep, &err), 0);
	/* The fixture counts calls that found another call inside it. */
	assert_int_equal(rep.nmatched_total, 0);
	tsec_bus_free(&bus);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reload_under_load),
		cmocka_unit_test(test_reload_bad_keeps_old),
		cmocka_unit_test(test_reload_behind_handle),
		cmocka_unit_test(test_reload_serial_module),
	};
	return cmocka_run_group_tests_name("reload", tests, NULL, NULL);
}
