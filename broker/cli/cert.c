/*
 * tsec cert: certificates through a broker, as one all-or-nothing group
 * (save, load) or through the remote certificate store (publish, fetch,
 * exists, archive, recover, sweep).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "broker/cli/cli.h"
#include "common/file.h"
#include "tinysecurity/store.h"

static const char *cert_out_dir, *cert_out_domain, *cert_cmd;

static int human_cert(json_t *r)
{
	static const char *const part[3] = { "cert", "key", "meta" };
	static const char *const ext[3] = { "crt", "key", "json" };
	int rc = EXIT_ALLOW;

	if (!cert_out_dir) {
		fputs(json_string_value(json_object_get(r, "cert")), stdout);
		return EXIT_ALLOW;
	}
	for (int i = 0; i < 3; i++) {
		char name[4200];
		const char *v = json_string_value(json_object_get(r, part[i]));

		/* A new file renamed over the name: the private key 0600 even
		 * over a wider file, and a reader never sees half of one. */
		snprintf(name, sizeof(name), "%s/%s.%s", cert_out_dir, cert_out_domain, ext[i]);
		if (tsec__file_replace(name, v ? v : "", v ? strlen(v) : 0, i == 1 ? 0600 : 0644)) {
			/* "cert fetch" when it was (issue 51, item 14). */
			fprintf(stderr, "tsec %s: cannot write %s: %s\n", cert_cmd, name,
				strerror(errno));
			rc = EXIT_FAILED;
			break;               /* the rest would fail the same way */
		}
	}
	return rc;
}

static int human_exists(json_t *r)
{
	int ex = json_is_true(json_object_get(r, "exists"));

	puts(ex ? "exists" : "absent");
	return ex ? EXIT_ALLOW : EXIT_DENY;
}

static int human_outcome(json_t *r)
{
	puts(json_string_value(json_object_get(r, "outcome")) ? json_string_value(
		     json_object_get(r, "outcome")) : "ok");
	return EXIT_ALLOW;
}

/* The three files CRT KEY META as the params of a save or a publish. */
static json_t *cert_params(const char *cmd, struct opts *o)
{
	struct tsec_error err;
	char *t[3] = { NULL, NULL, NULL };
	size_t n[3];
	json_t *params;

	for (int i = 0; i < 3; i++)
		if (tsec_read_file(o->args[3 + i], 16u << 20, &t[i], &n[i], &err)) {
			fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
			for (int k = 0; k < i; k++) {
				sodium_memzero(t[k], n[k]);
				free(t[k]);
			}
			exit(EXIT_ERROR);
		}
	/* CRT and KEY in their places, said plainly (issue 51, item 14: a
	 * swap got a message naming an internal field that contradicted
	 * itself). */
	if (!strstr(t[0], "-----BEGIN CERTIFICATE-----") || strstr(t[1], "-----BEGIN CERTIFICATE") ||
	    !strstr(t[1], "PRIVATE KEY-----")) {
		bool swapped = strstr(t[1], "-----BEGIN CERTIFICATE-----") &&
			       strstr(t[0], "PRIVATE KEY-----");

		fprintf(stderr, "tsec %s: %s\n", cmd,
			swapped ? "CRT and KEY are swapped: give the certificate, then its key"
			: !strstr(t[0], "-----BEGIN CERTIFICATE-----")
			? "CRT holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
			: "KEY holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)");
		for (int k = 0; k < 3; k++) {
			sodium_memzero(t[k], n[k]);
			free(t[k]);
		}
		exit(EXIT_ERROR);
	}
	params = json_pack("{s:s,s:s,s:s%,s:s%,s:s%}", "issuer", o->args[1], "domain",
			   o->args[2], "cert", t[0], n[0], "key", t[1], n[1], "meta", t[2], n[2]);
	for (int i = 0; i < 3; i++) {
		sodium_memzero(t[i], n[i]);
		free(t[i]);
	}
	if (!params) {
		fprintf(stderr, "tsec %s: the files must be UTF-8 text (PEM, JSON)\n", cmd);
		exit(EXIT_ERROR);
	}
	return params;
}

int cmd_cert(struct opts *o)
{
	const char *cmd = "cert", *sub = o->nargs >= 1 ? o->args[0] : "";
	json_t *params = NULL;
	int rc;

	/* save/publish ISSUER DOMAIN CRT KEY META */
	if ((!strcmp(sub, "save") || !strcmp(sub, "publish")) && o->nargs == 6) {
		int pub = !strcmp(sub, "publish");
		params = cert_params(pub ? "cert publish" : "cert save", o);
		rc = cli_call_print(pub ? "cert publish" : "cert save", o,
				pub ? "remote.publish" : "store.save_cert", params,
				pub ? human_outcome : cli_human_ok);
	} else if ((!strcmp(sub, "load") || !strcmp(sub, "fetch")) &&
		   (o->nargs == 3 || o->nargs == 4)) {
		/* load/fetch ISSUER DOMAIN [DIR] */
		params = json_pack("{s:s,s:s}", "issuer", o->args[1], "domain", o->args[2]);
		cert_out_dir = o->nargs == 4 ? o->args[3] : NULL;
		cert_cmd = !strcmp(sub, "load") ? "cert load" : "cert fetch";
		cert_out_domain = o->args[2];
		if (strchr(cert_out_domain, '/'))
			die_usage(cmd, "DOMAIN names no folder");
		rc = cli_call_print(!strcmp(sub, "load") ? "cert load" : "cert fetch", o,
				!strcmp(sub, "load") ? "store.load_cert" : "remote.load", params,
				human_cert);
	} else if (!strcmp(sub, "exists") && o->nargs == 3) {
		params = json_pack("{s:s,s:s}", "issuer", o->args[1], "domain", o->args[2]);
		rc = cli_call_print("cert exists", o, "remote.exists", params, human_exists);
	} else if (!strcmp(sub, "archive") && o->nargs == 4) {
		params = json_pack("{s:s,s:s,s:s}", "issuer", o->args[1], "domain", o->args[2],
				   "name", o->args[3]);
		rc = cli_call_print("cert archive", o, "remote.archive_key", params, cli_human_ok);
	} else if (!strcmp(sub, "recover") && o->nargs == 3) {
		/* An operator accepts a restored coordinator (admin). */
		params = json_pack("{s:s,s:s}", "issuer", o->args[1], "domain", o->args[2]);
		rc = cli_call_print("cert recover", o, "remote.recover", params, cli_human_object);
	} else if (!strcmp(sub, "sweep") && o->nargs == 2) {
		char *end;
		long long g = strtoll(o->args[1], &end, 10);
		if (*end || end == o->args[1] || g < 0)
			die_usage(cmd, "GRACE_MS must be a number of milliseconds");
		params = json_pack("{s:I}", "grace_ms", (json_int_t)g);
		rc = cli_call_print("cert sweep", o, "remote.sweep", params, cli_human_object);
	} else {
		static const char *const subs[] = { "save", "publish", "load", "fetch", "exists",
						    "archive", "recover", "sweep" };

		cli_bad_sub(cmd, sub, subs, 8, "usage: tsec cert save|publish ISSUER DOMAIN CRT KEY "
			"META | cert load|fetch ISSUER DOMAIN [DIR] | cert exists ISSUER DOMAIN | "
			"cert archive ISSUER DOMAIN NAME | cert recover ISSUER DOMAIN | "
			"cert sweep GRACE_MS");
		return EXIT_ERROR;
	}
	json_decref(params);
	return rc;
}

