/*
 * tsec: the commands that call a broker (check, eval, store, lock, cert,
 * stats, health, reload, policy), the connection they share and how their
 * answers are printed.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#include "common/error.h"
#include "common/file.h"
#include "common/prom.h"
#include "common/sign.h"
#include "common/wire.h"

#include "broker/cli/cli.h"
#include "common/suggest.h"

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
 * on it.  Exits 3 then, said as a failed call is.
 */
/* No broker to call: said as every failed call is (JSON on stdout with
 * --json: issue 51, item 9, it was text on stderr), exit 3. */
static void unreachable(const char *cmd, int json, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));
static void unreachable(const char *cmd, int json, const char *fmt, ...)
{
	struct tsec_error err = { .code = TSEC_EUNREACHABLE };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	exit(cli_fail(cmd, TSEC_EUNREACHABLE, &err, json));
}

static const char *ipc_endpoint(const char *cmd, const char *ep, int json)
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
		if (errno == EACCES)
			unreachable(cmd, json, "cannot reach %.3000s: a folder on its path is not "
				    "yours to open (permission denied)", abs_ep);
		unreachable(cmd, json, "no broker listening at %.3000s (no socket there)", abs_ep);
	}
	if (!S_ISSOCK(sb.st_mode))
		unreachable(cmd, json, "%.3000s is not a socket", path);
	if (strlen(path) < sizeof(sa.sun_path) && (fd = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0) {
		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		memcpy(sa.sun_path, path, strlen(path));
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (rc < 0 && errno == ECONNREFUSED)
			unreachable(cmd, json, "no broker listening at %.3000s (a stale socket)",
				    abs_ep);
		if (rc < 0 && errno == EACCES)
			unreachable(cmd, json, "cannot reach %.3000s: the socket is not yours to open "
				    "(permission denied; the broker's operator grants access)", abs_ep);
	}
	return abs_ep;
}

struct tsec_client *cli_connect_or_die(const char *cmd, struct opts *o)
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
		co.endpoint = ipc_endpoint(cmd, o->endpoint, o->json);
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
/* The client a call is waiting on, for ^C (issue 48): the handler
 * interrupts it, and the library cancels the call at the broker (a lock
 * wait is dropped, a lock taken for it let go) before the call returns. */
static struct tsec_client *volatile calling;

static void on_interrupt(int sig)
{
	(void)sig;
	tsec_client_interrupt(calling);
}

int cli_call(const char *cmd, struct opts *o, const char *method, json_t *params, char **res)
{
	struct tsec_client *c = cli_connect_or_die(cmd, o);
	struct tsec_error err;
	char *p = params ? json_dumps(params, JSON_COMPACT) : NULL;
	struct sigaction sa, old_int, old_term;
	bool answered;
	int rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_interrupt;
	calling = c;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	*res = NULL;
	rc = tsec_client_call(c, method, p, res, &err);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	calling = NULL;
	free(p);
	answered = tsec_client_last_error(c) != NULL;
	tsec_client_close(&c);
	if (rc == TSEC_ECANCELED) {
		/* As a shell reports ^C; the broker holds nothing for us. */
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		return EXIT_INTERRUPTED;
	}
	return rc ? cli_fail_call(cmd, rc, &err, o->json, answered) : 0;
}

int cli_call_print(const char *cmd, struct opts *o, const char *method,
		   json_t *params, int (*human)(json_t *result))
{
	char *res;
	int rc = cli_call(cmd, o, method, params, &res);

	if (rc)
		return rc;
	if (o->json || !human) {
		puts(res);
	} else {
		json_t *r = json_loads(res, 0, NULL);
		rc = human(r);
		json_decref(r);
	}
	free(res);
	return rc;
}

