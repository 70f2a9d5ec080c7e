/*
 * tsec lint's warnings: a policy that compiles may still hold rules that
 * can never decide anything.  Read from the policy's JSON here, after the
 * module said it is valid:
 * - an allow shadowed by a floor, or by a deny without conditions, that
 *   covers every principal, action and resource it names;
 * - a rule that can never match: lock actions on resources outside
 *   locks/.  (Storage actions on locks/ resources do match: they act on
 *   values named so.  Lock state is outside the key space.)
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "tinysecurity/types.h"
#include "broker/cli/cli.h"
#include "common/clock.h"
#include "common/suggest.h"

static unsigned actions_of(const json_t *r)
{
	const json_t *a = json_object_get(r, "action"), *v;
	unsigned m = 0;
	size_t i;

	json_array_foreach(a, i, v) {
		const char *s = json_string_value(v);

		if (!s)
			continue;
		if (!strcmp(s, "*"))
			m |= (1u << TSEC_ACTION__COUNT) - 1;
		else if (tsec_action_family(s, strlen(s)))
			m |= tsec_action_family(s, strlen(s));
		else
			for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
				if (!strcmp(s, tsec_action_name(x)))
					m |= 1u << x;
	}
	return m;
}

static bool has_string(const json_t *arr, const char *s)
{
	const json_t *v;
	size_t i;

	json_array_foreach(arr, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), s))
			return true;
	return false;
}

/*
 * Whether the one-segment glob t matches every name the one-segment glob
 * l does (conservatively: equal, "*", or "*S" / "S*" with S literal where
 * l's end / start is that same literal S).
 */
static bool segment_covers(const char *t, size_t tn, const char *l, size_t ln)
{
	if ((tn == ln && !memcmp(t, l, tn)) || (tn == 1 && t[0] == '*'))
		return true;
	if (tn < 2 || memchr(l, '/', ln))
		return false;
	if (t[0] == '*' && !memchr(t + 1, '*', tn - 1))
		return ln >= tn - 1 && !memcmp(l + ln - (tn - 1), t + 1, tn - 1) &&
		       !memchr(l + ln - (tn - 1), '*', tn - 1);
	if (t[tn - 1] == '*' && !memchr(t, '*', tn - 1))
		return ln >= tn - 1 && !memcmp(l, t, tn - 1) && !memchr(l, '*', tn - 1);
	return false;
}

/* Whether pattern d matches everything pattern a does (conservatively). */
static bool covers(const char *d, const char *a)
{
	size_t n = strlen(d);
	const char *dd = strstr(d, "**/"), *t, *l;
	size_t pn;

	if (!strcmp(d, "**") || !strcmp(d, a))
		return true;
	/* "P/" then "**" covers every pattern under P/ */
	if (n > 3 && !strcmp(d + n - 3, "/**") && !strncmp(a, d, n - 2))
		return true;
	/*
	 * P, then two stars as a segment, then T, one segment (the floor
	 * on certificates, any depth, "*.key"): covers a pattern under P
	 * whose last segment T covers, whatever
	 * lies between (the "**" takes any number of segments, none too).
	 * P must be literal, T and a's last segment free of "**".
	 */
	if (!dd || (dd != d && dd[-1] != '/'))
		return false;
	pn = (size_t)(dd - d);
	t = dd + 3;
	if (memchr(d, '*', pn) || strchr(t, '/') || strstr(t, "**") || strncmp(a, d, pn))
		return false;
	l = strrchr(a, '/') ? strrchr(a, '/') + 1 : a;
	if ((size_t)(l - a) < pn || strstr(l, "**"))
		return false;
	return segment_covers(t, strlen(t), l, strlen(l));
}

static bool all_covered(const json_t *dres, const json_t *ares)
{
	const json_t *v, *w;
	size_t i, j;

	json_array_foreach(ares, i, v) {
		bool ok = false;

		json_array_foreach(dres, j, w)
			ok |= json_is_string(v) && json_is_string(w) &&
			      covers(json_string_value(w), json_string_value(v));
		if (!ok)
			return false;
	}
	return json_array_size(ares) > 0;
}

