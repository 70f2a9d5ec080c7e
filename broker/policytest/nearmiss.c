/*
 * Near misses: why a request nothing allowed was not allowed by the rule
 * its author most likely meant (issue 51, item 3: the natural first
 * policy, principal "acme-issuer" and a resource of one star under
 * certificates/acme, matched nothing and nothing said why).  An allow
 * that names the
 * request's action is a near miss when it would have matched
 *
 *   - but for the principal: it names the caller without the prefix
 *     every principal carries ("acme-issuer" for "svc:acme-issuer"), or
 *     one edit or two away;
 *   - but for a "*" that stays inside one segment where "**" would reach
 *     the key (a star under certificates/acme and certificates/acme/x/x.crt);
 *   - but for one literal segment one edit from the key's.
 *
 * Read from the policy's JSON, with a plain matcher of the language's
 * globs: the module decides; this only explains.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "broker/policytest/policytest.h"
#include "common/suggest.h"

#define SEGS 64

/* '*' any run of characters inside the segment. */
static bool seg_match(const char *p, size_t pn, const char *s, size_t sn)
{
	if (!pn)
		return !sn;
	if (*p == '*') {
		for (size_t i = 0; i <= sn; i++)
			if (seg_match(p + 1, pn - 1, s + i, sn - i))
				return true;
		return false;
	}
	return sn && *p == *s && seg_match(p + 1, pn - 1, s + 1, sn - 1);
}

struct segs {
	const char *v[SEGS];
	size_t n[SEGS];
	int count;
};

static void split(const char *s, struct segs *out)
{
	out->count = 0;
	while (*s && out->count < SEGS) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);

		if (n) {
			out->v[out->count] = s;
			out->n[out->count++] = n;
		}
		s += n + (e != NULL);
	}
}

static bool match_from(const struct segs *p, int pi, const struct segs *k, int ki)
{
	if (pi == p->count)
		return ki == k->count;
	if (p->n[pi] == 2 && !memcmp(p->v[pi], "**", 2)) {
		for (int j = ki; j <= k->count; j++)
			if (match_from(p, pi + 1, k, j))
				return true;
		return false;
	}
	return ki < k->count && seg_match(p->v[pi], p->n[pi], k->v[ki], k->n[ki]) &&
	       match_from(p, pi + 1, k, ki + 1);
}

/* How many "**" a pattern has: the language allows two, and a matcher
 * with more would backtrack without bound on a caller's key. */
static int stars2(const struct segs *p)
{
	int n = 0;

	for (int j = 0; j < p->count; j++)
		n += p->n[j] == 2 && !memcmp(p->v[j], "**", 2);
	return n;
}

static bool action_named(const json_t *rule, const char *action)
{
	const json_t *v;
	size_t i;

	json_array_foreach(json_object_get(rule, "action"), i, v) {
		const char *a = json_string_value(v);
		size_t n = a ? strlen(a) : 0;

		if (a && (!strcmp(a, "*") || !strcmp(a, action) ||
			  (n > 2 && a[n - 1] == '*' && !strncmp(a, action, n - 1))))
			return true;
	}
	return false;
}

static bool role_held(const struct tsec_request *r, const char *role)
{
	for (uint32_t i = 0; i < r->nroles; i++) {
		const char *p = r->roles[i].ptr;
		size_t n = r->roles[i].len;

		if (n > 5 && !memcmp(p, "role:", 5)) {
			p += 5;
			n -= 5;
		}
		if (n == strlen(role) && !memcmp(p, role, n))
			return true;
	}
	return false;
}

/* 1: the rule names the caller; 0: not; with near, the nearest it names
 * instead (set when one is near enough to be meant). */
static int principal_named(const json_t *rule, const struct tsec_request *r, char *who,
			   const char **near)
{
	const json_t *list = json_object_get(rule, "principal"), *v;
	size_t i;

	*near = NULL;
	if (!list)
		return 1;
	json_array_foreach(list, i, v) {
		const char *p = json_string_value(v);
		const char *colon = strchr(who, ':');

		if (!p)
			continue;
		if (!strcmp(p, "*") || !strcmp(p, who) ||
		    (!strncmp(p, "role:", 5) && role_held(r, p + 5)))
			return 1;
		if ((colon && !strcmp(p, colon + 1)) || tsec__edit_distance(p, who) <= 2)
			*near = p;
	}
	return 0;
}

/* The first pattern of rule that matches key k. */
static bool resource_named(const json_t *rule, const struct segs *k)
{
	const json_t *v;
	size_t i;
	struct segs p;

	json_array_foreach(json_object_get(rule, "resource"), i, v) {
		if (!json_string_value(v))
			continue;
		split(json_string_value(v), &p);
		if (match_from(&p, 0, k, 0))
			return true;
	}
	return false;
}

