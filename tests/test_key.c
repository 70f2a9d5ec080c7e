/* Key rules and derived attributes, table-driven. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "module/module_private.h"

struct key_case {
	const char *key;
	size_t len;          /* 0: strlen(key) */
	int root_ok;         /* parse as for a list */
	int valid;
	const char *norm;    /* normalised form when valid */
	const char *kind;
	const char *issuer;  /* NULL: none */
	const char *domain;  /* NULL: none */
};

#define OK(k, n, kind, iss, dom) { k, 0, 0, 1, n, kind, iss, dom }
#define BAD(k) { k, 0, 0, 0, NULL, NULL, NULL, NULL }

static const struct key_case cases[] = {
	/* Layout and attributes. */
	OK("certificates/acme/example.com/example.com.crt",
	   "certificates/acme/example.com/example.com.crt", "cert", "acme", "example.com"),
	OK("certificates/acme/example.com/example.com.key",
	   "certificates/acme/example.com/example.com.key", "key", "acme", "example.com"),
	OK("certificates/acme/example.com/example.com.json",
	   "certificates/acme/example.com/example.com.json", "meta", "acme", "example.com"),
	OK("certificates/acme/wildcard_.example.com/wildcard_.example.com.crt",
	   "certificates/acme/wildcard_.example.com/wildcard_.example.com.crt",
	   "cert", "acme", "*.example.com"),
	OK("certificates/acme", "certificates/acme", "other", "acme", NULL),
	OK("certificates/acme/example.com", "certificates/acme/example.com",
	   "other", "acme", "example.com"),
	OK("ocsp/example.com-abc123", "ocsp/example.com-abc123", "ocsp", NULL, NULL),
	OK("acme/acme-v02/users/a@example.com/a@example.com.json",
	   "acme/acme-v02/users/a@example.com/a@example.com.json", "account", "acme-v02", NULL),
	OK("locks/issue_cert_example.com", "locks/issue_cert_example.com", "lock", NULL, NULL),
	OK("other/thing", "other/thing", "other", NULL, NULL),
	/* Normalisation: empty and "." segments and a leading "/" drop. */
	OK("/certificates/acme", "certificates/acme", "other", "acme", NULL),
	OK("certificates//acme", "certificates/acme", "other", "acme", NULL),
	OK("./certificates/./acme/", "certificates/acme", "other", "acme", NULL),
	OK("///a///b///", "a/b", "other", NULL, NULL),
	/* Unicode is fine when valid UTF-8. */
	OK("certificates/acme/b\xc3\xbc" "cher.example/x.crt",
	   "certificates/acme/b\xc3\xbc" "cher.example/x.crt", "cert", "acme",
	   "b\xc3\xbc" "cher.example"),
	OK("notes/\xe2\x9c\x93/\xf0\x9f\x94\x91", "notes/\xe2\x9c\x93/\xf0\x9f\x94\x91",
	   "other", NULL, NULL),
	/* Traversal and hostile bytes. */
	BAD(".."),
	BAD("../etc/passwd"),
	BAD("certificates/../../etc/shadow"),
	BAD("a/b/.."),
	BAD("a\\b"),
	BAD("..\\..\\windows"),
	BAD("c:/windows"),
	BAD("a:b"),
	BAD("a/b\x01"),
	BAD("a/\x7f"),
	BAD("a/\x1b[31m"),
	BAD("a\nb"),
	BAD("trailing-dot./x"),
	BAD("x/trailing-space "),
	BAD("x/..."),
	/* Root-like keys (only a list may name the root). */
	BAD(""),
	BAD("/"),
	BAD("."),
	BAD("./"),
	BAD("//././/"),
	{ "", 0, 1, 1, "", "other", NULL, NULL },
	{ "/./", 0, 1, 1, "", "other", NULL, NULL },
	/* Invalid UTF-8, overlong, surrogate, C1 control. */
	BAD("a/\xff"),
	BAD("a/\xc0\xaf"),
	BAD("a/\xed\xa0\x80"),
	BAD("a/\xc2\x85"),
	BAD("a/\xe2\x82"),
	/* Bidirectional and invisible characters (issue 20, defect 12): a
	 * right-to-left override, zero-width space and joiner, a BOM, a line
	 * separator, an isolate, a tag; accented letters and emoji stay. */
	BAD("certificates/acme/x/x\xe2\x80\xae" "trc.key"),
	BAD("a/b\xe2\x80\x8b" "c"),
	BAD("a/b\xe2\x80\x8d" "c"),
	BAD("a/\xef\xbb\xbf" "b"),
	BAD("a/b\xe2\x80\xa8" "c"),
	BAD("a/b\xe2\x81\xa6" "c"),
	BAD("a/b\xc2\xad" "c"),
	BAD("a/b\xf3\xa0\x80\x81" "c"),
	{ "a/\xc3\xa9t\xc3\xa9 \xf0\x9f\x94\x91", 0, 0, 1,
	  "a/\xc3\xa9t\xc3\xa9 \xf0\x9f\x94\x91", "other", NULL, NULL },
};

