/*
 * tsec replay and tsec diff: what a new policy would decide differently.
 *
 * replay LOG --policy NEW re-decides every request of a decision log under
 * NEW, as of the time each was logged, and shows each decision that
 * changes.  A request that carried a certificate is decided with a
 * certificate made again from the attributes the log keeps (names,
 * notAfter, key type and size): the attributes when.cert conditions read.
 *
 * diff OLD NEW decides the same requests under both: one generated from
 * each rule of either policy (each principal, action and resource
 * pattern made concrete, with the domains the policies name), and with
 * --log, every logged request.
 */
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"
#include "broker/policytest/policytest.h"
#include "common/certinfo.h"
#include "common/wire.h"

/* Certificates made for replay, by their attributes' JSON text. */
struct made {
	json_t *by_attrs;                /* text -> PEM string */
};

static const char *pem_for(struct made *m, json_t *attrs)
{
	struct tsec__certinfo ci;
	char *key = json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS), *pem;
	json_t *v;

	if (!key)
		return NULL;
	if ((v = json_object_get(m->by_attrs, key))) {
		free(key);
		return json_string_value(v);
	}
	if (tsec__certinfo_from_json(attrs, &ci) || !(pem = tsec__certinfo_pem(&ci))) {
		free(key);
		return NULL;
	}
	json_object_set_new(m->by_attrs, key, json_string(pem));
	free(pem);
	v = json_object_get(m->by_attrs, key);
	free(key);
	return json_string_value(v);
}

/*
 * The request a log line records, as a request object for
 * tsec__ptest_request (new), or NULL with *why set.
 */
static json_t *logged_request(json_t *line, struct made *m, const char **why)
{
	json_t *ctx = json_object_get(line, "context"), *req, *c;
	const char *k;
	json_t *v;

	if (!json_is_string(json_object_get(line, "action")) ||
	    !json_is_string(json_object_get(line, "resource")) ||
	    !json_is_string(json_object_get(line, "principal"))) {
		*why = "not a decision line";
		return NULL;
	}
	if (json_is_true(json_object_get(line, "cut"))) {
		*why = "the line was cut to fit (a field is incomplete)";
		return NULL;
	}
	c = json_object();
	json_object_foreach(ctx, k, v) {
		if (!strcmp(k, "cert_pem_sha256"))
			continue;
		if (!strcmp(k, "cert")) {
			const char *pem = pem_for(m, v);

			if (!pem) {
				json_decref(c);
				*why = "its certificate's attributes cannot be made again";
				return NULL;
			}
			json_object_set_new(c, "cert_pem", json_string(pem));
			continue;
		}
		json_object_set(c, k, v);
	}
	if (json_object_get(ctx, "cert_pem_sha256") && !json_object_get(c, "cert_pem")) {
		json_decref(c);
		*why = "the log holds only its certificate's hash (logged before attributes were)";
		return NULL;
	}
	/* As of when it was logged: a certificate's remaining time. */
	if (!json_object_get(c, "now") && json_is_integer(json_object_get(line, "time_ms")))
		json_object_set_new(c, "now", json_integer(
			json_integer_value(json_object_get(line, "time_ms")) / 1000));
	req = json_pack("{s:O,s:O,s:O,s:O,s:o}", "principal", json_object_get(line, "principal"),
			"roles", json_is_array(json_object_get(line, "roles"))
			? json_object_get(line, "roles") : json_array(),
			"action", json_object_get(line, "action"),
			"resource", json_object_get(line, "resource"), "context", c);
	return req;
}

/* One decision of req under bus: 0, or -1 (said). */
static int decide(const char *cmd, struct tsec_bus *bus, json_t *req, json_t *keep,
		  struct tsec_decision *d)
{
	struct tsec_str roles[16];
	struct tsec_request r;
	struct tsec_error err;