static bool principals_covered(const json_t *d, const json_t *a)
{
	const json_t *dp = json_object_get(d, "principal"), *v;
	size_t i;

	if (!dp || has_string(dp, "*"))
		return true;
	json_array_foreach(json_object_get(a, "principal"), i, v)
		if (!json_is_string(v) || !has_string(dp, json_string_value(v)))
			return false;
	return true;
}

void cli_note(json_t *out, const char *place, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_array_append_new(out, json_pack("{s:s,s:s}", "where", place, "message", msg));
}

/* Rank of a rule that can shadow an allow: floors first, then rules. */
static const json_t *rule_at(const json_t *floors, const json_t *rules, size_t rank)
{
	size_t nf = json_array_size(floors);

	return rank < nf ? json_array_get(floors, rank) : json_array_get(rules, rank - nf);
}

/*
 * Files rank under each resource pattern of d (the index of shadowers),
 * and in deep once when a pattern has two stars as a middle segment (no
 * cut of an allow's resource names it; covers() reads it whole).
 */
static void index_shadower(json_t *by_pat, json_t *deep, const json_t *d, size_t rank)
{
	const json_t *v;
	size_t i;
	bool in_deep = false;

	json_array_foreach(json_object_get(d, "resource"), i, v) {
		json_t *list;

		if (!json_is_string(v))
			continue;
		if (!(list = json_object_get(by_pat, json_string_value(v)))) {
			list = json_array();
			json_object_set_new(by_pat, json_string_value(v), list);
		}
		json_array_append_new(list, json_integer((json_int_t)rank));
		if (!in_deep && strstr(json_string_value(v), "**/")) {
			json_array_append_new(deep, json_integer((json_int_t)rank));
			in_deep = true;
		}
	}
}

/* The lowest rank in list (or best) whose rule refuses all allow r does. */
static size_t lowest_cover(const json_t *list, const json_t *floors, const json_t *rules,
			   const json_t *r, unsigned am, size_t best)
{
	const json_t *v;
	size_t i;

	json_array_foreach(list, i, v) {
		size_t rank = (size_t)json_integer_value(v);
		const json_t *d = rule_at(floors, rules, rank);

		if (rank >= best || d == r || !principals_covered(d, r) ||
		    (actions_of(d) & am) != am ||
		    !all_covered(json_object_get(d, "resource"), json_object_get(r, "resource")))
			continue;
		best = rank;
	}
	return best;
}

/*
 * The first shadower (lowest rank) that refuses everything allow r
 * matches, or NULL.  Candidates come from the index: only a pattern that
 * covers r's first resource ("**", the same pattern, or P/ followed by "**" for a
 * folder P above it) can cover them all, so the work per rule is the
 * few patterns along its first resource, not every rule of the policy.
 */
static const json_t *shadowed_by(const json_t *by_pat, const json_t *deep,
				 const json_t *floors, const json_t *rules, const json_t *r,
				 unsigned am, size_t *rank_out)
{
	const json_t *res = json_object_get(r, "resource"), *first = json_array_get(res, 0);
	const char *a = json_string_value(first);
	size_t n = a ? strlen(a) : 0, best = (size_t)-1;
	char key[1100];

	if (!a || n + 4 > sizeof(key))
		return NULL;
	for (size_t cut = 0; cut <= n + 1; cut++) {
		if (cut == 0)
			snprintf(key, sizeof(key), "**");
		else if (cut == n + 1)
			snprintf(key, sizeof(key), "%s", a);
		else if (a[cut - 1] == '/')
			snprintf(key, sizeof(key), "%.*s**", (int)cut, a);
		else
			continue;
		best = lowest_cover(json_object_get(by_pat, key), floors, rules, r, am, best);
	}
	/* And the few shadowers with two stars as a middle segment (as the
	 * example's floor on keys at any depth), which no cut of a names. */
	best = lowest_cover(deep, floors, rules, r, am, best);
	if (best == (size_t)-1)
		return NULL;
	*rank_out = best;
	return rule_at(floors, rules, best);
}

/* The actions whose flags have af, "a and b" (or "a, b and c"), into buf. */
static void carriers(unsigned af, char *buf, size_t cap)
{
	unsigned n = 0, seen = 0;
	size_t o = 0;

	for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
		n += !!(tsec_action_flags(x) & af);
	buf[0] = 0;
	for (unsigned x = 0; x < TSEC_ACTION__COUNT && o < cap; x++) {
		if (!(tsec_action_flags(x) & af))
			continue;
		seen++;
		o += (size_t)snprintf(buf + o, cap - o, "%s%s",
				      seen == 1 ? "" : seen == n ? " and " : ", ",
				      tsec_action_name(x));
	}
}

