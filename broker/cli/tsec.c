/*
 * tsec: the command line of tinysecurity.
 *
 * Exit status: 0 allow or success, 1 deny, 2 error.  Human-readable output
 * by default, --json for scripts.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tinysecurity/bus.h"
#include "tinysecurity/client.h"
#include "tinysecurity/store.h"
#include "common/sign.h"
#include "common/prom.h"
#include "common/suggest.h"
#include "common/wire.h"
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
	"  --endpoint EP        tcp://host:port or ipc://path (default ipc://var/run/tsec.sock);\n"
	"                       again for more brokers: a call fails over to the next\n"
	"  --server-key Z85     the broker's CURVE public key (tcp); again for each endpoint\n"
	"  --key PREFIX         this client's CURVE key pair PREFIX.pub / PREFIX.key (tcp)\n"
	"  --timeout-ms N       per call (default 5000)\n"
	"  --json               print JSON\n";

static const char *const req_help =
	"Request:\n"
	"  --action A           storage.store|load|exists|delete|list|stat|move, lock.acquire|renew|release\n"
	"  --resource KEY       the key or lock resource\n"
	"  --ttl-ms N --size N --recursive --dest KEY --cert-file PEM --now UNIX_SECONDS\n"
	"Without a broker (decided here, through the module, as a broker would):\n"
	"  --policy FILE        the policy to decide with\n"
	"  --principal P        who asks; --role R, again for more roles\n"
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

/* The request's action, refused (exit 2) unless it is one, with a
 * suggestion for a near miss. */
static void check_action(const char *cmd, const char *a)
{
	const char *names[TSEC_ACTION__COUNT], *near;

	for (unsigned i = 0; i < TSEC_ACTION__COUNT; i++) {
		names[i] = tsec_action_name(i);
		if (!strcmp(a, names[i]))
			return;
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
			fprintf(stderr, "tsec %s: %s: line %d: %s\n", cmd, paths[i], je.line,
				cfg ? "must be a JSON object" : je.text);
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
#define TAKE() (took = 1, inline_value ? v : (i++, v))
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
		else if (!strcmp(a, "--prometheus")) o->prometheus = 1;
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
			fprintf(stderr, "tsec %s: unknown option %s\nTry 'tsec %s --help'.\n", cmd, a, cmd);
			exit(EXIT_ERROR);
		} else if (o->nargs < 8) o->args[o->nargs++] = argv[i];
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
		o->endpoint = "ipc://var/run/tsec.sock";
	if (o->neps > 1 && o->nskeys > 1 && o->nskeys != o->neps)
		die_usage(cmd, "give one --server-key for every --endpoint, or one for all");
}

/* Reads "PREFIX.pub"/"PREFIX.key" (Z85) into pub/sec (41 bytes each). */
static int read_z85(const char *path, char out[41])
{
	FILE *f = fopen(path, "r");
	int ok = f && fscanf(f, "%40s", out) == 1 && strlen(out) == 40;
	if (f)
		fclose(f);
	return ok ? 0 : -1;
}

/*
 * An ipc endpoint, made absolute (a relative one depends on where tsec
 * runs), and checked before ZeroMQ hides the reason behind a timeout:
 * "no broker listening at ..." when there is no socket or nobody answers
 * on it.  Exits 2 then.
 */