	if (tsec__ptest_request(cmd, req, NULL, NULL, 0, &r, roles, 16, keep, stderr))
		return -1;
	if (tsec_bus_check(bus, "policy", &r, 1, d, &err)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		return -1;
	}
	tsec__decision_seal(d);
	return 0;
}

static void say_rules(const struct tsec_decision *d)
{
	printf("%s", tsec_status_reason(d->status));
	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		printf("%s%s", k ? ", " : " (", d->rules[k]);
	printf("%s", d->nrules ? ")" : "");
}

static void say_request(json_t *req)
{
	printf("%s %s by %s", json_string_value(json_object_get(req, "action")),
	       json_string_value(json_object_get(req, "resource")),
	       json_string_value(json_object_get(req, "principal")));
}

int cmd_replay(struct opts *o)
{
	struct made m = { json_object() };
	size_t replayed = 0, changed = 0, skipped = 0, lineno = 0, cap = 0;
	struct tsec_bus *bus;
	char *buf = NULL;
	ssize_t n;
	FILE *f;
	int rc = EXIT_ALLOW;

	if (o->nargs != 1 || !o->policy)
		die_usage("replay", "need a decision log and --policy NEW");
	if (!(f = fopen(o->args[0], "r"))) {
		perror(o->args[0]);
		json_decref(m.by_attrs);
		return EXIT_ERROR;
	}
	if (!(bus = cli_bus_on("replay", o, o->policy))) {
		fclose(f);
		json_decref(m.by_attrs);
		return EXIT_ERROR;
	}
	while ((n = getline(&buf, &cap, f)) > 0) {
		json_t *line = json_loadb(buf, (size_t)n, 0, NULL), *req, *keep;
		const char *why = NULL, *was;
		struct tsec_decision d;

		lineno++;
		if (!json_is_object(line) ||
		    !(was = json_string_value(json_object_get(line, "decision"))) ||
		    !(req = logged_request(line, &m, &why))) {
			if (!why)
				why = "not a decision line";
			if (o->verbose)
				printf("line %zu: not replayed: %s\n", lineno, why);
			skipped++;
			json_decref(line);
			continue;
		}
		keep = json_array();
		if (decide("replay", bus, req, keep, &d)) {
			if (o->verbose)
				printf("line %zu: not replayed: the request is invalid now\n", lineno);
			skipped++;
		} else {
			replayed++;
			if (d.allow != !strcmp(was, "allow")) {
				changed++;
				printf("%s: ", json_string_value(json_object_get(line, "decision_id"))
				       ? json_string_value(json_object_get(line, "decision_id")) : "?");
				say_request(req);
				printf(": was %s, now %s: ", was, d.allow ? "allow" : "deny");
				say_rules(&d);
				putchar('\n');
			}
		}
		json_decref(keep);
		json_decref(req);
		json_decref(line);
	}
	free(buf);
	fclose(f);
	tsec_bus_free(&bus);
	json_decref(m.by_attrs);
	printf("%zu decisions replayed, %zu changed, %zu lines not replayed%s\n", replayed,
	       changed, skipped, skipped && !o->verbose ? " (-v says why)" : "");
	if (changed)
		rc = EXIT_DENY;
	return rc;
}

/* ---- diff ---- */

/* A pattern made concrete: each '*' or '**' segment "x", '*' in a segment "x". */
static void concrete(const char *pat, char *out, size_t n)
{
	size_t o = 0;

	for (const char *p = pat; *p && o + 2 < n; p++) {
		if (*p == '*') {
			while (p[1] == '*')
				p++;
			out[o++] = 'x';
		} else if (*p != '?' && *p != '[') {
			out[o++] = *p;
		} else {
			out[o++] = 'x';
		}
	}
	out[o] = '\0';
}

