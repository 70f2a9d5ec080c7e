/*
 * tsec check --action cert.obtain at a broker: the on-demand TLS decision
 * (broker/daemon/obtain.c) as Caddy's ask endpoint and the Go binding's
 * DecisionFunc get it, asked dry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/cli/cli.h"
#include "tinysecurity/client.h"

/*
 * check of cert.obtain at a broker: its answer with the rate counted as
 * the broker counts it, nothing recorded (dry): the same decision Caddy's
 * ask endpoint or the Go binding's DecisionFunc would get now.
 */
int cli_check_obtain(struct opts *o)
{
	const char *name = o->resource ? o->resource : "";
	char *res;
	json_t *r;
	int rc;

	if (!strncmp(name, "names/", 6))
		name += 6;
	if (!*name)
		die_usage("check", "cert.obtain needs --resource NAME (or names/NAME)");
	r = json_pack("{s:s,s:b}", "name", name, "dry", 1);
	if (o->have_now)
		json_object_set_new(r, "now", json_integer(o->now));
	rc = cli_call("check", o, "cert.obtain", r, &res);
	json_decref(r);
	if (rc)
		return rc;
	r = json_loads(res, 0, NULL);
	free(res);
	if (!o->json && json_object_get(r, "used"))
		printf("rate (%s): %lld of %lld new names under %s in %lld s; this check "
		       "counted nothing\n", json_string_value(json_object_get(r, "rate_rule")),
		       (long long)json_integer_value(json_object_get(r, "used")),
		       (long long)json_integer_value(json_object_get(r, "max_new")),
		       json_string_value(json_object_get(r, "suffix")),
		       (long long)json_integer_value(json_object_get(r, "window_s")));
	rc = cli_print_decision(r, o->json);
	json_decref(r);
	return rc;
}

