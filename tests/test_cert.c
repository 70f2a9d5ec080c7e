/*
 * Certificate conditions, with certificates made here by OpenSSL: SANs
 * that cover the key's domain or not, expiry, RSA strength, key types,
 * garbage PEM failing closed; and the parse cache (Check fills it,
 * Evaluate does not).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>

#include "common/certinfo.h"
#include "module/module_private.h"
#include "tests/certgen.h"

static const char *policy =
	"{\"version\": 1,"
	" \"floor\": [{\"id\": \"f-sensitive-needs-cover\", \"action\": [\"storage.store\"],"
	"   \"resource\": [\"certificates/sensitive/**\"], \"when\": {\"cert\": {\"san_covers_domain\": true}}}],"
	" \"rules\": ["
	"  {\"id\": \"good-certs\", \"effect\": \"allow\", \"principal\": [\"svc:issuer\"],"
	"   \"action\": [\"storage.store\"], \"resource\": [\"certificates/**\"],"
	"   \"when\": {\"cert\": {\"san_covers_domain\": true, \"min_remaining_s\": 3600,"
	"                        \"min_rsa_bits\": 2048, \"key_types\": [\"rsa\", \"ec-p256\", \"ed25519\"]}}},"
	"  {\"id\": \"deny-weak\", \"effect\": \"deny\", \"principal\": [\"svc:issuer\"],"
	"   \"action\": [\"storage.store\"], \"resource\": [\"certificates/strict/**\"],"
	"   \"when\": {\"cert\": {\"key_types\": [\"rsa\"], \"min_rsa_bits\": 0}}}"
	" ]}";

static struct tsec__policy *pol;

static int setup(void **state)
{
	struct tsec_error err;
	(void)state;
	if (tsec__policy_compile(policy, strlen(policy), &pol, &err)) {
		fprintf(stderr, "%s: %s\n", err.where, err.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tsec__policy_free(&pol);
	return 0;
}

static struct tsec_decision decide_store(const char *key, const char *pem,
					 size_t len, struct tsec__certcache *cache,
					 struct tsec_report *rep)
{
	struct tsec_request r;
	struct tsec_decision d;

	memset(&r, 0, sizeof(r));
	r.principal = (struct tsec_str){ "svc:issuer", 10 };
	r.action = (struct tsec_str){ "storage.store", 13 };
	r.resource = (struct tsec_str){ key, strlen(key) };
	r.ctx.has = TSEC_CTX_SIZE;
	r.ctx.size = len;
	if (pem) {
		r.ctx.has |= TSEC_CTX_CERT_PEM;
		r.ctx.cert_pem = (struct tsec_str){ pem, len };
	}
	tsec__decide(pol, &r, &d, rep, NULL, cache);
	return d;
}

#define KEY(d) "certificates/acme/" d "/" d ".crt"

struct ccase {
	const char *type, *sans;
	long from, to;
	const char *key;
	int status;
};

static const struct ccase cases[] = {
	{ "rsa2048", "example.com", -60, 86400, KEY("example.com"), TSEC_STATUS_ALLOWED },
	{ "ec-p256", "example.com,www.example.com", -60, 86400, KEY("www.example.com"), TSEC_STATUS_ALLOWED },
	{ "ed25519", "example.com", -60, 86400, KEY("EXAMPLE.com"), TSEC_STATUS_ALLOWED },
	/* SANs that do not cover the key's domain. */
	{ "rsa2048", "other.org", -60, 86400, KEY("example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", "example.com", -60, 86400, KEY("a.example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", NULL, -60, 86400, KEY("example.com"), TSEC_STATUS_DEFAULT },
	/* Wildcards by the one-label rule. */
	{ "rsa2048", "*.example.com", -60, 86400, KEY("api.example.com"), TSEC_STATUS_ALLOWED },
	{ "rsa2048", "*.example.com", -60, 86400, KEY("wildcard_.example.com"), TSEC_STATUS_ALLOWED },
	{ "rsa2048", "*.example.com", -60, 86400, KEY("a.b.example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", "*.example.com", -60, 86400, KEY("example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", "a.example.com", -60, 86400, KEY("wildcard_.example.com"), TSEC_STATUS_DEFAULT },
	/* Time left. */
	{ "rsa2048", "example.com", -86400, -60, KEY("example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", "example.com", -60, 600, KEY("example.com"), TSEC_STATUS_DEFAULT },
	{ "rsa2048", "example.com", -60, 7200, KEY("example.com"), TSEC_STATUS_ALLOWED },
	/* Strength and type. */
	{ "rsa1024", "example.com", -60, 86400, KEY("example.com"), TSEC_STATUS_DEFAULT },
	{ "ec-p384", "example.com", -60, 86400, KEY("example.com"), TSEC_STATUS_DEFAULT },
	/* A deny with a condition that holds. */
	{ "rsa2048", "example.com", -60, 86400,
	  "certificates/strict/example.com/example.com.crt", TSEC_STATUS_DENIED },
	{ "ec-p256", "example.com", -60, 86400,
	  "certificates/strict/example.com/example.com.crt", TSEC_STATUS_ALLOWED },
};

static void test_cert_table(void **state)
{
	struct tsec__certcache *cache;
	(void)state;

	assert_int_equal(tsec__certcache_new(&cache), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		char *pem = tu_cert(cases[i].type, cases[i].sans, cases[i].from,
				    cases[i].to, &len);
		struct tsec_decision d = decide_store(cases[i].key, pem, len, cache, NULL);
		if (d.status != cases[i].status)
			fail_msg("case %zu (%s %s -> %s): %s, want %s (%s)", i,
				 cases[i].type, cases[i].sans ? cases[i].sans : "-",
				 cases[i].key, tsec_status_reason(d.status),
				 tsec_status_reason((unsigned)cases[i].status), d.detail);
		assert_int_equal(d.flags & TSEC_DECISION_COND_ERROR, 0);
		free(pem);
	}
	tsec__certcache_free(&cache);
}

/* The request's "now" moves the clock the expiry is judged by. */
static void test_cert_now(void **state)
{
	size_t len;
	char *pem = tu_cert("rsa2048", "example.com", -60, 86400, &len);
	struct tsec_request r;
	struct tsec_decision d;
	(void)state;

	memset(&r, 0, sizeof(r));
	r.principal = (struct tsec_str){ "svc:issuer", 10 };
	r.action = (struct tsec_str){ "storage.store", 13 };
	r.resource = (struct tsec_str){ KEY("example.com"), strlen(KEY("example.com")) };
	r.ctx.has = TSEC_CTX_SIZE | TSEC_CTX_CERT_PEM | TSEC_CTX_NOW;
	r.ctx.size = len;
	r.ctx.cert_pem = (struct tsec_str){ pem, len };
	r.ctx.now = (int64_t)time(NULL) + 2 * 86400;
	tsec__decide(pol, &r, &d, NULL, NULL, NULL);
	assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
	r.ctx.now = (int64_t)time(NULL);
	tsec__decide(pol, &r, &d, NULL, NULL, NULL);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	free(pem);
}

/* Garbage fails closed: no allow, a floor matches, the error is told. */
static void test_cert_garbage(void **state)
{
	static const char *garbage[] = {
		"not a certificate at all",
		"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		NULL, /* a private key, no certificate */
	};
	static struct tsec_report rep;
	size_t klen;
	char *key = tu_key_pem("ec-p256", &klen);
	(void)state;

	garbage[2] = key;
	for (int i = 0; i < 3; i++) {
		struct tsec_decision d = decide_store(KEY("example.com"), garbage[i],
						      strlen(garbage[i]), NULL, NULL);
		assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
		assert_int_equal(d.allow, 0);
		assert_true(d.flags & TSEC_DECISION_COND_ERROR);
		assert_non_null(strstr(d.detail, "good-certs"));
		assert_non_null(strstr(d.detail, "holds no PEM certificate"));

		d = decide_store("certificates/sensitive/example.com/example.com.crt",
				 garbage[i], strlen(garbage[i]), NULL, &rep);
		assert_int_equal(d.status, TSEC_STATUS_FLOOR);
		assert_string_equal(d.rules[0], "f-sensitive-needs-cover");
		assert_true(d.flags & TSEC_DECISION_COND_ERROR);
		/* The report lists the error of each rule that met it. */
		assert_int_equal(rep.nerrors, 2);
		assert_int_equal(rep.errors[0].code, TSEC_ECERT);
	}
	free(key);
}

/* A store of a key file carries no PEM: certificate conditions do not apply. */
static void test_cert_no_pem(void **state)
{
	struct tsec_decision d = decide_store("certificates/acme/example.com/example.com.key",
					      NULL, 100, NULL, NULL);
	(void)state;
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
}

/* Check fills the parse cache; Evaluate (with a report) does not. */
static void test_cert_cache(void **state)
{
	static struct tsec_report rep;
	struct tsec__certcache *cache;
	struct tsec__cert_facts a, b;
	size_t len;
	char *pem = tu_cert("ec-p256", "example.com", -60, 86400, &len);
	(void)state;

	assert_int_equal(tsec__certcache_new(&cache), 0);
	decide_store(KEY("example.com"), pem, len, cache, &rep);
	assert_int_equal(tsec__certcache_size(cache), 0);
	assert_int_equal(rep.decision.status, TSEC_STATUS_ALLOWED);
	decide_store(KEY("example.com"), pem, len, cache, NULL);
	assert_int_equal(tsec__certcache_size(cache), 1);
	decide_store(KEY("example.com"), pem, len, cache, NULL);
	assert_int_equal(tsec__certcache_size(cache), 1);

	tsec__cert_facts_get(cache, false, pem, len, &a);
	tsec__cert_facts_get(NULL, false, pem, len, &b);
	assert_int_equal(a.ok, 1);
	assert_memory_equal(a.hash, b.hash, 32);
	assert_int_equal(a.key_type, TSEC__KEYTYPE_EC_P256);
	assert_int_equal(a.nsans, 1);
	assert_int_equal(a.not_after, b.not_after);
	/* 70 distinct certificates: the cache stays bounded. */
	for (int i = 0; i < 70; i++) {
		char *p = tu_cert("ec-p256", "example.com", -60, 86400 + i, &len);
		decide_store(KEY("example.com"), p, len, cache, NULL);
		free(p);
	}
	assert_int_equal(tsec__certcache_size(cache), 64);
	tsec__certcache_free(&cache);
	free(pem);
}

static void test_cert_policy_errors(void **state)
{
	static const struct { const char *p, *where; } bad[] = {
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"],"
		  " \"when\": {\"cert\": {\"key_types\": [\"dsa\"]}}}]}", "/rules/0/when/cert/key_types/0" },
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"],"
		  " \"when\": {\"cert\": {\"min_rsa_bits\": -1}}}]}", "/rules/0/when/cert/min_rsa_bits" },
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"],"
		  " \"when\": {\"cert\": {\"san_covers_domain\": \"yes\"}}}]}", "/rules/0/when/cert/san_covers_domain" },
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"],"
		  " \"when\": {\"cert\": {\"colour\": 1}}}]}", "/rules/0/when/cert/colour" },
		{ "{\"version\": 1, \"rules\": [{\"id\": \"x\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"a\"],"
		  " \"when\": {\"cert\": []}}]}", "/rules/0/when/cert" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tsec__policy *p = NULL;
		struct tsec_error err;
		assert_int_equal(tsec__policy_compile(bad[i].p, strlen(bad[i].p), &p, &err),
				 TSEC_EPOLICY);
		assert_string_equal(err.where, bad[i].where);
	}
}

/*
 * A certificate's attributes as the decision log keeps them, and the
 * certificate tsec replay makes from them (issue 20: only a hash was
 * logged, so certificate decisions did not replay): the same attributes
 * read back, for every key type.
 */
static void test_cert_info_round_trip(void **state)
{
	static const char *const types[] = { "rsa2048", "ec-p256", "ec-p384", "ed25519" };
	(void)state;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct tsec__certinfo a, b, c;
		size_t len;
		char *pem = tu_cert(types[i], "a.example.com,b.example.com", -60, 86400 * 30, &len);
		char *again;
		json_t *j;

		assert_int_equal(tsec__certinfo_of(pem, len, &a), 0);
		assert_int_equal(a.nnames, 2);
		assert_string_equal(a.names[1], "b.example.com");
		assert_true(a.not_after > 0);
		j = tsec__certinfo_json(&a);
		assert_int_equal(tsec__certinfo_from_json(j, &b), 0);
		json_decref(j);
		assert_non_null(again = tsec__certinfo_pem(&b));
		assert_int_equal(tsec__certinfo_of(again, strlen(again), &c), 0);
		assert_int_equal(c.nnames, a.nnames);
		assert_string_equal(c.names[0], a.names[0]);
		assert_int_equal(c.not_after, a.not_after);
		assert_string_equal(c.key, a.key);
		assert_int_equal(c.bits, a.bits);
		free(again);
		free(pem);
	}
	{
		struct tsec__certinfo x;

		assert_int_equal(tsec__certinfo_of("not a pem", 9, &x), -1);
	}
}

