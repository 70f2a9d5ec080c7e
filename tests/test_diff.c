/*
 * The exact policy comparison (broker/policytest/diff.c) held to the
 * cases issue 49 found and to brute force.
 *
 * Every difference it reports is decided again here, request by
 * request, under both policies: a report the module does not confirm
 * fails.  The property test draws policy pairs (globs with prefixes and
 * suffixes, '**' anywhere, patterns up to 8 segments, principals, roles,
 * size bounds) and decides every key of a finite universe (every key of
 * up to 7 segments over a vocabulary the patterns' literals and globs
 * tell apart) under both: when brute force finds a difference, diff must
 * report one; and diff's "0 differ" must never meet one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/policytest/diff.h"
#include "tests/testutil.h"

struct seen {
	struct tsec_bus *a, *b;
	size_t reports, max_depth;
	char first[600];
	json_t *all;                 /* every report, when set: [request, a, b] */
};

/* Decides one request given as JSON (as diff reports it) on bus. */
static struct tsec_decision decide_json(struct tsec_bus *bus, json_t *j)
{
	struct tsec_request r;
	struct tsec_str roles[16];
	struct tsec_decision d;
	struct tsec_error err;
	json_t *c = json_object_get(j, "context"), *v;
	size_t i;

	memset(&r, 0, sizeof(r));
	r.principal = tsec_str_c(json_string_value(json_object_get(j, "principal")));
	json_array_foreach(json_object_get(j, "roles"), i, v)
		if (i < 16)
			roles[r.nroles++] = tsec_str_c(json_string_value(v));
	r.roles = roles;
	r.action = tsec_str_c(json_string_value(json_object_get(j, "action")));
	r.resource = tsec_str_c(json_string_value(json_object_get(j, "resource")));
	if ((v = json_object_get(c, "ttl_ms"))) {
		r.ctx.has |= TSEC_CTX_TTL_MS;
		r.ctx.ttl_ms = (uint64_t)json_integer_value(v);
	}
	if ((v = json_object_get(c, "size"))) {
		r.ctx.has |= TSEC_CTX_SIZE;
		r.ctx.size = (uint64_t)json_integer_value(v);
	}
	if ((v = json_object_get(c, "recursive"))) {
		r.ctx.has |= TSEC_CTX_RECURSIVE;
		r.ctx.recursive = json_is_true(v);
	}
	if ((v = json_object_get(c, "dest"))) {
		r.ctx.has |= TSEC_CTX_DEST;
		r.ctx.dest = tsec_str_c(json_string_value(v));
	}
	if ((v = json_object_get(c, "cert_pem"))) {
		r.ctx.has |= TSEC_CTX_CERT_PEM;
		r.ctx.cert_pem = tsec_str_c(json_string_value(v));
	}
	assert_int_equal(tsec_bus_check(bus, "policy", &r, 1, &d, &err), 0);
	return d;
}

/* Each report confirmed by the module, under both policies. */
static void confirm(void *ctx, json_t *req, const struct tsec_decision *da,
		    const struct tsec_decision *db)
{
	struct seen *s = ctx;
	struct tsec_decision a = decide_json(s->a, req), b = decide_json(s->b, req);
	const char *key = json_string_value(json_object_get(req, "resource"));
	size_t depth = *key ? 1 : 0;

	for (const char *c = key; *c; c++)
		depth += *c == '/';
	if (a.allow != da->allow || b.allow != db->allow || a.allow == b.allow) {
		char *t = json_dumps(req, JSON_COMPACT);
		fail_msg("diff reported %s, which the module decides %d / %d", t, a.allow, b.allow);
	}
	if (!s->reports++) {
		char *t = json_dumps(req, JSON_COMPACT);
		snprintf(s->first, sizeof(s->first), "%s", t);
		free(t);
	}
	if (depth > s->max_depth)
		s->max_depth = depth;
	if (s->all)
		json_array_append_new(s->all, json_pack("[O,b,b]", req, a.allow, b.allow));
}

static struct tsec__diff_stats run(const char *ta, const char *tb, struct seen *s)
{
	json_t *pa = json_loads(ta, 0, NULL), *pb = json_loads(tb, 0, NULL);
	struct tsec__diff_stats st;
	struct tsec_error err;

