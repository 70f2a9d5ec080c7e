/*
 * tsec: the command line of tinysecurity.
 *
 * Exit status: 0 allow or success, 1 deny, 2 error.  Human-readable output
 * by default, --json for scripts.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <sodium.h>

#include "tinysecurity/bus.h"
#include "tinysecurity/client.h"
#include "common/suggest.h"
#include "common/error.h"

#include "broker/cli/cli.h"

const char *tsec_cli_argv0;

void die_usage(const char *cmd, const char *text)
{
	fprintf(stderr, "tsec %s: %s\nTry 'tsec %s --help'.\n", cmd, text, cmd);
	exit(EXIT_ERROR);
}

static const char *const conn_help =
	"Connection (also from TSEC_ENDPOINT, TSEC_SERVER_KEY, TSEC_KEY, or a file:\n"
	"$TSEC_CONFIG, ~/.config/tsec/client.json, /etc/tinysecurity/client.json, holding\n"
	"{\"endpoint\", \"server_key\", \"key\"}):\n"
	"  --endpoint EP        tcp://host:port or ipc://path (default ipc:///run/tinysecurity/tsec.sock);\n"
	"                       again for more brokers: a call fails over to the next\n"
	"  --server-key Z85     the broker's CURVE public key (tcp); again for each endpoint\n"
	"  --key PREFIX         this client's CURVE key pair PREFIX.pub / PREFIX.key (tcp)\n"
	"  --timeout-ms N       per call (default 5000)\n"
	"  --json               print JSON\n";

static const char *const req_help =
	"Request:\n"
	"  --action A           storage.store|load|exists|delete|list|stat|move, lock.acquire|renew|release,\n"
	"                       cert.publish|load|exists|archive, cert.obtain\n"
	"  --resource KEY       the key or lock resource; for cert.obtain a name (names/NAME):\n"
	"                       at a broker, its rate as counted now (check counts nothing)\n"
	"  --ttl-ms N --size N --recursive --dest KEY --cert-file PEM --now UNIX_SECONDS\n"
	"Without a broker (decided here, through the module, as a broker would):\n"
	"  --policy FILE        the policy to decide with\n"
	"  --principal P        who asks; --role R, again for more roles\n"
	"  --module SO          the policy module (default: the installed one, or $TSEC_MODULE)\n"
	"  --input FILE         a batch: [{\"principal\", \"roles\", \"action\", \"resource\",\n"
	"                       \"context\"}, ...] (check only)\n";

/* A number flag's value, refused (exit 2) unless a whole number in [lo, hi]. */
static long long num(const char *cmd, const char *flag, const char *v, long long lo,
		     long long hi)
{
	char *end;
	long long n;

	if (!v) {
		fprintf(stderr, "tsec %s: %s needs a value\nTry 'tsec %s --help'.\n", cmd, flag, cmd);
		exit(EXIT_ERROR);
	}
	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno || *end || !*v || n < lo || n > hi) {
		fprintf(stderr, "tsec %s: %s: '%s' is not a whole number from %lld to %lld\n", cmd,
			flag, v, lo, hi);
		exit(EXIT_ERROR);
	}
	return n;
}

#define BIG 9007199254740991LL /* the largest integer JSON carries exactly */

unsigned cli_action_flags(const char *a)
{
	for (unsigned i = 0; i < TSEC_ACTION__COUNT; i++)
		if (!strcmp(a, tsec_action_name(i)))
			return tsec_action_flags(i);
	return 0;
}

/* The request's action, refused (exit 2) unless it is one, with a
 * suggestion for a near miss; its TSEC_AF_* flags. */
