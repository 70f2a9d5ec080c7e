/*
 * tsec lint --strict: the names a policy uses, checked against a schema
 * of the names that exist, as Cedar's validator checks a policy against
 * its schema.  A principal, role, issuer or domain the schema does not
 * know is not an error to the module (it is a rule that never matches,
 * silently); here it is one, with the nearest known name.
 *
 * The schema is a JSON file
 *   {"principals": [...], "roles": [...], "issuers": [...], "domains": [...]}
 * (each entry an exact name or an fnmatch pattern, e.g. "svc:web-*"), or a
 * tsec-broker configuration, whose clients and ipc_uids give the
 * principals and roles.  A list the schema leaves out is not checked.
 */
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/cli/cli.h"
#include "common/suggest.h"
#include "common/where.h"

struct names {
	const char **v;                  /* borrowed from the schema's JSON */
	size_t n;
	bool given;
};

struct schema {
	json_t *root;
	struct names principals, roles, issuers, domains;
};

static void names_add(struct names *s, const char *name)
{
	const char **v = realloc(s->v, (s->n + 1) * sizeof(*v));

	if (!v)
		return;
	s->v = v;
	s->v[s->n++] = name;
}

static void names_of(struct names *s, json_t *arr)
{
	json_t *v;
	size_t i;

	if (!json_is_array(arr))
		return;
	s->given = true;
	json_array_foreach(arr, i, v)
		if (json_is_string(v))
			names_add(s, json_string_value(v));
}

/* A tsec-broker configuration: its callers' principals and roles. */
static void names_of_config(struct schema *sc, json_t *root)
{
	static const char *const lists[] = { "clients", "ipc_uids" };

	sc->principals.given = sc->roles.given = true;
	for (size_t l = 0; l < 2; l++) {
		json_t *c, *r;
		size_t i, j;

		json_array_foreach(json_object_get(root, lists[l]), i, c) {
			if (json_is_string(json_object_get(c, "principal")))
				names_add(&sc->principals,
					  json_string_value(json_object_get(c, "principal")));
			json_array_foreach(json_object_get(c, "roles"), j, r)
				if (json_is_string(r))
					names_add(&sc->roles, json_string_value(r));
		}
	}
}

static bool known(const struct names *s, const char *name, int flags)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], name) || !fnmatch(s->v[i], name, flags))
			return true;
	return false;
}

/* "; did you mean 'X'?" for the nearest of s, with prefix before it. */
static const char *nearest(const struct names *s, const char *word, const char *prefix,
			   char *buf, size_t n)
{
	const char *near = tsec__nearest(word, s->v, s->n);

	if (!near)
		return "";
	snprintf(buf, n, "; did you mean '%s%s'?", prefix, near);
	return buf;
}

static void check_principal(const struct schema *sc, json_t *out, const char *where,
			    const char *p)
{
	char hint[320];

	if (!strcmp(p, "*"))
		return;
	if (!strncmp(p, "role:", 5)) {
		if (sc->roles.given && !known(&sc->roles, p + 5, 0))
			cli_note(out, where, "role '%s' is not in the schema%s", p + 5,
			    nearest(&sc->roles, p + 5, "role:", hint, sizeof(hint)));
		return;
	}
	if (!sc->principals.given || known(&sc->principals, p, 0))
		return;
	/* "ROLE:web", "Role:web": a role meant, a principal written. */
	if (!strncasecmp(p, "role:", 5) && sc->roles.given && known(&sc->roles, p + 5, 0)) {
		cli_note(out, where, "principal '%s' is not in the schema; did you mean 'role:%s'? "
		    "(\"role:\" is lower case)", p, p + 5);
		return;
	}
	/* "lego" for "svc:lego": the name without its kind. */
	for (size_t i = 0; i < sc->principals.n; i++) {
		const char *colon = strchr(sc->principals.v[i], ':');

		if (colon && !strcmp(colon + 1, p)) {
			cli_note(out, where, "principal '%s' is not in the schema; did you mean '%s'?", p,
			    sc->principals.v[i]);
			return;
		}
	}
	cli_note(out, where, "principal '%s' is not in the schema%s", p,
	    nearest(&sc->principals, p, "", hint, sizeof(hint)));
}