	assert_non_null(pa);
	assert_non_null(pb);
	{
		json_t *keep = s->all;
		memset(s, 0, sizeof(*s));
		s->all = keep;
	}
	s->a = tu_bus_with_text(ta);
	s->b = tu_bus_with_text(tb);
	assert_non_null(s->a);
	assert_non_null(s->b);
	if (tsec__policy_diff(s->a, s->b, pa, pb, 0, confirm, s, &st, &err))
		fail_msg("diff: %s", err.msg);
	assert_int_equal(st.differ, s->reports);
	json_decref(pa);
	json_decref(pb);
	return st;
}

static void done(struct seen *s)
{
	tsec_bus_free(&s->a);
	tsec_bus_free(&s->b);
}

#define POLICY(floor, rules) \
	"{\"version\": 1, \"floor\": [" floor "], \"rules\": [" rules "]}"

/*
 * The cases issue 49 found "0 differ" for: a glob narrowed (the last
 * segment of certificates/acme/ from any name to names starting with x)
 * and back; a floor on certificates, then any depth, then a .key name
 * rewritten as explicit depths 2-5 (a key at depth 6 goes from DENY to
 * ALLOW); and the same policy twice, which differs in nothing.
 */
static void test_diff_issue_cases(void **state)
{
	(void)state;
	static const char *const glob[2] = {
		POLICY("", "{\"id\": \"a\", \"effect\": \"allow\", \"principal\": [\"svc:x\"], "
		       "\"action\": [\"storage.load\"], \"resource\": [\"certificates/acme/*\"]}"),
		POLICY("", "{\"id\": \"a\", \"effect\": \"allow\", \"principal\": [\"svc:x\"], "
		       "\"action\": [\"storage.load\"], \"resource\": [\"certificates/acme/x*\"]}"),
	};
	static const char *const floor[2] = {
		POLICY("{\"id\": \"f\", \"action\": [\"storage.load\"], \"resource\": "
		       "[\"certificates/**/*.key\"]}",
		       "{\"id\": \"all\", \"effect\": \"allow\", \"principal\": [\"svc:auditor\"], "
		       "\"action\": [\"storage.load\"], \"resource\": [\"**\"]}"),
		POLICY("{\"id\": \"f\", \"action\": [\"storage.load\"], \"resource\": "
		       "[\"certificates/*.key\", \"certificates/*/*.key\", \"certificates/*/*/*.key\", "
		       "\"certificates/*/*/*/*.key\"]}",
		       "{\"id\": \"all\", \"effect\": \"allow\", \"principal\": [\"svc:auditor\"], "
		       "\"action\": [\"storage.load\"], \"resource\": [\"**\"]}"),
	};
	struct tsec__diff_stats st;
	struct seen s = { 0 };

	for (int way = 0; way < 2; way++) {
		st = run(glob[way], glob[!way], &s);
		assert_true(st.exact);
		if (!st.differ)
			fail_msg("certificates/acme/* against x*: 0 differ");
		done(&s);
		st = run(floor[way], floor[!way], &s);
		if (!st.differ)
			fail_msg("the '**' floor against depths 2-5: 0 differ");
		/* Every difference is a key deeper than the explicit ones. */
		assert_true(s.max_depth >= 6);
		done(&s);
	}
	/* A move between two classes, each of which is the same under both
	 * (out/) or differs only at one end (in/): the move from in/ to
	 * out/ differs too, and is reported. */
	{
		static const char *const mv[2] = {
			POLICY("", "{\"id\": \"m\", \"effect\": \"allow\", \"principal\": [\"svc:x\"], "
			       "\"action\": [\"storage.move\"], \"resource\": [\"in/*\", \"out/*\"]}"),
			POLICY("", "{\"id\": \"m\", \"effect\": \"allow\", \"principal\": [\"svc:x\"], "
			       "\"action\": [\"storage.move\"], \"resource\": [\"out/*\"]}"),
		};
		s.all = json_array();
		st = run(mv[0], mv[1], &s);
		{
			bool across = false;
			size_t i;
			json_t *rep;
			json_array_foreach(s.all, i, rep) {
				json_t *q = json_array_get(rep, 0);
				const char *res = json_string_value(json_object_get(q, "resource"));
				const char *dst = json_string_value(json_object_get(
					json_object_get(q, "context"), "dest"));
				across |= res && dst && !strncmp(res, "in/", 3) && !strncmp(dst, "out/", 4);
			}
			if (!across)
				fail_msg("no move from in/ to out/ reported");
		}
		json_decref(s.all);
		s.all = NULL;
		done(&s);
	}
	st = run(glob[0], glob[0], &s);
	assert_int_equal(st.differ, 0);
	assert_true(st.asked > 0);
	done(&s);
	{
		char *text = NULL;
		size_t n;
		struct tsec_error err;

		assert_int_equal(tsec_read_file("examples/policy.json", 1 << 20, &text, &n, &err), 0);
		st = run(text, text, &s);
		assert_int_equal(st.differ, 0);
		assert_true(st.exact);
		assert_true(st.cert_rules > 0);
		done(&s);
		/* A certificate condition changed (RSA keys of at least 3,072
		 * bits): found, with a certificate the module decides so. */
		{
			json_t *p = json_loads(text, 0, NULL), *r;
			size_t i;
			char *t2;
			json_array_foreach(json_object_get(p, "rules"), i, r) {
				json_t *c = json_object_get(json_object_get(r, "when"), "cert");
				if (c && json_object_get(c, "min_rsa_bits"))
					json_object_set_new(c, "min_rsa_bits", json_integer(3072));
			}
			assert_non_null(t2 = json_dumps(p, 0));
			s.all = json_array();
			st = run(text, t2, &s);
			if (!st.differ)
				fail_msg("min_rsa_bits 2048 -> 3072: 0 differ");
			json_array_foreach(s.all, i, r)
				assert_non_null(json_object_get(json_object_get(json_array_get(r, 0),
										"context"), "cert_pem"));
			json_decref(s.all);
			s.all = NULL;
			done(&s);
			free(t2);
			json_decref(p);
		}
		free(text);
	}
}

