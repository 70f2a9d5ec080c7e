/* The module loader: each refusal with its own code, and a good module. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

static const char *policy = "{\"version\": 1}";

static int load(const char *path, struct tsec_error *err)
{
	struct tsec_bus *bus = NULL;
	int rc;

	assert_int_equal(tsec_bus_new(&bus), 0);
	memset(err, 0, sizeof(*err));
	rc = tsec_bus_load(bus, "policy", path, policy, strlen(policy), err);
	if (rc) {
		/* A refused load leaves no endpoint behind. */
		struct tsec_module_info info;
		assert_int_equal(tsec_bus_info(bus, "policy", &info), TSEC_ENOENT);
	}
	tsec_bus_free(&bus);
	return rc;
}

static void refused(const char *path, int code, const char *cause)
{
	struct tsec_error err;
	int rc = load(path, &err);

	if (rc != code)
		fail_msg("%s: got %d (%s), want %d", path, rc, err.msg, code);
	assert_int_equal(err.code, code);
	/* The message names the file and the cause. */
	assert_non_null(strstr(err.msg, path));
	if (!strstr(err.msg, cause))
		fail_msg("message '%s' lacks '%s'", err.msg, cause);
}

static void test_loader_missing_file(void **state)
{
	(void)state;
	refused(TSEC_BUILD_DIR "/fixtures/does_not_exist.so", TSEC_ENOENT, "no such");
}

static void test_loader_not_elf(void **state)
{
	(void)state;
	refused(FIXTURE("not_elf"), TSEC_ENOTSO, "not a shared object");
}

static void test_loader_directory(void **state)
{
	(void)state;
	refused(TSEC_BUILD_DIR "/fixtures", TSEC_ENOTSO, "not a regular file");
}

static void test_loader_elf_not_shared(void **state)
{
	(void)state;
	/* An ELF executable is not something dlopen will take. */
	refused(TSEC_BUILD_DIR "/tests/test_loader", TSEC_ENOTSO, "cannot load");
}

static void test_loader_no_entry(void **state)
{
	(void)state;
	refused(FIXTURE("mod_no_entry"), TSEC_ENOSYM, "tsec_module_entry");
}

static void test_loader_wrong_abi(void **state)
{
	(void)state;
	refused(FIXTURE("mod_wrong_abi"), TSEC_EABI, "ABI major 2");
}

static void test_loader_short_desc(void **state)
{
	(void)state;
	refused(FIXTURE("mod_short_desc"), TSEC_ESHORT, "descriptor is 16 bytes");
}

static void test_loader_null_fn(void **state)
{
	(void)state;
	refused(FIXTURE("mod_null_fn"), TSEC_ENULLFN, "no check function");
}

static void test_loader_refuses_host(void **state)
{
	(void)state;
	refused(FIXTURE("mod_refuse"), TSEC_EMODULE, "refused the host");
	/* The module's own reason, through the 1.2 refuse callback. */
	refused(FIXTURE("mod_refuse"), TSEC_EMODULE, "needs host ABI 1.9");
}

/* Today's host loads modules of ABI 1.0 and of a later 1.x alike. */
static void test_loader_older_and_newer_modules(void **state)
{
	const struct tsec_request r = { .principal = tsec_str_c("svc:x"),
					.action = tsec_str_c("storage.load"),
					.resource = tsec_str_c("a") };
	struct tsec_bus *bus = NULL;
	struct tsec_module_info info;
	struct tsec_decision d;
	struct tsec_error errs[2], err;
	size_t n;
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	assert_int_equal(tsec_bus_load(bus, "old", FIXTURE("mod_abi10"), "", 0, &err), 0);
	assert_int_equal(tsec_bus_load(bus, "new", FIXTURE("mod_future"), "", 0, &err), 0);
	assert_int_equal(tsec_bus_info(bus, "new", &info), 0);
	assert_string_equal(info.name, "future");
	assert_int_equal(tsec_bus_check(bus, "old", &r, 1, &d, &err), 0);
	assert_int_equal(tsec_bus_check(bus, "new", &r, 1, &d, &err), 0);
	/* A 1.0 descriptor has no lint: the host says so rather than read past it. */
	assert_int_equal(tsec_bus_lint(bus, "old", "{}", 2, errs, 2, &n), TSEC_EMODULE);
	/* Nor explain: the report alone, and it says it was not explained. */
	{
		static struct tsec_report rep;
		static struct tsec_explain ex;

		memset(&ex, 0xff, sizeof(ex));
		assert_int_equal(tsec_bus_explain(bus, "old", &r, &rep, &ex, &err), 0);
		assert_int_equal(ex.explained, 0);
		assert_int_equal(ex.nnot_applied, 0);
	}
	tsec_bus_free(&bus);
}