static const char *ipc_endpoint(const char *cmd, const char *ep)
{
	static char abs_ep[4200];
	char cwd[4096];
	struct sockaddr_un sa;
	struct stat sb;
	const char *path;
	int fd, rc;

	if (strncmp(ep, "ipc://", 6))
		return ep;
	if (ep[6] != '/' && getcwd(cwd, sizeof(cwd)))
		snprintf(abs_ep, sizeof(abs_ep), "ipc://%s/%s", cwd, ep + 6);
	else
		snprintf(abs_ep, sizeof(abs_ep), "%s", ep);
	path = abs_ep + 6;
	if (lstat(path, &sb) < 0) {
		fprintf(stderr, "tsec %s: no broker listening at %s (no socket there)\n", cmd, abs_ep);
		exit(EXIT_ERROR);
	}
	if (!S_ISSOCK(sb.st_mode)) {
		fprintf(stderr, "tsec %s: %s is not a socket\n", cmd, path);
		exit(EXIT_ERROR);
	}
	if (strlen(path) < sizeof(sa.sun_path) && (fd = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0) {
		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		memcpy(sa.sun_path, path, strlen(path));
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (rc < 0 && errno == ECONNREFUSED) {
			fprintf(stderr, "tsec %s: no broker listening at %s (a stale socket)\n", cmd,
				abs_ep);
			exit(EXIT_ERROR);
		}
	}
	return abs_ep;
}

static struct tsec_client *connect_or_die(const char *cmd, struct opts *o)
{
	struct tsec_client_opts co = { .timeout_ms = o->timeout_ms };
	static struct tsec_client_endpoint eps[CLI_ENDPOINTS_MAX];
	static char pub[41], sec[41], srv[41], srvs[CLI_ENDPOINTS_MAX][41];
	struct tsec_client *c;
	struct tsec_error err;

	if (o->neps > 1) {
		/* Several brokers: no one of them must answer now. */
		for (int i = 0; i < o->neps; i++) {
			const char *k = o->nskeys == o->neps ? o->skeys[i] : o->server_key;

			eps[i].endpoint = o->eps[i];
			if (k) {
				if (strlen(k) == 40)
					snprintf(srvs[i], sizeof(srvs[i]), "%s", k);
				else if (read_z85(k, srvs[i]))
					die_usage(cmd, "--server-key must be 40 characters of Z85 or "
						  "a file holding them");
				eps[i].server_public_key = srvs[i];
			}
		}
		co.endpoints = eps;
		co.nendpoints = (size_t)o->neps;
	} else {
		co.endpoint = ipc_endpoint(cmd, o->endpoint);
	}
	if (o->server_key && o->neps <= 1) {
		if (strlen(o->server_key) == 40)
			snprintf(srv, sizeof(srv), "%s", o->server_key);
		else if (read_z85(o->server_key, srv))
			die_usage(cmd, "--server-key must be 40 characters of Z85 or a file holding them");
		co.server_public_key = srv;
	}
	if (o->key_prefix) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.pub", o->key_prefix);
		if (read_z85(path, pub))
			die_usage(cmd, "cannot read the client's public key (PREFIX.pub)");
		snprintf(path, sizeof(path), "%s.key", o->key_prefix);
		if (read_z85(path, sec))
			die_usage(cmd, "cannot read the client's secret key (PREFIX.key)");
		co.public_key = pub;
		co.secret_key = sec;
	}
	if (tsec_client_open(&c, &co, &err)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		exit(EXIT_ERROR);
	}
	sodium_memzero(sec, sizeof(sec));
	return c;
}

/* Calls and prints; returns the exit status. */
static int call_print(const char *cmd, struct opts *o, const char *method,
		      json_t *params, void (*human)(json_t *result))
{
	struct tsec_client *c = connect_or_die(cmd, o);
	struct tsec_error err;
	char *p = params ? json_dumps(params, JSON_COMPACT) : NULL, *res = NULL;
	int rc = tsec_client_call(c, method, p, &res, &err);

	free(p);
	tsec_client_close(&c);
	if (rc) {
		if (o->json) {
			json_t *e = tsec__error_json(rc, err.where, err.msg);
			json_dumpf(e, stdout, JSON_COMPACT);
			putchar('\n');
			json_decref(e);
		} else {
			fprintf(stderr, "tsec %s: %s (%s)\n", cmd, err.msg, tsec_strerror(rc));
		}
		return rc == TSEC_EDENIED ? EXIT_DENY : EXIT_ERROR;
	}
	if (o->json || !human) {
		puts(res);
	} else {
		json_t *r = json_loads(res, 0, NULL);
		human(r);
		json_decref(r);
	}
	free(res);
	return EXIT_ALLOW;
}