/* ---- brute force ---- */

static uint64_t rng = 0x49;

static unsigned rnd(unsigned n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((rng >> 33) % n);
}

/* Pattern segments: literals, globs with prefixes and suffixes, '**'. */
static const char *const PSEG[] = { "a", "ab", "b.key", "*", "**", "a*", "*b", "*.key", "*a*" };
/* The universe's segments: each class of the globs above, and one no
 * pattern names. */
static const char *const USEG[] = { "a", "ab", "b.key", "zz" };
#define UDEPTH 7

static void rand_rule(char *out, size_t n, int i, bool floor)
{
	static const char *const WHO[] = { "svc:a", "svc:b", "role:web", "*" };
	static const char *const ACT[] = { "storage.load", "storage.store", "storage.*" };
	static const char *const EFF[] = { "allow", "allow", "deny" };
	char res[200];
	unsigned segs = 1 + rnd(8), o = 0, stars = 0;

	for (unsigned k = 0; k < segs; k++) {
		const char *sg = PSEG[rnd(sizeof(PSEG) / sizeof(PSEG[0]))];
		if (!strcmp(sg, "**") && ++stars > 2)
			sg = "*";
		o += (unsigned)snprintf(res + o, sizeof(res) - o, "%s%s", k ? "/" : "", sg);
	}
	if (floor)
		snprintf(out, n, "{\"id\": \"f%d\", \"action\": [\"%s\"], \"resource\": [\"%s\"]}", i,
			 ACT[rnd(3)], res);
	else
		snprintf(out, n, "{\"id\": \"r%d\", \"effect\": \"%s\", \"principal\": [\"%s\"], "
			 "\"action\": [\"%s\"], \"resource\": [\"%s\"]%s}", i, EFF[rnd(3)],
			 WHO[rnd(4)], ACT[rnd(3)], res,
			 rnd(3) == 0 ? ", \"when\": {\"size_max\": 100}" : "");
}

static void rand_policy(char *out, size_t n, const char *base_rules[], int nbase)
{
	size_t o = (size_t)snprintf(out, n, "{\"version\": 1, \"floor\": [");
	char r[400];

	if (rnd(3) == 0) {
		rand_rule(r, sizeof(r), 0, true);
		o += (size_t)snprintf(out + o, n - o, "%s", r);
	}
	o += (size_t)snprintf(out + o, n - o, "], \"rules\": [");
	for (int i = 0; i < nbase; i++)
		o += (size_t)snprintf(out + o, n - o, "%s%s", i ? ", " : "", base_rules[i]);
	snprintf(out + o, n - o, "]}");
}

/* Whether key segments k[0..nk) match pattern segments p[0..np): a
 * matcher of the test's own ('*' any run in a segment, '**' any number
 * of whole segments). */
static bool seg_match(const char *p, const char *k)
{
	if (!*p)
		return !*k;
	if (*p == '*') {
		for (const char *c = k;; c++) {
			if (seg_match(p + 1, c))
				return true;
			if (!*c)
				return false;
		}
	}
	return *p == *k && seg_match(p + 1, k + 1);
}

