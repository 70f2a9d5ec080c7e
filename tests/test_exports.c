/* The module's only dynamic export is its entry symbol (nm -D). */
#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

static void test_exports_only_entry(void **state)
{
	char line[512];
	int entries = 0, others = 0, rc;
	FILE *p;
	(void)state;

	p = popen("nm -D --defined-only " MODULE_PATH, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		char addr[64], type[8], name[256];
		if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
			continue;
		if (strcmp(name, "tsec_module_entry") == 0 && strcmp(type, "T") == 0)
			entries++;
		else {
			fprintf(stderr, "unexpected export: %s", line);
			others++;
		}
	}
	rc = pclose(p);
	assert_int_equal(rc, 0);
	assert_int_equal(entries, 1);
	assert_int_equal(others, 0);
}

/* The module links no broker symbol: nothing tsec_bus_* is undefined in it. */
static void test_exports_no_broker_symbols(void **state)
{
	char line[512];
	int bad = 0;
	FILE *p;
	(void)state;

	p = popen("nm -D --undefined-only " MODULE_PATH, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p))
		if (strstr(line, "tsec_"))
			bad++;
	assert_int_equal(pclose(p), 0);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exports_only_entry),
		cmocka_unit_test(test_exports_no_broker_symbols),
	};
	return cmocka_run_group_tests_name("exports", tests, NULL, NULL);
}
