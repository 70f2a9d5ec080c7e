/*
 * A real ACME client end to end (examples/acme/run.sh): pebble issues,
 * lego's hook saves through tsec-broker as the issuer, a reader loads the
 * same bytes back, a save under a domain the issuer may not write and a
 * 1024-bit certificate are refused, the refusal is in the decision log;
 * then lego publishes to the remote certificate store and the reader
 * fetches the same bytes, every blob verified.
 * This build's tsec-broker, tsec and module are the ones run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "tests/testutil.h"

static void test_acme_end_to_end(void **state)
{
	int st;

	(void)state;
	st = system("sh examples/acme/run.sh " TSEC_BUILD_DIR " 2>&1");
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_acme_end_to_end),
	};

	return cmocka_run_group_tests_name("acme: pebble, lego, tsec-broker", tests, NULL, NULL);
}