/* certificates/I/D/D.ext with the domain dom in both places. */
static bool with_domain(const char *res, const char *dom, char *out, size_t n)
{
	char iss[256], ext[16];
	const char *a, *b, *dot;

	if (strncmp(res, "certificates/", 13) || !(a = strchr(res + 13, '/')) ||
	    !(b = strchr(a + 1, '/')) || !(dot = strrchr(b + 1, '.')) || strlen(dot) >= sizeof(ext) ||
	    (size_t)(a - res - 13) >= sizeof(iss))
		return false;
	snprintf(iss, sizeof(iss), "%.*s", (int)(a - res - 13), res + 13);
	snprintf(ext, sizeof(ext), "%s", dot);
	return (size_t)snprintf(out, n, "certificates/%s/%s/%s%s", iss, dom, dom, ext) < n;
}

static void add_request(json_t *reqs, json_t *seen, const char *prin, const char *role,
			const char *action, const char *res)
{
	json_t *req, *ctx = json_object();
	unsigned af = cli_action_flags(action);
	char *key;

	if (af & TSEC_AF_TTL)
		json_object_set_new(ctx, "ttl_ms", json_integer(60000));
	if (af & TSEC_AF_SIZE)
		json_object_set_new(ctx, "size", json_integer(1024));
	if (af & TSEC_AF_DEST) {
		char dest[1100];

		snprintf(dest, sizeof(dest), "%s.moved", res);
		json_object_set_new(ctx, "dest", json_string(dest));
	}
	req = json_pack("{s:s,s:[],s:s,s:s,s:o}", "principal", prin, "roles", "action", action,
			"resource", res, "context", ctx);
	if (role)
		json_array_append_new(json_object_get(req, "roles"), json_string(role));
	key = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
	if (key && !json_object_get(seen, key)) {
		json_object_set_new(seen, key, json_true());
		json_array_append(reqs, req);
	}
	free(key);
	json_decref(req);
}

/* Every principal either policy names: {"p": id, "role": name or null}. */
static void principals_of(json_t *out, json_t *seen, json_t *pol)
{
	static const char *const sections[] = { "floor", "rules" };
	json_t *r;
	size_t i, j;

	for (int s = 0; s < 2; s++)
		json_array_foreach(json_object_get(pol, sections[s]), i, r) {
			json_t *prins = json_object_get(r, "principal");

			for (j = 0; j < (prins ? json_array_size(prins) : 1); j++) {
				const char *ps = prins ? json_string_value(json_array_get(prins, j))
					       : "*";
				json_t *e;

				if (!ps || json_object_get(seen, ps))
					continue;
				json_object_set_new(seen, ps, json_true());
				e = !strncmp(ps, "role:", 5)
					? json_pack("{s:s,s:s}", "p", "svc:diff", "role", ps + 5)
					: json_pack("{s:s,s:n}", "p", strcmp(ps, "*") ? ps : "svc:anyone",
						    "role");
				json_array_append_new(out, e);
			}
		}
}

/*
 * The requests one rule's actions and resources make, asked by every
 * principal either policy names (a floor removed changes what an allow
 * elsewhere lets through), with the domains the policies name in place
 * of a certificate's.
 */
static void rule_requests(json_t *reqs, json_t *seen, json_t *r, json_t *domains,
			  json_t *prins)
{
	json_t *a, *res, *dom, *pe;
	size_t j, k, l, i;

	json_array_foreach(json_object_get(r, "action"), j, a) {
		const char *an = json_string_value(a);

		for (unsigned x = 0; an && x < TSEC_ACTION__COUNT; x++) {
			const char *name = tsec_action_name(x);

			if (fnmatch(an, name, 0))
				continue;
			json_array_foreach(json_object_get(r, "resource"), k, res) {
				char rc[1100], rd[1100];

				if (!json_is_string(res))
					continue;
				concrete(json_string_value(res), rc, sizeof(rc));
				json_array_foreach(prins, i, pe) {
					const char *who = json_string_value(json_object_get(pe, "p"));
					const char *role = json_string_value(json_object_get(pe, "role"));

					add_request(reqs, seen, who, role, name, rc);
					json_array_foreach(domains, l, dom) {
						char d[260];

						concrete(json_string_value(dom), d, sizeof(d));
						if (d[0] == 'x' && d[1] == '.')
							d[0] = 'w';
						if (with_domain(rc, d, rd, sizeof(rd)))
							add_request(reqs, seen, who, role, name, rd);
					}
				}
			}
		}
	}
}

