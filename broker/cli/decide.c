/*
 * tsec: decisions without a broker.  `tsec check|eval --policy FILE
 * --principal P [--role R]...` loads the policy through the bus and the
 * module exactly as tsec-broker does and decides locally, with the same
 * output and exit codes as online (0 allow, 1 deny, 2 error); `--input
 * FILE` decides a batch.  `tsec test FILE|DIR` runs named cases against
 * their policy and says which failed, like `opa test`.
 */
#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"
#include "common/sign.h"
#include "common/wire.h"

/* A bus with the policy at path on endpoint "policy"; NULL after saying why. */
static struct tsec_bus *bus_on(const char *cmd, const struct opts *o, const char *path)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	char *text;
	size_t len;

	if (tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, &err)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		return NULL;
	}
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", o->module ? o->module : cli_default_module(), text, len,
			  &err)) {
		fprintf(stderr, "tsec %s: %s%s%s\n", cmd, err.where, err.where[0] ? ": " : "", err.msg);
		tsec_bus_free(&bus);
	}
	free(text);
	return bus;
}

/*
 * Reads one request object: "principal" and "roles" (else def_p and the
 * --role flags), then what the wire takes.  Strings stay owned by j.
 */
static int request_of(const char *cmd, json_t *j, const char *def_p, const struct opts *o,
		      struct tsec_request *r, struct tsec_str *roles, size_t nroles_max,
		      json_t *keep)
{
	json_t *w = json_deep_copy(j), *p = json_object_get(j, "principal"), *rl = json_object_get(j, "roles");
	struct tsec_error err;
	size_t i;
	json_t *v;
	int rc;

	if (!json_is_object(j)) {
		json_decref(w);
		fprintf(stderr, "tsec %s: a request must be a JSON object\n", cmd);
		return -1;
	}
	json_object_del(w, "principal");
	json_object_del(w, "roles");
	json_object_del(w, "name");
	json_object_del(w, "want");
	json_object_del(w, "rule");
	rc = tsec__request_from_json(w, r, true, &err);
	if (rc) {
		fprintf(stderr, "tsec %s: request: %s%s%s\n", cmd, err.where, err.where[0] ? ": " : "",
			err.msg);
		json_decref(w);
		return -1;
	}
	/* The wire's strings live in w: keep it while r is used. */
	json_array_append_new(keep, w);
	if (p && !json_is_string(p)) {
		fprintf(stderr, "tsec %s: \"principal\" must be a string\n", cmd);
		return -1;
	}
	r->principal = tsec_str_c(p ? json_string_value(p) : def_p ? def_p : "");
	if (!r->principal.len) {
		fprintf(stderr, "tsec %s: who asks? give --principal (or \"principal\")\n", cmd);
		return -1;
	}
	r->nroles = 0;
	if (rl) {
		if (!json_is_array(rl) || json_array_size(rl) > nroles_max) {
			fprintf(stderr, "tsec %s: \"roles\" must be a list of at most %zu strings\n", cmd,
				nroles_max);
			return -1;
		}
		json_array_foreach(rl, i, v) {
			if (!json_is_string(v)) {
				fprintf(stderr, "tsec %s: \"roles\" must be strings\n", cmd);
				return -1;
			}
			roles[r->nroles++] = tsec_str_c(json_string_value(v));
		}
	} else {
		for (int k = 0; k < o->nroles; k++)
			roles[r->nroles++] = tsec_str_c(o->roles[k]);
	}
	r->roles = roles;
	return 0;
}

