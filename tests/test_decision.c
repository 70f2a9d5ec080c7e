/*
 * Decisions through the bus and the real module, table-driven over
 * tests/data/decision_policy.json; then the Evaluate report and Check
 * batches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/policytest/policytest.h"
#include "tests/testutil.h"

#define POLICY "tests/data/decision_policy.json"

/* Context shorthands. */
#define NOCTX 0, 0, 0, 0, NULL
#define TTL(x) TSEC_CTX_TTL_MS, (x), 0, 0, NULL
#define SIZE(x) TSEC_CTX_SIZE, 0, (x), 0, NULL
#define REC(x) TSEC_CTX_RECURSIVE, 0, 0, (x), NULL
#define DEST(d) TSEC_CTX_DEST, 0, 0, 0, (d)

enum { ALLOW = TSEC_STATUS_ALLOWED, DENY = TSEC_STATUS_DENIED,
       FLOOR = TSEC_STATUS_FLOOR, DEFAULT = TSEC_STATUS_DEFAULT,
       INVALID = TSEC_STATUS_INVALID };

struct dcase {
	const char *principal;
	const char *roles;           /* comma-separated or NULL */
	const char *action;
	const char *resource;
	uint32_t has;
	uint64_t ttl, size;
	uint32_t recursive;
	const char *dest;
	int status;
	const char *rule;            /* first deciding rule, or invalid field */
};

#define CRT(d) "certificates/acme/" d "/" d ".crt"
#define KEY(d) "certificates/acme/" d "/" d ".key"

/*
 * The decision cases are files, run by the library's runner (the one
 * `tsec test` uses): the *.test.json files in tests/data/policy.  Here only what the
 * wire cannot carry, straight to the module.
 */
static const struct dcase cases[] = {
	{ "svc:acme-issuer", NULL, "storage.list", "certificates", REC(2), INVALID, "context.recursive" },
	{ "", NULL, "storage.load", "ocsp/x", NOCTX, INVALID, "principal" },
};

static void split_roles(const char *s, struct tsec_str *roles, uint32_t *n,
			char *buf, size_t buflen)
{
	char *save = NULL, *tok;

	*n = 0;
	if (!s)
		return;
	snprintf(buf, buflen, "%s", s);
	if (!*buf) {
		roles[(*n)++] = tsec_str_c(buf);
		return;
	}
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		roles[(*n)++] = tsec_str_c(tok);
}

static void make_req(const struct dcase *c, struct tsec_request *r,
		     struct tsec_str *roles, char *buf, size_t buflen)
{
	memset(r, 0, sizeof(*r));
	r->principal = tsec_str_c(c->principal);
	split_roles(c->roles, roles, &r->nroles, buf, buflen);
	r->roles = roles;
	r->action = tsec_str_c(c->action);
	r->resource = tsec_str_c(c->resource);
	r->ctx.has = c->has;
	r->ctx.ttl_ms = c->ttl;
	r->ctx.size = c->size;
	r->ctx.recursive = c->recursive;
	r->ctx.dest = tsec_str_c(c->dest);
}

static void expect(const struct dcase *c, size_t i,
		   const struct tsec_decision *d)
{
	if (d->status != c->status)
		fail_msg("case %zu (%s %s %s): status %s, want %s (%s)", i,
			 c->principal, c->action, c->resource,
			 tsec_status_reason(d->status),
			 tsec_status_reason((unsigned)c->status), d->detail);
	assert_int_equal(d->allow, c->status == ALLOW);
	if (c->status == INVALID) {
		assert_string_equal(d->field, c->rule);
		assert_int_equal(d->nrules, 0);
		assert_true(strlen(d->detail) > 0);
	} else if (c->rule) {
		assert_true(d->nrules >= 1);
		if (strcmp(d->rules[0], c->rule) != 0)
			fail_msg("case %zu: rule %s, want %s", i, d->rules[0], c->rule);
	} else {
		assert_int_equal(d->nrules, 0);
	}
}

static int setup(void **state)
{
	*state = tu_bus_with_policy(POLICY);
	return 0;
}

static int teardown(void **state)
{
	struct tsec_bus *bus = *state;
	tsec_bus_free(&bus);
	assert_null(bus);
	return 0;
}