/* A pattern of rule that is near key k: its '*' segments made '**', or
 * one literal segment one edit from the key's.  Said into out. */
static bool resource_near(const json_t *rule, const struct segs *k, const char *id,
			  char *out, size_t cap)
{
	const json_t *v;
	size_t i;

	json_array_foreach(json_object_get(rule, "resource"), i, v) {
		const char *s = json_string_value(v);
		struct segs p, q;
		char wide[1100];
		size_t o = 0;

		if (!s)
			continue;
		split(s, &p);
		/* "*" where "**" was meant. */
		q = p;
		for (int j = 0; j < q.count && o + 4 < sizeof(wide); j++) {
			bool star = q.n[j] == 1 && q.v[j][0] == '*';
			o += (size_t)snprintf(wide + o, sizeof(wide) - o, "%s%.*s", j ? "/" : "",
					      star ? 2 : (int)q.n[j], star ? "**" : q.v[j]);
		}
		split(wide, &q);
		if (strcmp(wide, s) && stars2(&q) <= 2 && match_from(&q, 0, k, 0)) {
			snprintf(out, cap, "rule '%.60s': '%.60s' stays inside one segment for each "
				 "'*'; '%.60s' would reach this key", id, s, wide);
			return true;
		}
		/* A star segment one level deep ("x.key" with a star, under a
		 * folder) where any depth was meant: "**" before the first
		 * segment with a star. */
		o = 0;
		for (int j = 0, put = 0; j < p.count && o + 4 < sizeof(wide); j++) {
			if (!put && memchr(p.v[j], '*', p.n[j]) && !(p.n[j] == 2 && p.v[j][1] == '*')) {
				o += (size_t)snprintf(wide + o, sizeof(wide) - o, "%s**", j ? "/" : "");
				put = 1;
				if (p.n[j] == 1)
					continue;    /* a lone star: "**" is what was meant */
			}
			o += (size_t)snprintf(wide + o, sizeof(wide) - o, "%s%.*s", o ? "/" : "",
					      (int)p.n[j], p.v[j]);
		}
		split(wide, &q);
		if (strcmp(wide, s) && stars2(&q) <= 2 && match_from(&q, 0, k, 0)) {
			snprintf(out, cap, "rule '%.60s': '%.60s' stays inside one segment for each "
				 "'*'; '%.60s' would reach this key", id, s, wide);
			return true;
		}
		/* One literal segment one edit from one of the key's. */
		for (int j = 0; j < p.count; j++)
			for (int m = 0; m < k->count; m++) {
				char a[256], b[256];
				struct segs fixed = p;

				if (memchr(p.v[j], '*', p.n[j]) || p.n[j] >= sizeof(a) ||
				    k->n[m] >= sizeof(b))
					continue;
				snprintf(a, sizeof(a), "%.*s", (int)p.n[j], p.v[j]);
				snprintf(b, sizeof(b), "%.*s", (int)k->n[m], k->v[m]);
				if (!strcmp(a, b) || tsec__edit_distance(a, b) != 1)
					continue;
				fixed.v[j] = k->v[m];
				fixed.n[j] = k->n[m];
				if (match_from(&fixed, 0, k, 0)) {
					snprintf(out, cap, "rule '%.60s': '%.40s' in '%.60s' is one "
						 "edit from the key's '%.40s'", id, a, s, b);
					return true;
				}
			}
	}
	return false;
}

int tsec__near_misses(const json_t *policy, const struct tsec_request *r, char (*out)[256],
		      int max)
{
	char who[256], action[64], key[1100];
	const json_t *rule;
	struct segs k;
	size_t i;
	int n = 0;

	snprintf(who, sizeof(who), "%.*s", (int)r->principal.len, r->principal.ptr);
	snprintf(action, sizeof(action), "%.*s", (int)r->action.len, r->action.ptr);
	snprintf(key, sizeof(key), "%.*s", (int)r->resource.len, r->resource.ptr);
	split(key, &k);
	json_array_foreach(json_object_get(policy, "rules"), i, rule) {
		const char *eff = json_string_value(json_object_get(rule, "effect"));
		const char *id = json_string_value(json_object_get(rule, "id")), *near;
		int named;

		if (n >= max || !id || !eff || strcmp(eff, "allow") || !action_named(rule, action))
			continue;
		named = principal_named(rule, r, who, &near);
		if (!named && near && resource_named(rule, &k))
			snprintf(out[n++], 256, "rule '%.56s' names principal '%.56s'; the caller is '%.56s'%s",
				 id, near, who, strchr(who, ':') && !strchr(near, ':')
				 ? " (principals carry their prefix)" : "");
		else if (named && !resource_named(rule, &k) &&
			 resource_near(rule, &k, id, out[n], 256))
			n++;
	}
	return n;
}