static void policy_requests(json_t *reqs, json_t *seen, const char *a, const char *b)
{
	static const char *const sections[] = { "floor", "rules" };
	json_t *pa = json_load_file(a, 0, NULL), *pb = json_load_file(b, 0, NULL);
	json_t *domains = json_array(), *prins = json_array(), *pseen = json_object(), *r, *d;
	json_t *pols[2] = { pa, pb };
	size_t i, j;

	for (int p = 0; p < 2; p++) {
		principals_of(prins, pseen, pols[p]);
		for (int s = 0; s < 2; s++)
			json_array_foreach(json_object_get(pols[p], sections[s]), i, r)
				json_array_foreach(json_object_get(r, "domain"), j, d)
					if (json_is_string(d))
						json_array_append(domains, d);
	}
	for (int p = 0; p < 2; p++)
		for (int s = 0; s < 2; s++)
			json_array_foreach(json_object_get(pols[p], sections[s]), i, r)
				rule_requests(reqs, seen, r, domains, prins);
	json_decref(domains);
	json_decref(prins);
	json_decref(pseen);
	json_decref(pa);
	json_decref(pb);
}

int cmd_diff(struct opts *o)
{
	struct made m = { json_object() };
	struct tsec_bus *a = NULL, *b = NULL;
	json_t *reqs = json_array(), *seen = json_object(), *req;
	size_t i, differ = 0, asked = 0;
	int rc = EXIT_ALLOW;

	if (o->nargs != 2)
		die_usage("diff", "need two policies: OLD NEW");
	if (!(a = cli_bus_on("diff", o, o->args[0])) || !(b = cli_bus_on("diff", o, o->args[1]))) {
		rc = EXIT_ERROR;
		goto out;
	}
	policy_requests(reqs, seen, o->args[0], o->args[1]);
	if (o->log) {
		FILE *f = fopen(o->log, "r");
		char *buf = NULL;
		size_t cap = 0;
		ssize_t n;

		if (!f) {
			perror(o->log);
			rc = EXIT_ERROR;
			goto out;
		}
		while ((n = getline(&buf, &cap, f)) > 0) {
			json_t *line = json_loadb(buf, (size_t)n, 0, NULL);
			const char *why;

			if (json_is_object(line) && (req = logged_request(line, &m, &why))) {
				json_array_append_new(reqs, req);
			}
			json_decref(line);
		}
		free(buf);
		fclose(f);
	}
	json_array_foreach(reqs, i, req) {
		struct tsec_decision da, db;
		json_t *keep = json_array();

		if (!decide("diff", a, req, keep, &da) && !decide("diff", b, req, keep, &db)) {
			asked++;
			if (da.allow != db.allow) {
				differ++;
				say_request(req);
				if (json_array_size(json_object_get(req, "roles")))
					printf(" (role %s)", json_string_value(json_array_get(
						json_object_get(req, "roles"), 0)));
				printf(": %s: ", da.allow ? "allow" : "deny");
				say_rules(&da);
				printf("; %s: ", db.allow ? "allow" : "deny");
				say_rules(&db);
				putchar('\n');
			}
		}
		json_decref(keep);
	}
	printf("%zu requests decided under both, %zu differ\n", asked, differ);
	if (differ)
		rc = EXIT_DENY;
out:
	tsec_bus_free(&a);
	tsec_bus_free(&b);
	json_decref(reqs);
	json_decref(seen);
	json_decref(m.by_attrs);
	return rc;
}
