/* The runner of a policy's test cases (policytest.h). */
#include <dirent.h>
#include <fnmatch.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#include "broker/policytest/policytest.h"
#include "common/sign.h"
#include "common/suggest.h"
#include "common/where.h"
#include "common/wire.h"
#include "tinysecurity/bus.h"

#define CASES_MAX 4096
#define ROLES_MAX 16

int tsec__ptest_request(const char *cmd, json_t *j, const char *def_p,
			const char *const *roles, int nroles, struct tsec_request *r,
			struct tsec_str *rbuf, size_t nmax, json_t *keep, FILE *err)
{
	static const char *const ours[] = { "principal", "roles", "name", "want", "rule",
					    "status", "field" };
	json_t *w, *p = json_object_get(j, "principal"), *rl = json_object_get(j, "roles"), *v;
	struct tsec_error e;
	size_t i;

	if (!json_is_object(j)) {
		fprintf(err, "tsec %s: a request must be a JSON object\n", cmd);
		return -1;
	}
	{
		/* A misspelt member, named with the nearest (issue 51, item 12:
		 * "princpal: unknown field" and nothing more). */
		static const char *const all[] = { "principal", "roles", "name", "want", "rule",
						   "status", "field", "action", "resource",
						   "context" };
		const char *k, *near;
		json_t *x;

		json_object_foreach(j, k, x) {
			size_t a = 0;

			while (a < sizeof(all) / sizeof(all[0]) && strcmp(k, all[a]))
				a++;
			if (a < sizeof(all) / sizeof(all[0]))
				continue;
			near = tsec__nearest(k, all, sizeof(all) / sizeof(all[0]));
			fprintf(err, "tsec %s: request: unknown field \"%s\"%s%s%s\n", cmd, k,
				near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
			return -1;
		}
	}
	w = json_deep_copy(j);
	for (i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		json_object_del(w, ours[i]);
	if (tsec__request_from_json(w, r, true, &e)) {
		fprintf(err, "tsec %s: request: %s%s%s\n", cmd, e.where, e.where[0] ? ": " : "",
			e.msg);
		json_decref(w);
		return -1;
	}
	/* The wire's strings live in w: keep it while r is used. */
	json_array_append_new(keep, w);
	if (p && !json_is_string(p)) {
		fprintf(err, "tsec %s: \"principal\" must be a string\n", cmd);
		return -1;
	}
	r->principal = tsec_str_c(p ? json_string_value(p) : def_p ? def_p : "");
	if (!r->principal.len) {
		fprintf(err, "tsec %s: who asks? give --principal (or \"principal\")\n", cmd);
		return -1;
	}
	r->nroles = 0;
	if (rl) {
		if (!json_is_array(rl) || json_array_size(rl) > nmax) {
			fprintf(err, "tsec %s: \"roles\" must be a list of at most %zu strings\n", cmd,
				nmax);
			return -1;
		}
		json_array_foreach(rl, i, v) {
			if (!json_is_string(v)) {
				fprintf(err, "tsec %s: \"roles\" must be strings\n", cmd);
				return -1;
			}
			rbuf[r->nroles++] = tsec_str_c(json_string_value(v));
		}
	} else {
		for (int k = 0; k < nroles && (size_t)k < nmax; k++)
			rbuf[r->nroles++] = tsec_str_c(roles[k]);
	}
	r->roles = rbuf;
	return 0;
}

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

static struct tsec_bus *bus_on(struct tsec__ptest *t, const char *path)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	char *text;
	size_t len;

	if (tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, &err)) {
		fprintf(t->err, "tsec test: %s\n", err.msg);
		return NULL;
	}
	if (tsec_bus_new(&bus) || tsec_bus_load(bus, "policy", t->module, text, len, &err)) {
		char line[TSEC_ERR_WHERE + TSEC_ERR_MSG + 4200];

		tsec__error_say(line, sizeof(line), path, text, len, bus ? err.where : "",
				bus ? err.msg : "out of memory");
		fprintf(t->err, "tsec test: %s\n", line);
		tsec_bus_free(&bus);
	}
	free(text);
	return bus;
}

