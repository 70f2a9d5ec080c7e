/* The policy compiler: malformed policies name their error's place. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "module/module_private.h"
#include "common/clock.h"

#define R0 "{\"id\": \"r0\", \"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"a/*\"]}"

struct bad_case {
	const char *policy;
	const char *where;      /* expected JSON pointer */
	const char *msg_part;   /* expected in the message */
};

static const struct bad_case bad[] = {
	{ "[]", "", "must be a JSON object" },
	{ "{\"version\": 1,", "", "JSON error" },
	{ "{}", "/version", "missing version" },
	{ "{\"version\": 1} x", "", "end of file expected" },
	{ "{\"version\": 1, \"rules\": [], \"rules\": []}", "", "duplicate object key" },
	{ "{\"rules\": [{\"id\": 1}], \"version\": 2}", "/version", "unsupported version" },
	{ "{\"version\": 1, \"rules\": [" R0 " " R0 "]}", "", "expected ',' or ']'" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\\u0000\"}]}", "", "JSON error" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"a\", \"id\": \"b\"}]}", "", "duplicate" },
	{ "{\"version\": 1, \"floor\": {}}", "/floor", "must be an array" },
	{ "{\"version\": 1, \"rules\": [" R0 ",]}", "", "JSON error" },
	{ "{\"version\": 1, \"rules\": [" R0 "", "", "unterminated" },
	{ "{\"version\": 1, \"description\": 5}", "/description", "must be a string" },
	{ "", "", "JSON error" },
	{ "{\"version\": 2}", "/version", "unsupported version" },
	{ "{\"version\": \"1\"}", "/version", "unsupported version" },
	{ "{\"version\": 1, \"extra\": true}", "/extra", "unknown field" },
	{ "{\"version\": 1, \"fleet\": \"\"}", "/fleet", "1 to 64" },
	{ "{\"version\": 1, \"fleet\": 3}", "/fleet", "1 to 64" },
	{ "{\"version\": 1, \"expires\": \"2027-02-29T00:00:00Z\"}", "/expires", "UTC time" },
	{ "{\"version\": 1, \"expires\": \"2027-01-01T00:00:00\"}", "/expires", "UTC time" },
	{ "{\"version\": 1, \"expires\": \"2027-01-01T24:00:00Z\"}", "/expires", "UTC time" },
	{ "{\"version\": 1, \"expires\": \"2027-01-01T00:00:00Zx\"}", "/expires", "UTC time" },
	{ "{\"version\": 1, \"expires\": 1}", "/expires", "UTC time" },
	{ "{\"version\": 1, \"fleet\": \"a\", \"fleet\": \"b\"}", "", "duplicate" },
	{ "{\"version\": 1, \"rules\": {}}", "/rules", "array of rules" },
	{ "{\"version\": 1, \"rules\": [42]}", "/rules/0", "must be an object" },
	{ "{\"version\": 1, \"rules\": [" R0 ", {\"id\": \"r1\", \"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"ok\", \"a/**b\"]}]}",
	  "/rules/1/resource/1", "'**' must stand alone" },
	{ "{\"version\": 1, \"rules\": [" R0 ", " R0 "]}", "/rules/1/id", "duplicate rule id" },
	{ "{\"version\": 1, \"floor\": [{\"id\": \"r0\", \"action\": [\"storage.list\"], \"resource\": [\"x\"]}], \"rules\": [" R0 "]}",
	  "/rules/0/id", "duplicate rule id" },
	{ "{\"version\": 1, \"rules\": [{\"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/id", "missing rule id" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"has space\", \"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/id", "id must be" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"action\": [\"storage.load\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/effect", "missing effect" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"maybe\", \"action\": [\"storage.load\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/effect", "\"allow\" or \"deny\"" },
	{ "{\"version\": 1, \"floor\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"a\"]}]}",
	  "/floor/0/effect", "floor rule can only deny" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [], \"resource\": [\"a\"]}]}",
	  "/rules/0/action", "must not be empty" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"storage.lod\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/action/0", "unknown action" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"lock.*\", 7], \"resource\": [\"a\"]}]}",
	  "/rules/0/action/1", "must be a string" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"]}]}",
	  "/rules/0/resource", "missing resource" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": \"a\"}]}",
	  "/rules/0/resource", "array of strings" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a/../b\"]}]}",
	  "/rules/0/resource/0", "'..'" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a//b\"]}]}",
	  "/rules/0/resource/0", "empty segment" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"/a\"]}]}",
	  "/rules/0/resource/0", "starts with '/'" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"**/a/**/b/**\"]}]}",
	  "/rules/0/resource/0", "more than two" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\\\\b\"]}]}",
	  "/rules/0/resource/0", "backslash" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\\u0001b\"]}]}",
	  "/rules/0/resource/0", "control character" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"principal\": [], \"action\": [\"*\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/principal", "must not be empty" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"principal\": [\"ok\", \"svc:*\"], \"action\": [\"*\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/principal/1", "'*' must be the whole principal" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"principal\": [\"role:\"], \"action\": [\"*\"], \"resource\": [\"a\"]}]}",
	  "/rules/0/principal/0", "role name is empty" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"domain\": [\"*.*.example.com\"]}]}",
	  "/rules/0/domain/0", "at most one" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"domain\": [\"a*.example.com\"]}]}",
	  "/rules/0/domain/0", "whole label" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"domain\": [\"example..com\"]}]}",
	  "/rules/0/domain/0", "empty label" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"when\": {\"ttl_ms_max\": -1}}]}",
	  "/rules/0/when/ttl_ms_max", "non-negative integer" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"when\": {\"size_max\": \"big\"}}]}",
	  "/rules/0/when/size_max", "non-negative integer" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"when\": {\"recursive\": 1}}]}",
	  "/rules/0/when/recursive", "true or false" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"when\": {\"phase_of_moon\": 1}}]}",
	  "/rules/0/when/phase_of_moon", "unknown condition" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"when\": []}]}",
	  "/rules/0/when", "must be an object" },
	{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"], \"principals\": [\"x\"]}]}",
	  "/rules/0/principals", "unknown field" },
};

