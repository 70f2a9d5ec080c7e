/*
 * Internal to tsec (broker/cli): what its files share.  tsec.c holds the
 * options, the calls to a broker and main; offline.c what needs no
 * broker (lint, keygen, sign).
 */
#ifndef TSEC_CLI_H
#define TSEC_CLI_H

#include <stdio.h>

#include <jansson.h>

#define EXIT_ALLOW 0
#define EXIT_DENY 1
#define EXIT_ERROR 2

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
	const char *run;                     /* tsec test --run PATTERN */
	int prometheus;
};

/* Prints a decision (JSON of the wire); returns 0 allow, 1 deny. */
int cli_print_decision(json_t *d, int json);
/* Prints an Evaluate report as text. */
void cli_human_report(json_t *r);
/* The module beside this program, or installed, or the build's. */
const char *cli_default_module(void);

/* warn.c: lint's warnings for a policy that compiles ([{where, message}]). */
json_t *cli_policy_warnings(const char *path);

/* decide.c: check and eval without a broker (--policy), and tsec test. */
int cmd_decide_offline(const char *cmd, struct opts *o, json_t *req);
int cmd_test(struct opts *o);

/* argv[0], to find the module beside this program. */
extern const char *tsec_cli_argv0;

/* Says "tsec CMD: TEXT" and how to get help, then exits 2. */
void die_usage(const char *cmd, const char *text) __attribute__((noreturn));

/* offline.c */
int cmd_lint(struct opts *o);
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
void check_action(const char *cmd, const char *a);
int cmd_keygen(int argc, char **argv);
int cmd_sign(struct opts *o, const char *keyfile);

#endif
