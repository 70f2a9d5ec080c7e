/*
 * What leaves each shared object: the module exports only its entry
 * symbol; the library exports exactly the TSEC_API declarations of the
 * public headers, and has a SONAME (the idea of jansson's check-exports).
 */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
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

#define MAX_NAMES 256

struct names {
	char v[MAX_NAMES][64];
	int n;
};

static int has(const struct names *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], name))
			return 1;
	return 0;
}

static void add(struct names *s, const char *name)
{
	assert_true(s->n < MAX_NAMES);
	assert_true(strlen(name) < sizeof(s->v[0]));
	if (!has(s, name))
		strcpy(s->v[s->n++], name);
}

/*
 * Collects the name of every function declared TSEC_API in one header:
 * the identifier right before the first '(' after the macro (declarations
 * may span lines).
 */
static void header_names(const char *path, struct names *out)
{
	FILE *f = fopen(path, "r");
	char *text, *p;
	long len;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = calloc(1, (size_t)len + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	for (p = text; (p = strstr(p, "TSEC_API ")); p += 9) {
		char *paren = strchr(p, '('), *end, *start;
		char name[64];
		if (p > text && p[-1] != '\n')
			continue; /* the macro's own definition and comments */
		assert_non_null(paren);
		for (end = paren; end > p && isspace((unsigned char)end[-1]); end--)
			;
		for (start = end; start > p && (isalnum((unsigned char)start[-1]) ||
						start[-1] == '_'); start--)
			;
		assert_true(end > start && (size_t)(end - start) < sizeof(name));
		memcpy(name, start, (size_t)(end - start));
		name[end - start] = '\0';
		add(out, name);
	}
	free(text);
}

static void test_exports_library_is_its_api(void **state)
{
	struct names api = { .n = 0 }, dyn = { .n = 0 };
	char line[512];
	struct dirent *e;
	DIR *dir;
	FILE *p;
	(void)state;

	dir = opendir("include/tinysecurity");
	assert_non_null(dir);
	while ((e = readdir(dir))) {
		char path[512];
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".h"))
			continue;
		snprintf(path, sizeof(path), "include/tinysecurity/%s", e->d_name);
		header_names(path, &api);
	}
	closedir(dir);
	assert_true(api.n > 40); /* the scan found the API, not nothing */
	assert_true(has(&api, "tsec_store_put") && has(&api, "tsec_bus_check"));

	p = popen("nm -D --defined-only " LIBRARY_PATH, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		char addr[64], type[8], name[256];
		if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
			continue;
		add(&dyn, name);
	}
	assert_int_equal(pclose(p), 0);
	for (int i = 0; i < dyn.n; i++)
		if (!has(&api, dyn.v[i]))
			fail_msg("libtinysecurity.so exports %s, which no header declares TSEC_API",
				 dyn.v[i]);
	for (int i = 0; i < api.n; i++)
		if (!has(&dyn, api.v[i]))
			fail_msg("%s is declared TSEC_API but the library does not export it",
				 api.v[i]);
}

static void test_exports_library_soname(void **state)
{
	char line[512];
	int found = 0;
	FILE *p;
	(void)state;

	p = popen("objdump -p " LIBRARY_PATH, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p))
		if (strstr(line, "SONAME") && strstr(line, "libtinysecurity.so.0"))
			found++;
	assert_int_equal(pclose(p), 0);
	assert_int_equal(found, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exports_only_entry),
		cmocka_unit_test(test_exports_no_broker_symbols),
		cmocka_unit_test(test_exports_library_is_its_api),
		cmocka_unit_test(test_exports_library_soname),
	};
	return cmocka_run_group_tests_name("exports", tests, NULL, NULL);
}