/*
 * A log whose certificates name many RSA sizes (issue 52, item 5): past
 * eight sizes, tsec replay and tsec diff --log generated an RSA key for
 * each line, seconds a line for a crafted log.  Now 60 sizes up to 8,192
 * bits, each read back at its size, generate no key but the signer and
 * the other types' (counted, not timed).
 */
static void test_cert_info_many_rsa_sizes(void **state)
{
	(void)state;
	for (unsigned i = 0; i < 60; i++) {
		struct tsec__certinfo a = { .not_after = 2000000000, .nnames = 1 }, c;
		char *pem;

		snprintf(a.key, sizeof(a.key), "rsa");
		snprintf(a.names[0], sizeof(a.names[0]), "n%u.example", i);
		a.bits = 8192 - 37 * i;
		assert_non_null(pem = tsec__certinfo_pem(&a));
		assert_int_equal(tsec__certinfo_of(pem, strlen(pem), &c), 0);
		assert_int_equal(c.bits, a.bits);
		assert_string_equal(c.key, "rsa");
		free(pem);
	}
	if (tsec__certinfo_keys_made() > 4)
		fail_msg("%u keys generated for 60 RSA sizes", tsec__certinfo_keys_made());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cert_table),
		cmocka_unit_test(test_cert_info_round_trip),
		cmocka_unit_test(test_cert_info_many_rsa_sizes),
		cmocka_unit_test(test_cert_now),
		cmocka_unit_test(test_cert_garbage),
		cmocka_unit_test(test_cert_no_pem),
		cmocka_unit_test(test_cert_cache),
		cmocka_unit_test(test_cert_policy_errors),
	};
	return cmocka_run_group_tests_name("cert", tests, setup, teardown);
}