/* What the wire cannot carry, through Check and through Evaluate. */
static void test_decision_raw(void **state)
{
	struct tsec_bus *bus = *state;
	static struct tsec_report rep;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tsec_request r;
		struct tsec_str roles[4];
		struct tsec_decision d;
		struct tsec_error err;
		char buf[128];

		make_req(&cases[i], &r, roles, buf, sizeof(buf));
		memset(&d, 0xa5, sizeof(d));
		assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
		expect(&cases[i], i, &d);
		memset(&rep, 0x5a, sizeof(rep));
		assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &rep, &err), 0);
		expect(&cases[i], i, &rep.decision);
	}
}

/*
 * The case files, by the runner `tsec test` uses: each case through
 * Check and Evaluate (which must agree), then each file's cases as one
 * batch (the same answers).
 */
static void test_decision_case_files(void **state)
{
	struct tsec__ptest t = { .module = MODULE_PATH, .out = stdout, .err = stderr };
	(void)state;

	tsec__ptest_path(&t, "tests/data/policy");
	assert_int_equal(t.errors, 0);
	assert_int_equal(t.failed, 0);
	assert_true(t.files >= 1);
	assert_true(t.passed >= 70);
}

/* The runner can fail: a wrong decision, a wrong rule, a misspelt
 * action (an error, not a deny), a file that does not parse. */
static void test_decision_runner_fails(void **state)
{
	struct tsec__ptest t = { .module = MODULE_PATH, .err = stderr };
	(void)state;

	assert_non_null(t.out = fopen("/dev/null", "w"));
	tsec__ptest_path(&t, "tests/data/cli/failing.test.json");
	assert_int_equal(t.failed, 2);
	assert_int_equal(t.errors, 0);
	tsec__ptest_path(&t, "tests/data/cli/misspelt.test.json");
	assert_int_equal(t.failed, 2);
	assert_int_equal(t.errors, 1);
	tsec__ptest_path(&t, "tests/data/cli/no-such.test.json");
	assert_int_equal(t.errors, 2);
	t.run = "nothing matches this";
	t.passed = 0;
	tsec__ptest_path(&t, "tests/data/policy");
	assert_int_equal(t.passed, 0);
	fclose(t.out);
}

/* Several allows are all named, in policy order. */
static void test_decision_reasons(void **state)
{
	struct tsec_bus *bus = *state;
	struct tsec_str roles[] = { tsec_str_c("role:web") };
	struct tsec_request r = {
		.principal = tsec_str_c("svc:acme-issuer"), .roles = roles, .nroles = 1,
		.action = tsec_str_c("storage.load"),
		.resource = tsec_str_c(CRT("example.com")),
	};
	struct tsec_decision d;
	struct tsec_error err;

	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	assert_int_equal(d.nrules, 2);
	assert_string_equal(d.rules[0], "web-reads-certs");
	assert_string_equal(d.rules[1], "issuer-writes");
	assert_string_equal(tsec_status_reason(d.status), "allowed by rule");
	assert_string_equal(tsec_status_reason(TSEC_STATUS_FLOOR), "forbidden by floor");
	assert_string_equal(tsec_status_reason(TSEC_STATUS_DENIED), "forbidden by rule");
	assert_string_equal(tsec_status_reason(TSEC_STATUS_DEFAULT), "nothing allowed it");
	/* A zeroed decision is a deny. */
	memset(&d, 0, sizeof(d));
	assert_int_equal(d.allow, 0);
	assert_int_equal(d.status, TSEC_STATUS_NONE);
}

/* The report: attributes, every matching rule, the decision; and purity. */
static void test_decision_report(void **state)
{
	struct tsec_bus *bus = *state;
	struct tsec_str roles[] = { tsec_str_c("role:ops") };
	struct tsec_request r = {
		.principal = tsec_str_c("svc:evil"), .roles = roles, .nroles = 1,
		.action = tsec_str_c("storage.list"),
		.resource = tsec_str_c("/certificates//acme/wildcard_.example.com/./wildcard_.example.com.key"),
	};
	static struct tsec_report a, b;
	struct tsec_error err;
	unsigned floors = 0, denies = 0, allows = 0;

	assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &a, &err), 0);
	assert_int_equal(a.decision.status, TSEC_STATUS_FLOOR);
	assert_int_equal(a.decision.nrules, 2);
	assert_string_equal(a.decision.rules[0], "f-keys-never-listed");
	assert_string_equal(a.decision.rules[1], "f-evil-never");
	assert_int_equal(a.action, TSEC_ACTION_STORAGE_LIST);
	assert_int_equal(a.kind, TSEC_KIND_KEY);
	assert_string_equal(a.key, "certificates/acme/wildcard_.example.com/wildcard_.example.com.key");
	assert_string_equal(a.issuer, "acme");
	assert_string_equal(a.domain, "*.example.com");
	/* f-keys-never-listed, f-evil-never, ops-list-all, evil-allowed, evil-denied */
	assert_int_equal(a.nmatched, 5);
	assert_int_equal(a.nmatched_total, 5);
	for (unsigned i = 0; i < a.nmatched; i++) {
		floors += a.matched[i].effect == TSEC_EFFECT_FLOOR;
		denies += a.matched[i].effect == TSEC_EFFECT_DENY;
		allows += a.matched[i].effect == TSEC_EFFECT_ALLOW;
	}
	assert_int_equal(floors, 2);
	assert_int_equal(denies, 1);
	assert_int_equal(allows, 2);
	assert_int_equal(a.nerrors, 0);
	/* Pure: the same question gives the same report, byte for byte
	 * where it is defined. */
	assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &b, &err), 0);
	assert_memory_equal(&a.decision, &b.decision, sizeof(a.decision));
	assert_string_equal(a.key, b.key);
	assert_memory_equal(a.matched, b.matched, sizeof(a.matched[0]) * a.nmatched);
}

