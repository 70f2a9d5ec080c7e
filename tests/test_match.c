/* Segment globs, certmagic domain wildcards, action names. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "module/module_private.h"

static void test_match_glob(void **state)
{
	static const struct { const char *pat, *s; int want; } t[] = {
		{ "*", "anything", 1 }, { "*", "", 1 }, { "*.crt", "a.crt", 1 },
		{ "*.crt", ".crt", 1 }, { "*.crt", "a.crt.bak", 0 },
		{ "*.crt", "a.key", 0 }, { "wildcard_*", "wildcard_.example.com", 1 },
		{ "wildcard_*", "example.com", 0 }, { "a*b*c", "aXXbYYc", 1 },
		{ "a*b*c", "aXXbYY", 0 }, { "a*a*a", "aaa", 1 }, { "a*a*a", "aa", 0 },
		{ "exact", "exact", 1 }, { "exact", "exactly", 0 }, { "**", "x", 1 },
		{ "*x", "xxxxxxxxxxxxxxxxxxxxxxxxy", 0 },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (tsec__glob_segment(t[i].pat, strlen(t[i].pat), t[i].s,
				       strlen(t[i].s)) != t[i].want)
			fail_msg("glob '%s' vs '%s' should be %d", t[i].pat, t[i].s, t[i].want);
}

/* The compiled fast paths agree with the general glob matcher. */
static void test_match_glob_kinds(void **state)
{
	const char *policy =
		"{\"version\": 1, \"rules\": [{\"id\": \"g\", \"effect\": \"allow\","
		" \"action\": [\"*\"], \"resource\": [\"x/*\", \"x/*.crt\", \"x/wild_*\","
		" \"x/a*b*c\", \"x/*mid*\", \"x/*.certificate-bundle\","
		" \"x/a-prefix-past-16-bytes_*\"]}]}";
	static const char *subjects[] = {
		"", "a", ".crt", "a.crt", "a.crt.x", "wild_", "wild_x", "wil", "abc",
		"aXbYc", "ab", "mid", "xmidx", "crt", "wild_.crt",
		"a.certificate-bundle", ".certificate-bundle", "certificate-bundle",
		"x.certificate-bundlE", "a-prefix-past-16-bytes_", "a-prefix-past-16-bytes_x",
		"a-prefix-past-16-byteS_x", "a-prefix-past-16", "averyveryverylongname.crt",
	};
	unsigned kinds[4] = { 0 };
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	(void)state;

	assert_int_equal(tsec__policy_compile(policy, strlen(policy), &pol, &err), 0);
	assert_int_equal(pol->nglobs, 1 + 7);
	for (uint32_t g = 1; g < pol->nglobs; g++) {
		const struct tsec__glob *e = &pol->globs[g];
		kinds[e->kind]++;
		for (size_t i = 0; i < sizeof(subjects) / sizeof(subjects[0]); i++) {
			const char *sub = subjects[i];
			bool fast = tsec__glob_edge_match(pol->arena, e, sub, strlen(sub));
			bool slow = tsec__glob_segment(pol->arena + e->off, e->len, sub, strlen(sub));
			if (fast != slow)
				fail_msg("glob '%.*s' vs '%s': fast %d slow %d", (int)e->len,
					 pol->arena + e->off, sub, fast, slow);
		}
	}
	assert_int_equal(kinds[TSEC__GLOB_ANY], 1);
	assert_int_equal(kinds[TSEC__GLOB_SUFFIX], 2);
	assert_int_equal(kinds[TSEC__GLOB_PREFIX], 2);
	assert_int_equal(kinds[TSEC__GLOB_GENERAL], 2);
	tsec__policy_free(&pol);
}

