/*
 * libFuzzer: the decision-log reader of tsec replay and tsec diff --log
 * (issue 52, item 8).  The input is one log line, any bytes: read as
 * replay reads it (rate refusals left out, the request rebuilt, a
 * certificate made again from its attributes), then decided through the
 * real bus and module on the example policy.  Nothing may crash, leak
 * or hang; a request rebuilt must have the fields a request has.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "broker/cli/cli.h"
#include "broker/policytest/policytest.h"
#include "tinysecurity/bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tsec_bus *bus;
static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec__made m;
	struct tsec_str roles[16];
	struct tsec_request r;
	struct tsec_decision d;
	struct tsec_error err;
	const char *why = NULL;
	json_t *line, *req, *keep;

	if (!bus) {
		if (tsec_bus_new(&bus) ||
		    tsec_bus_load_file(bus, "policy", TSEC_FUZZ_MODULE, "examples/policy.json", &err) ||
		    !(devnull = fopen("/dev/null", "w")))
			abort();
	}
	if (!(line = json_loadb((const char *)data, size, 0, NULL)))
		return 0;
	m.by_attrs = json_object();
	if (!tsec__rate_refusal(line, &why) && (req = tsec__logged_request(line, &m, &why))) {
		if (!json_is_string(json_object_get(req, "principal")) ||
		    !json_is_string(json_object_get(req, "action")) ||
		    !json_is_string(json_object_get(req, "resource")) ||
		    !json_is_object(json_object_get(req, "context")))
			abort();
		keep = json_array();
		if (!tsec__ptest_request("replay", req, NULL, NULL, 0, &r, roles, 16, keep, devnull))
			tsec_bus_check(bus, "policy", &r, 1, &d, &err);
		json_decref(keep);
		json_decref(req);
	} else if (!why) {
		abort();             /* left out without a reason */
	}
	json_decref(m.by_attrs);
	json_decref(line);
	return 0;
}