/* Bad arguments to the bus deny and say so. */
static void test_decision_bad_calls(void **state)
{
	struct tsec_bus *bus = *state;
	struct tsec_request r = { .principal = tsec_str_c("svc:x"),
				  .action = tsec_str_c("storage.load"),
				  .resource = tsec_str_c("ocsp/x") };
	struct tsec_decision d;
	struct tsec_error err;

	memset(&d, 0, sizeof(d));
	d.allow = 1;
	assert_int_equal(tsec_bus_check(bus, "nope", &r, 1, &d, &err), TSEC_ENOENT);
	assert_int_equal(d.allow, 0);
	d.allow = 1;
	assert_int_equal(tsec_bus_check(bus, "policy", NULL, 1, &d, &err), TSEC_EINVAL);
	assert_int_equal(d.allow, 0);
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 0, &d, &err), TSEC_EINVAL);
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, NULL, &err), TSEC_EINVAL);
	assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, NULL, &err), TSEC_EINVAL);
	/* Unknown context bits. */
	r.ctx.has = 1u << 30;
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_INVALID);
	assert_string_equal(d.field, "context");
	/* NUL inside a key given with its length. */
	r.ctx.has = 0;
	r.resource.ptr = "ocsp/x\0y";
	r.resource.len = 8;
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_INVALID);
	assert_string_equal(d.field, "resource");
	/* NULL strings. */
	r.resource.ptr = NULL;
	r.resource.len = 3;
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_INVALID);
	r.resource = tsec_str_c("ocsp/x");
	r.action.ptr = NULL;
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_string_equal(d.field, "action");
	r.action = tsec_str_c("storage.load");
	r.nroles = 2;
	r.roles = NULL;
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_string_equal(d.field, "roles");
}

/* The example policy answers what the README says it does. */
static void test_decision_example_policy(void **state)
{
	struct tsec_bus *bus = tu_bus_with_policy("examples/policy.json");
	struct tsec_request r = { .principal = tsec_str_c("svc:acme-issuer"),
				  .action = tsec_str_c("storage.list"),
				  .resource = tsec_str_c(KEY("example.com")) };
	struct tsec_decision d;
	struct tsec_error err;
	(void)state;

	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_FLOOR);
	assert_string_equal(d.rules[0], "keys-never-listed");
	tsec_bus_free(&bus);
}

/* Evaluate counts each matching rule once, past the 32 it lists too,
 * however many paths (principal patterns here) reach it. */
static void test_decision_matched_total_once(void **state)
{
	char policy[16384];
	size_t o = 0;
	struct tsec_bus *bus;
	static struct tsec_report rep;
	struct tsec_error err;
	const struct tsec_request r = { .principal = tsec_str_c("svc:x"),
					.action = tsec_str_c("storage.load"),
					.resource = tsec_str_c("a/b") };
	(void)state;

	o += (size_t)snprintf(policy + o, sizeof(policy) - o, "{\"version\": 1, \"rules\": [");
	for (int i = 0; i < 40; i++)
		o += (size_t)snprintf(policy + o, sizeof(policy) - o,
				      "%s{\"id\": \"r%d\", \"effect\": \"allow\", \"principal\": "
				      "[\"*\", \"svc:x\"], \"action\": [\"storage.load\"], "
				      "\"resource\": [\"a/*\", \"a/b\"]}", i ? "," : "", i);
	snprintf(policy + o, sizeof(policy) - o, "]}");
	bus = tu_bus_with_text(policy);
	assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &rep, &err), 0);
	assert_int_equal(rep.nmatched, TSEC_REPORT_MATCHES);
	assert_int_equal(rep.nmatched_total, 40);
	tsec_bus_free(&bus);
}