static json_t *request_json(const char *cmd, struct opts *o)
{
	json_t *r = json_object(), *c = json_object();

	if (!o->action || !o->resource)
		die_usage(cmd, "need --action and --resource");
	/* A request the policy would call invalid is a usage error here. */
	check_action(cmd, o->action);
	if (!strcmp(o->action, "storage.store") && !o->have_size)
		die_usage(cmd, "storage.store needs --size (the value's bytes)");
	if ((!strcmp(o->action, "lock.acquire") || !strcmp(o->action, "lock.renew")) && !o->have_ttl)
		die_usage(cmd, "lock.acquire and lock.renew need --ttl-ms");
	if (!strcmp(o->action, "storage.move") && !o->dest)
		die_usage(cmd, "storage.move needs --dest");
	json_object_set_new(r, "action", json_string(o->action));
	json_object_set_new(r, "resource", json_string(o->resource));
	if (o->have_ttl)
		json_object_set_new(c, "ttl_ms", json_integer(o->ttl_ms));
	if (o->have_size)
		json_object_set_new(c, "size", json_integer(o->size));
	if (o->have_recursive)
		json_object_set_new(c, "recursive", json_true());
	if (o->dest)
		json_object_set_new(c, "dest", json_string(o->dest));
	if (o->have_now)
		json_object_set_new(c, "now", json_integer(o->now));
	if (o->cert_file) {
		struct tsec_error err;
		char *pem;
		size_t len;
		if (tsec_read_file(o->cert_file, 1 << 20, &pem, &len, &err)) {
			fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
			exit(EXIT_ERROR);
		}
		json_object_set_new(c, "cert_pem", json_stringn(pem, len));
		free(pem);
	}
	if (json_object_size(c))
		json_object_set_new(r, "context", c);
	else
		json_decref(c);
	return r;
}

