/*
 * Internal to tsec (broker/cli): what its files share.  tsec.c holds the
 * options, the calls to a broker and main; offline.c what needs no
 * broker (lint, keygen, sign).
 */
#ifndef TSEC_CLI_H
#define TSEC_CLI_H

#include <stdio.h>

#include <jansson.h>

/*
 * Exit statuses, one table for every command (tsec(1) EXIT STATUS;
 * test_exit_codes in tests/test_daemon_cli.c):
 *   0  ok, allowed, every case passed
 *   1  the answer is no: denied by the policy, a test case failed, a file
 *      is not formatted (fmt --check), a signature does not verify,
 *      decisions differ (diff, replay)
 *   2  usage or bad input: options, arguments, a policy, key or request
 *      that is invalid, a file that cannot be read
 *   3  no broker answered, or it did not accept this client (socket
 *      missing or not ours to open, key or user refused, no answer)
 *   4  the broker answered with an error (not found, conflict, lock held,
 *      deadline passed, I/O), or tsec could not write its output
 *   130 interrupted (^C, SIGTERM) while it waited for the broker: the
 *      call was cancelled there (a lock wait dropped, a lock taken for
 *      it let go)
 */
#include <stdbool.h>

#define EXIT_ALLOW 0
#define EXIT_DENY 1
#define EXIT_ERROR 2
#define EXIT_UNREACHABLE 3
#define EXIT_FAILED 4
#define EXIT_INTERRUPTED 130     /* ^C: a call the broker took was cancelled there */

/* The exit status for a TSEC_E* code a call returned. */
int cli_exit_of(int rc);
/* Says why a call failed (as JSON on stdout with --json, else on
 * stderr as "tsec CMD: MESSAGE"); returns cli_exit_of(rc). */
struct tsec_error;
int cli_fail(const char *cmd, int rc, const struct tsec_error *err, int json);
/* The same for a call: when the broker answered it with an error
 * (tsec_client_last_error), 1 for a deny, 2 for input it found bad, else
 * 4, whatever the code. */
int cli_fail_call(const char *cmd, int rc, const struct tsec_error *err, int json, bool answered);

/* The installed service's socket (packaging/broker.json.in): absolute, so
 * tsec finds the broker from any folder.  `make run` prints the export
 * for its own. */
#define TSEC_DEFAULT_ENDPOINT "ipc:///run/tinysecurity/tsec.sock"

#define CLI_ENDPOINTS_MAX 16

#define CLI_ARGS_MAX 64

struct opts {
	const char *endpoint, *server_key, *key_prefix, *module;
	/* --endpoint and --server-key given more than once: several brokers */
	const char *eps[CLI_ENDPOINTS_MAX], *skeys[CLI_ENDPOINTS_MAX];
	int neps, nskeys;
	int json, timeout_ms;
	/* Request flags. */
	const char *action, *resource, *dest, *cert_file;
	long long ttl_ms, size, now, timeout_lock;
	int recursive, have_ttl, have_size, have_now, have_recursive;
	char *args[CLI_ARGS_MAX];
	int nargs;
	int help;
	/* Offline decisions (no broker): the policy, who asks, a batch. */
	const char *policy, *principal, *input;
	const char *roles[16];
	int nroles;
	int coverage, verbose;
	int min_coverage;                    /* tsec test --min-coverage PCT (0: none) */
	const char *run;                     /* tsec test --run PATTERN */
	int prometheus;
	int check, write, force;             /* tsec fmt --check / -w [--force] */
	int strict;                          /* tsec lint --strict [--schema FILE] */
	const char *log;                     /* tsec diff --log FILE */
	const char *schema;
};

/* Prints a decision (JSON of the wire); returns 0 allow, 1 deny. */
int cli_print_decision(json_t *d, int json);
/* A connection to the broker o names, or exit 2 after saying why (online.c). */
struct tsec_client *cli_connect_or_die(const char *cmd, struct opts *o);
/* One call of method with params (borrowed; NULL: none) to that broker,
 * ^C cancelling it there: 0 with *res its result text (free()), or the
 * exit status after saying why. */
int cli_call(const char *cmd, struct opts *o, const char *method, json_t *params, char **res);
/* cli_call, then the result printed: as JSON with --json or no human,
 * else by human, whose status is the command's. */