static void check_case(const struct key_case *c)
{
	struct tsec__key k;
	char why[96], buf[TSEC_KEY_MAX + 1], dom[256];
	size_t n = c->len ? c->len : strlen(c->key);
	int rc = tsec__key_parse(c->key, n, c->root_ok, &k, why, sizeof(why));

	if (!c->valid) {
		if (rc != TSEC_EKEY)
			fail_msg("key '%s' should be refused", c->key);
		assert_true(strlen(why) > 0);
		return;
	}
	if (rc != 0)
		fail_msg("key '%s' refused: %s", c->key, why);
	tsec__key_format(&k, buf, sizeof(buf));
	assert_string_equal(buf, c->norm);
	assert_string_equal(tsec_kind_name(k.kind), c->kind);
	if (c->issuer) {
		assert_true(k.issuer_seg >= 0);
		assert_int_equal(k.len[k.issuer_seg], strlen(c->issuer));
		assert_memory_equal(k.base + k.off[k.issuer_seg], c->issuer,
				    strlen(c->issuer));
	} else {
		assert_int_equal(k.issuer_seg, -1);
	}
	tsec__key_domain(&k, dom, sizeof(dom));
	assert_string_equal(dom, c->domain ? c->domain : "");
}

static void test_key_table(void **state)
{
	(void)state;
	assert_true(sizeof(cases) / sizeof(cases[0]) >= 30);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(&cases[i]);
}

/* "..." is a segment ending in a dot: refused like any other. */
static void test_key_triple_dot(void **state)
{
	struct tsec__key k;
	char why[96];
	(void)state;
	assert_int_equal(tsec__key_parse("a/.../b", 7, false, &k, why, sizeof(why)),
			 TSEC_EKEY);
}

static void test_key_embedded_nul(void **state)
{
	static const char key[] = "certificates/acme\0/../../etc";
	struct tsec__key k;
	char why[96];
	(void)state;
	assert_int_equal(tsec__key_parse(key, sizeof(key) - 1, false, &k, why,
					 sizeof(why)), TSEC_EKEY);
	assert_non_null(strstr(why, "NUL"));
}

static void test_key_long(void **state)
{
	char *key = malloc(TSEC_KEY_MAX + 2);
	struct tsec__key k;
	char why[96];
	(void)state;

	/* Exactly at the limit, made of 5 segments of legal size. */
	memset(key, 'a', TSEC_KEY_MAX);
	key[200] = key[400] = key[600] = key[800] = '/';
	assert_int_equal(tsec__key_parse(key, TSEC_KEY_MAX, false, &k, why, sizeof(why)), 0);
	assert_int_equal(k.nseg, 5);
	/* One byte over. */
	key[TSEC_KEY_MAX] = 'a';
	assert_int_equal(tsec__key_parse(key, TSEC_KEY_MAX + 1, false, &k, why, sizeof(why)),
			 TSEC_EKEY);
	/* A 256-byte segment. */
	memset(key, 'b', 300);
	assert_int_equal(tsec__key_parse(key, 300, false, &k, why, sizeof(why)), TSEC_EKEY);
	/* 65 segments. */
	for (int i = 0; i < 65; i++) {
		key[2 * i] = 'x';
		key[2 * i + 1] = '/';
	}
	assert_int_equal(tsec__key_parse(key, 130, false, &k, why, sizeof(why)), TSEC_EKEY);
	assert_int_equal(tsec__key_parse(key, 128, false, &k, why, sizeof(why)), 0);
	free(key);
}