int cmd_decide_offline(const char *cmd, struct opts *o, json_t *req)
{
	struct tsec_bus *bus;
	struct tsec_str roles[16];
	struct tsec_error err;
	json_t *batch = NULL, *list, *v, *out, *keep;
	int rc = EXIT_ALLOW;
	size_t i;

	if (!o->policy)
		die_usage(cmd, "--input needs --policy");
	if (o->input) {
		json_error_t je;

		if (!(batch = json_load_file(o->input, JSON_REJECT_DUPLICATES, &je))) {
			fprintf(stderr, "tsec %s: %s: line %d: %s\n", cmd, o->input, je.line, je.text);
			return EXIT_ERROR;
		}
		list = json_is_array(batch) ? batch : json_object_get(batch, "requests");
		if (!json_is_array(list)) {
			fprintf(stderr, "tsec %s: %s: want a list of requests (or {\"requests\": [...]})\n",
				cmd, o->input);
			json_decref(batch);
			return EXIT_ERROR;
		}
	} else {
		if (o->principal)
			json_object_set_new(req, "principal", json_string(o->principal));
		batch = json_array();
		json_array_append_new(batch, req);
		list = batch;
	}
	if (!(bus = bus_on(cmd, o, o->policy))) {
		json_decref(batch);
		return EXIT_ERROR;
	}
	keep = json_array();
	out = json_array();
	json_array_foreach(list, i, v) {
		struct tsec_request r;
		struct tsec_decision d;

		if (request_of(cmd, v, o->principal, o, &r, roles, 16, keep)) {
			rc = EXIT_ERROR;
			break;
		}
		if (!strcmp(cmd, "eval")) {
			struct tsec_report *rep = malloc(sizeof(*rep));
			struct tsec_explain *ex = malloc(sizeof(*ex));
			json_t *j;

			if (!rep || !ex || tsec_bus_explain(bus, "policy", &r, rep, ex, &err)) {
				fprintf(stderr, "tsec eval: %s\n", rep && ex ? err.msg : "out of memory");
				free(rep);
				free(ex);
				rc = EXIT_ERROR;
				break;
			}
			j = tsec__report_to_json(rep);
			tsec__explain_to_json(j, ex, &r);
			free(rep);
			free(ex);
			if (o->json) {
				json_dumpf(j, stdout, JSON_COMPACT);
				putchar('\n');
			} else {
				cli_human_report(j);
			}
			if (!json_is_true(json_object_get(json_object_get(j, "decision"), "allow")))
				rc = EXIT_DENY;
			json_decref(j);
			continue;
		}
		if (tsec_bus_check(bus, "policy", &r, 1, &d, &err)) {
			fprintf(stderr, "tsec check: %s\n", err.msg);
			rc = EXIT_ERROR;
			break;
		}
		if (o->input && !o->json)
			printf("%zu %.*s %.*s: ", i, (int)r.action.len, r.action.ptr,
			       (int)r.resource.len, r.resource.ptr);
		if (o->input && o->json) {
			json_array_append_new(out, tsec__decision_to_json(&d));
			if (!d.allow)
				rc = EXIT_DENY;
		} else {
			json_t *j = tsec__decision_to_json(&d);

			if (cli_print_decision(j, o->json) != EXIT_ALLOW && rc == EXIT_ALLOW)
				rc = EXIT_DENY;
			json_decref(j);
		}
	}
	if (o->input && o->json && rc != EXIT_ERROR) {
		json_t *w = json_pack("{s:o}", "decisions", out);
		json_dumpf(w, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(w);
	} else {
		json_decref(out);
	}
	tsec_bus_free(&bus);
	json_decref(batch);
	json_decref(keep);
	return rc;
}

/* ---- tsec test ---- */

struct tally {
	int passed, failed, errors;
};

/* The ids of a policy's floor and rules, in order (new JSON array). */
static json_t *rule_ids(const char *path)
{
	json_t *p = json_load_file(path, 0, NULL), *ids = json_array(), *v;
	static const char *const parts[] = { "floor", "rules" };
	size_t i;

	for (int k = 0; k < 2; k++)
		json_array_foreach(json_object_get(p, parts[k]), i, v)
			if (json_is_string(json_object_get(v, "id")))
				json_array_append(ids, json_object_get(v, "id"));
	json_decref(p);
	return ids;
}

static void run_file(struct opts *o, const char *file, struct tally *t)
{
	json_error_t je;
	json_t *tf = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *cases, *c, *keep, *seen;
	const char *pol;
	char *copy, policy[4096];
	struct tsec_bus *bus;
	size_t i;

	if (!tf) {
		fprintf(stderr, "tsec test: %s: line %d: %s\n", file, je.line, je.text);
		t->errors++;
		return;
	}
	pol = json_string_value(json_object_get(tf, "policy"));
	cases = json_object_get(tf, "cases");
	if (!pol || !json_is_array(cases)) {
		fprintf(stderr, "tsec test: %s: want {\"policy\": FILE, \"cases\": [...]}\n", file);
		json_decref(tf);
		t->errors++;
		return;
	}
	/* The policy is named relative to the test file. */
	copy = strdup(file);
	if (o->policy)
		snprintf(policy, sizeof(policy), "%s", o->policy);
	else if (pol[0] == '/')
		snprintf(policy, sizeof(policy), "%s", pol);
	else
		snprintf(policy, sizeof(policy), "%s/%s", dirname(copy), pol);
	free(copy);
	if (!(bus = bus_on("test", o, policy))) {
		json_decref(tf);
		t->errors++;
		return;
	}
	keep = json_array();
	seen = json_object();
	json_array_foreach(cases, i, c) {
		const char *name = json_string_value(json_object_get(c, "name"));
		const char *want = json_string_value(json_object_get(c, "want"));
		const char *rule = json_string_value(json_object_get(c, "rule"));
		struct tsec_str roles[16];
		struct tsec_request r;
		struct tsec_decision d;
		struct tsec_error err;
		bool ok, has_rule = false;
		char label[160];

		snprintf(label, sizeof(label), "%s: %s", file, name ? name : "(unnamed case)");
		if (!name || !want || (strcmp(want, "allow") && strcmp(want, "deny"))) {
			fprintf(stderr, "tsec test: %s: case %zu needs \"name\" and \"want\": "
				"\"allow\" or \"deny\"\n", file, i);
			t->errors++;
			continue;
		}
		if (request_of("test", c, NULL, o, &r, roles, 16, keep)) {
			fprintf(stderr, "  (in %s)\n", label);
			t->errors++;
			continue;
		}
		if (tsec_bus_check(bus, "policy", &r, 1, &d, &err)) {
			fprintf(stderr, "tsec test: %s: %s\n", label, err.msg);
			t->errors++;
			continue;
		}
		for (unsigned k = 0; k < d.nrules; k++) {
			json_object_set_new(seen, d.rules[k], json_true());
			has_rule |= rule && !strcmp(rule, d.rules[k]);
		}
		ok = d.allow == !strcmp(want, "allow") && (!rule || has_rule);
		if (ok) {
			t->passed++;
			continue;
		}
		t->failed++;
		printf("FAIL %s\n  want %s%s%s\n  got  %s: %s", label, want, rule ? " by " : "",
		       rule ? rule : "", d.allow ? "allow" : "deny", tsec_status_reason(d.status));
		for (unsigned k = 0; k < d.nrules; k++)
			printf("%s%s", k ? ", " : " (", d.rules[k]);
		printf("%s%s%s\n", d.nrules ? ")" : "", d.detail[0] ? " -- " : "", d.detail);
	}
	if (o->coverage) {
		json_t *ids = rule_ids(policy), *v;
		size_t k, missing = 0;

		json_array_foreach(ids, k, v) {
			if (json_object_get(seen, json_string_value(v)))
				continue;
			if (!missing++)
				printf("%s: not exercised by any case:", file);
			printf(" %s", json_string_value(v));
		}
		if (missing)
			putchar('\n');
		else
			printf("%s: every rule exercised\n", file);
		json_decref(ids);
	}
	json_decref(seen);
	json_decref(keep);
	tsec_bus_free(&bus);
	json_decref(tf);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int cmd_test(struct opts *o)
{
	struct tally t = { 0 };
	struct stat st;

	if (o->nargs < 1)
		die_usage("test", "name test files or folders (*.test.json)");
	for (int a = 0; a < o->nargs; a++) {
		if (stat(o->args[a], &st)) {
			fprintf(stderr, "tsec test: %s: no such file or folder\n", o->args[a]);
			return EXIT_ERROR;
		}
		if (S_ISDIR(st.st_mode)) {
			size_t al = strlen(o->args[a]), n = 0, cap = 0;
			char **names = NULL, **more;
			struct dirent *e;
			DIR *d;

			while (al > 1 && o->args[a][al - 1] == '/')
				o->args[a][--al] = '\0';
			d = opendir(o->args[a]);
			while (d && (e = readdir(d))) {
				size_t l = strlen(e->d_name);

				if (l <= 10 || strcmp(e->d_name + l - 10, ".test.json"))
					continue;
				if (n == cap) {
					cap = cap ? cap * 2 : 16;
					if (!(more = realloc(names, cap * sizeof(*names)))) {
						fprintf(stderr, "tsec test: out of memory\n");
						exit(EXIT_ERROR);
					}
					names = more;
				}
				if (asprintf(&names[n], "%s/%s", o->args[a], e->d_name) < 0) {
					fprintf(stderr, "tsec test: out of memory\n");
					exit(EXIT_ERROR);
				}
				n++;
			}
			if (d)
				closedir(d);
			else
				fprintf(stderr, "tsec test: cannot read %s\n", o->args[a]);
			qsort(names, n, sizeof(*names), by_name);
			for (size_t i = 0; i < n; i++) {
				run_file(o, names[i], &t);
				free(names[i]);
			}
			free(names);
			if (!n) {
				fprintf(stderr, "tsec test: %s: no *.test.json files\n", o->args[a]);
				t.errors++;
			}
		} else {
			run_file(o, o->args[a], &t);
		}
	}
	printf("%d passed, %d failed%s", t.passed, t.failed, t.errors ? "" : "\n");
	if (t.errors)
		printf(", %d could not run\n", t.errors);
	return t.errors ? EXIT_ERROR : t.failed ? EXIT_DENY : EXIT_ALLOW;
}