static void test_match_domain(void **state)
{
	static const struct { const char *pat, *d; int want; } t[] = {
		{ "example.com", "example.com", 1 },
		{ "example.com", "EXAMPLE.com", 1 },
		{ "example.com", "www.example.com", 0 },
		{ "*.example.com", "a.example.com", 1 },
		{ "*.example.com", "A.Example.COM", 1 },
		{ "*.example.com", "a.b.example.com", 0 },
		{ "*.example.com", "example.com", 0 },
		{ "*.example.com", "*.example.com", 1 },
		{ "*.example.com", ".example.com", 0 },
		{ "www.*.com", "www.example.com", 1 },
		{ "www.*.com", "www.a.b.com", 0 },
		{ "example.com", "example.com.", 0 },
		{ "example.com", "", 0 },
		{ "*", "localhost", 1 },
		{ "*", "a.b", 0 },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (tsec__domain_match(t[i].pat, strlen(t[i].pat), t[i].d,
				       strlen(t[i].d)) != t[i].want)
			fail_msg("domain '%s' vs '%s' should be %d", t[i].pat, t[i].d, t[i].want);
}

/*
 * A pattern without a "*" label is matched by one case-blind comparison
 * (tsec__domain_equal); it agrees with the label matcher on names of every
 * length around the 8-byte steps, with each byte in turn changed to a
 * capital, a neighbour of the capitals or a byte with the high bit set.
 */
static void test_match_domain_equal(void **state)
{
	static const char swap[] = { 'A', 'Z', 'a', 'z', '@', '[', '`', '{', '.', '-',
				     (char)0xc1, (char)0xda, (char)0xe1, (char)0x80 };
	char pat[48], d[48];
	(void)state;

	for (size_t n = 1; n <= 40; n++) {
		for (size_t j = 0; j < n; j++)
			pat[j] = (j % 6 == 5) ? '.' : (char)('a' + (j * 7) % 26);
		if (pat[n - 1] == '.')
			continue;
		for (size_t at = 0; at < n; at++) {
			for (size_t o = 0; o < sizeof(swap); o++) {
				memcpy(d, pat, n);
				d[n] = 'a';      /* the byte a longer name (dn = n + 1) ends with */
				d[at] = swap[o];
				for (size_t dn = n - 1; dn <= n + 1; dn++) {
					bool eq = tsec__domain_equal(pat, n, d, dn);
					bool lab = tsec__domain_match(pat, n, d, dn);
					if (eq != lab)
						fail_msg("'%.*s' vs '%.*s': equal %d, labels %d", (int)n,
							 pat, (int)dn, d, eq, lab);
				}
				/* And the capitals of the whole name. */
				for (size_t j = 0; j < n; j++)
					d[j] = (pat[j] >= 'a' && pat[j] <= 'z') ? (char)(pat[j] - 32) : pat[j];
				assert_true(tsec__domain_equal(pat, n, d, n));
			}
		}
	}
	assert_false(tsec__domain_equal("a", 1, "", 0));
}

static void test_match_action(void **state)
{
	(void)state;
	for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++) {
		const char *n = tsec_action_name(a);
		assert_int_equal(tsec__action_parse(n, strlen(n)), (int)a);
	}
	assert_int_equal(tsec__action_parse("storage.*", 9), -1);
	assert_int_equal(tsec__action_parse("storage.loa", 11), -1);
	assert_int_equal(tsec__action_parse("storage.loadx", 13), -1);
	assert_int_equal(tsec__action_parse("", 0), -1);
	assert_null(tsec_action_name(TSEC_ACTION__COUNT));
	/*
	 * Every prefix of every name, in a buffer of exactly its length (so
	 * a read past it is AddressSanitizer's to see): refused, never read
	 * beyond (the reader looked at a storage name's tenth byte in names
	 * of nine, once cert.load made nine a length it takes).
	 */
	for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++) {
		const char *n = tsec_action_name(a);
		for (size_t l = 0; l < strlen(n); l++) {
			char *p = malloc(l ? l : 1);
			assert_non_null(p);
			memcpy(p, n, l);
			assert_int_equal(tsec__action_parse(p, l), -1);
			/* The same length with another family's first letter. */
			if (l) {
				for (const char *c = "lcsx"; *c; c++) {
					p[0] = *c;
					(void)tsec__action_parse(p, l);
				}
			}
			free(p);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_match_glob),
		cmocka_unit_test(test_match_glob_kinds),
		cmocka_unit_test(test_match_domain),
		cmocka_unit_test(test_match_domain_equal),
		cmocka_unit_test(test_match_action),
	};
	return cmocka_run_group_tests_name("match", tests, NULL, NULL);
}
