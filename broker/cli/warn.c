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

static unsigned actions_of(const json_t *r)
{
	const json_t *a = json_object_get(r, "action"), *v;
	unsigned m = 0, storage = 0;
	size_t i;

	for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
		if (strncmp(tsec_action_name(x), "lock.", 5))
			storage |= 1u << x;
	json_array_foreach(a, i, v) {
		const char *s = json_string_value(v);

		if (!s)
			continue;
		if (!strcmp(s, "*"))
			m |= (1u << TSEC_ACTION__COUNT) - 1;
		else if (!strcmp(s, "storage.*"))
			m |= storage;
		else if (!strcmp(s, "lock.*"))
			m |= ((1u << TSEC_ACTION__COUNT) - 1) & ~storage;
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

/* Whether pattern d matches everything pattern a does (conservatively). */
static bool covers(const char *d, const char *a)
{
	size_t n = strlen(d);

	if (!strcmp(d, "**") || !strcmp(d, a))
		return true;
	/* "P/" then "**" covers every pattern under P/ */
	return n > 3 && !strcmp(d + n - 3, "/**") && !strncmp(a, d, n - 2);
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

static void say(json_t *out, const char *place, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(json_t *out, const char *place, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_array_append_new(out, json_pack("{s:s,s:s}", "where", place, "message", msg));
}

json_t *cli_policy_warnings(const char *path)
{
	json_t *p = json_load_file(path, 0, NULL), *out = json_array(), *rules, *floors, *r, *d;
	unsigned lock_mask = 0;
	size_t i, j;

	for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
		if (!strncmp(tsec_action_name(x), "lock.", 5))
			lock_mask |= 1u << x;
	rules = json_object_get(p, "rules");
	floors = json_object_get(p, "floor");
	json_array_foreach(rules, i, r) {
		const char *id = json_string_value(json_object_get(r, "id"));
		const char *eff = json_string_value(json_object_get(r, "effect"));
		unsigned am = actions_of(r);
		char place[64];
		bool lock_res = false;
		const json_t *v;
		size_t k;

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
			say(out, place, "rule '%s' can never match: lock actions act on locks/<name>, "
			    "and none of its resources is there", id);
		if (strcmp(eff, "allow"))
			continue;
		/* Shadowed by a floor (everyone) or an unconditional deny. */
		for (int pass = 0; pass < 2; pass++) {
			json_array_foreach(pass ? rules : floors, j, d) {
				const char *did = json_string_value(json_object_get(d, "id"));

				if (!did || d == r || (pass && strcmp(json_string_value(
					json_object_get(d, "effect")) ? json_string_value(
					json_object_get(d, "effect")) : "", "deny")))
					continue;
				if (json_object_get(d, "when") || json_object_get(d, "domain"))
					continue;
				/* A floor may name principals too. */
				if (!principals_covered(d, r))
					continue;
				if ((actions_of(d) & am) != am ||
				    !all_covered(json_object_get(d, "resource"), json_object_get(r, "resource")))
					continue;
				say(out, place, "rule '%s' can never allow: %s '%s' refuses everything "
				    "it matches", id, pass ? "deny" : "floor", did);
				goto next;
			}
		}
next:;
	}
	json_decref(p);
	return out;
}