unsigned check_action(const char *cmd, const char *a)
{
	const char *names[TSEC_ACTION__COUNT], *near;

	for (unsigned i = 0; i < TSEC_ACTION__COUNT; i++) {
		names[i] = tsec_action_name(i);
		if (!strcmp(a, names[i]))
			return tsec_action_flags(i);
	}
	near = tsec__nearest(a, names, TSEC_ACTION__COUNT);
	fprintf(stderr, "tsec %s: --action: unknown action '%s'%s%s%s\nTry 'tsec %s --help'.\n",
		cmd, a, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", cmd);
	exit(EXIT_ERROR);
}

/* An environment variable, NULL when unset or empty. */
static const char *env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/*
 * Where the broker is, when neither --endpoint nor $TSEC_ENDPOINT says:
 * $TSEC_CONFIG, else $XDG_CONFIG_HOME/tsec/client.json (~/.config/...),
 * else /etc/tinysecurity/client.json: {"endpoint", "server_key", "key"}
 * (key: the CURVE key pair's PREFIX).  Unknown members are refused.
 */
static void client_config(const char *cmd, struct opts *o)
{
	static char paths[3][4096];
	static json_t *cfg;
	const char *env = env_set("TSEC_CONFIG"), *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME"), *k;
	json_error_t je;
	json_t *v;
	int n = 0;

	if (env)
		snprintf(paths[n++], sizeof(paths[0]), "%s", env);
	if (xdg && *xdg)
		snprintf(paths[n++], sizeof(paths[0]), "%s/tsec/client.json", xdg);
	else if (home && *home)
		snprintf(paths[n++], sizeof(paths[0]), "%s/.config/tsec/client.json", home);
	snprintf(paths[n++], sizeof(paths[0]), "/etc/tinysecurity/client.json");
	for (int i = 0; i < n && !cfg; i++) {
		if (access(paths[i], F_OK) != 0) {
			if (i == 0 && env) {
				fprintf(stderr, "tsec %s: $TSEC_CONFIG: no file %s\n", cmd, paths[i]);
				exit(EXIT_ERROR);
			}
			continue;
		}
		if (!(cfg = json_load_file(paths[i], JSON_REJECT_DUPLICATES, &je)) ||
		    !json_is_object(cfg)) {
			cli_json_error(cmd, paths[i], &je, cfg ? "must be a JSON object" : NULL);
			exit(EXIT_ERROR);
		}
		json_object_foreach(cfg, k, v) {
			static const char *const known[] = { "endpoint", "server_key", "key" };
			const char *near = tsec__nearest(k, known, 3);

			if (strcmp(k, "endpoint") && strcmp(k, "server_key") && strcmp(k, "key")) {
				fprintf(stderr, "tsec %s: %s: unknown setting \"%s\"%s%s%s\n", cmd,
					paths[i], k, near ? "; did you mean \"" : "", near ? near : "",
					near ? "\"?" : "");
				exit(EXIT_ERROR);
			}
			if (!json_is_string(v)) {
				fprintf(stderr, "tsec %s: %s: \"%s\" must be a string\n", cmd, paths[i], k);
				exit(EXIT_ERROR);
			}
		}
		o->endpoint = json_string_value(json_object_get(cfg, "endpoint"));
		if (!o->server_key)
			o->server_key = json_string_value(json_object_get(cfg, "server_key"));
		if (!o->key_prefix)
			o->key_prefix = json_string_value(json_object_get(cfg, "key"));
	}
}

/* An option that takes a value came last, without one: a usage error,
 * not a default (`tsec check --policy` must not ask the broker). */
static const char *no_value(const char *cmd, const char *opt)
{
	fprintf(stderr, "tsec %s: %s needs a value\nTry 'tsec %s --help'.\n", cmd, opt, cmd);
	exit(EXIT_ERROR);
}

/* Every option parse() knows, for "did you mean". */
static const char *const known_opts[] = {
	"--help", "--json", "--endpoint", "--server-key", "--key", "--policy", "--principal",
	"--input", "--coverage", "--verbose", "--run", "--prometheus", "--check", "--strict",
	"--log", "--schema", "--write", "--role", "--module", "--timeout-ms", "--action",
	"--resource", "--dest", "--cert-file", "--ttl-ms", "--size", "--now", "--wait-ms",
	"--recursive", "--min-coverage", "--force",
};

static void parse(const char *cmd, int argc, char **argv, struct opts *o)
{
	o->endpoint = env_set("TSEC_ENDPOINT");
	o->server_key = env_set("TSEC_SERVER_KEY");
	o->key_prefix = env_set("TSEC_KEY");
	o->module = env_set("TSEC_MODULE");
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL, *eq;
		static char flag[64];
		int inline_value = 0, took = 0;
		/* --opt=value is --opt value. */
		if (!strncmp(a, "--", 2) && (eq = strchr(a, '=')) && (size_t)(eq - a) < sizeof(flag)) {
			memcpy(flag, a, (size_t)(eq - a));
			flag[eq - a] = '\0';
			a = flag;
			v = eq + 1;
			inline_value = 1;
		}
#define TAKE() (took = 1, inline_value ? v : (i++, v ? v : no_value(cmd, a)))
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) o->help = 1;
		else if (!strcmp(a, "--json")) o->json = 1;
		else if (!strcmp(a, "--endpoint")) {
			o->endpoint = TAKE();
			if (o->neps == CLI_ENDPOINTS_MAX)
				die_usage(cmd, "too many --endpoint");
			o->eps[o->neps++] = o->endpoint;
		} else if (!strcmp(a, "--server-key")) {
			o->server_key = TAKE();
			if (o->nskeys == CLI_ENDPOINTS_MAX)
				die_usage(cmd, "too many --server-key");
			o->skeys[o->nskeys++] = o->server_key;
		}
		else if (!strcmp(a, "--key")) o->key_prefix = TAKE();
		else if (!strcmp(a, "--policy")) o->policy = TAKE();
		else if (!strcmp(a, "--principal")) o->principal = TAKE();
		else if (!strcmp(a, "--input")) o->input = TAKE();
		else if (!strcmp(a, "--coverage")) o->coverage = 1;
		else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = 1;
		else if (!strcmp(a, "--run")) o->run = TAKE();
		else if (!strcmp(a, "--prometheus")) o->prometheus = 1;
		else if (!strcmp(a, "--check")) o->check = 1;
		else if (!strcmp(a, "--strict")) o->strict = 1;
		else if (!strcmp(a, "--log")) o->log = TAKE();
		else if (!strcmp(a, "--schema")) o->schema = TAKE();
		else if (!strcmp(a, "--min-coverage")) {
			o->min_coverage = (int)num(cmd, a, TAKE(), 1, 100);
			o->coverage = 1;
		}
		else if (!strcmp(a, "-w") || !strcmp(a, "--write")) o->write = 1;
		else if (!strcmp(a, "--force")) o->force = 1;
		else if (!strcmp(a, "--role")) {
			if (o->nroles == 16)
				die_usage(cmd, "at most 16 --role");
			o->roles[o->nroles++] = TAKE();
		}
		else if (!strcmp(a, "--module")) o->module = TAKE();
		else if (!strcmp(a, "--timeout-ms")) o->timeout_ms = (int)num(cmd, a, TAKE(), 1, 3600000);
		else if (!strcmp(a, "--action")) o->action = TAKE();
		else if (!strcmp(a, "--resource")) o->resource = TAKE();
		else if (!strcmp(a, "--dest")) o->dest = TAKE();
		else if (!strcmp(a, "--cert-file")) o->cert_file = TAKE();
		else if (!strcmp(a, "--ttl-ms")) { o->ttl_ms = num(cmd, a, TAKE(), 1, BIG); o->have_ttl = 1; }
		else if (!strcmp(a, "--size")) { o->size = num(cmd, a, TAKE(), 0, BIG); o->have_size = 1; }
		else if (!strcmp(a, "--now")) { o->now = num(cmd, a, TAKE(), -BIG, BIG); o->have_now = 1; }
		else if (!strcmp(a, "--wait-ms")) o->timeout_lock = num(cmd, a, TAKE(), 0, BIG);
		else if (!strcmp(a, "--recursive") || !strcmp(a, "-r")) { o->recursive = 1; o->have_recursive = 1; }
		else if (a[0] == '-' && a[1]) {
			const char *near = tsec__nearest(a, known_opts,
							 sizeof(known_opts) / sizeof(known_opts[0]));

			fprintf(stderr, "tsec %s: unknown option %s%s%s%s\nTry 'tsec %s --help'.\n",
				cmd, a, near ? "; did you mean " : "", near ? near : "",
				near ? "?" : "", cmd);
			exit(EXIT_ERROR);
		} else if (o->nargs < CLI_ARGS_MAX) o->args[o->nargs++] = argv[i];
		else die_usage(cmd, "too many arguments");
		if (inline_value && !took) {
			fprintf(stderr, "tsec %s: %s takes no value\n", cmd, a);
			exit(EXIT_ERROR);
		}
#undef TAKE
	}
	if (!o->endpoint)
		client_config(cmd, o);
	if (!o->endpoint)
		o->endpoint = TSEC_DEFAULT_ENDPOINT;
	if (o->neps > 1 && o->nskeys > 1 && o->nskeys != o->neps)
		die_usage(cmd, "give one --server-key for every --endpoint, or one for all");
}