static const char *const status_names[] = {
	[TSEC_STATUS_NONE] = "none", [TSEC_STATUS_INVALID] = "invalid",
	[TSEC_STATUS_FLOOR] = "floor", [TSEC_STATUS_DENIED] = "denied",
	[TSEC_STATUS_ALLOWED] = "allowed", [TSEC_STATUS_DEFAULT] = "default",
};

static const char *status_name(unsigned s)
{
	return s < sizeof(status_names) / sizeof(status_names[0]) && status_names[s]
	       ? status_names[s] : "?";
}

static bool same_decision(const struct tsec_decision *a, const struct tsec_decision *b)
{
	if (a->allow != b->allow || a->status != b->status || a->nrules != b->nrules)
		return false;
	for (unsigned k = 0; k < a->nrules && k < TSEC_DECISION_RULES; k++)
		if (strcmp(a->rules[k], b->rules[k]))
			return false;
	return true;
}

/* One case's verdict against what it wants: NULL if it holds, else why
 * not (into buf). */
static const char *verdict(json_t *c, const struct tsec_decision *d, char *buf, size_t cap)
{
	const char *want = json_string_value(json_object_get(c, "want"));
	const char *rule = json_string_value(json_object_get(c, "rule"));
	const char *status = json_string_value(json_object_get(c, "status"));
	const char *field = json_string_value(json_object_get(c, "field"));
	bool has_rule = false;

	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		has_rule |= rule && !strcmp(rule, d->rules[k]);
	if (d->allow != !strcmp(want, "allow"))
		snprintf(buf, cap, "wrong decision");
	else if (status && strcmp(status, status_name(d->status)))
		snprintf(buf, cap, "decided as %s, want %s", status_name(d->status), status);
	else if (rule && !has_rule)
		snprintf(buf, cap, "rule %s did not decide it", rule);
	else if (field && strcmp(field, d->field))
		snprintf(buf, cap, "field at fault %s, want %s", d->field[0] ? d->field : "none",
			 field);
	else
		return NULL;
	return buf;
}

static void print_failure(struct tsec__ptest *t, struct tsec_bus *bus,
			  const struct tsec_request *r, const char *label, json_t *c,
			  const struct tsec_decision *d, const char *why)
{
	const char *rule = json_string_value(json_object_get(c, "rule"));
	struct tsec_report *rep = malloc(sizeof(*rep));
	struct tsec_explain *ex = malloc(sizeof(*ex));
	struct tsec_error err;

	fprintf(t->out, "FAIL %s: %s\n  want %s%s%s\n  got  %s: %s", label, why,
		json_string_value(json_object_get(c, "want")), rule ? " by " : "",
		rule ? rule : "", d->allow ? "allow" : "deny", tsec_status_reason(d->status));
	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		fprintf(t->out, "%s%s", k ? ", " : " (", d->rules[k]);
	fprintf(t->out, "%s%s%s\n", d->nrules ? ")" : "", d->detail[0] ? " -- " : "", d->detail);
	/* An allow wanted and nothing allowed: the allow most likely meant. */
	if (!d->allow && !strcmp(status_name(d->status), "default") && t->doc) {
		char near[4][256];
		int n = tsec__near_misses(t->doc, r, near, 4);

		for (int k = 0; k < n; k++)
			fprintf(t->out, "  near miss: %s\n", near[k]);
	}
	/* Why not: the rules that matched the request but did not apply. */
	if (rep && ex && !tsec_bus_explain(bus, "policy", r, rep, ex, &err) && ex->explained) {
		tsec__explain_seal(ex);
		for (uint32_t k = 0; k < ex->nnot_applied && k < 4; k++)
			fprintf(t->out, "  not applied: %s%s: %s\n", ex->not_applied[k].rule,
				ex->not_applied[k].dest ? " (at the destination)" : "",
				ex->not_applied[k].why);
	}
	free(rep);
	free(ex);
}