static void host_log(void *host, int level, const char *msg)
{
	(void)host; (void)level; (void)msg;
}

/*
 * Today's module under hosts of other versions: a 1.0 host table (no
 * refuse) and a longer, later 1.x one are served; a table shorter than
 * 1.0 or of another major is refused.
 */
static void test_loader_module_under_other_hosts(void **state)
{
	union {
		struct tsec_host_api api;
		unsigned char bytes[sizeof(struct tsec_host_api) + 64];
	} h;
	tsec_module_entry_fn entry;
	const struct tsec_module_desc *d;
	struct tsec_error err;
	void *dl, *sym, *st = NULL;
	(void)state;

	dl = dlopen(MODULE_PATH, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(dl);
	sym = dlsym(dl, TSEC_MODULE_ENTRY_NAME);
	assert_non_null(sym);
	memcpy(&entry, &sym, sizeof(entry));

	memset(&h, 0, sizeof(h));
	h.api.abi_major = 1;
	h.api.abi_minor = 0;
	h.api.size = TSEC_HOST_API_MIN_SIZE;
	h.api.log = host_log;
	d = entry(&h.api);
	assert_non_null(d);
	assert_int_equal(d->init(&h.api, policy, strlen(policy), &st, &err), 0);
	d->fini(st);

	h.api.abi_minor = 9;
	h.api.size = sizeof(h);
	assert_non_null(entry(&h.api));
	h.api.size = TSEC_HOST_API_MIN_SIZE - 1;
	assert_null(entry(&h.api));
	h.api.size = sizeof(h.api);
	h.api.abi_major = 2;
	assert_null(entry(&h.api));
	assert_null(entry(NULL));
	dlclose(dl);
}

static void test_loader_bad_policy(void **state)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	const char *bad = "{\"version\": 1, \"rules\": [{\"id\": 1}]}";
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	assert_int_equal(tsec_bus_load(bus, "policy", MODULE_PATH, bad, strlen(bad), &err),
			 TSEC_EPOLICY);
	assert_string_equal(err.where, "/rules/0/id");
	assert_int_equal(tsec_bus_load_file(bus, "policy", MODULE_PATH, "no/such/policy.json", &err),
			 TSEC_ENOENT);
	tsec_bus_free(&bus);
}

static void test_loader_good(void **state)
{
	struct tsec_bus *bus = NULL;
	struct tsec_module_info info;
	struct tsec_error err;
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	assert_int_equal(tsec_bus_load(bus, "policy", MODULE_PATH, policy, strlen(policy), &err), 0);
	assert_int_equal(tsec_bus_info(bus, "policy", &info), 0);
	assert_string_equal(info.name, "tinysecurity");
	assert_int_equal(info.abi_major, TSEC_MODULE_ABI_MAJOR);
	assert_int_equal(info.build, TSEC_BUILD_THIS);
	assert_true(info.caps & TSEC_MODULE_CONCURRENT);
	assert_string_equal(info.path, MODULE_PATH);
	/* One endpoint, one module. */
	assert_int_equal(tsec_bus_load(bus, "policy", MODULE_PATH, policy, strlen(policy), &err),
			 TSEC_EBUSY);
	/* The same module may serve another endpoint. */
	assert_int_equal(tsec_bus_load(bus, "other", MODULE_PATH, policy, strlen(policy), &err), 0);
	/* Names are bounded. */
	assert_int_equal(tsec_bus_load(bus, "a-name-that-is-far-too-long-for-an-endpoint",
				       MODULE_PATH, policy, strlen(policy), &err), TSEC_EINVAL);
	tsec_bus_free(&bus);
	assert_null(bus);
	tsec_bus_free(&bus);
	tsec_bus_free(NULL);
}