static json_t *request_json(const char *cmd, struct opts *o)
{
	json_t *r = json_object(), *c = json_object();
	unsigned af;

	if (!o->action || !o->resource)
		die_usage(cmd, "need --action and --resource");
	/* A request the policy would call invalid is a usage error here. */
	af = check_action(cmd, o->action);
	if ((af & TSEC_AF_SIZE) && !o->have_size)
		die_usage(cmd, "storage.store and cert.publish need --size (the value's bytes)");
	if ((af & TSEC_AF_TTL) && !o->have_ttl)
		die_usage(cmd, "lock.acquire and lock.renew need --ttl-ms");
	if ((af & TSEC_AF_DEST) && !o->dest)
		die_usage(cmd, "storage.move and cert.archive need --dest");
	json_object_set_new(r, "action", json_string(o->action));
	if (!strcmp(o->action, "cert.obtain") && !strchr(o->resource, '/')) {
		/* A bare name: its resource, as the broker makes it (an IPv6
		 * address with '-' for ':', as certmagic's keys write it). */
		char res[300];
		int n = snprintf(res, sizeof(res), "names/%s", o->resource);

		for (int i = 6; i < n && i < (int)sizeof(res); i++)
			if (res[i] == ':')
				res[i] = '-';
		json_object_set_new(r, "resource", json_string(res));
	} else {
		json_object_set_new(r, "resource", json_string(o->resource));
	}
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

/* A decision's exit status: 0 allow, 1 deny, 2 an invalid request (a
 * bad key is bad input, whether check or store found it). */
int cli_decision_exit(const json_t *d)
{
	const char *st = json_string_value(json_object_get(d, "status"));

	if (st && !strcmp(st, "invalid"))
		return EXIT_ERROR;
	return json_is_true(json_object_get(d, "allow")) ? EXIT_ALLOW : EXIT_DENY;
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
		/* Why not: the rules that matched but did not apply. */
		json_array_foreach(json_object_get(d, "why_not"), i, v)
			printf("  not applied: %s%s: %s\n",
			       json_string_value(json_object_get(v, "rule")),
			       json_object_get(v, "at") ? " (at the destination)" : "",
			       json_string_value(json_object_get(v, "why")));
		/* The allows that nearly matched (issue 51, item 3). */
		json_array_foreach(json_object_get(d, "near_miss"), i, v)
			printf("  near miss: %s\n", json_string_value(v));
	}
	return cli_decision_exit(d);
}

int cmd_check(struct opts *o)
{
	json_t *params, *r;
	char *res;
	int rc;

	if (o->policy || o->input)
		return cmd_decide_offline("check", o, o->input ? NULL : request_json("check", o));
	if (o->principal || o->nroles)
		die_usage("check", "--principal and --role need --policy (a broker takes the "
			  "principal from authentication)");
	if (!strcmp(o->action ? o->action : "", "cert.obtain"))
		return cli_check_obtain(o);
	params = json_pack("{s:[o]}", "requests", request_json("check", o));
	rc = cli_call("check", o, "check", params, &res);
	json_decref(params);
	if (rc)
		return rc;
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

int cmd_eval(struct opts *o)
{
	json_t *params, *r;
	char *res;
	int rc;

	if (o->policy)
		return cmd_decide_offline("eval", o, request_json("eval", o));
	if (o->principal || o->nroles || o->input)
		die_usage("eval", "--principal, --role and --input need --policy");
	params = json_pack("{s:o}", "request", request_json("eval", o));
	rc = cli_call("eval", o, "evaluate", params, &res);
	json_decref(params);
	if (rc)
		return rc;
	r = json_loads(res, 0, NULL);
	free(res);
	if (o->json) {
		json_dumpf(r, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		cli_human_report(r);
	}
	rc = cli_decision_exit(json_object_get(r, "decision"));
	json_decref(r);
	return rc;
}

/* A value's bytes, exactly as stored, text or not. */
static int human_value(json_t *r)
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
		return raw && n ? EXIT_ALLOW : EXIT_FAILED;
	}
	return EXIT_ALLOW;
}

static int human_keys(json_t *r)
{
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(r, "keys"), i, v)
		puts(json_string_value(v));
	return EXIT_ALLOW;
}