static bool key_match(char **p, int np, char **k, int nk)
{
	if (np == 0)
		return nk == 0;
	if (!strcmp(p[0], "**"))
		for (int i = 0; i <= nk; i++)
			if (key_match(p + 1, np - 1, k + i, nk - i))
				return true;
	return nk > 0 && strcmp(p[0], "**") && seg_match(p[0], k[0]) &&
	       key_match(p + 1, np - 1, k + 1, nk - 1);
}

static int split(char *s, char **out)
{
	int n = 0;

	for (char *t = strtok(s, "/"); t && n < 16; t = strtok(NULL, "/"))
		out[n++] = t;
	return n;
}

/* The patterns key matches, as a string of 0 and 1 over pats. */
static void vector(json_t *pats, const char *key, char *out)
{
	char kb[200], *k[16];
	int nk, i;
	json_t *v;
	size_t j;

	snprintf(kb, sizeof(kb), "%s", key);
	nk = split(kb, k);
	json_array_foreach(pats, j, v) {
		char pb[200], *p[16];
		int np;

		snprintf(pb, sizeof(pb), "%s", json_string_value(v));
		np = split(pb, p);
		out[j] = key_match(p, np, k, nk) ? '1' : '0';
	}
	i = (int)json_array_size(pats);
	out[i] = 0;
}

/* Every resource pattern of a policy's text, into pats (once each). */
static void patterns_of(json_t *pats, const char *text)
{
	static const char *const sections[] = { "floor", "rules" };
	json_t *p = json_loads(text, 0, NULL), *r, *v;
	size_t i, j, k;

	for (int t = 0; t < 2; t++)
		json_array_foreach(json_object_get(p, sections[t]), i, r)
			json_array_foreach(json_object_get(r, "resource"), j, v) {
				bool have = false;
				json_t *w;
				json_array_foreach(pats, k, w)
					have |= json_equal(v, w);
				if (!have)
					json_array_append(pats, v);
			}
	json_decref(p);
}

/* The patterns of rules with a size bound, into pats. */
static void bounded_of(json_t *pats, const char *text)
{
	json_t *p = json_loads(text, 0, NULL), *r, *v;
	size_t i, j;

	json_array_foreach(json_object_get(p, "rules"), i, r)
		if (json_object_get(json_object_get(r, "when"), "size_max"))
			json_array_foreach(json_object_get(r, "resource"), j, v)
				json_array_append(pats, v);
	json_decref(p);
}

/*
 * Whether diff reported, for the class of a request brute force found
 * differing (the patterns its key matches, its action, its size on each
 * side of the bound), a request the two policies decide as they decide
 * it.
 */
static json_t *bounded_pats;         /* patterns of rules with size_max */

/* Whether a rule with a size bound applies to key's class. */
static bool bounded_at(const char *key)
{
	char v[64];

	vector(bounded_pats, key, v);
	return strchr(v, '1') != NULL;
}

static bool covered(json_t *reports, json_t *pats, const char *key, const char *action,
		    int size, bool a, bool b)
{
	char want[64], got[64];
	json_t *rep;
	size_t i;

	vector(pats, key, want);
	json_array_foreach(reports, i, rep) {
		json_t *req = json_array_get(rep, 0);
		json_t *sz = json_object_get(json_object_get(req, "context"), "size");

		if (strcmp(json_string_value(json_object_get(req, "action")), action) ||
		    json_is_true(json_array_get(rep, 1)) != a ||
		    json_is_true(json_array_get(rep, 2)) != b)
			continue;
		/* (Sizes are one class where no rule bounds them.) */
		if (size >= 0 && bounded_at(key) && (!sz || (json_integer_value(sz) > 100) != (size > 100)))
			continue;
		vector(pats, json_string_value(json_object_get(req, "resource")), got);
		if (!strcmp(want, got))
			return true;
	}
	return false;
}

/* Every key of the universe, depth 1..UDEPTH, decided under both: whether
 * any differs (the first, into first), and whether diff covered each one
 * that does (the first it did not, into missed). */