/* ---- the commands: one table for dispatch, arity, --help and help ---- */

enum { HELP_CONN = 1, HELP_REQ = 2 };

static int run_sign(struct opts *o)
{
	return cmd_sign(o, o->key_prefix);
}

static const struct command {
	const char *name;
	int (*run)(struct opts *o);          /* NULL: keygen, which reads its own argv */
	int max_args;                        /* positional arguments, at most */
	const char *summary;                 /* for `tsec --help` (may span lines) */
	const char *usage;                   /* the usage line(s), "tsec " omitted */
	const char *help;                    /* what it does, after the usage */
	unsigned more;                       /* HELP_*: the option lists that follow */
} commands[] = {
	{ "check", cmd_check, 0, "ask the broker: allow or deny, with the deciding rules",
	  "check --action A --resource KEY [context] [connection]",
	  "Asks Check: allow (exit 0) or deny (exit 1), with the deciding rules.\n",
	  HELP_REQ | HELP_CONN },
	{ "eval", cmd_eval, 0, "the full diagnostic report of one request",
	  "eval --action A --resource KEY [context] [connection]",
	  "Asks Evaluate: the attributes derived from the key, every rule that\n"
	  "matched, why the others did not, and the decision.\n",
	  HELP_REQ | HELP_CONN },
	{ "lint", cmd_lint, CLI_ARGS_MAX, "every error of a policy, with its place (exit 0 or 2)",
	  "lint [--strict] [--schema FILE] [--module SO] [--json] POLICY|FOLDER|-...",
	  "Prints every error (every error of every rule) as FILE:LINE:COL: with its\n"
	  "JSON pointer, then warnings: rules that can never allow or never match\n"
	  "(a pattern too shallow for the files certmagic keeps, a top one edit from\n"
	  "certificates/, acme/, ocsp/, locks/ or names/), principals no caller has\n"
	  "(no KIND: prefix), conditions that never apply, a policy past its\n"
	  "\"expires\".  Several files, folders (each *.json in it holding \"rules\"\n"
	  "or \"floor\") and - (stdin) at once.  Exit 0 if every policy is good, 2\n"
	  "if one is not.\n\n"
	  "--schema FILE alone: the names it does not know are warnings.\n"
	  "--strict also checks the names the policy uses against a schema (--schema\n"
	  "FILE, else schema.json beside the policy): {\"principals\": [...],\n"
	  "\"roles\": [...], \"issuers\": [...], \"domains\": [...]}, each entry a name\n"
	  "or an fnmatch pattern, or a tsec-broker configuration (its clients'\n"
	  "principals and roles).  A name it does not know (\"lego\" for \"svc:lego\",\n"
	  "\"ROLE:web\") is an error with the nearest known name, and so is a warning.\n",
	  0 },
	{ "can", cmd_can, 1, "PRINCIPAL --policy FILE: what a principal may do (no broker)",
	  "can [--role R]... [--module SO] [--json] --policy FILE PRINCIPAL",
	  "What PRINCIPAL (with each --role R) may do under the policy FILE, once\n"
	  "the module has compiled it: each allow that names it (by id, by one of\n"
	  "its roles, or \"*\"), with its actions, resource patterns, domains and\n"
	  "conditions; then the floors and the denies that name it, which win\n"
	  "over those allows.  Exit 0 when an allow names it, 1 when none does, 2\n"
	  "when the policy cannot be read or compiled.\n",
	  0 },
	{ "test", cmd_test, CLI_ARGS_MAX, "run a policy's test cases (no broker)",
	  "test [--coverage] [--min-coverage PCT] [-v] [--run PATTERN] [--json] [--module SO]\n"
	  "     [--policy FILE]\n"
	  "     FILE|DIR...",
	  "Runs every case of each FILE (or every *.test.json in DIR):\n"
	  "  {\"policy\": \"policy.json\", \"cases\": [{\"name\": ..., \"principal\": ...,\n"
	  "   \"roles\": [...], \"action\": ..., \"resource\": ..., \"context\": {...},\n"
	  "   \"want\": \"allow\"|\"deny\", \"rule\": \"optional deciding rule\",\n"
	  "   \"status\": \"allowed|denied|floor|default|invalid\" (optional),\n"
	  "   \"field\": \"the invalid request's field\" (with \"invalid\")}]}\n"
	  "The policy is named relative to the file (--policy overrides it).  Each\n"
	  "case is asked by Check and by Evaluate, which must agree, and all of a\n"
	  "file's cases again as one batch.  An invalid request (a misspelt action)\n"
	  "is an error unless the case wants \"status\": \"invalid\".  Each failure is\n"
	  "shown with what was wanted, what was got and why not; the last line is\n"
	  "\"N passed, M failed\" (--json: one object, every case and the coverage).  -v lists the cases that\n"
	  "pass; --run runs the cases whose name matches PATTERN (fnmatch).  Exit 0\n"
	  "when all pass, 1 when one fails, 2 when a case or file cannot run.\n"
	  "--coverage names the rules no case was decided by.\n",
	  0 },
	{ "fmt", cmd_fmt, CLI_ARGS_MAX, "a policy in canonical form (-w rewrites, --check for CI)",
	  "fmt [-w [--force]|--check] POLICY...",
	  "Prints each POLICY in canonical form: the top-level members in the order\n"
	  "version, description, revision, fleet, expires, floor, rules; each rule\n"
	  "on lines of its own, its members in the order id, effect, principal,\n"
	  "action, resource, domain, when, description, filled to 100 columns.\n"
	  "-w rewrites the files that differ (a new\n"
	  "file renamed over the old); --check prints the names of those not in\n"
	  "canonical form and exits 1 if there is one.  Malformed JSON or a\n"
	  "duplicate member: exit 2.  A signature covers the bytes: -w does not\n"
	  "rewrite a file with a signature beside it (FILE.sig) unless --force,\n"
	  "and then says the signature no longer matches: sign after fmt.\n",
	  0 },
	{ "inspect", cmd_inspect, 1, "what a policy or bundle holds: rules, revision, signature, SHA-256",
	  "inspect [--key PREFIX.sign.pub] [--json] POLICY|BUNDLE",
	  "What a policy file (or a fleet bundle {\"policy\", \"signature\"}) holds:\n"
	  "its SHA-256, version, revision, fleet, expiry, its floors and rules by\n"
	  "effect, the principals, roles, actions and issuers it names, and its\n"
	  "signature (POLICY.sig), checked against --key when given.\n",
	  0 },
	{ "verify", cmd_verify, 1, "--key PREFIX.sign.pub POLICY|BUNDLE: check a signature",
	  "verify --key PREFIX.sign.pub POLICY|BUNDLE",
	  "Checks POLICY against POLICY.sig (or a fleet bundle's own signature)\n"
	  "with the public key, as tsec-broker does: exit 0 when it verifies, 1\n"
	  "when it does not (or there is none), 2 when a file cannot be read.\n",
	  0 },
	{ "replay", cmd_replay, 1, "LOG --policy NEW: the logged decisions NEW would change",
	  "replay [-v] [--module SO] --policy NEW LOG",
	  "Decides every request of a decision log (tsec-broker's decision_log)\n"
	  "again under the policy NEW, as of the time it was logged, and prints each\n"
	  "decision that changes: the request, what was decided, what NEW decides\n"
	  "and by which rules.  A request that carried a certificate is decided with\n"
	  "a certificate made again from the attributes the log keeps (names,\n"
	  "notAfter, key type and size).  The last line counts the decisions\n"
	  "replayed, changed and not replayed (-v says why each was not).  Exit 0\n"
	  "when none changes, 1 when one does, 2 when a file cannot be read.\n",
	  0 },
	{ "diff", cmd_diff, 2, "OLD NEW: every request two policies decide differently",
	  "diff [-v] [--log LOG] [--module SO] OLD NEW",
	  "Compares OLD and NEW exactly: every class of keys their resource and\n"
	  "domain patterns tell apart (found by walking one automaton of them all,\n"
	  "shortest keys first), with every action, the principals and roles the\n"
	  "rules name and one other, ttl and size at each bound, recursive or not,\n"
	  "and moves between classes, decided by the module under both.  Prints\n"
	  "each request decided differently (its class's shortest; the first 50,\n"
	  "-v every one) with both decisions and their rules; where a rule has a\n"
	  "cert condition, with a certificate of each class it tells apart.  With\n"
	  "--log, every logged request too.  Exit 0 when none differs, 1 when one\n"
	  "does.\n",
	  0 },
	{ "keygen", NULL, 0, "--curve PREFIX (CURVE key pair) or --sign PREFIX (policy signing)",
	  "keygen --curve PREFIX | --sign PREFIX [--force]",
	  "Never overwrites a key; --force first keeps the old files as\n"
	  "FILE.old-TIME.\n\n"
	  "--curve writes PREFIX.pub and PREFIX.key (Z85, for ZeroMQ CURVE);\n"
	  "--sign writes PREFIX.sign.pub and PREFIX.sign.key (hex, Ed25519).\n",
	  0 },
	{ "sign", run_sign, 1, "--key PREFIX.sign.key POLICY: write POLICY.sig",
	  "sign [--module SO] --key PREFIX.sign.key POLICY",
	  "Writes POLICY.sig, the detached Ed25519 signature tsec-broker checks\n"
	  "when its configuration names policy_public_key.\n",
	  0 },
	{ "store", cmd_store, 3, "put KEY FILE|-, get KEY, ls [PREFIX] [-r], rm KEY [-r], mv SRC DST",
	  "store put KEY FILE|- | get KEY | ls [PREFIX] [-r] | rm KEY [-r] | mv SRC DST",
	  "Stores, reads, lists, deletes and moves values through the broker's\n"
	  "gated storage (each call checked by the policy first).\n",
	  HELP_CONN },
	{ "lock", cmd_lock, 3, "acquire NAME --ttl-ms N [--wait-ms N], renew NAME TOKEN --ttl-ms N,\n"
	  "              release NAME TOKEN",
	  "lock acquire NAME --ttl-ms N [--wait-ms N]\n"
	  "       tsec lock renew NAME TOKEN --ttl-ms N\n"
	  "       tsec lock release NAME TOKEN",
	  "Takes, renews and releases a lock; acquire prints its token and fence.\n",
	  HELP_CONN },
	{ "cert", cmd_cert, 6, "save|publish ISSUER DOMAIN CRT KEY META, load|fetch ISSUER DOMAIN\n"
	  "              [DIR], exists, archive, recover, sweep: certificates, local or remote",
	  "cert save ISSUER DOMAIN CRT KEY META [connection]\n"
	  "       tsec cert load ISSUER DOMAIN [DIR] [connection]\n"
	  "       tsec cert publish ISSUER DOMAIN CRT KEY META [connection]\n"
	  "       tsec cert fetch ISSUER DOMAIN [DIR] [connection]\n"
	  "       tsec cert exists ISSUER DOMAIN [connection]\n"
	  "       tsec cert archive ISSUER DOMAIN NAME [connection]\n"
	  "       tsec cert recover ISSUER DOMAIN [connection]\n"
	  "       tsec cert sweep GRACE_MS [connection]",
	  "save stores a certificate, its private key and its metadata (files) as\n"
	  "one all-or-nothing group, in certmagic's layout\n"
	  "(certificates/ISSUER/DOMAIN/DOMAIN.crt, .key, .json).  load reads the\n"
	  "three together and prints them, or writes DOMAIN.crt, DOMAIN.key (mode\n"
	  "0600) and DOMAIN.json into DIR.\n"
	  "\n"
	  "publish, fetch, exists, archive and sweep use the broker's remote\n"
	  "certificate store (\"remote\" in its configuration): the three files as\n"
	  "immutable blobs in a folder or an S3 bucket, the same three keys holding\n"
	  "references to them.  publish prints \"published\" or \"unchanged\" (the\n"
	  "same content was current); fetch verifies every blob against its address\n"
	  "and writes like load; exists exits 0 when the certificate is there, 1 when\n"
	  "not; archive moves the key's reference to\n"
	  "certificates/ISSUER/DOMAIN/archive/NAME.key (refused if taken); sweep\n"
	  "(admin) removes blobs unreferenced for GRACE_MS.  recover (admin) accepts\n"
	  "a coordinator restored from a backup for one certificate: brokers refuse\n"
	  "its older generation record (fetch and publish exit 4, \"rollback\")\n"
	  "until then; it prints the record's sequence before and after, and the\n"
	  "restored certificate is served until the next publish.\n",
	  HELP_CONN },
	{ "stats", cmd_stats, 0, "the broker's counters",
	  "stats [--prometheus] [connection]",
	  "The broker's counters and per-method latency histograms; --prometheus\n"
	  "prints them in Prometheus's text format (as tsec-broker's\n"
	  "\"metrics_listen\" serves them at /metrics).\n",
	  HELP_CONN },
	{ "health", cmd_health, 0, "whether the broker serves, its module and policy",
	  "health [connection]",
	  "Whether the broker serves (\"ok\" or \"degraded\", with reasons), its\n"
	  "module, its policy (SHA-256, revision) and its storage and cache.  Exit\n"
	  "0 when \"ok\", 1 when it serves degraded.\n",
	  HELP_CONN },
	{ "reload", cmd_reload, 0, "reread the policy (admin callers)",
	  "reload [connection]",
	  "Makes the broker reread its policy file (admin callers only); a policy\n"
	  "that does not compile, or is not signed when it must be, is refused and\n"
	  "the running one keeps serving.\n",
	  HELP_CONN },
	{ "policy", cmd_policy, 2, "publish POLICY: make a signed policy the fleet's (admin; shared storage)",
	  "policy publish POLICY [connection]",
	  "Sends POLICY and POLICY.sig (tsec sign) to a broker on shared storage\n"
	  "(etcd, redis); it checks them as a reload would and stores them for the\n"
	  "fleet; every broker loads them within a second, each checking the\n"
	  "signature with its own key.  A revision not above the running one is\n"
	  "refused (no rollback).\n",
	  HELP_CONN },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/*
 * The commands whose output is text only: --json is refused there rather
 * than ignored, so that a script never parses text it took for JSON.
 */
static bool honours_json(const char *cmd)
{
	static const char *const text_only[] = { "fmt", "verify", "replay", "diff", "keygen",
						 "sign" };

	for (size_t i = 0; i < sizeof(text_only) / sizeof(text_only[0]); i++)
		if (!strcmp(cmd, text_only[i]))
			return false;
	return true;
}

static int no_json(const char *cmd)
{
	fprintf(stderr, "tsec %s: --json is not an output of %s (its output is text; its exit "
		"status is in tsec(1))\n", cmd, cmd);
	return EXIT_ERROR;
}

static const struct command *command_of(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tsec [global options] COMMAND [options]\n\nCommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nGlobal options (the connection, --json) may come before the command.\n"
		"Exit status: 0 ok or allow; 1 deny (or a test failed, a file not\n"
		"formatted, a signature that does not verify); 2 usage or bad input;\n"
		"3 no broker answered, or it refused this client; 4 the broker answered\n"
		"with an error, or the output could not be written.  'tsec help COMMAND'\n"
		"for more.\n");
}