static void test_loader_full_bus(void **state)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	char name[16];
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	for (int i = 0; i < TSEC_BUS_ENDPOINTS; i++) {
		snprintf(name, sizeof(name), "ep%d", i);
		assert_int_equal(tsec_bus_load(bus, name, MODULE_PATH, policy, strlen(policy), &err), 0);
	}
	assert_int_equal(tsec_bus_load(bus, "one-more", MODULE_PATH, policy, strlen(policy), &err),
			 TSEC_EBUSY);
	tsec_bus_free(&bus);
}

/* Lint through the bus: every rule's error; absent from an ABI 1.0 module. */
static void test_loader_lint(void **state)
{
	const char *bad = "{\"version\": 1, \"rules\": ["
		"{\"id\": \"a\", \"effect\": \"allow\", \"action\": [\"x\"], \"resource\": [\"r\"]},"
		"{\"id\": \"b\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"r\"]},"
		"{\"id\": \"b\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"/r\"]}]}";
	struct tsec_bus *bus = NULL;
	struct tsec_error errs[4], err;
	size_t n = 99;
	(void)state;

	assert_int_equal(tsec_bus_new(&bus), 0);
	assert_int_equal(tsec_bus_load(bus, "policy", MODULE_PATH, policy, strlen(policy), &err), 0);
	assert_int_equal(tsec_bus_load(bus, "old", FIXTURE("mod_serial"), "", 0, &err), 0);
	assert_int_equal(tsec_bus_lint(bus, "policy", bad, strlen(bad), errs, 4, &n), TSEC_EPOLICY);
	/* Rule 2 has two errors: both said (issue 20, defect 3). */
	assert_int_equal(n, 3);
	assert_string_equal(errs[0].where, "/rules/0/action/0");
	assert_string_equal(errs[1].where, "/rules/2/id");
	assert_string_equal(errs[2].where, "/rules/2/resource/0");
	assert_int_equal(tsec_bus_lint(bus, "policy", policy, strlen(policy), errs, 4, &n), 0);
	assert_int_equal(n, 0);
	/* Fewer slots than errors: the count still says how many. */
	assert_int_equal(tsec_bus_lint(bus, "policy", bad, strlen(bad), errs, 1, &n), TSEC_EPOLICY);
	assert_int_equal(n, 3);
	assert_int_equal(tsec_bus_lint(bus, "old", bad, strlen(bad), errs, 4, &n), TSEC_EMODULE);
	assert_int_equal(tsec_bus_lint(bus, "none", bad, strlen(bad), errs, 4, &n), TSEC_ENOENT);
	tsec_bus_free(&bus);
}

static void test_loader_strerror(void **state)
{
	(void)state;
	for (int c = 0; c >= TSEC_EUNKNOWN; c--)
		assert_string_not_equal(tsec_strerror(c), "unknown error");
	assert_string_equal(tsec_strerror(-999), "unknown error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loader_missing_file),
		cmocka_unit_test(test_loader_not_elf),
		cmocka_unit_test(test_loader_directory),
		cmocka_unit_test(test_loader_elf_not_shared),
		cmocka_unit_test(test_loader_no_entry),
		cmocka_unit_test(test_loader_wrong_abi),
		cmocka_unit_test(test_loader_short_desc),
		cmocka_unit_test(test_loader_null_fn),
		cmocka_unit_test(test_loader_refuses_host),
		cmocka_unit_test(test_loader_older_and_newer_modules),
		cmocka_unit_test(test_loader_module_under_other_hosts),
		cmocka_unit_test(test_loader_bad_policy),
		cmocka_unit_test(test_loader_good),
		cmocka_unit_test(test_loader_full_bus),
		cmocka_unit_test(test_loader_lint),
		cmocka_unit_test(test_loader_strerror),
	};
	return cmocka_run_group_tests_name("loader", tests, NULL, NULL);
}