/* Both readings agree: result, reason, segments and attributes. */
static void same_reading(const char *key, size_t n, bool root_ok)
{
	struct tsec__key a, b;
	char wa[96] = "", wb[96] = "";
	int ra = tsec__key_parse(key, n, root_ok, &a, wa, sizeof(wa));
	int rb = tsec__key_parse_bytes(key, n, root_ok, &b, wb, sizeof(wb));

	if (ra != rb || (ra && strcmp(wa, wb)))
		fail_msg("key of %zu bytes: %d '%s' vs byte loop %d '%s'", n, ra, wa, rb, wb);
	if (ra)
		return;
	assert_int_equal(a.nseg, b.nseg);
	assert_memory_equal(a.off, b.off, a.nseg * sizeof(a.off[0]));
	assert_memory_equal(a.len, b.len, a.nseg * sizeof(a.len[0]));
	assert_int_equal(a.kind, b.kind);
	assert_int_equal(a.issuer_seg, b.issuer_seg);
	assert_int_equal(a.domain_seg, b.domain_seg);
	assert_int_equal(a.domain_wild, b.domain_wild);
	/* "Normal" exactly when the key is its own normal form. */
	{
		char buf[TSEC_KEY_MAX + 1], fmt[TSEC_KEY_MAX + 1];
		size_t m = 0;
		bool same;

		/* The normal form by hand: the segments, '/' between. */
		for (unsigned i = 0; i < a.nseg; i++) {
			if (i)
				buf[m++] = '/';
			memcpy(buf + m, key + a.off[i], a.len[i]);
			m += a.len[i];
		}
		same = m == n && !memcmp(buf, key, n);
		/* And key_format writes it, whichever way it takes. */
		assert_int_equal(tsec__key_format(&a, fmt, sizeof(fmt)), m);
		assert_memory_equal(fmt, buf, m);
		assert_int_equal(fmt[m], '\0');

		if (tsec__key_is_normal(&a, n) != same || tsec__key_is_normal(&b, n) != same)
			fail_msg("key of %zu bytes: normal %d / byte loop %d, but its normal form "
				 "is %s", n, tsec__key_is_normal(&a, n), tsec__key_is_normal(&b, n),
				 same ? "itself" : "another");
	}
}

/*
 * The 16-byte block reading against the byte loop: every table case,
 * each problem byte at every position of keys of 1..80 bytes (so across
 * and at the edges of both loads of a step), and random keys drawn from
 * the bytes that matter.
 */
static void test_key_blocks_agree(void **state)
{
	static const char bytes[] = "ab/./\\:. \x01\x7f\xc3\xa9\x80\xff\x00";
	static const char odd[] = { '/', '.', ' ', '\\', ':', 0x01, 0x7f, 0x00,
				    (char)0xc3, (char)0x80, (char)0xff };
	char key[300];
	unsigned seed = 12345;
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (int r = 0; r < 2; r++)
			same_reading(cases[i].key, cases[i].len ? cases[i].len : strlen(cases[i].key), r);
	for (size_t n = 1; n <= 80; n++) {
		for (size_t at = 0; at < n; at++) {
			for (size_t o = 0; o < sizeof(odd); o++) {
				for (size_t j = 0; j < n; j++)
					key[j] = (j % 7 == 6) ? '/' : (char)('a' + j % 26);
				key[at] = odd[o];
				same_reading(key, n, false);
				same_reading(key, n, true);
			}
		}
	}
	for (int t = 0; t < 200000; t++) {
		size_t n;
		seed = seed * 1103515245u + 12345u;
		n = (seed >> 16) % 96;
		for (size_t j = 0; j < n; j++) {
			seed = seed * 1103515245u + 12345u;
			key[j] = bytes[(seed >> 16) % (sizeof(bytes) - 1)];
		}
		same_reading(key, n, t & 1);
	}
	/* Long segments and many segments, past 255 and 64. */
	memset(key, 'a', sizeof(key));
	same_reading(key, 256, false);
	same_reading(key, 255, false);
	for (int i = 0; i < 70; i++)
		key[2 * i + 1] = '/';
	same_reading(key, 130, false);
	same_reading(key, 128, false);
	same_reading(key, 140, false);
}

/* tsec__copy moves exactly n bytes, for every length its branches
 * split at, and touches nothing around them. */
static void test_key_short_copy(void **state)
{
	char src[200], dst[220], want[220];
	(void)state;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)(i * 7 + 1);
	for (size_t n = 0; n <= 160; n++) {
		memset(dst, 0x5a, sizeof(dst));
		memset(want, 0x5a, sizeof(want));
		memcpy(want + 10, src + 3, n);
		tsec__copy(dst + 10, src + 3, n);
		if (memcmp(dst, want, sizeof(dst)))
			fail_msg("tsec__copy of %zu bytes", n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_table),
		cmocka_unit_test(test_key_triple_dot),
		cmocka_unit_test(test_key_embedded_nul),
		cmocka_unit_test(test_key_long),
		cmocka_unit_test(test_key_blocks_agree),
		cmocka_unit_test(test_key_short_copy),
	};
	return cmocka_run_group_tests_name("key", tests, NULL, NULL);
}