/* 0, or EXIT_ERROR for a command that does not exist. */
static int command_help(const char *name)
{
	const struct command *c = command_of(name);

	if (!c) {
		fprintf(stderr, "tsec: no command '%s'\n", name);
		usage(stderr);
		return EXIT_ERROR;
	}
	printf("usage: tsec %s\n\n%s", c->usage, c->help);
	if (c->more & HELP_REQ)
		printf("\n%s", req_help);
	if (c->more & HELP_CONN)
		printf("\n%s", conn_help);
	return 0;
}

/* Options that take a value, for finding the command after global ones. */
static bool takes_value(const char *a)
{
	static const char *const v[] = { "--endpoint", "--server-key", "--key", "--timeout-ms",
					 "--module", "--policy", "--principal", "--role",
					 "--input", "--action", "--resource", "--dest",
					 "--cert-file", "--ttl-ms", "--size", "--now", "--wait-ms",
					 "--run", "--schema", "--log", "--min-coverage" };

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (!strcmp(a, v[i]))
			return true;
	return false;
}

/* Whether text names flag as a word of its own ("--key", not within
 * "--key-file" or "--server-key"). */
static bool names_flag(const char *text, const char *flag, size_t n)
{
	for (const char *p = text; (p = strstr(p, flag)); p += n) {
		char before = p == text ? ' ' : p[-1], after = p[n];

		if (!isalnum((unsigned char)before) && before != '-' &&
		    !isalnum((unsigned char)after) && after != '-')
			return true;
	}
	return false;
}