static void check_rule(const struct schema *sc, json_t *out, const char *section, size_t ri,
		       json_t *r)
{
	char where[128], hint[320];
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(r, "principal"), i, v) {
		snprintf(where, sizeof(where), "/%s/%zu/principal/%zu", section, ri, i);
		if (json_is_string(v))
			check_principal(sc, out, where, json_string_value(v));
	}
	json_array_foreach(json_object_get(r, "resource"), i, v) {
		const char *s = json_string_value(v), *e;
		char iss[256];

		if (!sc->issuers.given || !s || strncmp(s, "certificates/", 13) ||
		    !(e = strchr(s + 13, '/')) || (size_t)(e - s - 13) >= sizeof(iss))
			continue;
		snprintf(iss, sizeof(iss), "%.*s", (int)(e - s - 13), s + 13);
		if (strchr(iss, '*') || known(&sc->issuers, iss, 0))
			continue;
		snprintf(where, sizeof(where), "/%s/%zu/resource/%zu", section, ri, i);
		cli_note(out, where, "issuer '%s' is not in the schema%s", iss,
		    nearest(&sc->issuers, iss, "", hint, sizeof(hint)));
	}
	json_array_foreach(json_object_get(r, "domain"), i, v) {
		const char *d = json_string_value(v);

		if (!sc->domains.given || !d || known(&sc->domains, d, FNM_CASEFOLD))
			continue;
		snprintf(where, sizeof(where), "/%s/%zu/domain/%zu", section, ri, i);
		cli_note(out, where, "domain '%s' is not in the schema%s", d,
		    nearest(&sc->domains, d, "", hint, sizeof(hint)));
	}
}

json_t *cli_schema_errors(const char *policy_path, const char *schema_path, char *why,
			  size_t whylen)
{
	struct schema sc;
	json_error_t je;
	json_t *pol, *out, *r;
	size_t i;

	memset(&sc, 0, sizeof(sc));
	if (!(sc.root = json_load_file(schema_path, JSON_REJECT_DUPLICATES, &je)) ||
	    !json_is_object(sc.root)) {
		if (sc.root) {
			je.line = je.column = 1;
			snprintf(je.text, sizeof(je.text), "a schema is a JSON object");
		}
		tsec__json_error_say(why, whylen, schema_path, &je);
		json_decref(sc.root);
		return NULL;
	}
	if (json_object_get(sc.root, "clients") || json_object_get(sc.root, "ipc_uids")) {
		names_of_config(&sc, sc.root);
	} else {
		static const char *const members[] = { "principals", "roles", "issuers",
						       "domains", "description" };
		const char *k;
		json_t *v;

		json_object_foreach(sc.root, k, v) {
			size_t m = 0;

			while (m < 5 && strcmp(k, members[m]))
				m++;
			if (m == 5 || (m < 4 && !json_is_array(v))) {
				const char *near = tsec__nearest(k, members, 5);

				snprintf(why, whylen, "%s: /%s: %s%s%s%s", schema_path, k,
					 m == 5 ? "unknown member" : "must be an array of names",
					 near && m == 5 ? "; did you mean \"" : "",
					 near && m == 5 ? near : "", near && m == 5 ? "\"?" : "");
				json_decref(sc.root);
				return NULL;
			}
		}
		names_of(&sc.principals, json_object_get(sc.root, "principals"));
		names_of(&sc.roles, json_object_get(sc.root, "roles"));
		names_of(&sc.issuers, json_object_get(sc.root, "issuers"));
		names_of(&sc.domains, json_object_get(sc.root, "domains"));
	}
	pol = json_load_file(policy_path, 0, NULL);
	out = json_array();
	json_array_foreach(json_object_get(pol, "floor"), i, r)
		check_rule(&sc, out, "floor", i, r);
	json_array_foreach(json_object_get(pol, "rules"), i, r)
		check_rule(&sc, out, "rules", i, r);
	json_decref(pol);
	free(sc.principals.v);
	free(sc.roles.v);
	free(sc.issuers.v);
	free(sc.domains.v);
	json_decref(sc.root);
	return out;
}