/* Why-not: each condition that kept a matching rule from applying. */
static void test_decision_why_not(void **state)
{
	static const char *policy =
		"{\"version\": 1, \"rules\": ["
		" {\"id\": \"w\", \"effect\": \"allow\", \"principal\": [\"svc:a\"],"
		"  \"action\": [\"storage.*\", \"lock.*\"], \"resource\": [\"certificates/**\", \"locks/*\"],"
		"  \"domain\": [\"example.com\"], \"when\": {\"size_max\": 10, \"ttl_ms_max\": 1000}},"
		" {\"id\": \"locks\", \"effect\": \"allow\", \"principal\": [\"svc:a\"],"
		"  \"action\": [\"lock.acquire\"], \"resource\": [\"locks/*\"], \"when\": {\"ttl_ms_max\": 5}},"
		" {\"id\": \"rec\", \"effect\": \"deny\", \"principal\": [\"*\"],"
		"  \"action\": [\"storage.delete\"], \"resource\": [\"certificates/**\"],"
		"  \"when\": {\"recursive\": true}},"
		" {\"id\": \"other-action\", \"effect\": \"allow\", \"principal\": [\"svc:a\"],"
		"  \"action\": [\"storage.list\"], \"resource\": [\"**\"]}]}";
	struct tsec_bus *bus = tu_bus_with_text(policy);
	static struct tsec_report rep;
	static struct tsec_explain ex;
	struct tsec_error err;
	struct tsec_request r = {
		.principal = tsec_str_c("svc:a"), .action = tsec_str_c("storage.store"),
		.resource = tsec_str_c("certificates/acme/example.com/example.com.key"),
		.ctx = { .has = TSEC_CTX_SIZE, .size = 100 },
	};

	(void)state;
	assert_int_equal(tsec_bus_explain(bus, "policy", &r, &rep, &ex, &err), 0);
	assert_false(rep.decision.allow);
	assert_int_equal(ex.explained, 1);
	/* "other-action" matched principal and resource but not the action:
	 * it is not listed. */
	assert_int_equal(ex.nnot_applied, 1);
	assert_string_equal(ex.not_applied[0].rule, "w");
	assert_string_equal(ex.not_applied[0].why, "size 100 > size_max 10");
	/* The domain. */
	r.ctx.size = 5;
	r.resource = tsec_str_c("certificates/acme/example.org/example.org.key");
	assert_int_equal(tsec_bus_explain(bus, "policy", &r, &rep, &ex, &err), 0);
	assert_string_equal(ex.not_applied[0].why, "domain example.org not in [example.com]");
	/* A lock's TTL, for both lock rules. */
	r.action = tsec_str_c("lock.acquire");
	r.resource = tsec_str_c("locks/x");
	r.ctx.has = TSEC_CTX_TTL_MS;
	r.ctx.ttl_ms = 2000;
	assert_int_equal(tsec_bus_explain(bus, "policy", &r, &rep, &ex, &err), 0);
	assert_int_equal(ex.nnot_applied, 2);
	assert_int_equal(ex.nnot_applied_total, 2);
	/* A deny that wants a recursive delete, asked without. */
	r.action = tsec_str_c("storage.delete");
	r.resource = tsec_str_c("certificates/acme");
	r.ctx.has = 0;
	assert_int_equal(tsec_bus_explain(bus, "policy", &r, &rep, &ex, &err), 0);
	assert_string_equal(ex.not_applied[ex.nnot_applied - 1].rule, "rec");
	assert_non_null(strstr(ex.not_applied[ex.nnot_applied - 1].why, "the rule wants true"));
	/* A move's destination is named as such. */
	r.action = tsec_str_c("storage.move");
	r.resource = tsec_str_c("certificates/acme/example.com/a.crt");
	r.ctx.has = TSEC_CTX_DEST;
	r.ctx.dest = tsec_str_c("certificates/acme/example.org/a.crt");
	assert_int_equal(tsec_bus_explain(bus, "policy", &r, &rep, &ex, &err), 0);
	assert_false(rep.decision.allow);
	assert_int_equal(ex.nnot_applied, 1);
	assert_int_equal(ex.not_applied[0].dest, 1);
	/* Check and Evaluate are unchanged by all this. */
	assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &rep, &err), 0);
	assert_false(rep.decision.allow);
	tsec_bus_free(&bus);
}

