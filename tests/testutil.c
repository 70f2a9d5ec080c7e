#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

struct tsec_bus *tu_bus_with_policy(const char *policy_path)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err = { 0 };

	assert_int_equal(tsec_bus_new(&bus), 0);
	if (tsec_bus_load_file(bus, "policy", MODULE_PATH, policy_path, &err)) {
		fprintf(stderr, "load failed: %s: %s\n", err.where, err.msg);
		fail();
	}
	return bus;
}

struct tsec_bus *tu_bus_with_text(const char *text)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err = { 0 };

	assert_int_equal(tsec_bus_new(&bus), 0);
	tsec_bus_set_log(bus, NULL, NULL);
	if (tsec_bus_load(bus, "policy", MODULE_PATH, text, strlen(text), &err)) {
		fprintf(stderr, "load failed: %s: %s\n", err.where, err.msg);
		fail();
	}
	return bus;
}