/*
 * Conditions no request of the rule's actions carries (issue 51, item
 * 5: ttl_ms_max on a load-only rule still allowed every load, silently),
 * and a domain its resources never have (lock names carry none): said at
 * the rule's place.
 */
static void conditions_that_never_apply(json_t *out, const char *place, const char *id,
					const json_t *r, unsigned am)
{
	static const struct {
		const char *name;
		unsigned af;
	} conds[] = {
#define TSEC_X_COND(id, name, carried, bound, lo) { name, carried },
		TSEC_CONDITIONS(TSEC_X_COND)
#undef TSEC_X_COND
	};
	const json_t *when = json_object_get(r, "when"), *v;
	unsigned carried = 0;
	bool domain_ok = false;
	size_t k;

	for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
		if (am & (1u << x))
			carried |= tsec_action_flags(x);
	for (size_t c = 0; am && c < sizeof(conds) / sizeof(conds[0]); c++) {
		char who[256];

		if (!conds[c].af || !json_object_get(when, conds[c].name) ||
		    (carried & conds[c].af))
			continue;
		carriers(conds[c].af, who, sizeof(who));
		cli_note(out, place, "rule '%s': when/%s never applies: only %s carry what it "
			 "bounds, and the rule has neither (it constrains nothing)", id,
			 conds[c].name, who);
	}
	if (!json_object_get(r, "domain"))
		return;
	/* A key's domain is its third segment under certificates/, or the
	 * second under names/: a resource that cannot be such a key never
	 * has one. */
	json_array_foreach(json_object_get(r, "resource"), k, v) {
		const char *s = json_string_value(v);

		if (!s || s[0] == '*' || !strncmp(s, "certificates/", 13) || !strncmp(s, "names/", 6))
			domain_ok = true;
	}
	if (!domain_ok)
		cli_note(out, place, "rule '%s' can never match: it wants a domain, and none of its "
			 "resources has one (only certificates/<issuer>/<domain>/... and "
			 "names/<name> do; lock names do not)", id);
}

/* The depths (in segments) pattern s can match: lo to hi, hi < 0 for
 * no bound ("**" matches zero or more segments). */
static void depths(const char *s, int *lo, int *hi)
{
	int n = 0, deep = 0;

	for (const char *p = s;; p++) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (len == 2 && !strncmp(p, "**", 2))
			deep++;
		else
			n++;
		if (!(p = e))
			break;
	}
	*lo = n;
	*hi = deep ? -1 : n;
}

/*
 * Where certmagic and tsec put the files an action acts on, by the first
 * segment: certificates/ISSUER/DOMAIN/FILE (and a remote store's archive
 * a level below), acme/CA/users/EMAIL/FILE and acme/CA/challenge_tokens/
 * FILE, ocsp/NAME; cert.obtain's names/NAME.  Depths in segments.
 */
#define A(n) (1u << TSEC_ACTION_##n)
#define FILES (A(STORAGE_STORE) | A(STORAGE_LOAD) | A(CERT_PUBLISH) | A(CERT_LOAD) | \
	       A(CERT_EXISTS) | A(CERT_ARCHIVE))
static const struct {
	const char *top;
	unsigned actions;
	int depth[2];
	const char *shape;
} shapes[] = {
	{ "certificates", FILES, { 4, 5 }, "certificates/ISSUER/DOMAIN/DOMAIN.crt|.key|.json" },
	{ "acme", FILES, { 4, 5 }, "acme/CA/users/EMAIL/FILE" },
	{ "ocsp", FILES, { 2, 2 }, "ocsp/NAME" },
	{ "names", A(CERT_OBTAIN), { 2, 2 }, "names/NAME" },
};

/* A pattern too shallow, with "**" where its last segment was
 * (certificates/acme/STAR becomes certificates/acme/STARSTAR). */
