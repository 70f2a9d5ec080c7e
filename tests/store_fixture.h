/*
 * The fixture test_store and test_store_disk share: a file store on a
 * fresh folder with the test policy, three callers, and put/check
 * helpers as app.
 */
#ifndef TSEC_TESTS_STORE_FIXTURE_H
#define TSEC_TESTS_STORE_FIXTURE_H

#include "tests/testutil.h"

static struct tsec_principal app, reader, nobody;

static int setup(void **state)
{
	static struct tu_store t;
	app = tu_who("svc:app");
	reader = tu_who("svc:reader");
	nobody = tu_who("svc:nobody");
	tu_store_open(&t);
	*state = &t;
	return 0;
}

static int teardown(void **state)
{
	tu_store_close(*state);
	return 0;
}

#define put(s, key, value) tu_put((s), &app, (key), (value))
#define check_value(s, key, want) tu_want((s), &app, (key), (want))

#endif
