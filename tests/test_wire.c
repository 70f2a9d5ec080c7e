/*
 * The wire's error objects: every code of TSEC_ERRNO_MAP goes out with its
 * own name and comes back as itself; names and messages are all distinct.
 */
#include <string.h>

#include "tests/testutil.h"
#include "common/wire.h"

static const int codes[] = {
#define CODE_OF(name, value, wire, msg) TSEC_##name,
	TSEC_ERRNO_MAP(CODE_OF)
#undef CODE_OF
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

static void test_wire_every_error_round_trips(void **state)
{
	(void)state;
	for (size_t i = 1; i < NCODES; i++) { /* every code but TSEC_OK */
		struct tsec_error err;
		json_t *o = tsec__error_json(codes[i], "here", "a message");
		char *text = json_dumps(o, JSON_COMPACT);
		json_t *back = json_loads(text, 0, NULL);

		assert_non_null(back);
		assert_string_equal(json_string_value(json_object_get(back, "code")),
				    tsec_errname(codes[i]));
		assert_int_equal(tsec__error_from_json(back, &err), codes[i]);
		assert_int_equal(err.code, codes[i]);
		assert_string_equal(err.where, "here");
		assert_string_equal(err.msg, "a message");
		json_decref(back);
		json_decref(o);
		free(text);
	}
}

static void test_wire_names_distinct(void **state)
{
	(void)state;
	for (size_t i = 0; i < NCODES; i++) {
		assert_int_equal(codes[i], -(int)i); /* dense: the enum is never renumbered */
		assert_int_equal(tsec_errcode(tsec_errname(codes[i])), codes[i]);
		assert_string_not_equal(tsec_errname(codes[i]), "unknown");
		assert_string_not_equal(tsec_strerror(codes[i]), "unknown error");
		for (size_t j = 0; j < i; j++) {
			assert_string_not_equal(tsec_errname(codes[i]), tsec_errname(codes[j]));
			assert_string_not_equal(tsec_strerror(codes[i]), tsec_strerror(codes[j]));
		}
	}
	assert_string_equal(tsec_errname(-1000), "unknown");
	assert_string_equal(tsec_errname(5), "unknown");
	assert_string_equal(tsec_strerror(-1000), "unknown error");
	assert_int_equal(tsec_errcode("no_such_name"), TSEC_EPROTO);
	assert_int_equal(tsec_errcode(NULL), TSEC_EPROTO);
}

/* Replies from an older or foreign peer: a number alone, nonsense, "ok". */
static void test_wire_error_fallbacks(void **state)
{
	struct tsec_error err;
	json_t *o;
	(void)state;

	o = json_pack("{s:i,s:s}", "errno", TSEC_EBUSY, "message", "m");
	assert_int_equal(tsec__error_from_json(o, &err), TSEC_EBUSY);
	json_decref(o);
	o = json_pack("{s:s,s:i}", "code", "made_up", "errno", TSEC_EBUSY);
	assert_int_equal(tsec__error_from_json(o, &err), TSEC_EPROTO);
	json_decref(o);
	o = json_pack("{s:s}", "code", "ok");
	assert_int_equal(tsec__error_from_json(o, &err), TSEC_EPROTO);
	json_decref(o);
	o = json_pack("{s:i}", "errno", -5000);
	assert_int_equal(tsec__error_from_json(o, &err), TSEC_EPROTO);
	assert_string_equal(err.msg, tsec_strerror(TSEC_EPROTO));
	json_decref(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_every_error_round_trips),
		cmocka_unit_test(test_wire_names_distinct),
		cmocka_unit_test(test_wire_error_fallbacks),
	};
	return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