static void deeper(const char *s, char *out, size_t n)
{
	const char *last = strrchr(s, '/');
	int pre = last ? (int)(last - s + 1) : 0;

	if (!strcmp(s + pre, "*"))
		snprintf(out, n, "%.*s**", pre, s);
	else
		snprintf(out, n, "%.*s**/%s", pre, s, s + pre);
}

/*
 * Issue 51, item 3, written literally: certificates/acme/STAR.key stays
 * three segments deep where certmagic's keys are four.  Said when a rule
 * acts on files under a top certmagic or tsec lays out and none of its
 * patterns there reaches a file's depth (a rule that also lists the
 * folders above names them alongside a deep enough pattern).
 */
static void too_shallow(json_t *out, const char *place, const char *id, const json_t *r,
			unsigned am)
{
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const char *first = NULL;
		bool reaches = false;
		const json_t *v;
		size_t k, at = 0, tl = strlen(shapes[i].top);
		char better[600], where[96];
		int lo, hi;

		if (!(am & shapes[i].actions))
			continue;
		json_array_foreach(json_object_get(r, "resource"), k, v) {
			const char *s = json_string_value(v);

			if (!s || strncmp(s, shapes[i].top, tl) || (s[tl] != '/' && s[tl]))
				continue;
			depths(s, &lo, &hi);
			for (int d = 0; d < 2; d++)
				if (shapes[i].depth[d] >= lo && (hi < 0 || shapes[i].depth[d] <= hi))
					reaches = true;
			if (!first) {
				first = s;
				at = k;
			}
		}
		if (!first || reaches)
			continue;
		depths(first, &lo, &hi);
		deeper(first, better, sizeof(better));
		snprintf(where, sizeof(where), "%s/resource/%zu", place, at);
		cli_note(out, where, "rule '%s' can never match a file it acts on: '%s' is %d "
			 "segment%s deep, files there are %s ('*' stays inside one segment)%s%s%s",
			 id, first, lo, lo == 1 ? "" : "s", shapes[i].shape,
			 hi >= 0 && hi < shapes[i].depth[0] ? "; did you mean '" : "",
			 hi >= 0 && hi < shapes[i].depth[0] ? better : "",
			 hi >= 0 && hi < shapes[i].depth[0] ? "'?" : "");
	}
}

/* And principals no caller has: every caller is KIND:NAME as its broker
 * names it, every role role:NAME; STAR.key only at the root. */
static void shapes_and_names(json_t *out, const char *place, const char *id, const json_t *r,
			     unsigned am)
{
	const json_t *v;
	char where[96];
	size_t k;

	too_shallow(out, place, id, r, am);
	json_array_foreach(json_object_get(r, "resource"), k, v) {
		const char *s = json_string_value(v);
		size_t n = s ? strlen(s) : 0;

		if (s && n < 200) {
			/* A top one edit or two from one certmagic or tsec writes. */
			static const char *const tops[] = { "certificates", "acme", "ocsp", "locks",
							    "names" };
			char top[200];
			const char *near;
			size_t tl = strcspn(s, "/");

			bool known = false;

			for (size_t j = 0; j < 5; j++)
				known |= strlen(tops[j]) == tl && !strncmp(s, tops[j], tl);
			if (known || memchr(s, '*', tl))
				goto root;
			snprintf(top, sizeof(top), "%.*s", (int)tl, s);
			snprintf(where, sizeof(where), "%s/resource/%zu", place, k);
			if ((near = tsec__nearest(top, tops, 5)))
				cli_note(out, where, "rule '%s': '%s': no key certmagic or tsec writes "
					 "is under '%s'; did you mean '%s%s'?", id, s, top, near,
					 s + tl);
		}
root:
		if (s && !strchr(s, '/') && s[0] == '*' && (am & FILES) && n > 4 &&
		    (!strcmp(s + n - 4, ".key") || !strcmp(s + n - 4, ".crt")) &&
		    snprintf(where, sizeof(where), "%s/resource/%zu", place, k) > 0)
			cli_note(out, where, "rule '%s': '%s' matches only keys at the root, and "
				 "certmagic keeps none there (certificates/ISSUER/DOMAIN/DOMAIN%s); "
				 "did you mean '**/%s'?", id, s, s + n - 4, s);
	}
	for (int f = 0; f < 2; f++)
		json_array_foreach(json_object_get(r, f ? "except" : "principal"), k, v) {
			const char *s = json_string_value(v);

			if (s && strcmp(s, "*") && !strchr(s, ':') &&
			    snprintf(where, sizeof(where), "%s/%s/%zu", place,
				     f ? "except" : "principal", k) > 0)
				cli_note(out, where, "rule '%s': %s '%s' names no caller: callers are "
					 "KIND:NAME as the broker's configuration names them, roles "
					 "role:NAME; did you mean 'svc:%s'?", id,
					 f ? "except" : "principal", s, s);
		}
}
#undef FILES
#undef A