/*
 * A batch's caller is looked up once and reused while the requests name
 * the same principal and roles (issue 21): every decision of a batch is
 * the one the same request gets alone, whatever runs of callers, shared
 * or copied names, invalid names and role lists the batch holds.
 */
static void test_decision_batch_same_as_alone(void **state)
{
	struct tsec_bus *bus = tu_bus_with_policy("examples/policy.json");
	static const struct tsec_str web[1] = { { "web", 3 } }, web2[1] = { { "role:web", 8 } };
	static const struct tsec_str ops[2] = { { "ops", 3 }, { "web", 3 } };
	static const struct tsec_str bad[1] = { { "we b", 4 } }, nul[1] = { { NULL, 0 } };
	char copy[16] = "svc:web-1";
	const struct { const char *p; size_t pl; const struct tsec_str *r; uint32_t nr; } who[] = {
		{ "svc:web-1", 9, web, 1 }, { copy, 9, web, 1 }, { "svc:web-1", 9, web2, 1 },
		{ "svc:web-1", 9, NULL, 0 }, { "svc:web-1", 9, ops, 2 }, { "svc:web-1", 9, ops, 1 },
		{ "svc:acme-issuer", 15, NULL, 0 }, { "svc:web-1", 9, bad, 1 },
		{ "svc:web-1", 9, nul, 1 }, { "svc:web-1", 9, NULL, 1 }, { "", 0, NULL, 0 },
		{ "svc:web 1", 9, web, 1 }, { NULL, 0, NULL, 0 },
	};
	static const char *const res[] = {
		"certificates/acme/example.com/example.com.crt",
		"certificates/acme/example.com/example.com.key",
		"certificates/acme/other.org/other.org.crt",
	};
	const size_t nw = sizeof(who) / sizeof(who[0]);
	struct tsec_request r[64];
	struct tsec_decision batch[64], alone;
	struct tsec_error err;
	uint64_t seed = 7;
	(void)state;

	for (int round = 0; round < 300; round++) {
		size_t n = 1 + round % 64;
		for (size_t i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			/* Runs of one caller, as a wire batch has, broken now and then. */
			if (i && (seed >> 60) < 12) {
				r[i] = r[i - 1];
			} else {
				size_t w = (seed >> 33) % nw;
				memset(&r[i], 0, sizeof(r[i]));
				r[i].principal.ptr = who[w].p;
				r[i].principal.len = who[w].pl;
				r[i].roles = who[w].r;
				r[i].nroles = who[w].nr;
			}
			r[i].action = (struct tsec_str){ "storage.load", 12 };
			r[i].resource.ptr = res[(seed >> 20) % 3];
			r[i].resource.len = strlen(r[i].resource.ptr);
		}
		assert_int_equal(tsec_bus_check(bus, "policy", r, n, batch, &err), 0);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(tsec_bus_check(bus, "policy", &r[i], 1, &alone, &err), 0);
			assert_int_equal(batch[i].status, alone.status);
			assert_int_equal(batch[i].allow, alone.allow);
			assert_int_equal(batch[i].nrules, alone.nrules);
			for (unsigned k = 0; k < alone.nrules; k++)
				assert_string_equal(batch[i].rules[k], alone.rules[k]);
			assert_string_equal(batch[i].field, alone.field);
		}
	}
	tsec_bus_free(&bus);
}

/*
 * Check stops reading allows once a floor or deny applies, and walks "*"
 * first; Evaluate reads everything.  They must still agree on every
 * decision, condition errors included: a policy with floors and denies
 * for everyone and for one caller, conditions that fail, succeed or
 * cannot be evaluated (a store whose PEM is garbage), over random
 * requests, Check alone, Check in a batch and Evaluate.
 */