/* --json: one case's result, with what was wanted and what was got. */
static void json_case(struct tsec__ptest *t, const char *file, json_t *c,
		      const struct tsec_decision *d, const char *why)
{
	json_t *rules = json_array(), *o;
	const char *rule = json_string_value(json_object_get(c, "rule"));

	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		json_array_append_new(rules, json_string(d->rules[k]));
	o = json_pack("{s:s, s:s, s:s, s:s, s:{s:b, s:s, s:o}}", "file", file, "name",
		      json_string_value(json_object_get(c, "name")), "result",
		      why ? "fail" : "pass", "want", json_string_value(json_object_get(c, "want")),
		      "got", "allow", d->allow, "status", status_name(d->status), "rules", rules);
	if (o && rule)
		json_object_set_new(o, "rule", json_string(rule));
	if (o && why)
		json_object_set_new(o, "why", json_string(why));
	if (o && d->detail[0])
		json_object_set_new(json_object_get(o, "got"), "detail", json_string(d->detail));
	json_array_append_new(t->cases_json, o);
}

/* Why a case cannot run (NULL: it can), into buf when it names what it
 * read; ids are the policy's rules. */
static const char *malformed(json_t *c, const json_t *ids, char *buf, size_t cap)
{
	const char *want = json_string_value(json_object_get(c, "want"));
	json_t *st = json_object_get(c, "status"), *f = json_object_get(c, "field"),
	       *rule = json_object_get(c, "rule");

	if (!json_string_value(json_object_get(c, "name")))
		return "needs a \"name\"";
	if (!want || (strcmp(want, "allow") && strcmp(want, "deny"))) {
		static const char *const wants[] = { "allow", "deny" };
		const char *near = want ? tsec__nearest(want, wants, 2) : NULL;

		snprintf(buf, cap, "needs \"want\": \"allow\" or \"deny\"%s%s%s",
			 near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
		return buf;
	}
	if (rule && !json_is_string(rule))
		return "\"rule\" must be a string";
	if (rule && ids) {
		const char *names[512], *near;
		size_t n = 0, k;
		bool found = false;
		json_t *v;

		json_array_foreach(ids, k, v) {
			found |= !strcmp(json_string_value(v), json_string_value(rule));
			if (n < 512)
				names[n++] = json_string_value(v);
		}
		if (!found) {
			near = tsec__nearest(json_string_value(rule), names, n);
			snprintf(buf, cap, "names \"rule\": \"%.64s\", which the policy does not "
				 "have%s%s%s", json_string_value(rule), near ? "; did you mean \"" : "",
				 near ? near : "", near ? "\"?" : "");
			return buf;
		}
	}
	if (st) {
		size_t k;

		for (k = 1; k < sizeof(status_names) / sizeof(status_names[0]); k++)
			if (json_is_string(st) && !strcmp(json_string_value(st), status_names[k]))
				break;
		if (k == sizeof(status_names) / sizeof(status_names[0]))
			return "\"status\" must be one of allowed, denied, floor, default, invalid";
	}
	if (f && (!json_is_string(f) || !st || strcmp(json_string_value(st), "invalid")))
		return "\"field\" goes with \"status\": \"invalid\"";
	return NULL;
}

struct run {
	json_t *ids;                 /* the policy's rule ids */
	struct tsec_request *reqs;
	struct tsec_decision *single, *batch;
	json_t **cases;
	struct tsec_str (*roles)[ROLES_MAX];
	size_t n;
};

static void run_free(struct run *r)
{
	json_decref(r->ids);
	free(r->reqs);
	free(r->single);
	free(r->batch);
	free(r->cases);
	free(r->roles);
}

/* One case of a test file: run through Check and Evaluate, judged, and
 * kept in run (for the batch) when it ran; the rules it touched in seen. */
static void run_case(struct tsec__ptest *t, struct tsec_bus *bus, const char *file, size_t i,
		     json_t *c, struct run *run, json_t *keep, json_t *seen)
{
	const char *name = json_string_value(json_object_get(c, "name")), *bad;
	const char *status = json_string_value(json_object_get(c, "status"));
	struct tsec_request *r = &run->reqs[run->n];
	struct tsec_decision *d = &run->single[run->n];
	struct tsec_report rep;
	struct tsec_error err;
	char label[200], why[256];

	snprintf(label, sizeof(label), "%s: %s", file, name ? name : "(unnamed case)");
	if ((bad = malformed(c, run->ids, why, sizeof(why)))) {
		fprintf(t->err, "tsec test: %s: case %zu %s\n", file, i, bad);
		t->errors++;
		return;
	}
	if (t->run && fnmatch(t->run, name, 0))
		return;
	if (tsec__ptest_request("test", c, t->principal, t->roles, t->nroles, r,
				run->roles[run->n], ROLES_MAX, keep, t->err)) {
		fprintf(t->err, "  (in %s)\n", label);
		t->errors++;
		return;
	}
	if (tsec_bus_check(bus, "policy", r, 1, d, &err) ||
	    tsec_bus_evaluate(bus, "policy", r, &rep, &err)) {
		fprintf(t->err, "tsec test: %s: %s\n", label, err.msg);
		t->errors++;
		return;
	}
	tsec__decision_seal(d);
	tsec__decision_seal(&rep.decision);
	if (!same_decision(d, &rep.decision)) {
		fprintf(t->err, "tsec test: %s: Check (%s) and Evaluate (%s) disagree\n", label,
			status_name(d->status), status_name(rep.decision.status));
		t->errors++;
		return;
	}
	if (d->status == TSEC_STATUS_INVALID && (!status || strcmp(status, "invalid"))) {
		/* A misspelt action is the case's fault, not a deny. */
		fprintf(t->err, "tsec test: %s: the request is invalid (%s)\n", label, d->detail);
		t->errors++;
		return;
	}
	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		json_object_set_new(seen, d->rules[k], json_true());
	run->cases[run->n++] = c;
	if (!verdict(c, d, why, sizeof(why))) {
		t->passed++;
		if (t->cases_json)
			json_case(t, file, c, d, NULL);
		else if (t->verbose)
			fprintf(t->out, "ok   %s\n", label);
		return;
	}
	t->failed++;
	if (t->cases_json)
		json_case(t, file, c, d, why);
	else
		print_failure(t, bus, r, label, c, d, why);
}

/* The cases that ran, again as one batch: the same answers. */
static void run_batch(struct tsec__ptest *t, struct tsec_bus *bus, const char *file,
		      struct run *run)
{
	struct tsec_error err;

	if (!run->n)
		return;
	if (tsec_bus_check(bus, "policy", run->reqs, run->n, run->batch, &err)) {
		fprintf(t->err, "tsec test: %s: the batch of %zu: %s\n", file, run->n, err.msg);
		t->errors++;
		return;
	}
	for (size_t i = 0; i < run->n; i++)
		tsec__decision_seal(&run->batch[i]);
	for (size_t i = 0; i < run->n; i++)
		if (!same_decision(&run->single[i], &run->batch[i])) {
			fprintf(t->err, "tsec test: %s: case %s answered differently in a batch\n",
				file, json_string_value(json_object_get(run->cases[i], "name")));
			t->errors++;
		}
}

/* The policy's rules no case of this file touched (seen), as JSON or
 * text, and the totals. */
static void coverage_of(struct tsec__ptest *t, const char *file, const char *policy,
			json_t *seen)
{
	json_t *ids = rule_ids(policy), *v, *not = json_array();
	size_t k;

	json_array_foreach(ids, k, v)
		if (!json_object_get(seen, json_string_value(v)))
			json_array_append(not, v);
	t->rules += (int)json_array_size(ids);
	t->exercised += (int)(json_array_size(ids) - json_array_size(not));
	if (t->coverage_json) {
		json_array_append_new(t->coverage_json,
				      json_pack("{s:s, s:I, s:I, s:O}", "file", file, "rules",
						(json_int_t)json_array_size(ids), "exercised",
						(json_int_t)(json_array_size(ids) - json_array_size(not)),
						"not_exercised", not));
	} else if (json_array_size(not)) {
		fprintf(t->out, "%s: not exercised by any case:", file);
		json_array_foreach(not, k, v)
			fprintf(t->out, " %s", json_string_value(v));
		fputc('\n', t->out);
	} else {
		fprintf(t->out, "%s: every rule exercised\n", file);
	}
	json_decref(not);
	json_decref(ids);
}

void tsec__ptest_file(struct tsec__ptest *t, const char *file)
{
	json_error_t je;
	json_t *tf = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *cases, *c, *keep, *seen;
	struct run run = { 0 };
	const char *pol;
	char *copy, policy[4096];
	struct tsec_bus *bus;
	size_t i, total;

	t->files++;
	if (!tf) {
		char line[4300];

		tsec__json_error_say(line, sizeof(line), file, &je);
		fprintf(t->err, "tsec test: %s\n", line);
		t->errors++;
		return;
	}
	pol = json_string_value(json_object_get(tf, "policy"));
	cases = json_object_get(tf, "cases");
	if (!pol || !json_is_array(cases) || json_array_size(cases) > CASES_MAX) {
		fprintf(t->err, "tsec test: %s: want {\"policy\": FILE, \"cases\": [at most %d]}\n",
			file, CASES_MAX);
		json_decref(tf);
		t->errors++;
		return;
	}
	/* The policy is named relative to the test file. */
	copy = strdup(file);
	if (t->policy)
		snprintf(policy, sizeof(policy), "%s", t->policy);
	else if (pol[0] == '/' || !copy || (t->stdin_path && !strcmp(file, t->stdin_path)))
		snprintf(policy, sizeof(policy), "%s", pol);
	else
		snprintf(policy, sizeof(policy), "%s/%s", dirname(copy), pol);
	free(copy);
	if (!(bus = bus_on(t, policy))) {
		json_decref(tf);
		t->errors++;
		return;
	}
	total = json_array_size(cases);
	run.ids = rule_ids(policy);
	t->doc = json_load_file(policy, 0, NULL);
	run.reqs = calloc(total + 1, sizeof(*run.reqs));
	run.single = calloc(total + 1, sizeof(*run.single));
	run.batch = calloc(total + 1, sizeof(*run.batch));
	run.cases = calloc(total + 1, sizeof(*run.cases));
	run.roles = calloc(total + 1, sizeof(*run.roles));
	if (!run.reqs || !run.single || !run.batch || !run.cases || !run.roles) {
		fprintf(t->err, "tsec test: out of memory\n");
		t->errors++;
		goto out;
	}
	keep = json_array();
	seen = json_object();
	json_array_foreach(cases, i, c)
		run_case(t, bus, file, i, c, &run, keep, seen);
	run_batch(t, bus, file, &run);
	if (t->coverage)
		coverage_of(t, file, policy, seen);
	json_decref(seen);
	json_decref(keep);
out:
	run_free(&run);
	json_decref(t->doc);
	t->doc = NULL;
	tsec_bus_free(&bus);
	json_decref(tf);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void tsec__ptest_path(struct tsec__ptest *t, const char *path)
{
	size_t n = 0, cap = 0, al = strlen(path);
	char **names = NULL, **more, *dir;
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (stat(path, &st)) {
		fprintf(t->err, "tsec test: %s: no such file or folder\n", path);
		t->errors++;
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		tsec__ptest_file(t, path);
		return;
	}
	while (al > 1 && path[al - 1] == '/')
		al--;
	if (!(dir = strndup(path, al)) || !(d = opendir(dir))) {
		fprintf(t->err, "tsec test: cannot read %s\n", path);
		free(dir);
		t->errors++;
		return;
	}
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l <= 10 || strcmp(e->d_name + l - 10, ".test.json"))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			if (!(more = realloc(names, cap * sizeof(*names))))
				break;
			names = more;
		}
		if (asprintf(&names[n], "%s/%s", dir, e->d_name) < 0)
			break;
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		tsec__ptest_file(t, names[i]);
		free(names[i]);
	}
	free(names);
	if (!n) {
		fprintf(t->err, "tsec test: %s: no *.test.json files\n", dir);
		t->errors++;
	}
	free(dir);
}