int cli_print_decision(json_t *d, int json)
{
	int allow = json_is_true(json_object_get(d, "allow"));
	json_t *rules = json_object_get(d, "rules"), *v;
	size_t i;

	if (json) {
		json_dumpf(d, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		printf("%s: %s", allow ? "ALLOW" : "DENY",
		       json_string_value(json_object_get(d, "reason")));
		json_array_foreach(rules, i, v)
			printf("%s%s", i ? ", " : " (", json_string_value(v));
		if (json_array_size(rules))
			putchar(')');
		if (json_object_get(d, "detail"))
			printf(" -- %s", json_string_value(json_object_get(d, "detail")));
		putchar('\n');
	}
	return allow ? EXIT_ALLOW : EXIT_DENY;
}

static int cmd_check(struct opts *o)
{
	json_t *params, *r;
	struct tsec_client *c;
	struct tsec_error err;
	char *p, *res = NULL;
	int rc;

	if (o->policy || o->input)
		return cmd_decide_offline("check", o, o->input ? NULL : request_json("check", o));
	if (o->principal || o->nroles)
		die_usage("check", "--principal and --role need --policy (a broker takes the "
			  "principal from authentication)");
	params = json_pack("{s:[o]}", "requests", request_json("check", o));
	c = connect_or_die("check", o);
	p = json_dumps(params, JSON_COMPACT);
	rc = tsec_client_call(c, "check", p, &res, &err);
	free(p);
	json_decref(params);
	tsec_client_close(&c);
	if (rc) {
		fprintf(stderr, "tsec check: %s (%s)\n", err.msg, tsec_strerror(rc));
		return EXIT_ERROR;
	}
	r = json_loads(res, 0, NULL);
	free(res);
	rc = cli_print_decision(json_array_get(json_object_get(r, "decisions"), 0), o->json);
	json_decref(r);
	return rc;
}

void cli_human_report(json_t *r)
{
	json_t *a = json_object_get(r, "attributes"), *m = json_object_get(r, "matched");
	json_t *e = json_object_get(r, "errors"), *v, *who = json_object_get(r, "caller");
	json_t *na = json_object_get(r, "not_applied");
	const char *k;
	size_t i;

	if (who) {
		printf("caller:\n  %-8s %s\n", "principal",
		       json_string_value(json_object_get(who, "principal")));
		printf("  %-8s", "roles");
		json_array_foreach(json_object_get(who, "roles"), i, v)
			printf("%s%s", i ? ", " : " ", json_string_value(v));
		printf("%s\n", json_array_size(json_object_get(who, "roles")) ? "" : " (none)");
	}
	printf("attributes:\n");
	json_object_foreach(a, k, v)
		printf("  %-8s %s\n", k, json_string_value(v));
	printf("matching rules (%lld):\n", (long long)json_integer_value(json_object_get(r, "matched_total")));
	json_array_foreach(m, i, v)
		printf("  %-6s %s\n", json_string_value(json_object_get(v, "effect")),
		       json_string_value(json_object_get(v, "id")));
	if (json_object_get(r, "certificate"))
		printf("certificate:\n  %s\n", json_string_value(json_object_get(r, "certificate")));
	if (json_array_size(na)) {
		printf("matched but did not apply (%lld):\n",
		       (long long)json_integer_value(json_object_get(r, "not_applied_total")));
		json_array_foreach(na, i, v)
			printf("  %-6s %s%s: %s\n", json_string_value(json_object_get(v, "effect")),
			       json_string_value(json_object_get(v, "id")),
			       json_object_get(v, "at") ? " (at the destination)" : "",
			       json_string_value(json_object_get(v, "why")));
	}
	if (json_array_size(e)) {
		printf("errors:\n");
		json_array_foreach(e, i, v)
			printf("  rule %s: %s\n", json_string_value(json_object_get(v, "rule")),
			       json_string_value(json_object_get(v, "message")));
	}
	printf("decision: ");
	cli_print_decision(json_object_get(r, "decision"), 0);
}

static int cmd_eval(struct opts *o)
{
	json_t *params, *r;
	struct tsec_client *c;
	struct tsec_error err;
	char *p, *res = NULL;
	int rc;

	if (o->policy)
		return cmd_decide_offline("eval", o, request_json("eval", o));
	if (o->principal || o->nroles || o->input)
		die_usage("eval", "--principal, --role and --input need --policy");
	params = json_pack("{s:o}", "request", request_json("eval", o));
	c = connect_or_die("eval", o);
	p = json_dumps(params, JSON_COMPACT);
	rc = tsec_client_call(c, "evaluate", p, &res, &err);

	free(p);
	json_decref(params);
	tsec_client_close(&c);
	if (rc) {
		fprintf(stderr, "tsec eval: %s (%s)\n", err.msg, tsec_strerror(rc));
		return EXIT_ERROR;
	}
	r = json_loads(res, 0, NULL);
	free(res);
	if (o->json) {
		json_dumpf(r, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		cli_human_report(r);
	}
	rc = json_is_true(json_object_get(json_object_get(r, "decision"), "allow")) ? EXIT_ALLOW : EXIT_DENY;
	json_decref(r);
	return rc;
}

/* A value's bytes, exactly as stored, text or not. */
static void human_value(json_t *r)
{
	json_t *v = json_object_get(r, "value"), *b = json_object_get(r, "value_b64");

	if (v) {
		fwrite(json_string_value(v), 1, json_string_length(v), stdout);
	} else if (json_is_string(b)) {
		size_t cap = json_string_length(b), n = 0;
		unsigned char *raw = malloc(cap + 1);
		if (raw && !sodium_base642bin(raw, cap, json_string_value(b), cap, NULL, &n, NULL,
					      sodium_base64_VARIANT_ORIGINAL))
			fwrite(raw, 1, n, stdout);
		else
			fprintf(stderr, "tsec store get: the broker sent a value that is not base64\n");
		free(raw);
	}
}

static void human_keys(json_t *r)
{
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(r, "keys"), i, v)
		puts(json_string_value(v));
}

/* cert load: the PEM to stdout, or DIR/DOMAIN.{crt,key,json} (key 0600). */
static const char *cert_out_dir, *cert_out_domain;

static void human_cert(json_t *r)
{
	static const char *const part[3] = { "cert", "key", "meta" };
	static const char *const ext[3] = { "crt", "key", "json" };

	if (!cert_out_dir) {
		fputs(json_string_value(json_object_get(r, "cert")), stdout);
		return;
	}
	for (int i = 0; i < 3; i++) {
		char path[4200];
		const char *v = json_string_value(json_object_get(r, part[i]));
		int fd;
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s.%s", cert_out_dir, cert_out_domain, ext[i]);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			  i == 1 ? 0600 : 0644);
		if (fd < 0 || !(f = fdopen(fd, "w"))) {
			fprintf(stderr, "tsec cert load: cannot write %s\n", path);
			if (fd >= 0)
				close(fd);
			continue;
		}
		fputs(v ? v : "", f);
		fclose(f);
	}
}

static void human_ok(json_t *r)
{
	(void)r;
	puts("ok");
}

static void human_object(json_t *r)
{
	const char *k;
	json_t *v;
	json_object_foreach(r, k, v) {
		char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		printf("%-20s %s\n", k, t);
		free(t);
	}
}

static int cmd_store(struct opts *o)
{
	const char *sub = o->nargs ? o->args[0] : "";
	json_t *p = json_object();
	int rc;

	if (!strcmp(sub, "put") && o->nargs == 3) {
		struct tsec_error err;
		char *data;
		size_t len;
		const char *file = !strcmp(o->args[2], "-") ? "/dev/stdin" : o->args[2];
		if (tsec_read_file(file, TSEC_STORE_VALUE_MAX, &data, &len, &err)) {
			fprintf(stderr, "tsec store put: %s\n", err.msg);
			json_decref(p);
			return EXIT_ERROR;
		}
		/* Raw bytes travel as base64: text with a NUL byte or that is not
		 * UTF-8 would not survive JSON text. */
		json_t *s = memchr(data, 0, len) ? NULL : json_stringn(data, len);
		if (s) {
			json_object_set_new(p, "value", s);
		} else {
			size_t bl = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
			char *b = malloc(bl);
			sodium_bin2base64(b, bl, (unsigned char *)data, len, sodium_base64_VARIANT_ORIGINAL);
			json_object_set_new(p, "value_b64", json_string(b));
			free(b);
		}
		free(data);
		json_object_set_new(p, "key", json_string(o->args[1]));
		rc = call_print("store put", o, "store.put", p, human_ok);
	} else if (!strcmp(sub, "get") && o->nargs == 2) {
		json_object_set_new(p, "key", json_string(o->args[1]));
		rc = call_print("store get", o, "store.get", p, human_value);
	} else if (!strcmp(sub, "ls") && o->nargs <= 2) {
		json_object_set_new(p, "prefix", json_string(o->nargs == 2 ? o->args[1] : ""));
		json_object_set_new(p, "recursive", json_boolean(o->recursive));
		rc = call_print("store ls", o, "store.list", p, human_keys);
	} else if (!strcmp(sub, "rm") && o->nargs == 2) {
		json_object_set_new(p, "key", json_string(o->args[1]));
		json_object_set_new(p, "recursive", json_boolean(o->recursive));
		rc = call_print("store rm", o, "store.delete", p, human_ok);
	} else if (!strcmp(sub, "mv") && o->nargs == 3) {
		json_object_set_new(p, "src", json_string(o->args[1]));
		json_object_set_new(p, "dst", json_string(o->args[2]));
		rc = call_print("store mv", o, "store.move", p, human_ok);
	} else {
		json_decref(p);
		die_usage("store", "use put KEY FILE|-, get KEY, ls [PREFIX] [-r], rm KEY [-r], mv SRC DST");
		return EXIT_ERROR;
	}
	json_decref(p);
	return rc;
}

static int cmd_lock(struct opts *o)
{
	const char *sub = o->nargs ? o->args[0] : "";
	json_t *p = json_object();
	int rc;

	if (!strcmp(sub, "acquire") && o->nargs == 2 && o->have_ttl) {
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "ttl_ms", json_integer(o->ttl_ms));
		json_object_set_new(p, "timeout_ms", json_integer(o->timeout_lock));
		rc = call_print("lock acquire", o, "lock.acquire", p, human_object);
	} else if (!strcmp(sub, "renew") && o->nargs == 3 && o->have_ttl) {
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "token", json_string(o->args[2]));
		json_object_set_new(p, "ttl_ms", json_integer(o->ttl_ms));
		rc = call_print("lock renew", o, "lock.renew", p, human_object);
	} else if (!strcmp(sub, "release") && o->nargs == 3) {
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "token", json_string(o->args[2]));
		rc = call_print("lock release", o, "lock.release", p, human_ok);
	} else {
		json_decref(p);
		die_usage("lock", "use acquire NAME --ttl-ms N [--wait-ms N], renew NAME TOKEN --ttl-ms N, release NAME TOKEN");
		return EXIT_ERROR;
	}
	json_decref(p);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tsec COMMAND [options]\n"
		"\n"
		"Commands:\n"
		"  check       ask the broker: allow or deny, with the deciding rules\n"
		"  eval        the full diagnostic report of one request\n"
		"  lint POLICY every error of a policy, with its place (exit 0 or 2)\n"
		"  keygen      --curve PREFIX (CURVE key pair) or --sign PREFIX (policy signing)\n"
		"  sign        --key PREFIX.sign.key POLICY: write POLICY.sig\n"
		"  store       put KEY FILE|-, get KEY, ls [PREFIX] [-r], rm KEY [-r], mv SRC DST\n"
		"  lock        acquire NAME --ttl-ms N [--wait-ms N], renew NAME TOKEN --ttl-ms N,\n"
		"              release NAME TOKEN\n"
		"  stats       the broker's counters\n"
		"  health      whether the broker serves, its module and policy\n"
		"  reload      reread the policy (admin callers)\n"
		"  policy publish POLICY   make a signed policy the fleet's (admin; shared storage)\n"
		"  test FILE|DIR   run a policy's test cases (no broker)\n"
		"  cert save ISSUER DOMAIN CRT KEY META | cert load ISSUER DOMAIN [DIR]\n"
		"              a certificate, its key and metadata, as one group\n"
		"\n"
		"Exit status: 0 allow or success, 1 deny, 2 error.  'tsec COMMAND --help' for more.\n");
}