static bool brute(struct tsec_bus *a, struct tsec_bus *b, char *first, size_t fn,
		  json_t *reports, json_t *pats, char *missed, size_t mn)
{
	static const char *const WHO[] = { "svc:a", "svc:b", "svc:c" };
	unsigned idx[UDEPTH];
	bool any = false;

	for (unsigned depth = 1; depth <= UDEPTH; depth++) {
		memset(idx, 0, sizeof(idx));
		for (;;) {
			char key[200];
			size_t o = 0;
			struct tsec_request r[6];
			struct tsec_decision da[6], db[6];
			struct tsec_str web = tsec_str_c("web");
			struct tsec_error err;

			for (unsigned k = 0; k < depth; k++)
				o += (size_t)snprintf(key + o, sizeof(key) - o, "%s%s", k ? "/" : "",
						      USEG[idx[k]]);
			memset(r, 0, sizeof(r));
			for (int i = 0; i < 6; i++) {
				r[i].principal = tsec_str_c(WHO[i % 3]);
				if (i % 3 == 2) {
					r[i].roles = &web;
					r[i].nroles = 1;
				}
				r[i].resource = tsec_str_c(key);
				r[i].action = tsec_str_c(i < 3 ? "storage.load" : "storage.store");
				if (i >= 3) {
					r[i].ctx.has = TSEC_CTX_SIZE;
					r[i].ctx.size = i == 3 ? 100 : 101;
				}
			}
			assert_int_equal(tsec_bus_check(a, "policy", r, 6, da, &err), 0);
			assert_int_equal(tsec_bus_check(b, "policy", r, 6, db, &err), 0);
			for (int i = 0; i < 6; i++)
				if (da[i].allow != db[i].allow) {
					const char *act = i < 3 ? "storage.load" : "storage.store";

					if (!any)
						snprintf(first, fn, "%s %s by %s", act, key, WHO[i % 3]);
					any = true;
					if (!*missed && !covered(reports, pats, key, act,
								 i < 3 ? -1 : (int)r[i].ctx.size,
								 da[i].allow, db[i].allow))
						snprintf(missed, mn, "%s %s by %s (size %d)", act, key,
							 WHO[i % 3], i < 3 ? -1 : (int)r[i].ctx.size);
				}
			unsigned k = 0;
			while (k < depth && ++idx[k] == sizeof(USEG) / sizeof(USEG[0]))
				idx[k++] = 0;
			if (k == depth)
				break;
		}
	}
	return any;
}

static void test_diff_against_brute_force(void **state)
{
	int pairs = 0, differing = 0;
	char pa[4096], pb[4096], r[4][400], first[300];

	(void)state;
	for (int round = 0; round < 40; round++) {
		const char *base[4], *other[4];
		struct tsec__diff_stats st;
		struct seen s = { 0 };
		bool b;

		for (int i = 0; i < 4; i++) {
			rand_rule(r[i], sizeof(r[i]), i, false);
			base[i] = r[i];
		}
		rand_policy(pa, sizeof(pa), base, 4);
		/* NEW: OLD with one rule drawn again, or one removed. */
		{
			static char changed[400];
			int k = (int)rnd(4);
			for (int i = 0; i < 4; i++)
				other[i] = base[i];
			rand_rule(changed, sizeof(changed), k, false);
			other[k] = changed;
			rand_policy(pb, sizeof(pb), other, rnd(4) ? 4 : 3);
		}
		json_t *pats = json_array();
		char missed[300] = "";

		s.all = json_array();
		st = run(pa, pb, &s);
		patterns_of(pats, pa);
		patterns_of(pats, pb);
		bounded_pats = json_array();
		bounded_of(bounded_pats, pa);
		bounded_of(bounded_pats, pb);
		b = brute(s.a, s.b, first, sizeof(first), s.all, pats, missed, sizeof(missed));
		pairs++;
		if (b && !st.differ)
			fail_msg("round %d: brute force found %s; diff said 0 differ\nOLD %s\nNEW %s",
				 round, first, pa, pb);
		if (*missed)
			fprintf(stderr, "OLD %s\nNEW %s\n", pa, pb);
		if (*missed)
			fail_msg("round %d: brute force found %s; diff reported nothing of its "
				 "class\nOLD %s\nNEW %s", round, missed, pa, pb);
		json_decref(pats);
		json_decref(bounded_pats);
		json_decref(s.all);
		s.all = NULL;
		if (!st.exact)
			fail_msg("round %d: not exact", round);
		differing += b;
		done(&s);
	}
	/* Enough of both kinds to mean something. */
	assert_true(differing >= 10);
	assert_true(pairs - differing >= 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_diff_issue_cases),
		cmocka_unit_test(test_diff_against_brute_force),
	};
	return cmocka_run_group_tests_name("diff", tests, NULL, NULL);
}