/* cert load: the PEM to stdout, or DIR/DOMAIN.{crt,key,json} (key 0600). */
int cli_human_ok(json_t *r)
{
	(void)r;
	puts("ok");
	return EXIT_ALLOW;
}

int cli_human_object(json_t *r)
{
	const char *k;
	json_t *v;
	json_object_foreach(r, k, v) {
		char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		printf("%-20s %s\n", k, t);
		free(t);
	}
	return EXIT_ALLOW;
}

/*
 * A subcommand that is not one of subs (issue 51, item 12: `store gte`,
 * `lock aquire`, `cert fecth` got the usage alone), named with the
 * nearest; a known one used wrongly, the usage.  Exits 2.
 */
void cli_bad_sub(const char *cmd, const char *sub, const char *const *subs, size_t n,
		 const char *usage)
{
	char msg[700];
	const char *near;
	size_t i = 0;

	while (i < n && strcmp(sub, subs[i]))
		i++;
	if (i == n && *sub) {
		near = tsec__nearest(sub, subs, n);
		snprintf(msg, sizeof(msg), "unknown subcommand '%s'%s%s%s\n%s", sub,
			 near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", usage);
		die_usage(cmd, msg);
	}
	die_usage(cmd, usage);
}

int cmd_store(struct opts *o)
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
		rc = cli_call_print("store put", o, "store.put", p, cli_human_ok);
	} else if (!strcmp(sub, "get") && o->nargs == 2) {
		json_object_set_new(p, "key", json_string(o->args[1]));
		rc = cli_call_print("store get", o, "store.get", p, human_value);
	} else if (!strcmp(sub, "ls") && o->nargs <= 2) {
		json_object_set_new(p, "prefix", json_string(o->nargs == 2 ? o->args[1] : ""));
		json_object_set_new(p, "recursive", json_boolean(o->recursive));
		rc = cli_call_print("store ls", o, "store.list", p, human_keys);
	} else if (!strcmp(sub, "rm") && o->nargs == 2) {
		json_object_set_new(p, "key", json_string(o->args[1]));
		json_object_set_new(p, "recursive", json_boolean(o->recursive));
		rc = cli_call_print("store rm", o, "store.delete", p, cli_human_ok);
	} else if (!strcmp(sub, "mv") && o->nargs == 3) {
		json_object_set_new(p, "src", json_string(o->args[1]));
		json_object_set_new(p, "dst", json_string(o->args[2]));
		rc = cli_call_print("store mv", o, "store.move", p, cli_human_ok);
	} else {
		static const char *const subs[] = { "put", "get", "ls", "rm", "mv" };

		json_decref(p);
		cli_bad_sub("store", sub, subs, 5, "use put KEY FILE|-, get KEY, ls [PREFIX] [-r], "
			"rm KEY [-r], mv SRC DST");
		return EXIT_ERROR;
	}
	json_decref(p);
	return rc;
}

int cmd_lock(struct opts *o)
{
	const char *sub = o->nargs ? o->args[0] : "";
	json_t *p = json_object();
	int rc;

	if (!strcmp(sub, "acquire") && o->nargs == 2 && o->have_ttl) {
		/* Wait for the answer as long as for the lock, and a little
		 * more, unless --timeout-ms says otherwise (then the broker
		 * waits no longer than that: it is sent with the call). */
		if (!o->timeout_ms && o->timeout_lock + 2000 > 5000)
			o->timeout_ms = o->timeout_lock + 2000 > 3600000 ? 3600000
				      : (int)(o->timeout_lock + 2000);
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "ttl_ms", json_integer(o->ttl_ms));
		json_object_set_new(p, "timeout_ms", json_integer(o->timeout_lock));
		rc = cli_call_print("lock acquire", o, "lock.acquire", p, cli_human_object);
	} else if (!strcmp(sub, "renew") && o->nargs == 3 && o->have_ttl) {
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "token", json_string(o->args[2]));
		json_object_set_new(p, "ttl_ms", json_integer(o->ttl_ms));
		rc = cli_call_print("lock renew", o, "lock.renew", p, cli_human_object);
	} else if (!strcmp(sub, "release") && o->nargs == 3) {
		json_object_set_new(p, "name", json_string(o->args[1]));
		json_object_set_new(p, "token", json_string(o->args[2]));
		rc = cli_call_print("lock release", o, "lock.release", p, cli_human_ok);
	} else {
		static const char *const subs[] = { "acquire", "renew", "release" };

		json_decref(p);
		cli_bad_sub("lock", sub, subs, 3, "use acquire NAME --ttl-ms N [--wait-ms N], renew NAME "
			"TOKEN --ttl-ms N, release NAME TOKEN");
		return EXIT_ERROR;
	}
	json_decref(p);
	return rc;
}

