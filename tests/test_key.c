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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_table),
		cmocka_unit_test(test_key_triple_dot),
		cmocka_unit_test(test_key_embedded_nul),
		cmocka_unit_test(test_key_long),
	};
	return cmocka_run_group_tests_name("key", tests, NULL, NULL);
}