static void test_compile_bad_table(void **state)
{
	(void)state;
	assert_true(sizeof(bad) / sizeof(bad[0]) >= 20);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tsec__policy *pol = NULL;
		struct tsec_error err;
		int rc;

		memset(&err, 0, sizeof(err));
		rc = tsec__policy_compile(bad[i].policy, strlen(bad[i].policy), &pol, &err);
		if (rc != TSEC_EPOLICY || pol)
			fail_msg("case %zu should be refused: %s", i, bad[i].policy);
		if (strcmp(err.where, bad[i].where) != 0)
			fail_msg("case %zu: where '%s', want '%s' (%s)", i, err.where,
				 bad[i].where, err.msg);
		if (!strstr(err.msg, bad[i].msg_part))
			fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg,
				 bad[i].msg_part);
	}
}

static void test_compile_duplicate_json_key(void **state)
{
	const char *p = "{\"version\": 1, \"version\": 1}";
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;
	assert_int_equal(tsec__policy_compile(p, strlen(p), &pol, &err), TSEC_EPOLICY);
	assert_non_null(strstr(err.msg, "duplicate"));
}

/* Syntax errors inside a rule name the line of the whole document. */
static void test_compile_line_numbers(void **state)
{
	const char *p = "{\n\"version\": 1,\n\"rules\": [\n  {\"id\": tru}]}";
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;
	assert_int_equal(tsec__policy_compile(p, strlen(p), &pol, &err), TSEC_EPOLICY);
	if (!strstr(err.msg, "line 4"))
		fail_msg("message lacks line 4: %s", err.msg);
}

static void test_compile_good(void **state)
{
	const char *p =
		"{\"version\": 1, \"description\": \"d\", \"floor\": [], \"rules\": ["
		"{\"id\": \"a\", \"effect\": \"allow\", \"principal\": [\"svc:x\", \"role:web\", \"*\"],"
		" \"action\": [\"*\", \"storage.*\", \"lock.*\", \"lock.renew\"],"
		" \"resource\": [\"**\", \"a/**/**/b\", \"x/*.crt\", \"wildcard_*\"],"
		" \"domain\": [\"Example.COM\", \"*.example.com\"],"
		" \"when\": {\"ttl_ms_max\": 0, \"size_max\": 10, \"recursive\": false},"
		" \"description\": \"all of it\"}]}";
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;
	if (tsec__policy_compile(p, strlen(p), &pol, &err))
		fail_msg("%s: %s", err.where, err.msg);
	assert_non_null(pol);
	assert_int_equal(pol->nrules, 1);
	assert_int_equal(pol->rules[0].actions, (1u << TSEC_ACTION__COUNT) - 1);
	assert_int_equal(pol->rules[0].dom_count, 2);
	/* Domains are lowered at compile time. */
	assert_memory_equal(pol->arena + pol->doms[pol->rules[0].dom_first].off,
			    "example.com", 11);
	tsec__policy_free(&pol);
	assert_null(pol);
	tsec__policy_free(&pol); /* NULL is fine */
}