/*
 * Every option given must be one the command's help names (issue 51,
 * item 12: `health --policy x`, `lint --role x` were taken and ignored):
 * read from the one table, so help and what is accepted cannot drift.
 */
static void options_apply(const struct command *c, int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		char flag[64];

		if (a[0] != '-' || n < 2 || n >= sizeof(flag) || !strcmp(a, "-h") ||
		    !strcmp(a, "--help") || !strcmp(a, "--json"))
			continue;
		memcpy(flag, a, n);
		flag[n] = '\0';
		if (names_flag(c->usage, flag, n) || names_flag(c->help, flag, n) ||
		    ((c->more & HELP_REQ) && names_flag(req_help, flag, n)) ||
		    ((c->more & HELP_CONN) && names_flag(conn_help, flag, n))) {
			if (!eq && takes_value(flag))
				i++;
			continue;
		}
		fprintf(stderr, "tsec %s: %s does not apply to %s\nTry 'tsec %s --help'.\n",
			c->name, flag, c->name, c->name);
		exit(EXIT_ERROR);
	}
}

const char *cli_stdin_spool;
static char spool[4200];

const char *cli_shown(const char *path)
{
	return path && cli_stdin_spool && !strcmp(path, cli_stdin_spool) ? "-" : path;
}

static void spool_remove(void)
{
	if (spool[0])
		unlink(spool);
}