static int cmd_stats_prometheus(struct opts *o)
{
	struct tsec_client *c = cli_connect_or_die("stats", o);
	struct tsec_error err;
	bool answered;
	char *res = NULL, *text;
	json_t *j;
	int rc = tsec_client_call(c, "stats", NULL, &res, &err);

	answered = tsec_client_last_error(c) != NULL;
	tsec_client_close(&c);
	if (rc)
		return cli_fail_call("stats", rc, &err, 0, answered);
	j = json_loads(res, 0, NULL);
	free(res);
	text = j ? tsec__prometheus(j) : NULL;
	json_decref(j);
	if (!text) {
		fprintf(stderr, "tsec stats: the broker's answer is not stats\n");
		return EXIT_FAILED;
	}
	fputs(text, stdout);
	free(text);
	return EXIT_ALLOW;
}

int cmd_stats(struct opts *o)
{
	if (o->prometheus)
		return cmd_stats_prometheus(o);
	return cli_call_print("stats", o, "stats", NULL, cli_human_object);
}

/* Whether the broker says "ok": 0, or 1 (EXIT_DENY) when it serves
 * degraded, so that a script or a probe can tell without parsing. */
static int health_status(json_t *r)
{
	const char *st = json_string_value(json_object_get(r, "status"));

	return st && !strcmp(st, "ok") ? EXIT_ALLOW : EXIT_DENY;
}

static int human_health(json_t *result)
{
	int rc = cli_human_object(result);

	return rc ? rc : health_status(result);
}

int cmd_health(struct opts *o)
{
	struct tsec_client *c = cli_connect_or_die("health", o);
	struct tsec_error err;
	bool answered;
	char *res = NULL;
	json_t *r;
	int rc = tsec_client_call(c, "health", NULL, &res, &err);

	answered = tsec_client_last_error(c) != NULL;
	tsec_client_close(&c);
	if (rc)
		return cli_fail_call("health", rc, &err, o->json, answered);
	r = json_loads(res, 0, NULL);
	if (o->json) {
		puts(res);
		rc = health_status(r);
	} else {
		rc = human_health(r);
	}
	json_decref(r);
	free(res);
	return rc;
}

int cmd_reload(struct opts *o)
{
	return cli_call_print("reload", o, "reload", NULL, cli_human_ok);
}

int cmd_policy(struct opts *o)
{
	const char *cmd = "policy";
	char sigpath[4200], *text = NULL, *sig = NULL;
	size_t len, slen;
	struct tsec_error err;
	json_t *params;

	if (o->nargs != 2 || strcmp(o->args[0], "publish"))
		die_usage(cmd, "usage: tsec policy publish POLICY");
	snprintf(sigpath, sizeof(sigpath), "%s.sig", o->args[1]);
	if (tsec_read_file(o->args[1], 16u << 20, &text, &len, &err) ||
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
		fprintf(stderr, "tsec policy: %s is not UTF-8 text\n", o->args[1]);
		return EXIT_ERROR;
	}
	{
		int rc = cli_call_print("policy", o, "policy.publish", params, cli_human_object);
		json_decref(params);
		return rc;
	}
}
