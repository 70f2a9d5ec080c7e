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
#include "broker/policytest/policytest.h"
#include "common/sign.h"
#include "common/where.h"
#include "common/wire.h"

/* Says the module's error e about the policy text read from path:
 * "tsec CMD: FILE:LINE:COL: [/pointer: ]message". */
void cli_policy_error(const char *cmd, const char *path, const char *text, size_t len,
		      const struct tsec_error *e)
{
	char line[TSEC_ERR_WHERE + TSEC_ERR_MSG + 4200];

	tsec__error_say(line, sizeof(line), cli_shown(path), text, len, e->where, e->msg);
	fprintf(stderr, "tsec %s: %s\n", cmd, line);
}

/* Says jansson's error je reading path: "tsec CMD: FILE:LINE:COL: text";
 * not_object, when the JSON was read but is not what was wanted. */
void cli_json_error(const char *cmd, const char *path, json_error_t *je, const char *not_object)
{
	char line[4300];

	if (not_object) {
		je->line = je->column = 1;
		snprintf(je->text, sizeof(je->text), "%s", not_object);
	}
	tsec__json_error_say(line, sizeof(line), cli_shown(path), je);
	fprintf(stderr, "tsec %s: %s\n", cmd, line);
}

/* A bus with the policy at path on endpoint "policy"; NULL after saying why. */
struct tsec_bus *cli_bus_on(const char *cmd, const struct opts *o, const char *path)
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
		if (bus)
			cli_policy_error(cmd, path, text, len, &err);
		else
			fprintf(stderr, "tsec %s: out of memory\n", cmd);
		tsec_bus_free(&bus);
	}
	free(text);
	return bus;
}

/* One request object (policytest.h), with the command line's roles. */
static int request_of(const char *cmd, json_t *j, const char *def_p, const struct opts *o,
		      struct tsec_request *r, struct tsec_str *roles, size_t nroles_max,
		      json_t *keep)
{
	return tsec__ptest_request(cmd, j, def_p, o->roles, o->nroles, r, roles, nroles_max, keep,
				   stderr);
}

/* tsec eval of one request: the report with its explanation, printed;
 * the exit status its decision gives, or -1 when it could not be made
 * (said). */
/*
 * A default deny's near misses (nearmiss.c), as "near_miss" of the
 * decision d: the allows the author most likely meant.  The policy is
 * read once per command.
 */
static void near_miss_into(const struct opts *o, const struct tsec_request *r, json_t *d)
{
	static json_t *policy;
	char out[4][256];
	int n;

	if (json_is_true(json_object_get(d, "allow")) ||
	    strcmp(json_string_value(json_object_get(d, "status")) ?: "", "default"))
		return;
	if (!policy && !(policy = json_load_file(o->policy, 0, NULL)))
		return;
	if ((n = tsec__near_misses(policy, r, out, 4)) > 0) {
		json_t *a = json_array();

		for (int i = 0; i < n; i++)
			json_array_append_new(a, json_string(out[i]));
		json_object_set_new(d, "near_miss", a);
	}
}