/* stdin, kept in a temporary file (0600) for a command that reads "-" as
 * a file, removed at exit: read once, however many times it is opened. */
static const char *stdin_file(const char *cmd)
{
	const char *tmp = getenv("TMPDIR");
	char *text = NULL;
	struct tsec_error err;
	size_t len;
	int fd;

	if (cli_stdin_spool)
		die_usage(cmd, "stdin (-) can stand for one file only");
	if (tsec_read_file("/dev/stdin", 64u << 20, &text, &len, &err)) {
		fprintf(stderr, "tsec %s: stdin: %s\n", cmd, err.msg);
		exit(EXIT_ERROR);
	}
	snprintf(spool, sizeof(spool), "%s/tsec-stdin-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if ((fd = mkstemp(spool)) < 0 || write(fd, text, len) != (ssize_t)len) {
		fprintf(stderr, "tsec %s: cannot keep stdin in %s: %s\n", cmd, spool, strerror(errno));
		if (fd >= 0)
			unlink(spool);
		exit(EXIT_ERROR);
	}
	close(fd);
	free(text);
	atexit(spool_remove);
	return cli_stdin_spool = spool;
}

/*
 * "-" for a file read as stdin by every command that reads files (issue
 * 51, item 11: only lint and fmt took it): --policy, --input, --log, and
 * the file arguments of test, inspect, verify, diff, replay and can.
 * lint and fmt read stdin themselves.
 */