static void test_decision_check_same_as_evaluate(void **state)
{
	static const char policy[] =
		"{\"version\": 1, \"floor\": ["
		" {\"id\": \"f-keys\", \"action\": [\"storage.list\", \"storage.delete\"],"
		"  \"resource\": [\"certificates/**/*.key\"]},"
		" {\"id\": \"f-a-big\", \"principal\": [\"svc:a\"], \"action\": [\"storage.store\"],"
		"  \"resource\": [\"certificates/**\"], \"when\": {\"size_max\": 1000}},"
		" {\"id\": \"f-cover\", \"action\": [\"storage.store\"],"
		"  \"resource\": [\"certificates/sensitive/**\"],"
		"  \"when\": {\"cert\": {\"san_covers_domain\": true}}}],"
		" \"rules\": ["
		" {\"id\": \"a-all\", \"effect\": \"allow\", \"principal\": [\"svc:a\"],"
		"  \"action\": [\"storage.*\"], \"resource\": [\"**\"]},"
		" {\"id\": \"a-certs\", \"effect\": \"allow\", \"principal\": [\"svc:a\", \"role:ops\"],"
		"  \"action\": [\"storage.*\"], \"resource\": [\"certificates/*/*/*\"],"
		"  \"when\": {\"cert\": {\"min_rsa_bits\": 2048}}},"
		" {\"id\": \"ops-com\", \"effect\": \"allow\", \"principal\": [\"role:ops\"],"
		"  \"action\": [\"storage.load\", \"storage.store\", \"storage.list\"],"
		"  \"resource\": [\"certificates/**\"], \"domain\": [\"*.example.com\", \"example.com\"]},"
		" {\"id\": \"d-b\", \"effect\": \"deny\", \"principal\": [\"svc:b\"],"
		"  \"action\": [\"storage.*\"], \"resource\": [\"certificates/acme/**\"]},"
		" {\"id\": \"d-sensitive\", \"effect\": \"deny\", \"action\": [\"storage.store\"],"
		"  \"resource\": [\"certificates/sensitive/**\"],"
		"  \"when\": {\"cert\": {\"key_types\": [\"rsa\"]}}},"
		" {\"id\": \"d-rec\", \"effect\": \"deny\", \"action\": [\"storage.delete\", \"storage.list\"],"
		"  \"resource\": [\"certificates\", \"certificates/*\"], \"when\": {\"recursive\": true}},"
		" {\"id\": \"all-load\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
		"  \"resource\": [\"certificates/**\"]}]}";
	static const struct tsec_str ops[1] = { { "role:ops", 8 } };
	static const char *const principals[] = { "svc:a", "svc:b", "svc:c" };
	static const char *const actions[] = {
		"storage.load", "storage.list", "storage.delete", "storage.store",
	};
	static const char *const res[] = {
		"certificates/acme/example.com/example.com.crt",
		"certificates/acme/example.com/example.com.key",
		"certificates/sensitive/example.com/example.com.crt",
		"certificates/sensitive/www.example.com/x.key",
		"certificates/acme", "certificates", "acme/users/x",
	};
	static const char *const pems[] = { "not a certificate", NULL };
	struct tsec_bus *bus = tu_bus_with_text(policy);
	static struct tsec_report rep;
	struct tsec_request r[16];
	struct tsec_decision batch[16], alone;
	struct tsec_error err;
	uint64_t seed = 11;
	unsigned floors_with_allow_error = 0;
	(void)state;

	for (int round = 0; round < 400; round++) {
		size_t n = 1 + round % 16;
		for (size_t i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			memset(&r[i], 0, sizeof(r[i]));
			r[i].principal = tsec_str_c(principals[(seed >> 60) % 3]);
			if ((seed >> 58) & 1) {
				r[i].roles = ops;
				r[i].nroles = 1;
			}
			r[i].action = tsec_str_c(actions[(seed >> 40) % 4]);
			r[i].resource = tsec_str_c(res[(seed >> 20) % 7]);
			if (r[i].action.len == 13) {   /* storage.store */
				const char *pem = pems[(seed >> 10) & 1];
				r[i].ctx.has = TSEC_CTX_SIZE;
				r[i].ctx.size = (seed >> 12) & 1 ? 100 : 5000;
				if (pem) {
					r[i].ctx.has |= TSEC_CTX_CERT_PEM;
					r[i].ctx.cert_pem = tsec_str_c(pem);
				}
			} else if (r[i].action.len != 12 && ((seed >> 14) & 1)) {
				r[i].ctx.has = TSEC_CTX_RECURSIVE;   /* list, delete */
				r[i].ctx.recursive = 1;
			}
		}
		assert_int_equal(tsec_bus_check(bus, "policy", r, n, batch, &err), 0);
		for (size_t i = 0; i < n; i++) {
			const struct tsec_decision *e = &rep.decision;
			assert_int_equal(tsec_bus_check(bus, "policy", &r[i], 1, &alone, &err), 0);
			assert_int_equal(tsec_bus_evaluate(bus, "policy", &r[i], &rep, &err), 0);
			for (int k = 0; k < 2; k++) {
				const struct tsec_decision *c = k ? &alone : &batch[i];
				assert_int_equal(c->status, e->status);
				assert_int_equal(c->allow, e->allow);
				assert_int_equal(c->flags, e->flags);
				assert_int_equal(c->nrules, e->nrules);
				for (unsigned j = 0; j < e->nrules; j++)
					assert_string_equal(c->rules[j], e->rules[j]);
				assert_string_equal(c->field, e->field);
				assert_string_equal(c->detail, e->detail);
			}
			/* A floor beside an allow whose condition cannot be
			 * evaluated: the floor decides, and the allow's error is
			 * not the decision's (Check may not have read it). */
			if (e->status == FLOOR && rep.nerrors) {
				bool only_allows = true;
				for (uint32_t j = 0; j < rep.nerrors; j++)
					only_allows &= strcmp(rep.errors[j].rule, "a-certs") == 0;
				if (only_allows) {
					floors_with_allow_error++;
					assert_false(e->flags & TSEC_DECISION_COND_ERROR);
				}
			}
		}
	}
	assert_true(floors_with_allow_error > 0);
	tsec_bus_free(&bus);
}