static int eval_one(struct tsec_bus *bus, const struct opts *o, const struct tsec_request *r)
{
	struct tsec_report *rep = malloc(sizeof(*rep));
	struct tsec_explain *ex = malloc(sizeof(*ex));
	struct tsec_error err;
	json_t *j;
	int x;

	if (!rep || !ex || tsec_bus_explain(bus, "policy", r, rep, ex, &err)) {
		fprintf(stderr, "tsec eval: %s\n", rep && ex ? err.msg : "out of memory");
		free(rep);
		free(ex);
		return -1;
	}
	j = tsec__report_to_json(rep);
	tsec__explain_to_json(j, ex, r);
	near_miss_into(o, r, json_object_get(j, "decision"));
	free(rep);
	free(ex);
	if (o->json) {
		json_dumpf(j, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		cli_human_report(j);
	}
	x = cli_decision_exit(json_object_get(j, "decision"));
	json_decref(j);
	return x;
}

/*
 * A default deny's why not, as a broker's check answers it (issue 51:
 * offline, `check` said only "nothing allowed it"): each rule (at most
 * four) that matched the request but did not apply, and the condition
 * it failed, as "why_not" of the decision j.
 */
#define WHY_NOT_MAX 4
static void why_not_into(struct tsec_bus *bus, const struct tsec_request *r,
			 const struct tsec_decision *d, json_t *j)
{
	struct tsec_report *rep;
	struct tsec_explain *ex;
	struct tsec_error err;
	json_t *a;

	if (d->allow || d->status != TSEC_STATUS_DEFAULT)
		return;
	rep = malloc(sizeof(*rep));
	ex = malloc(sizeof(*ex));
	if (rep && ex && !tsec_bus_explain(bus, "policy", r, rep, ex, &err) && ex->explained &&
	    ex->nnot_applied) {
		tsec__explain_seal(ex);
		a = json_array();
		for (uint32_t k = 0; k < ex->nnot_applied && k < WHY_NOT_MAX; k++) {
			json_t *w = json_pack("{s:s,s:s}", "rule", ex->not_applied[k].rule, "why",
					      ex->not_applied[k].why);

			if (ex->not_applied[k].dest)
				json_object_set_new(w, "at", json_string("destination"));
			json_array_append_new(a, w);
		}
		json_object_set_new(j, "why_not", a);
	}
	free(rep);
	free(ex);
}

/* The requests: --input's file (a list, or {"requests": [...]}), or req
 * alone; the batch (new; *list in it), or NULL after saying why. */
static json_t *batch_of(const char *cmd, const struct opts *o, json_t *req, json_t **list)
{
	json_error_t je;
	json_t *batch;

	if (!o->input) {
		if (o->principal)
			json_object_set_new(req, "principal", json_string(o->principal));
		batch = json_array();
		json_array_append_new(batch, req);
		*list = batch;
		return batch;
	}
	if (!(batch = json_load_file(o->input, JSON_REJECT_DUPLICATES, &je))) {
		cli_json_error(cmd, o->input, &je, NULL);
		return NULL;
	}
	*list = json_is_array(batch) ? batch : json_object_get(batch, "requests");
	if (!json_is_array(*list)) {
		fprintf(stderr, "tsec %s: %s: want a list of requests (or {\"requests\": [...]})\n",
			cmd, cli_shown(o->input));
		json_decref(batch);
		return NULL;
	}
	return batch;
}

int cmd_decide_offline(const char *cmd, struct opts *o, json_t *req)
{
	struct tsec_bus *bus;
	struct tsec_str roles[16];
	struct tsec_error err;
	json_t *batch = NULL, *list, *v, *out, *keep;
	int rc = EXIT_ALLOW;
	bool broke = false;          /* stopped: what was decided is not shown whole */
	size_t i;

	if (!o->policy)
		die_usage(cmd, "--input needs --policy");
	if (!(batch = batch_of(cmd, o, req, &list)))
		return EXIT_ERROR;
	if (!(bus = cli_bus_on(cmd, o, o->policy))) {
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
			broke = true;
			break;
		}
		if (!strcmp(cmd, "eval")) {
			int x = eval_one(bus, o, &r);

			if (x < 0) {
				rc = EXIT_ERROR;
				broke = true;
				break;
			}
			if (x > rc)
				rc = x;
			continue;
		}
		if (tsec_bus_check(bus, "policy", &r, 1, &d, &err)) {
			fprintf(stderr, "tsec check: %s\n", err.msg);
			rc = EXIT_ERROR;
			broke = true;
			break;
		}
		if (o->input && !o->json)
			printf("%zu %.*s %.*s: ", i, (int)r.action.len, r.action.ptr,
			       (int)r.resource.len, r.resource.ptr);
		if (o->input && o->json) {
			json_t *j = tsec__decision_to_json(&d);

			why_not_into(bus, &r, &d, j);
			near_miss_into(o, &r, j);
			if (cli_decision_exit(j) > rc)
				rc = cli_decision_exit(j);
			json_array_append_new(out, j);
		} else {
			json_t *j = tsec__decision_to_json(&d);
			int x;

			why_not_into(bus, &r, &d, j);
			near_miss_into(o, &r, j);
			x = cli_print_decision(j, o->json);

			if (x > rc)
				rc = x;
			json_decref(j);
		}
	}
	if (o->input && o->json && !broke) {
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

/* ---- tsec test: the library's runner (broker/policytest) ---- */

/* tsec test --json: one object, the counts, every case run with its
 * result, each file's coverage under --coverage, and what could not run
 * (errtext: what stderr had).  Frees errtext.  0, or -1 out of memory. */
static int test_json(const struct opts *o, struct tsec__ptest *t, bool under, char *errtext)
{
	/* One object: the counts, every case run with its result, and
	 * each file's coverage under --coverage.  What could not run
	 * is said on stderr, as without --json. */
	json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:o}", "passed", t->passed, "failed",
			      t->failed, "errors", t->errors, "files", t->files, "cases",
			      t->cases_json);

	if (j && t->coverage_json) {
		json_object_set_new(j, "coverage", t->coverage_json);
		json_object_set_new(j, "rules", json_integer(t->rules));
		json_object_set_new(j, "exercised", json_integer(t->exercised));
	}
	if (j && o->min_coverage) {
		json_object_set_new(j, "below_min_coverage", json_boolean(under));
		json_object_set_new(j, "min_coverage", json_integer(o->min_coverage));
		json_object_set_new(j, "coverage_percent",
				    json_integer(t->rules ? t->exercised * 100 / t->rules : 100));
	}
	if (j) {
		/* Each line of what could not run, as stderr has it. */
		json_t *nr = json_array();

		for (char *l = errtext, *e; l && *l; l = e + 1) {
			if (!(e = strchr(l, '\n')))
				e = l + strlen(l) - 1;
			json_array_append_new(nr, json_stringn(l, (size_t)(e - l + (*e != '\n'))));
		}
		json_object_set_new(j, "not_run", nr);
	}
	if (!j) {
		free(errtext);
		return -1;
	}
	json_dumpf(j, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(j);
	free(errtext);
	return 0;
}

int cmd_test(struct opts *o)
{
	bool under = false;                  /* below --min-coverage */
	struct tsec__ptest t = {
		.module = o->module ? o->module : cli_default_module(), .policy = o->policy,
		.roles = o->roles, .nroles = o->nroles, .principal = o->principal,
		.run = o->run, .coverage = o->coverage, .verbose = o->verbose,
		.stdin_path = cli_stdin_spool,
		.out = stdout, .err = stderr,
	};

	char *errtext = NULL;
	size_t errlen = 0;

	if (o->nargs < 1)
		die_usage("test", "name test files or folders (*.test.json)");
	if (o->json) {
		t.cases_json = json_array();
		t.coverage_json = o->coverage ? json_array() : NULL;
		/* What could not run goes into the object too (issue 51, item
		 * 9: it was only on stderr): kept, then said both ways. */
		if (!(t.err = open_memstream(&errtext, &errlen)))
			t.err = stderr;
	}
	for (int a = 0; a < o->nargs; a++)
		tsec__ptest_path(&t, o->args[a]);
	/* Nothing ran: no test passed, so none may say so (a --run that
	 * matched no name, a file without cases). */
	if (!t.passed && !t.failed && !t.errors) {
		if (o->run)
			fprintf(t.err, "tsec test: no case's name matches --run '%s'\n", o->run);
		else
			fprintf(t.err, "tsec test: no test cases in %s%s\n", cli_shown(o->args[0]),
				o->nargs > 1 ? " and the rest" : "");
		t.errors = 1;
	}
	/* --min-coverage: too few rules decided by a case fails the run, as
	 * a failing case does.  The percentage rounds down. */
	if (o->min_coverage && t.rules && t.exercised * 100 / t.rules < o->min_coverage) {
		fprintf(t.err, "tsec test: coverage %d%% (%d of %d rules) is below --min-coverage "
			"%d%%\n", t.exercised * 100 / t.rules, t.exercised, t.rules, o->min_coverage);
		under = true;
	}
	if (t.err != stderr) {
		fclose(t.err);
		t.err = stderr;
		if (errlen)
			fwrite(errtext, 1, errlen, stderr);
	}
	if (o->json) {
		if (test_json(o, &t, under, errtext)) {
			fprintf(stderr, "tsec test: out of memory\n");
			return EXIT_ERROR;
		}
	} else {
		printf("%d passed, %d failed%s", t.passed, t.failed, t.errors ? "" : "\n");
		if (t.errors)
			printf(", %d could not run\n", t.errors);
	}
	return t.errors ? EXIT_ERROR : t.failed || under ? EXIT_DENY : EXIT_ALLOW;
}
