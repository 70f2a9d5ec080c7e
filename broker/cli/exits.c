/*
 * tsec's exit status (tsec(1) EXIT STATUS; test_exit_codes in
 * tests/test_daemon_cli.c): 0 ok or allow, 1 deny, 2 usage or bad input,
 * 3 no broker answered or it refused this client, 4 the broker answered
 * with an error.
 */
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "broker/cli/cli.h"
#include "common/wire.h"
#include "tinysecurity/types.h"

int cli_exit_of(int rc)
{
	switch (rc) {
	case TSEC_OK:
		return EXIT_ALLOW;
	case TSEC_EDENIED:
		return EXIT_DENY;
	case TSEC_EINVAL: case TSEC_EKEY: case TSEC_EPROTO: case TSEC_EPOLICY:
	case TSEC_ETOOBIG: case TSEC_ECERT: case TSEC_ESIGNATURE:
		return EXIT_ERROR;
	case TSEC_EAUTH: case TSEC_EUNREACHABLE: case TSEC_EUNKNOWN:
		return EXIT_UNREACHABLE;
	default:
		return EXIT_FAILED;
	}
}

/*
 * The broker answered the call with an error (not a transport failure):
 * a deny is 1 and input it found bad is 2, as offline; anything else is
 * 4, whatever its code (issue 49, item 7: a rollback refusal exited 2,
 * and a blob store refusing the broker's credentials, TSEC_EAUTH, exited
 * 3 as if this client had been refused).
 */
static int exit_of_answer(int rc)
{
	switch (rc) {
	case TSEC_EDENIED:
		return EXIT_DENY;
	case TSEC_EINVAL: case TSEC_EKEY: case TSEC_EPROTO: case TSEC_EPOLICY:
	case TSEC_ETOOBIG: case TSEC_ECERT: case TSEC_ESIGNATURE:
		return EXIT_ERROR;
	default:
		return EXIT_FAILED;
	}
}

int cli_fail_call(const char *cmd, int rc, const struct tsec_error *err, int json, bool answered)
{
	int ex = cli_fail(cmd, rc, err, json);

	return answered ? exit_of_answer(rc) : ex;
}

int cli_fail(const char *cmd, int rc, const struct tsec_error *err, int json)
{
	if (json) {
		json_t *e = tsec__error_json(rc, err->where, err->msg);
		json_dumpf(e, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(e);
	} else {
		/* The message says what happened; the code's own words would
		 * only repeat it ("not found (not found)"). */
		fprintf(stderr, "tsec %s: %s\n", cmd, err->msg[0] ? err->msg : tsec_strerror(rc));
	}
	return cli_exit_of(rc);
}