static bool starts(const char *s, size_t n, const char *p)
{
	size_t l = strlen(p);
	return n >= l && memcmp(s, p, l) == 0;
}

static bool ends(const char *s, size_t n, const char *p)
{
	size_t l = strlen(p);
	return n >= l && memcmp(s + n - l, p, l) == 0;
}

/*
 * A node with many prefix ("dK-*") or suffix ("*.sK") globs finds them
 * through an index instead of trying each (TSEC__GLOB_INDEX_MIN): with
 * prefixes that overlap ("d1*" and "d1-*"), leaf and non-leaf, suffixes
 * behind "**", both kinds at one node beside a general glob and "*", the
 * rules that match each key are exactly those a plain reading of the
 * patterns gives.
 */
static void test_decision_glob_index(void **state)
{
	char *p = NULL, key[160];
	size_t len = 0, cap = 0;
	static struct tsec_report rep;
	struct tsec_decision d;
	struct tsec_error err;
	struct tsec_bus *bus;
	uint64_t seed = 5;
	unsigned seen_rules = 0;
	(void)state;

#define CAT(...) do { \
		int n_ = snprintf(NULL, 0, __VA_ARGS__); \
		if (len + (size_t)n_ + 1 > cap) { \
			cap = (len + (size_t)n_ + 1) * 2; \
			assert_non_null(p = realloc(p, cap)); \
		} \
		len += (size_t)snprintf(p + len, cap - len, __VA_ARGS__); \
	} while (0)
	CAT("{\"version\": 1, \"rules\": [");
	for (int k = 0; k < 40; k++)
		CAT("{\"id\": \"p%d\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
		    " \"resource\": [\"certificates/d%d-*/**\"]},", k, k);
	for (int k = 0; k < 20; k++)
		CAT("{\"id\": \"t%d\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
		    " \"resource\": [\"certificates/acme/*/x-%d-*\"]},", k, k);
	for (int k = 0; k < 12; k++)
		CAT("{\"id\": \"e%d\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
		    " \"resource\": [\"certificates/acme/*/*-e%d\"]},", k, k);
	for (int k = 0; k < 20; k++)
		CAT("{\"id\": \"s%d\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
		    " \"resource\": [\"**/*.s%d\"]},", k, k);
	CAT("{\"id\": \"q\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
	    " \"resource\": [\"certificates/d1*/**\"]},");
	CAT("{\"id\": \"gen\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
	    " \"resource\": [\"certificates/acme/*/*a*b*\"]},");
	CAT("{\"id\": \"any3\", \"effect\": \"allow\", \"action\": [\"storage.load\"],"
	    " \"resource\": [\"certificates/acme/*/*\"]}]}");