static void command_help(const char *cmd)
{
	if (!strcmp(cmd, "check") || !strcmp(cmd, "eval"))
		printf("usage: tsec %s --action A --resource KEY [context] [connection]\n\n%s\n%s",
		       cmd, req_help, conn_help);
	else if (!strcmp(cmd, "lint"))
		printf("usage: tsec lint [--module SO] [--json] POLICY\n\n"
		       "Prints every error with its JSON pointer; exit 0 if the policy is good, 2 if not.\n");
	else if (!strcmp(cmd, "keygen"))
		printf("usage: tsec keygen --curve PREFIX | --sign PREFIX [--force]\n\n"
		       "Never overwrites a key; --force first keeps the old files as\n"
		       "FILE.old-TIME.\n\n"
		       "--curve writes PREFIX.pub and PREFIX.key (Z85, for ZeroMQ CURVE);\n"
		       "--sign writes PREFIX.sign.pub and PREFIX.sign.key (hex, Ed25519).\n");
	else if (!strcmp(cmd, "sign"))
		printf("usage: tsec sign --key PREFIX.sign.key POLICY\n\n"
		       "Writes POLICY.sig, the detached Ed25519 signature tsec-broker checks\n"
		       "when its configuration names policy_public_key.\n");
	else if (!strcmp(cmd, "store"))
		printf("usage: tsec store put KEY FILE|- | get KEY | ls [PREFIX] [-r] | rm KEY [-r] | mv SRC DST\n\n%s",
		       conn_help);
	else if (!strcmp(cmd, "test"))
		printf("usage: tsec test [--coverage] [--policy FILE] FILE|DIR...\n\n"
		       "Runs every case of each FILE (or every *.test.json in DIR):\n"
		       "  {\"policy\": \"policy.json\", \"cases\": [{\"name\": ..., \"principal\": ...,\n"
		       "   \"roles\": [...], \"action\": ..., \"resource\": ..., \"context\": {...},\n"
		       "   \"want\": \"allow\"|\"deny\", \"rule\": \"optional deciding rule\"}]}\n"
		       "The policy is named relative to the file (--policy overrides it).  Each\n"
		       "failure is shown with what was wanted and what was got; the last line\n"
		       "is \"N passed, M failed\".  Exit 0 when all pass, 1 when one fails, 2 when\n"
		       "a file cannot run.  --coverage names the rules no case was decided by.\n");
	else if (!strcmp(cmd, "policy"))
		printf("usage: tsec policy publish POLICY [connection]\n\n"
		       "Sends POLICY and POLICY.sig (tsec sign) to a broker on shared storage\n"
		       "(etcd, redis); it checks them as a reload would and stores them for the\n"
		       "fleet; every broker loads them within a second, each checking the\n"
		       "signature with its own key.  A revision not above the running one is\n"
		       "refused (no rollback).\n\n%s", conn_help);
	else if (!strcmp(cmd, "lock"))
		printf("usage: tsec lock acquire NAME --ttl-ms N [--wait-ms N]\n"
		       "       tsec lock renew NAME TOKEN --ttl-ms N\n"
		       "       tsec lock release NAME TOKEN\n\n%s", conn_help);
	else if (!strcmp(cmd, "stats"))
		printf("usage: tsec stats [--prometheus] [connection]\n\n"
		       "The broker's counters and per-method latency histograms; --prometheus\n"
		       "prints them in Prometheus's text format (as tsec-broker's\n"
		       "\"metrics_listen\" serves them at /metrics).\n\n%s", conn_help);
	else
		printf("usage: tsec %s [connection]\n\n%s", cmd, conn_help);
}