int cli_call_print(const char *cmd, struct opts *o, const char *method, json_t *params,
		   int (*human)(json_t *result));
/* Printers of a result: "ok"; each member on a line. */
int cli_human_ok(json_t *r);
int cli_human_object(json_t *r);
/* An unknown subcommand named with the nearest of subs, or the usage; exits 2. */
void cli_bad_sub(const char *cmd, const char *sub, const char *const *subs, size_t n,
		 const char *usage);
/* Where stdin went, when a command named "-" for a file (tsec.c), or NULL. */
extern const char *cli_stdin_spool;
/* A file's name as the user gave it: "-" for stdin's spool. */
const char *cli_shown(const char *path);
/* Whether the policy's "expires" has passed (warn.c). */
bool cli_expired(const json_t *policy);
/* check of cert.obtain at a broker, dry (obtain.c). */
int cli_check_obtain(struct opts *o);
int cli_decision_exit(const json_t *d);
/* Prints an Evaluate report as text. */
void cli_human_report(json_t *r);
/* The module beside this program, or installed, or the build's. */
const char *cli_default_module(void);

/* warn.c: lint's warnings for a policy that compiles ([{where, message}]). */
/* Appends {where: place, message: the formatted text} to out. */
void cli_note(json_t *out, const char *place, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
json_t *cli_policy_warnings(const char *path);

/* decide.c: check and eval without a broker (--policy), and tsec test. */
/* A bus with the policy at path on endpoint "policy"; NULL after saying why. */
struct tsec_bus;
void cli_json_error(const char *cmd, const char *path, json_error_t *je, const char *not_object);
void cli_policy_error(const char *cmd, const char *path, const char *text, size_t len,
		      const struct tsec_error *e);
struct tsec_bus *cli_bus_on(const char *cmd, const struct opts *o, const char *path);
/* replay.c */
int cmd_replay(struct opts *o);

/* replay_line.c: certificates made for replay, by their attributes'
 * JSON text (by_attrs: text -> PEM string; the caller frees it). */
struct tsec__made {
	json_t *by_attrs;
};
/* The request a log line records, as a request object for
 * tsec__ptest_request (new), or NULL with *why set. */
json_t *tsec__logged_request(json_t *line, struct tsec__made *m, const char **why);
/* Whether line is a cert.obtain the broker refused by its rate (its
 * count was the broker's: no log replays it), *why then set. */
bool tsec__rate_refusal(json_t *line, const char **why);
int cmd_diff(struct opts *o);
int cmd_decide_offline(const char *cmd, struct opts *o, json_t *req);
int cmd_test(struct opts *o);
/* can.c: what a principal may do under a policy. */
int cmd_can(struct opts *o);

/* argv[0], to find the module beside this program. */
extern const char *tsec_cli_argv0;

/* Says "tsec CMD: TEXT" and how to get help, then exits 2. */
void die_usage(const char *cmd, const char *text) __attribute__((noreturn));

/* offline.c */
int cmd_lint(struct opts *o);
/* schema.c: lint --strict's errors ([{where, message}]) for the policy
 * at policy_path against the schema (or broker configuration) at
 * schema_path; NULL with why when the schema does not read. */
json_t *cli_schema_errors(const char *policy_path, const char *schema_path, char *why,
			  size_t whylen);
/* tools.c: fmt, inspect, verify (no broker). */
int cmd_fmt(struct opts *o);
int cmd_inspect(struct opts *o);
int cmd_verify(struct opts *o);
/* online.c: the commands that call a broker. */
int cmd_check(struct opts *o);
int cmd_eval(struct opts *o);
int cmd_store(struct opts *o);
int cmd_lock(struct opts *o);
int cmd_cert(struct opts *o);
int cmd_stats(struct opts *o);
int cmd_health(struct opts *o);
int cmd_reload(struct opts *o);
int cmd_policy(struct opts *o);
/* tsec.c: an action named by --action, refused (exit 2) unless known. */
unsigned check_action(const char *cmd, const char *a);
/* The TSEC_AF_* flags of the action named a (0 for none). */
unsigned cli_action_flags(const char *a);
int cmd_keygen(int argc, char **argv);
int cmd_sign(struct opts *o, const char *keyfile);

#endif
