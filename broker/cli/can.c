/*
 * tsec can PRINCIPAL --policy FILE [--role R]...: what a principal may
 * do under a policy, read from the policy the module compiled (so only a
 * valid policy is answered): each allow that names it (by id, by one of
 * its roles, or "*"), with its actions, resource patterns, domains and
 * conditions; then the floors and the unconditional and conditional
 * denies that name it, which win over any of those allows.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"

/* Whether a rule's principal list names who (absent: everyone). */
static bool names(const json_t *rule, const char *who, const char *const *roles, int nroles)
{
	const json_t *list = json_object_get(rule, "principal"), *v;
	size_t i;

	if (!list)
		return true;
	json_array_foreach(list, i, v) {
		const char *p = json_string_value(v);

		if (!p)
			continue;
		if (!strcmp(p, "*") || !strcmp(p, who))
			return true;
		if (!strncmp(p, "role:", 5))
			for (int r = 0; r < nroles; r++)
				if (!strcmp(p + 5, roles[r]))
					return true;
	}
	return false;
}

/* Whether rule's "except" names who or one of its roles: a floor or deny
 * that does not bind them. */
static bool excepts(const json_t *rule, const char *who, const char *const *roles, int nroles)
{
	const json_t *v;
	size_t i;

	json_array_foreach(json_object_get(rule, "except"), i, v) {
		const char *p = json_string_value(v);

		if (p && !strcmp(p, who))
			return true;
		if (p && !strncmp(p, "role:", 5))
			for (int r = 0; r < nroles; r++)
				if (!strcmp(p + 5, roles[r]))
					return true;
	}
	return false;
}

/* "a, b, c" of a list of strings. */
static void joined(FILE *f, const json_t *list)
{
	const json_t *v;
	size_t i;

	json_array_foreach(list, i, v)
		fprintf(f, "%s%s", i ? ", " : "", json_string_value(v));
}

static void say_rule(const json_t *r, const char *kind)
{
	const json_t *dom = json_object_get(r, "domain"), *when = json_object_get(r, "when");

	fputs("  ", stdout);
	joined(stdout, json_object_get(r, "action"));
	fputs(" on ", stdout);
	joined(stdout, json_object_get(r, "resource"));
	if (dom) {
		fputs(" for ", stdout);
		joined(stdout, dom);
	}
	if (when) {
		char *w = json_dumps(when, JSON_COMPACT | JSON_SORT_KEYS);

		printf(" when %s", w ? w : "?");
		free(w);
	}
	printf("  (%s %s)\n", kind, json_string_value(json_object_get(r, "rule")));
}

/* The rules of one kind that name who, as {rule, action, resource,
 * domain?, when?} objects. */
static json_t *pick(const json_t *rules, const char *effect, const char *who,
		    const char *const *roles, int nroles)
{
	json_t *out = json_array();
	const json_t *r;
	size_t i;

	json_array_foreach(rules, i, r) {
		const char *eff = json_string_value(json_object_get(r, "effect"));
		json_t *o;

		if ((effect && (!eff || strcmp(eff, effect))) || !names(r, who, roles, nroles) ||
		    excepts(r, who, roles, nroles))
			continue;
		o = json_pack("{s:O, s:O, s:O}", "rule", json_object_get(r, "id"), "action",
			      json_object_get(r, "action"), "resource", json_object_get(r, "resource"));
		if (o && json_object_get(r, "domain"))
			json_object_set(o, "domain", json_object_get(r, "domain"));
		if (o && json_object_get(r, "when"))
			json_object_set(o, "when", json_object_get(r, "when"));
		json_array_append_new(out, o);
	}
	return out;
}

int cmd_can(struct opts *o)
{
	const char *who = o->nargs ? o->args[0] : o->principal;
	struct tsec_bus *bus = NULL;
	json_error_t je;
	json_t *pol, *allow, *floor, *deny;
	int rc;

	if (!who || !*who)
		die_usage("can", "name the principal: tsec can PRINCIPAL --policy FILE");
	if (!o->policy)
		die_usage("can", "--policy FILE: the policy to read");
	/* The module compiles it first: an invalid policy is not answered. */
	if (!(bus = cli_bus_on("can", o, o->policy)))
		return EXIT_ERROR;
	tsec_bus_free(&bus);
	if (!(pol = json_load_file(o->policy, JSON_REJECT_DUPLICATES, &je))) {
		cli_json_error("can", o->policy, &je, NULL);
		return EXIT_ERROR;
	}
	allow = pick(json_object_get(pol, "rules"), "allow", who, o->roles, o->nroles);
	deny = pick(json_object_get(pol, "rules"), "deny", who, o->roles, o->nroles);
	floor = pick(json_object_get(pol, "floor"), NULL, who, o->roles, o->nroles);
	rc = json_array_size(allow) ? EXIT_ALLOW : EXIT_DENY;
	if (o->json) {
		json_t *roles = json_array(), *j;

		for (int r = 0; r < o->nroles; r++)
			json_array_append_new(roles, json_string(o->roles[r]));
		j = json_pack("{s:s, s:o, s:s, s:o, s:o, s:o}", "principal", who, "roles", roles,
			      "policy", cli_shown(o->policy), "allow", allow, "floor", floor, "deny", deny);
		json_dumpf(j, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(j);
	} else {
		const json_t *r;
		size_t i;

		printf("%s", who);
		for (int r2 = 0; r2 < o->nroles; r2++)
			printf("%s%s", r2 ? ", " : " (roles ", o->roles[r2]);
		printf("%s, under %s:\n", o->nroles ? ")" : "", cli_shown(o->policy));
		if (!json_array_size(allow))
			puts("  nothing: no allow names it");
		else
			puts("may");
		json_array_foreach(allow, i, r)
			say_rule(r, "rule");
		if (json_array_size(floor))
			puts("never, whatever an allow says (floors)");
		json_array_foreach(floor, i, r)
			say_rule(r, "floor");
		if (json_array_size(deny))
			puts("never where a deny applies (a deny wins over an allow)");
		json_array_foreach(deny, i, r)
			say_rule(r, "rule");
		json_decref(allow);
		json_decref(floor);
		json_decref(deny);
	}
	json_decref(pol);
	return rc;
}