int main(int argc, char **argv)
{
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
	cmd = argv[1];
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
		printf("tsec %s (%s build)\n", TSEC_VERSION, tsec_build_name(TSEC_BUILD_THIS));
		return 0;
	}
	if (!strcmp(cmd, "help")) {
		if (argc > 2) {
			command_help(argv[2]);
			return 0;
		}
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "keygen")) {
		if (argc == 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
			command_help(cmd);
			return 0;
		}
		return cmd_keygen(argc - 2, argv + 2);
	}
	/* sign takes --key as a file, not a CURVE prefix. */
	parse(cmd, argc - 2, argv + 2, &o);
	if (o.help) {
		command_help(cmd);
		return 0;
	}
	{
		/* Positional arguments each command takes, at most. */
		static const struct { const char *cmd; int max; } arity[] = {
			{ "check", 0 }, { "eval", 0 }, { "lint", 1 }, { "sign", 1 },
			{ "store", 3 }, { "lock", 3 }, { "stats", 0 }, { "health", 0 },
			{ "reload", 0 }, { "policy", 2 }, { "test", 8 }, { "cert", 6 },
		};
		for (size_t i = 0; i < sizeof(arity) / sizeof(arity[0]); i++)
			if (!strcmp(cmd, arity[i].cmd) && o.nargs > arity[i].max) {
				fprintf(stderr, "tsec %s: unexpected argument '%s'\nTry 'tsec %s --help'.\n",
					cmd, o.args[arity[i].max], cmd);
				return EXIT_ERROR;
			}
	}
	if (!strcmp(cmd, "check"))
		return cmd_check(&o);
	if (!strcmp(cmd, "eval"))
		return cmd_eval(&o);
	if (!strcmp(cmd, "lint"))
		return cmd_lint(&o);
	if (!strcmp(cmd, "test"))
		return cmd_test(&o);
	if (!strcmp(cmd, "sign"))
		return cmd_sign(&o, o.key_prefix);
	if (!strcmp(cmd, "store"))
		return cmd_store(&o);
	if (!strcmp(cmd, "lock"))
		return cmd_lock(&o);
	if (!strcmp(cmd, "stats") && o.prometheus) {
		struct tsec_client *c = connect_or_die("stats", &o);
		struct tsec_error err;
		char *res = NULL, *text;
		json_t *j;
		int rc = tsec_client_call(c, "stats", NULL, &res, &err);

		tsec_client_close(&c);
		if (rc) {
			fprintf(stderr, "tsec stats: %s (%s)\n", err.msg, tsec_strerror(rc));
			return EXIT_ERROR;
		}
		j = json_loads(res, 0, NULL);
		free(res);
		text = j ? tsec__prometheus(j) : NULL;
		json_decref(j);
		if (!text) {
			fprintf(stderr, "tsec stats: the broker's answer is not stats\n");
			return EXIT_ERROR;
		}
		fputs(text, stdout);
		free(text);
		return EXIT_ALLOW;
	}
	if (!strcmp(cmd, "stats"))
		return call_print("stats", &o, "stats", NULL, human_object);
	if (!strcmp(cmd, "health"))
		return call_print("health", &o, "health", NULL, human_object);
	if (!strcmp(cmd, "reload"))
		return call_print("reload", &o, "reload", NULL, human_ok);
	if (!strcmp(cmd, "cert")) {
		/* cert save ISSUER DOMAIN CRT KEY META | cert load ISSUER DOMAIN [DIR] */
		struct tsec_error err;
		json_t *params;
		int rc;

		if (o.nargs >= 1 && !strcmp(o.args[0], "save") && o.nargs == 6) {
			char *t[3] = { NULL, NULL, NULL };
			size_t n[3];

			for (int i = 0; i < 3; i++)
				if (tsec_read_file(o.args[3 + i], 16u << 20, &t[i], &n[i], &err)) {
					fprintf(stderr, "tsec cert: %s\n", err.msg);
					free(t[0]);
					free(t[1]);
					return EXIT_ERROR;
				}
			params = json_pack("{s:s,s:s,s:s%,s:s%,s:s%}", "issuer", o.args[1],
					   "domain", o.args[2], "cert", t[0], n[0], "key", t[1], n[1],
					   "meta", t[2], n[2]);
			for (int i = 0; i < 3; i++) {
				if (t[i])
					sodium_memzero(t[i], n[i]);
				free(t[i]);
			}
			if (!params) {
				fprintf(stderr, "tsec cert: the files must be UTF-8 text (PEM, JSON)\n");
				return EXIT_ERROR;
			}
			rc = call_print("cert save", &o, "store.save_cert", params, human_ok);
			json_decref(params);
			return rc;
		}
		if (o.nargs >= 1 && !strcmp(o.args[0], "load") && (o.nargs == 3 || o.nargs == 4)) {
			params = json_pack("{s:s,s:s}", "issuer", o.args[1], "domain", o.args[2]);
			cert_out_dir = o.nargs == 4 ? o.args[3] : NULL;
			cert_out_domain = o.args[2];
			if (strchr(cert_out_domain, '/'))
				die_usage(cmd, "DOMAIN names no folder");
			rc = call_print("cert load", &o, "store.load_cert", params, human_cert);
			json_decref(params);
			return rc;
		}
		die_usage(cmd, "usage: tsec cert save ISSUER DOMAIN CRT KEY META | "
			  "cert load ISSUER DOMAIN [DIR]");
	}
	if (!strcmp(cmd, "policy")) {
		char sigpath[4200], *text = NULL, *sig = NULL;
		size_t len, slen;
		struct tsec_error err;
		json_t *params;

		if (o.nargs != 2 || strcmp(o.args[0], "publish"))
			die_usage(cmd, "usage: tsec policy publish POLICY");
		snprintf(sigpath, sizeof(sigpath), "%s.sig", o.args[1]);
		if (tsec_read_file(o.args[1], 16u << 20, &text, &len, &err) ||
		    tsec_read_file(sigpath, 1024, &sig, &slen, &err)) {
			fprintf(stderr, "tsec policy: %s\n", err.msg);
			free(text);
			return EXIT_ERROR;
		}
		while (slen && (sig[slen - 1] == '\n' || sig[slen - 1] == '\r'))
			sig[--slen] = '\0';
		params = json_pack("{s:s%,s:s}", "policy", text, len, "signature", sig);
		free(text);
		free(sig);
		if (!params) {
			fprintf(stderr, "tsec policy: %s is not UTF-8 text\n", o.args[1]);
			return EXIT_ERROR;
		}
		{
			int rc = call_print("policy", &o, "policy.publish", params, human_object);
			json_decref(params);
			return rc;
		}
	}
	fprintf(stderr, "tsec: unknown command '%s'\n", cmd);
	usage(stderr);
	return EXIT_ERROR;
}