bool cli_expired(const json_t *policy)
{
	const char *e = json_string_value(json_object_get(policy, "expires"));
	int64_t t = e ? tsec__utc_parse(e) : -1;

	return t >= 0 && t * 1000 <= tsec__wall_ms();
}

json_t *cli_policy_warnings(const char *path)
{
	json_t *p = json_load_file(path, 0, NULL), *out = json_array(), *rules, *floors, *r, *d;
	json_t *by_pat = json_object(), *deep = json_array();
	unsigned lock_mask = 0;
	size_t i, nfloors;

	for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
		if (!strncmp(tsec_action_name(x), "lock.", 5))
			lock_mask |= 1u << x;
	rules = json_object_get(p, "rules");
	floors = json_object_get(p, "floor");
	nfloors = json_array_size(floors);
	/* Issue 51, item 6: an expired policy passed lint silently. */
	if (cli_expired(p))
		cli_note(out, "/expires", "the policy expired at %s: a broker refuses it (give a "
			 "later \"expires\" and a new revision)",
			 json_string_value(json_object_get(p, "expires")));
	/* The rules that can shadow an allow: floors (every principal they
	 * name) and denies, without conditions or domains. */
	json_array_foreach(floors, i, d)
		if (json_string_value(json_object_get(d, "id")) && !json_object_get(d, "when") &&
		    !json_object_get(d, "domain") && !json_object_get(d, "except"))
			index_shadower(by_pat, deep, d, i);
	json_array_foreach(rules, i, d) {
		const char *eff = json_string_value(json_object_get(d, "effect"));

		if (json_string_value(json_object_get(d, "id")) && eff && !strcmp(eff, "deny") &&
		    !json_object_get(d, "when") && !json_object_get(d, "domain") &&
		    !json_object_get(d, "except"))
			index_shadower(by_pat, deep, d, nfloors + i);
	}
	json_array_foreach(floors, i, r) {
		char place[64];

		snprintf(place, sizeof(place), "/floor/%zu", i);
		if (json_string_value(json_object_get(r, "id")))
			shapes_and_names(out, place, json_string_value(json_object_get(r, "id")), r,
					 actions_of(r));
	}
	json_array_foreach(rules, i, r) {
		const char *id = json_string_value(json_object_get(r, "id"));
		const char *eff = json_string_value(json_object_get(r, "effect"));
		unsigned am = actions_of(r);
		char place[64];
		bool lock_res = false;
		const json_t *v;
		size_t k, rank;

		snprintf(place, sizeof(place), "/rules/%zu", i);
		if (!id || !eff)
			continue;
		json_array_foreach(json_object_get(r, "resource"), k, v) {
			const char *s = json_string_value(v);
			if (!s)
				continue;
			if (!strncmp(s, "locks/", 6) || !strcmp(s, "**") || s[0] == '*')
				lock_res = true;
		}
		if (am && !(am & ~lock_mask) && !lock_res)
			cli_note(out, place, "rule '%s' can never match: lock actions act on locks/<name>, "
			    "and none of its resources is there", id);
		conditions_that_never_apply(out, place, id, r, am);
		shapes_and_names(out, place, id, r, am);
		if (strcmp(eff, "allow"))
			continue;
		/* Shadowed by a floor (everyone) or an unconditional deny. */
		if ((d = (json_t *)shadowed_by(by_pat, deep, floors, rules, r, am, &rank)))
			cli_note(out, place, "rule '%s' can never allow: %s '%s' refuses everything "
			    "it matches", id, rank < nfloors ? "floor" : "deny",
			    json_string_value(json_object_get(d, "id")));
	}
	json_decref(by_pat);
	json_decref(deep);
	json_decref(p);
	return out;
}