/* Many rules: the index grows and every rule id stays findable. */
static void test_compile_many(void **state)
{
	size_t cap = 1 << 20, n = 0;
	char *p = malloc(cap);
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;

	n += (size_t)snprintf(p + n, cap - n, "{\"version\": 1, \"rules\": [");
	for (int i = 0; i < 3000; i++)
		n += (size_t)snprintf(p + n, cap - n,
			"%s{\"id\": \"r%d\", \"effect\": \"allow\", \"principal\": [\"svc:%d\"], "
			"\"action\": [\"storage.load\"], \"resource\": [\"c/%d/*\"]}",
			i ? "," : "", i, i, i);
	n += (size_t)snprintf(p + n, cap - n, "]}");
	if (tsec__policy_compile(p, n, &pol, &err))
		fail_msg("%s: %s", err.where, err.msg);
	assert_int_equal(pol->nrules, 3000);
	assert_true(pol->nedges > 6000);
	tsec__policy_free(&pol);
	free(p);
}

/* Appends to a growing buffer (asserts on failure). */
static void cat(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
		va_end(ap);
		assert_true(n >= 0);
		if ((size_t)n < *cap - *len)
			break;
		*cap = (*cap + (size_t)n) * 2;
		assert_non_null(*buf = realloc(*buf, *cap));
	}
	*len += (size_t)n;
}

/*
 * Policies built to exhaust the compiler: one rule naming 3,000
 * principals and 3,000 resources compiles into a few thousand nodes (its
 * resources indexed once, its principals jumping there) instead of 18
 * million; 20,000 rules on one resource compile (each terminal entry is
 * added in constant time).
 */
/* The policy's "expires" reader: the civil calendar, strictly. */
static void test_compile_utc_times(void **state)
{
	(void)state;
	assert_int_equal(tsec__utc_parse("1970-01-01T00:00:00Z"), 0);
	assert_int_equal(tsec__utc_parse("2000-03-01T00:00:00Z"), 951868800);
	assert_int_equal(tsec__utc_parse("2024-02-29T12:34:56Z"), 1709210096);
	assert_int_equal(tsec__utc_parse("2099-12-31T23:59:59Z"), 4102444799);
	assert_int_equal(tsec__utc_parse("2100-02-29T00:00:00Z"), -1);
	assert_int_equal(tsec__utc_parse("2024-04-31T00:00:00Z"), -1);
	assert_int_equal(tsec__utc_parse("2024-00-10T00:00:00Z"), -1);
	assert_int_equal(tsec__utc_parse("2024-1-10T00:00:00Z"), -1);
	assert_int_equal(tsec__utc_parse(NULL), -1);
}

static void test_compile_size_attacks(void **state)
{
	size_t len = 0, cap = 1 << 16;
	char *p = malloc(cap);
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;

	assert_non_null(p);
	cat(&p, &len, &cap, "{\"version\": 1, \"rules\": [{\"id\": \"big\", \"effect\": \"allow\","
	    " \"action\": [\"*\"], \"principal\": [");
	for (int i = 0; i < 3000; i++)
		cat(&p, &len, &cap, "%s\"svc:p%d\"", i ? "," : "", i);
	cat(&p, &len, &cap, "], \"resource\": [");
	for (int i = 0; i < 3000; i++)
		cat(&p, &len, &cap, "%s\"certificates/r%d/x/*/y\"", i ? "," : "", i);
	cat(&p, &len, &cap, "]}]}");
	assert_int_equal(tsec__policy_compile(p, len, &pol, &err), 0);
	assert_true(pol->nnodes < 5 * 3000 + 3000 + 16);
	tsec__policy_free(&pol);

	len = 0;
	cat(&p, &len, &cap, "{\"version\": 1, \"rules\": [");
	for (int i = 0; i < 20000; i++)
		cat(&p, &len, &cap, "%s{\"id\": \"r%d\", \"effect\": \"allow\", \"action\":"
		    " [\"storage.load\"], \"resource\": [\"certificates/one/a.crt\"]}", i ? "," : "", i);
	cat(&p, &len, &cap, "]}");
	assert_int_equal(tsec__policy_compile(p, len, &pol, &err), 0);
	assert_int_equal(pol->nrules, 20000);
	tsec__policy_free(&pol);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_bad_table),
		cmocka_unit_test(test_compile_utc_times),
		cmocka_unit_test(test_compile_duplicate_json_key),
		cmocka_unit_test(test_compile_line_numbers),
		cmocka_unit_test(test_compile_good),
		cmocka_unit_test(test_compile_many),
		cmocka_unit_test(test_compile_size_attacks),
	};
	return cmocka_run_group_tests_name("compile", tests, NULL, NULL);
}