static void stdin_args(const char *cmd, struct opts *o)
{
	static const char *const files[] = { "test", "inspect", "verify", "diff", "replay" };
	const char **opt[] = { &o->policy, &o->input, &o->log };

	for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
		if (*opt[i] && !strcmp(*opt[i], "-"))
			*opt[i] = stdin_file(cmd);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (!strcmp(cmd, files[i]))
			for (int a = 0; a < o->nargs; a++)
				if (!strcmp(o->args[a], "-"))
					o->args[a] = (char *)stdin_file(cmd);
}

/*
 * A command whose output did not reach its file (a full disk, a closed
 * pipe, /dev/full) has failed, whatever it decided: exit 4, said once.
 */
static int output_written(const char *cmd, int rc)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	fprintf(stderr, "tsec %s: cannot write the output: %s\n", cmd, strerror(errno));
	return EXIT_FAILED;
}

/* `tsec --endpoint EP health`: the command moves to the front. */
static void command_first(int argc, char **argv)
{
	int at = 1;

	if (argv[1][0] != '-' || !strcmp(argv[1], "--version") || !strcmp(argv[1], "--commands") ||
	    !strcmp(argv[1], "--options") || !strcmp(argv[1], "--actions"))
		return;
	while (at < argc && argv[at][0] == '-')
		at += takes_value(argv[at]) && !strchr(argv[at], '=') ? 2 : 1;
	if (at < argc) {
		char *name = argv[at];

		memmove(&argv[2], &argv[1], (size_t)(at - 1) * sizeof(*argv));
		argv[1] = name;
	}
}

