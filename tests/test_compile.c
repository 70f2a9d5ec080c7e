/* The policy compiler: malformed policies name their error's place. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "module/module_private.h"
#include "common/clock.h"
#include "common/where.h"


/*
 * The bad policies are files, as jansson's test suites keep theirs:
 * tests/data/policy/invalid/NAME/policy.json, refused with the place on
 * the first line of NAME/error and a part of the message on its second.
 */
#define INVALID_DIR "tests/data/policy/invalid"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = '\0';
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_compile_invalid_files(void **state)
{
	char *names[256];
	size_t n = 0;
	struct dirent *e;
	DIR *d;

	(void)state;
	assert_non_null(d = opendir(INVALID_DIR));
	while ((e = readdir(d)) && n < 256)
		if (e->d_name[0] != '.')
			assert_non_null(names[n++] = strdup(e->d_name));
	closedir(d);
	qsort(names, n, sizeof(*names), by_name);
	assert_true(n >= 50);
	for (size_t i = 0; i < n; i++) {
		struct tsec__policy *pol = NULL;
		struct tsec_error err;
		char path[512], *text, *want, *msg;
		size_t len, wlen;
		int rc;

		snprintf(path, sizeof(path), INVALID_DIR "/%s/policy.json", names[i]);
		assert_non_null(text = slurp(path, &len));
		snprintf(path, sizeof(path), INVALID_DIR "/%s/error", names[i]);
		assert_non_null(want = slurp(path, &wlen));
		assert_non_null(msg = strchr(want, '\n'));
		*msg++ = '\0';
		msg[strcspn(msg, "\n")] = '\0';
		memset(&err, 0, sizeof(err));
		rc = tsec__policy_compile(text, len, &pol, &err);
		if (rc != TSEC_EPOLICY || pol)
			fail_msg("%s should be refused", names[i]);
		if (strcmp(err.where, want) != 0)
			fail_msg("%s: where '%s', want '%s' (%s)", names[i], err.where, want, err.msg);
		if (!strstr(err.msg, msg))
			fail_msg("%s: message '%s' lacks '%s'", names[i], err.msg, msg);
		free(text);
		free(want);
		free(names[i]);
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

/* The module's error is said at the character that is wrong, and a
 * pointer names the key it points to (common/where.h): the column a
 * reader counts, one-based, in characters. */
static void test_compile_error_positions(void **state)
{
	static const struct {
		const char *text, *want;
	} syn[] = {
		/* The second comma, on the first line and further down. */
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\",,}]}", "line 1 column 37:" },
		{ "{\n  \"version\": 1,\n  \"rules\": [\n    {\"id\": \"x\",,}\n  ]\n}",
		  "line 4 column 16:" },
		/* A value spread over lines inside a rule. */
		{ "{\"version\": 1, \"rules\": [{\n\"id\":\n  tru}]}", "line 3 column 5:" },
		/* Characters, not bytes: "é" is one column. */
		{ "{\"version\": 1, \"description\": \"\xc3\xa9\", \"rules\": [,]}",
		  "line 1 column 46:" },
		{ "{\"version\": 1} x", "line 1 column 16:" },
	};
	const char *doc = "{\"a\": {\"b~c\": [1, {\"x/y\": 2, \"q\\\"k\": 3}]},\n"
			  " \"rules\": [{\"id\": \"r0\"},\n   {\"id\": \"r1\", \"effect\": 1}]}";
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	const char *rest;
	int line, col;
	char say[512];
	(void)state;

	for (size_t i = 0; i < sizeof(syn) / sizeof(syn[0]); i++) {
		assert_int_equal(tsec__policy_compile(syn[i].text, strlen(syn[i].text), &pol, &err),
				 TSEC_EPOLICY);
		if (!strstr(err.msg, syn[i].want))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, syn[i].want);
	}
	/* Pointers: escaped keys (~0, ~1, \"), array elements, and what is
	 * missing named at the deepest part that exists. */
	tsec__text_pos(doc, strlen(doc), tsec__pointer_at(doc, strlen(doc), "/a/b~0c/1/x~1y"),
		       &line, &col);
	assert_int_equal(line * 100 + col, 1 * 100 + 20);
	tsec__text_pos(doc, strlen(doc), tsec__pointer_at(doc, strlen(doc), "/a/b~0c/1/q\"k"),
		       &line, &col);
	assert_int_equal(line * 100 + col, 1 * 100 + 30);
	tsec__text_pos(doc, strlen(doc), tsec__pointer_at(doc, strlen(doc), "/rules/1/effect"),
		       &line, &col);
	assert_int_equal(line * 100 + col, 3 * 100 + 17);
	tsec__text_pos(doc, strlen(doc), tsec__pointer_at(doc, strlen(doc), "/rules/1/action/0"),
		       &line, &col);
	assert_int_equal(line * 100 + col, 3 * 100 + 4);
	tsec__text_pos(doc, strlen(doc), tsec__pointer_at(doc, strlen(doc), "/rules/7"),
		       &line, &col);
	assert_int_equal(line * 100 + col, 2 * 100 + 2);
	assert_int_equal(tsec__pointer_at(doc, strlen(doc), ""), 0);
	assert_int_equal(tsec__pointer_at("", 0, "/a"), 0);
	assert_int_equal(tsec__pointer_at("[1, {", 5, "/1/x"), 4);
	/* One wording for both kinds. */
	tsec__error_say(say, sizeof(say), "p.json", doc, strlen(doc), "/rules/1/effect",
			"must be a string");
	assert_string_equal(say, "p.json:3:17: /rules/1/effect: must be a string");
	tsec__error_say(say, sizeof(say), "p.json", doc, strlen(doc), "",
			"JSON error at line 4 column 16: string expected");
	assert_string_equal(say, "p.json:4:16: string expected");
	tsec__error_pos(doc, strlen(doc), "", "version: missing", &line, &col, &rest);
	assert_string_equal(rest, "version: missing");
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
		cmocka_unit_test(test_compile_invalid_files),
		cmocka_unit_test(test_compile_utc_times),
		cmocka_unit_test(test_compile_duplicate_json_key),
		cmocka_unit_test(test_compile_line_numbers),
		cmocka_unit_test(test_compile_error_positions),
		cmocka_unit_test(test_compile_good),
		cmocka_unit_test(test_compile_many),
		cmocka_unit_test(test_compile_size_attacks),
	};
	return cmocka_run_group_tests_name("compile", tests, NULL, NULL);
}
