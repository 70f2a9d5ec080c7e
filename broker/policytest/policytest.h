/*
 * Internal: the runner of a policy's test cases (*.test.json), one for
 * `tsec test` and for the project's own tests.
 *
 * A test file is {"policy": FILE, "cases": [CASE...]}, the policy named
 * relative to the file.  A CASE is a request as the wire takes it
 * ("principal", "roles", "action", "resource", "context") with "name",
 * "want" ("allow" or "deny") and optionally "rule" (one of the deciding
 * rules) and "status" (how it was decided: "allowed", "denied", "floor",
 * "default", or "invalid" with "field", the request field at fault).
 *
 * Every case is asked by Check and by Evaluate, which must agree, and the
 * cases of a file are asked again as one Check batch, whose answers must
 * be the single ones'.  An invalid request is an error, not a deny,
 * unless the case wants "status": "invalid".
 */
#ifndef TSEC_BROKER_POLICYTEST_H
#define TSEC_BROKER_POLICYTEST_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "tinysecurity/types.h"

struct tsec__ptest {
	/* Set by the caller. */
	const char *module;                  /* the module to load */
	const char *policy;                  /* instead of each file's own, or NULL */
	const char *const *roles;            /* for a case that names none */
	int nroles;
	const char *principal;               /* for a case that names none, or NULL */
	const char *run;                     /* fnmatch(3) pattern on case names, or NULL */
	const char *stdin_path;              /* a file that is stdin spooled: its policy is
						named from the working folder */
	bool coverage, verbose;
	FILE *out, *err;                     /* results; what could not run */
	/* --json: each case's result is appended here ({file, name, result:
	 * pass|fail, want, rule?, got: {allow, status, rules}, why?}) and each
	 * file's coverage to coverage_json, instead of text on out. */
	json_t *cases_json, *coverage_json;
	/* Counted. */
	int passed, failed, errors, files;
	int rules, exercised;                /* under coverage: rules, and those a case decided */
	/* Private: the policy of the file being run, for near misses. */
	json_t *doc;
};

/* Runs every case of one file. */
void tsec__ptest_file(struct tsec__ptest *t, const char *file);

/* A file, or every *.test.json in a folder, in name order. */
void tsec__ptest_path(struct tsec__ptest *t, const char *path);

/*
 * Reads one request object: "principal" and "roles" (else def_p and
 * roles[0..nroles)), then what the wire takes; "name", "want", "rule",
 * "status" and "field" are ignored.  The strings stay owned by j and by a
 * copy appended to keep.  rbuf holds up to nmax roles.  0, or -1 with
 * the reason on err (prefixed with cmd).
 */
int tsec__ptest_request(const char *cmd, json_t *j, const char *def_p,
			const char *const *roles, int nroles, struct tsec_request *r,
			struct tsec_str *rbuf, size_t nmax, json_t *keep, FILE *err);

/*
 * Near misses of a request nothing allowed (nearmiss.c): allows that
 * would have matched but for the principal's prefix or a near name, a
 * '*' where '**' was meant, or a literal one edit off; up to max
 * sentences into out.  How many.
 */
int tsec__near_misses(const json_t *policy, const struct tsec_request *r, char (*out)[256],
		      int max);

#endif