/* --version, --commands, --options, --actions (each from its one list,
 * for completion and the docs tests): 1 when cmd was one, said. */
static int about(const char *cmd)
{
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
		printf("tsec %s (%s build)\n", TSEC_VERSION, tsec_build_name(TSEC_BUILD_THIS));
	} else if (!strcmp(cmd, "--commands")) {
		for (size_t i = 0; i < NCOMMANDS; i++)
			printf("%s\n", commands[i].name);
	} else if (!strcmp(cmd, "--options")) {
		for (size_t i = 0; i < sizeof(known_opts) / sizeof(known_opts[0]); i++)
			printf("%s\n", known_opts[i]);
	} else if (!strcmp(cmd, "--actions")) {
		for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++)
			printf("%s\n", tsec_action_name(a));
	} else {
		return 0;
	}
	return 1;
}

/* A name that is no command: said, with the nearest; EXIT_ERROR. */
static int unknown_command(const char *cmd)
{
	const char *names[NCOMMANDS + 1], *near;

	if (cmd[0] == '-') {
		fprintf(stderr, "tsec: no command after the options (or an unknown option "
			"'%s'); 'tsec --help' lists them\n", cmd);
		return EXIT_ERROR;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		names[i] = commands[i].name;
	names[NCOMMANDS] = "help";
	if ((near = tsec__nearest(cmd, names, NCOMMANDS + 1))) {
		fprintf(stderr, "tsec: unknown command '%s'; did you mean '%s'?\n", cmd, near);
		return EXIT_ERROR;
	}
	fprintf(stderr, "tsec: unknown command '%s'\n", cmd);
	usage(stderr);
	return EXIT_ERROR;
}

int main(int argc, char **argv)
{
	const struct command *c;
	struct opts o;
	const char *cmd;

	tsec_cli_argv0 = argv[0];
	memset(&o, 0, sizeof(o));
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_ERROR : 0;
	}
	if (sodium_init() < 0)
		return EXIT_ERROR;
	command_first(argc, argv);
	cmd = argv[1];
	if (about(cmd))
		return 0;
	if (!strcmp(cmd, "help")) {
		if (argc > 2)
			return command_help(argv[2]);
		usage(stdout);
		return 0;
	}
	if (!(c = command_of(cmd)))
		return unknown_command(cmd);
	if (!c->run) {
		if (argc == 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")))
			return command_help(cmd);
		for (int i = 2; i < argc; i++)
			if (!strcmp(argv[i], "--json"))
				return no_json(cmd);
		return cmd_keygen(argc - 2, argv + 2);
	}
	parse(cmd, argc - 2, argv + 2, &o);
	if (o.help)
		return command_help(cmd);
	options_apply(c, argc - 2, argv + 2);
	stdin_args(cmd, &o);
	if (o.json && !honours_json(cmd))
		return no_json(cmd);
	if (o.nargs > c->max_args) {
		fprintf(stderr, "tsec %s: unexpected argument '%s'\nTry 'tsec %s --help'.\n", cmd,
			o.args[c->max_args], cmd);
		return EXIT_ERROR;
	}
	return output_written(cmd, c->run(&o));
}