#undef CAT
	bus = tu_bus_with_text(p);

	for (int round = 0; round < 3000; round++) {
		char last[64], want[16][16];
		unsigned nwant = 0;
		size_t ll;
		int a, b, c;
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		a = (int)((seed >> 33) % 50);
		b = (int)((seed >> 43) % 25);
		c = (int)((seed >> 53) % 6);
		/* The last segment: one of the shapes, its number maybe unknown. */
		switch ((seed >> 20) % 5) {
		case 0: snprintf(last, sizeof(last), "x-%d-name", b); break;
		case 1: snprintf(last, sizeof(last), "cab-e%d", b % 14); break;
		case 2: snprintf(last, sizeof(last), "n.s%d", b); break;
		case 3: snprintf(last, sizeof(last), "x-%d-a.s%d", b % 22, a % 22); break;
		default: snprintf(last, sizeof(last), "x-%d-", b); break;
		}
		ll = strlen(last);
		if (c == 0)
			snprintf(key, sizeof(key), "certificates/d%d-z", a);
		else if (c == 1)
			snprintf(key, sizeof(key), "certificates/d%d-z/y/%s", a, last);
		else if (c == 2)
			snprintf(key, sizeof(key), "certificates/d%d/%s", a, last);
		else if (c == 3)
			snprintf(key, sizeof(key), "other/%s", last);
		else
			snprintf(key, sizeof(key), "certificates/acme/ex.com/%s", last);

		/* The plain reading. */
		{
			char seg1[64] = "", *slash;
			const char *s1 = strchr(key, '/') + 1;
			size_t nseg = 1, l1;
			for (const char *q = key; *q; q++)
				nseg += *q == '/';
			snprintf(seg1, sizeof(seg1), "%s", s1);
			if ((slash = strchr(seg1, '/')))
				*slash = '\0';
			l1 = strlen(seg1);
			bool certs = starts(key, strlen(key), "certificates/");
			bool acme4 = c >= 4;
			for (int k = 0; k < 40; k++) {
				char pre[16];
				snprintf(pre, sizeof(pre), "d%d-", k);
				if (certs && starts(seg1, l1, pre))
					snprintf(want[nwant++], 16, "p%d", k);
			}
			if (certs && starts(seg1, l1, "d1"))
				snprintf(want[nwant++], 16, "q");
			for (int k = 0; k < 20 && acme4; k++) {
				char pre[16];
				snprintf(pre, sizeof(pre), "x-%d-", k);
				if (starts(last, ll, pre))
					snprintf(want[nwant++], 16, "t%d", k);
			}
			for (int k = 0; k < 12 && acme4; k++) {
				char suf[16];
				snprintf(suf, sizeof(suf), "-e%d", k);
				if (ends(last, ll, suf))
					snprintf(want[nwant++], 16, "e%d", k);
			}
			for (int k = 0; k < 20 && nseg > 1; k++) {
				char suf[16];
				snprintf(suf, sizeof(suf), ".s%d", k);
				if (c != 0 && ends(last, ll, suf))
					snprintf(want[nwant++], 16, "s%d", k);
			}
			if (acme4) {
				const char *x = memchr(last, 'a', ll);
				if (x && memchr(x + 1, 'b', ll - (size_t)(x + 1 - last)))
					snprintf(want[nwant++], 16, "gen");
				snprintf(want[nwant++], 16, "any3");
			}
		}

		struct tsec_request r = {
			.principal = tsec_str_c("svc:any"), .action = tsec_str_c("storage.load"),
			.resource = tsec_str_c(key),
		};
		assert_int_equal(tsec_bus_evaluate(bus, "policy", &r, &rep, &err), 0);
		if (rep.nmatched_total != nwant)
			fail_msg("%s: %u rules match, %u expected", key, rep.nmatched_total, nwant);
		for (unsigned i = 0; i < nwant; i++) {
			bool found = false;
			for (unsigned j = 0; j < rep.nmatched; j++)
				found |= strcmp(rep.matched[j].id, want[i]) == 0;
			if (!found)
				fail_msg("%s: rule %s does not match", key, want[i]);
		}
		assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
		assert_int_equal(d.allow, nwant > 0);
		seen_rules += nwant;
	}
	assert_true(seen_rules > 3000);
	tsec_bus_free(&bus);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decision_matched_total_once),
		cmocka_unit_test(test_decision_raw),
		cmocka_unit_test(test_decision_case_files),
		cmocka_unit_test(test_decision_runner_fails),
		cmocka_unit_test(test_decision_reasons),
		cmocka_unit_test(test_decision_report),
		cmocka_unit_test(test_decision_bad_calls),
		cmocka_unit_test(test_decision_example_policy),
		cmocka_unit_test(test_decision_why_not),
		cmocka_unit_test(test_decision_batch_same_as_alone),
		cmocka_unit_test(test_decision_check_same_as_evaluate),
		cmocka_unit_test(test_decision_glob_index),
	};
	return cmocka_run_group_tests_name("decision", tests, setup, teardown);
}
