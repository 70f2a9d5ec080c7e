/*
 * The wire's error objects: every code of TSEC_ERRNO_MAP goes out with its
 * own name and comes back as itself; names and messages are all distinct.
 */
#include <limits.h>
#include <string.h>

#include "tests/testutil.h"
#include "tests/wire_diff.h"
#include "broker/client/client_private.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/jsonw.h"
#include "common/methods.h"
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

/*
 * A peer's error with a code no map has (INT_MIN among them, which was
 * negated: undefined behaviour) or text carrying an escape sequence
 * (issue 34, item 12): read as a protocol error, the text tamed.
 */
static void test_wire_hostile_errors(void **state)
{
	static const char *const replies[] = {
		"{\"errno\": -2147483648, \"message\": \"x\"}",
		"{\"errno\": -9223372036854775808, \"message\": \"x\"}",
		"{\"errno\": 2147483647, \"message\": \"x\"}",
		"{\"errno\": -29999, \"message\": \"x\"}",
	};
	struct tsec_error err;
	(void)state;

	assert_string_equal(tsec_strerror(INT_MIN), "unknown error");
	assert_string_equal(tsec_errname(INT_MIN), "unknown");
	assert_string_equal(tsec_errname(INT_MIN + 1), "unknown");
	for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
		json_t *e = json_loads(replies[i], 0, NULL);
		assert_non_null(e);
		assert_int_equal(tsec__error_from_json(e, &err), TSEC_EPROTO);
		json_decref(e);
	}
	{
		json_t *e = json_loads("{\"code\": \"denied\", \"where\": \"a\\u001b]0;x\\u0007\","
				       " \"message\": \"\\u001b[2Jcleared\\u009b1mbold\\u007f\"}", 0,
				       NULL);
		assert_non_null(e);
		assert_int_equal(tsec__error_from_json(e, &err), TSEC_EDENIED);
		assert_string_equal(err.msg, "?[2Jcleared??1mbold?");
		assert_string_equal(err.where, "a?]0;x?");
		json_decref(e);
	}
	/* Text the store itself formats, from a peer, the same way. */
	tsec__seterr(&err, TSEC_EIO, "etcd", "etcd said: %s", "bad\r\nX-Injected: 1");
	assert_string_equal(err.msg, "etcd said: bad??X-Injected: 1");
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
/* The length of the string member `name` of o (or of o itself if
 * name is NULL), or -1. */
static long str_len(json_t *o, const char *name)
{
	json_t *v = name ? json_object_get(o, name) : o;

	return json_is_string(v) ? (long)json_string_length(v) : -1;
}

/*
 * What a module writes is read no further than its arrays: a decision,
 * report and explanation whose every string fills its array with no NUL
 * and whose counts run past their arrays become JSON of the arrays'
 * lengths and counts.  Each sits in a heap block of its own size, so
 * ASan stops a read past it (the report's key, issuer and domain, and
 * every id and message, were read as C strings before).
 */
static void test_wire_module_strings_bounded(void **state)
{
	struct tsec_decision *d = malloc(sizeof(*d));
	struct tsec_report *r = malloc(sizeof(*r));
	struct tsec_explain *ex = malloc(sizeof(*ex));
	struct tsec_request req = { .principal = { "svc:a", 5 } };
	struct tsec__jw w;
	json_t *j, *a;
	(void)state;

	assert_non_null(d);
	assert_non_null(r);
	assert_non_null(ex);
	memset(d, 'x', sizeof(*d));
	d->nrules = 255;
	d->status = TSEC_STATUS_DENIED;
	d->flags = 0;
	j = tsec__decision_to_json(d);
	assert_int_equal(json_array_size(a = json_object_get(j, "rules")), TSEC_DECISION_RULES);
	assert_int_equal(str_len(json_array_get(a, 3), NULL), TSEC_ID_MAX);
	assert_int_equal(str_len(j, "field"), sizeof(d->field));
	assert_int_equal(str_len(j, "detail"), TSEC_DETAIL_MAX);
	json_decref(j);
	tsec__jw_init(&w);
	tsec__decision_write(&w, d);
	assert_false(w.failed);
	assert_true(w.len > 4 * TSEC_ID_MAX + TSEC_DETAIL_MAX);
	tsec__jw_free(&w);

	memset(r, 'x', sizeof(*r));
	r->decision = *d;
	r->action = -1;
	r->kind = 0;
	r->nmatched = r->nerrors = 100000;
	for (int i = 0; i < TSEC_REPORT_MATCHES; i++)
		r->matched[i].effect = 1;
	j = tsec__report_to_json(r);
	a = json_object_get(j, "attributes");
	assert_int_equal(str_len(a, "key"), sizeof(r->key));
	assert_int_equal(str_len(a, "issuer"), sizeof(r->issuer));
	assert_int_equal(str_len(a, "domain"), sizeof(r->domain));
	assert_int_equal(json_array_size(json_object_get(j, "matched")), TSEC_REPORT_MATCHES);
	assert_int_equal(json_array_size(a = json_object_get(j, "errors")), TSEC_REPORT_ERRORS);
	assert_int_equal(str_len(json_array_get(a, TSEC_REPORT_ERRORS - 1), "message"),
			 TSEC_DETAIL_MAX);

	memset(ex, 'x', sizeof(*ex));
	ex->explained = 1;
	ex->nnot_applied = 100000;
	ex->has_cert = 1;
	for (int i = 0; i < TSEC_EXPLAIN_MAX; i++)
		ex->not_applied[i].effect = ex->not_applied[i].dest = 0;
	tsec__explain_to_json(j, ex, &req);
	assert_int_equal(json_array_size(a = json_object_get(j, "not_applied")), TSEC_EXPLAIN_MAX);
	assert_int_equal(str_len(json_array_get(a, TSEC_EXPLAIN_MAX - 1), "why"),
			 TSEC_DETAIL_MAX);
	assert_int_equal(str_len(j, "certificate"), sizeof(ex->cert));
	json_decref(j);
	/* Sealed, for the tools that read them as C strings. */
	tsec__decision_seal(d);
	assert_int_equal(d->nrules, TSEC_DECISION_RULES);
	assert_int_equal(strlen(d->rules[3]), TSEC_ID_MAX - 1);
	assert_int_equal(strlen(d->detail), TSEC_DETAIL_MAX - 1);
	tsec__explain_seal(ex);
	assert_int_equal(ex->nnot_applied, TSEC_EXPLAIN_MAX);
	assert_int_equal(strlen(ex->not_applied[TSEC_EXPLAIN_MAX - 1].why), TSEC_DETAIL_MAX - 1);
	assert_int_equal(strlen(ex->cert), sizeof(ex->cert) - 1);
	free(d);
	free(r);
	free(ex);
}

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

/*
 * The writer's strings are JSON that jansson reads back as the same text:
 * every byte value alone and between others, quotes, backslashes,
 * controls; DEL and the C1 controls escaped; invalid UTF-8 (a stray
 * continuation, an overlong form, a surrogate, a cut sequence) as U+FFFD,
 * so no raw control byte is ever written.
 */
static void test_wire_writer_strings(void **state)
{
	static const struct { const char *in; size_t n; const char *back; } t[] = {
		{ "plain", 5, "plain" },
		{ "q\"b\\s/", 6, "q\"b\\s/" },
		{ "nl\nx\r\t\b\f", 8, "nl\nx\r\t\b\f" },
		{ "nul\0x", 5, NULL },
		{ "del\x7f", 4, "del\x7f" },
		{ "c1\xc2\x85", 4, "c1\xc2\x85" },
		{ "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x91", 14,
		  "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x91" },
		{ "bad\x80x", 5, "bad\xef\xbf\xbdx" },
		{ "over\xc0\xafx", 7, "over\xef\xbf\xbd\xef\xbf\xbdx" },
		{ "sur\xed\xa0\x80", 6, "sur\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "cut\xe2\x82", 5, "cut\xef\xbf\xbd\xef\xbf\xbd" },
		/* Bidi and invisible characters escaped, read back the same. */
		{ "rlo\xe2\x80\xae", 6, "rlo\xe2\x80\xae" },
		{ "zw\xe2\x80\x8b", 5, "zw\xe2\x80\x8b" },
		{ "tag\xf3\xa0\x80\x81", 7, "tag\xf3\xa0\x80\x81" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct tsec__jw w;
		char *text;
		size_t n;
		json_t *j;

		tsec__jw_init(&w);
		tsec__jw_str(&w, t[i].in, t[i].n);
		text = tsec__jw_take(&w, &n);
		assert_non_null(text);
		assert_int_equal(strlen(text), n);
		for (size_t k = 0; k < n; k++)
			if ((unsigned char)text[k] < 0x20 || text[k] == 0x7f)
				fail_msg("case %zu: raw control byte 0x%02x written", i, text[k]);
		if (strstr(text, "\xe2\x80\xae") || strstr(text, "\xe2\x80\x8b") ||
		    strstr(text, "\xf3\xa0\x80"))
			fail_msg("case %zu: a bidi or invisible character written raw: %s", i, text);
		j = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!j)
			fail_msg("case %zu: jansson cannot read back %s", i, text);
		if (t[i].back) {
			assert_int_equal(json_string_length(j), strlen(t[i].back));
			assert_memory_equal(json_string_value(j), t[i].back, strlen(t[i].back));
		} else {
			assert_int_equal(json_string_length(j), t[i].n);
			assert_memory_equal(json_string_value(j), t[i].in, t[i].n);
		}
		json_decref(j);
		free(text);
	}
	/* Every single byte, and every byte between two letters. */
	for (unsigned b = 0; b < 256; b++) {
		char in[3] = { 'a', (char)b, 'z' };
		struct tsec__jw w;
		char *text;
		json_t *j;

		tsec__jw_init(&w);
		tsec__jw_str(&w, in, 3);
		text = tsec__jw_take(&w, NULL);
		j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!j)
			fail_msg("byte 0x%02x: %s does not read back", b, text);
		if (b < 0x80)
			assert_memory_equal(json_string_value(j), in, 3);
		json_decref(j);
		free(text);
	}
	/* Every byte at every place of a 27-byte string: the writer scans
	 * sixteen bytes a step (SSE2), then eight, then one: each place of
	 * each kind of step. */
	for (unsigned b = 0; b < 256; b++)
		for (unsigned at = 0; at < 27; at++) {
			char in[27];
			struct tsec__jw w;
			char *text;
			json_t *j;

			memset(in, 'k', sizeof(in));
			in[at] = (char)b;
			tsec__jw_init(&w);
			tsec__jw_str(&w, in, sizeof(in));
			text = tsec__jw_take(&w, NULL);
			for (size_t k = 0; text[k]; k++)
				if ((unsigned char)text[k] < 0x20 || text[k] == 0x7f ||
				    (b >= 0x80 && (unsigned char)text[k] == b))
					fail_msg("byte 0x%02x at %u written raw: %s", b, at, text);
			j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
			if (!j)
				fail_msg("byte 0x%02x at %u: %s does not read back", b, at, text);
			if (b < 0x80)
				assert_memory_equal(json_string_value(j), in, sizeof(in));
			json_decref(j);
			free(text);
		}
}

/* A decision written as text is what jansson writes for its tree. */
static void test_wire_writer_decisions(void **state)
{
	struct tsec_decision d[3];
	(void)state;

	memset(d, 0, sizeof(d));
	d[0].allow = 1;
	d[0].status = TSEC_STATUS_ALLOWED;
	d[0].nrules = 2;
	strcpy(d[0].rules[0], "web-reads-certs");
	strcpy(d[0].rules[1], "a\"quoted\\id");
	d[1].status = TSEC_STATUS_INVALID;
	strcpy(d[1].field, "resource");
	strcpy(d[1].detail, "resource: control character in key (byte 3)");
	d[2].status = TSEC_STATUS_FLOOR;
	d[2].nrules = 4;
	d[2].flags = TSEC_DECISION_MORE_RULES | TSEC_DECISION_COND_ERROR;
	for (int i = 0; i < 4; i++)
		snprintf(d[2].rules[i], TSEC_ID_MAX, "floor-%d", i);
	for (int i = 0; i < 3; i++) {
		json_t *tree = tsec__decision_to_json(&d[i]);
		char *want = json_dumps(tree, JSON_COMPACT), *got;
		struct tsec__jw w;

		tsec__jw_init(&w);
		tsec__decision_write(&w, &d[i]);
		got = tsec__jw_take(&w, NULL);
		assert_string_equal(got, want);
		free(got);
		free(want);
		json_decref(tree);
	}
	/* Every status (and one past them), each written as jansson would. */
	for (unsigned st = 0; st <= TSEC_STATUS_DEFAULT + 1; st++) {
		struct tsec_decision x;
		json_t *tree;
		char *want, *got;
		struct tsec__jw w;

		memset(&x, 0, sizeof(x));
		x.status = (uint8_t)st;
		x.allow = st == TSEC_STATUS_ALLOWED;
		tree = tsec__decision_to_json(&x);
		want = json_dumps(tree, JSON_COMPACT);
		tsec__jw_init(&w);
		tsec__decision_write(&w, &x);
		got = tsec__jw_take(&w, NULL);
		assert_string_equal(got, want);
		free(got);
		free(want);
		json_decref(tree);
	}
}

/* Numbers at their limits, and a writer that grows past its first block. */
static void test_wire_writer_numbers(void **state)
{
	struct tsec__jw w;
	char *text;
	(void)state;

	tsec__jw_init(&w);
	tsec__jw_int(&w, INT64_MIN);
	TSEC__JW_LIT(&w, ",");
	tsec__jw_int(&w, INT64_MAX);
	TSEC__JW_LIT(&w, ",");
	tsec__jw_uint(&w, UINT64_MAX);
	TSEC__JW_LIT(&w, ",");
	tsec__jw_int(&w, 0);
	for (int i = 0; i < 1000; i++)
		TSEC__JW_LIT(&w, ",true");
	text = tsec__jw_take(&w, NULL);
	assert_non_null(text);
	assert_memory_equal(text, "-9223372036854775808,9223372036854775807,18446744073709551615,0,true",
			    strlen("-9223372036854775808,9223372036854775807,18446744073709551615,0,true"));
	assert_int_equal(strlen(text), 63 + 1000 * 5);
	free(text);
}

/*
 * Each seed, which the fast reader must take, with every byte replaced by
 * each of a set of bytes that break JSON or change its meaning, deleted,
 * or with one put before it ("-null" is one insertion away from "null"),
 * and cut there: diff (tu_wire_diff, tu_tree_diff) must agree with
 * jansson on each.  *took counts the messages the fast reader took.
 */
static void mutate_all(const char *const *seeds, size_t nseeds,
		       const char *(*diff)(const char *, size_t, int *), size_t *took,
		       size_t *tried)
{
	static const unsigned char subst[] = {
		0x00, ' ', '"', '\\', ',', ':', '{', '}', '[', ']', '0', '1', '-', 'e', '.',
		'a', 'u', 'n', 't', 'f', 0x80, 0xc3, 0xed, 0xff, 0x1f, 0x7f, '\n',
	};

	/* Room for one byte more than the longest seed. */
	for (size_t s = 0; s < nseeds; s++) {
		const char *seed = seeds[s];
		size_t n = strlen(seed);
		char m[512];
		const char *why;
		int fast;

		assert_true(n < sizeof(m));
		if ((why = diff(seed, n, &fast)) || !fast)
			fail_msg("seed %zu: %s", s, why ? why : "not taken by the fast reader");
		for (size_t at = 0; at < n; at++) {
			for (size_t k = 0; k <= 2 * sizeof(subst); k++) {
				size_t len = n;

				memcpy(m, seed, n);
				if (k == sizeof(subst)) {        /* deleted */
					memmove(m + at, m + at + 1, n - at - 1);
					len = n - 1;
				} else if (k > sizeof(subst)) {  /* inserted */
					memmove(m + at + 1, m + at, n - at);
					m[at] = (char)subst[k - sizeof(subst) - 1];
					len = n + 1;
				} else {
					m[at] = (char)subst[k];
				}
				if ((why = diff(m, len, &fast)))
					fail_msg("seed %zu, byte %zu, change %zu: %s (%.*s)", s, at, k,
						 why, (int)len, m);
				*took += (size_t)fast;
				(*tried)++;
			}
			if ((why = diff(seed, at, &fast)))  /* cut there */
				fail_msg("seed %zu cut at %zu: %s", s, at, why);
		}
	}
}

/*
 * The tree-less Check reader against jansson (issue 21): seeds in every
 * shape it takes, and each seed with every byte replaced by each of a set
 * of bytes that break JSON or change its meaning, deleted, or cut there.
 * A message the fast reader takes, jansson takes with the same id and
 * requests; one jansson refuses, the fast reader refuses.
 */
static void test_wire_fast_reader_agrees(void **state)
{
	static const char *const seeds[] = {
		"{\"id\":1,\"method\":\"check\",\"params\":{\"requests\":[{\"action\":"
		"\"storage.load\",\"resource\":\"certificates/acme/example.com/example.com.crt\"}]}}",
		" {\"params\" : {\"requests\" : [ {\"resource\":\"a/b\", \"action\":\"lock.acquire\","
		"\"context\":{\"ttl_ms\":60000,\"size\":0,\"recursive\":false,\"dest\":\"c/d\"}},"
		"{\"action\":\"storage.list\",\"resource\":\"x\",\"context\":{}}]},\n"
		"\"method\":\"check\", \"id\":\"req-\xc3\xa9\"}\t\r\n",
		"{\"method\":\"check\",\"id\":null,\"params\":{\"requests\":[{\"action\":\"a\","
		"\"resource\":\"\",\"context\":{\"recursive\":true}}]}}",
		/* The client library's own shape, two requests with contexts. */
		"{\"id\":\"a-1\",\"method\":\"check\",\"params\":{\"requests\":[{\"action\":"
		"\"lock.acquire\",\"resource\":\"locks/x\",\"context\":{\"ttl_ms\":5000}},"
		"{\"action\":\"storage.list\",\"resource\":\"certificates\",\"context\":"
		"{\"recursive\":true}}]}}",
		"{\"id\":-12345678901234567,\"method\":\"check\",\"params\":{\"requests\":[{"
		"\"action\":\"storage.move\",\"resource\":\"k\xe2\x82\xac\",\"context\":{\"dest\":"
		"\"\xf0\x9f\x94\x91\"}}]}}",
	};
	size_t took = 0, tried = 0;
	(void)state;

	mutate_all(seeds, sizeof(seeds) / sizeof(seeds[0]), tu_wire_diff, &took, &tried);
	/* The mutations keep some messages in the shape (a letter for a
	 * letter), so both outcomes were met. */
	assert_true(took > 100 && took < tried / 2);
}

/*
 * The tree reader against jansson (issue 36), the same way: storage and
 * lock calls as the client library and the Go binding write them, and
 * JSON in every shape the reader takes (nesting, arrays, literals,
 * negative numbers, UTF-8, spaces), each byte replaced, deleted, put
 * before, or the message cut there.  A message it takes, jansson takes
 * into an equal tree.
 */
static void test_wire_tree_reader_agrees(void **state)
{
	static const char *const seeds[] = {
		"{\"id\":3,\"method\":\"lock.acquire\",\"params\":{\"name\":\"example.com\","
		"\"ttl_ms\":60000,\"timeout_ms\":10000,\"deadline_ms\":20000}}",
		"{\"id\":4,\"method\":\"store.exists\",\"params\":{\"keys\":[\"a/b.crt\","
		"\"a/b.key\",\"a/b.json\"]}}",
		"{\"id\":5,\"method\":\"store.save_cert\",\"params\":{\"issuer\":\"acme\","
		"\"domain\":\"example.com\",\"cert_frame\":1,\"key_frame\":2,\"meta_frame\":3},"
		"\"frames\":true}",
		"{\"id\":6,\"method\":\"lock.release\",\"params\":{\"lock\":{\"name\":\"x\","
		"\"token\":\"0123abcd\",\"fence\":-17},\"ok\":false,\"none\":null,\"e\":{},"
		"\"a\":[[],[1,[true]],{}]}}",
		" {\"method\" : \"store.get\" ,\n\"params\":{ \"key\" : \"k\xc3\xa9\xf0\x9f\x94\x91\" } ,"
		"\"id\":\"r-\xe2\x82\xac\"}\t\r\n",
	};
	size_t took = 0, tried = 0;
	(void)state;

	mutate_all(seeds, sizeof(seeds) / sizeof(seeds[0]), tu_tree_diff, &took, &tried);
	/* Both outcomes met: a letter for a letter keeps a message valid. */
	assert_true(took > 100 && took < tried / 2);
	/* Left to jansson, valid or not: escapes, fractions, a member twice,
	 * 17 deep, a top that is not an object, a number too long. */
	{
		static const char *const left[] = {
			"{\"a\":\"\\n\"}", "{\"a\":1.5}", "{\"a\":1,\"a\":2}",
			"{\"a\":[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}", "[1]", "{\"a\":1234567890123456789}",
			"{\"a\":1e3}", "{\"a\":\"\\u00e9\"}",
		};

		for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
			json_t *t = tsec__fast_tree(left[i], strlen(left[i]));

			if (t)
				fail_msg("taken, not left to jansson: %s", left[i]);
		}
	}
}

/*
 * A '-' that does not start a number is not consumed: "-null" as an id
 * is refused by both readers (issue 34: the fast reader read a failed
 * number's '-' and then took "null", where jansson refuses the message).
 */
static void test_wire_fast_minus_null(void **state)
{
	static const char *const bad[] = {
		"{\"id\":-null,\"method\":\"check\",\"params\":{\"requests\":[{\"action\":"
		"\"storage.load\",\"resource\":\"a\"}]}}",
		"{\"method\":\"check\",\"id\":-null,\"params\":{\"requests\":[{\"action\":"
		"\"storage.load\",\"resource\":\"a\"}]}}",
		"{\"id\":-\"x\",\"method\":\"check\",\"params\":{\"requests\":[{\"action\":"
		"\"storage.load\",\"resource\":\"a\"}]}}",
		"{\"method\":\"check\",\"params\":{\"requests\":[{\"action\":\"lock.acquire\","
		"\"resource\":\"a\",\"context\":{\"ttl_ms\":-true}}]},\"id\":1}",
	};
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *why;
		int fast;
		if ((why = tu_wire_diff(bad[i], strlen(bad[i]), &fast)))
			fail_msg("%zu: %s", i, why);
		assert_int_equal(fast, 0);
	}
}

/* The eight-bytes-a-step test marks exactly the bytes a byte-wise look
 * would stop at, and the first of them is found (the fast reader and the
 * writer jump straight to it). */
static uint64_t special_ref(const unsigned char b[8], bool del)
{
	uint64_t m = 0;

	for (int i = 0; i < 8; i++)
		if (b[i] < 0x20 || b[i] == '"' || b[i] == '\\' || b[i] >= 0x80 ||
		    (del && b[i] == 0x7f))
			m |= 0x80ull << (8 * i);
	return m;
}

static void test_wire_special_mask(void **state)
{
	unsigned char b[8];
	uint64_t x, seed = 0x9e3779b97f4a7c15ull;
	(void)state;

	/* Every byte value at every place, among plain ones. */
	for (int v = 0; v < 256; v++)
		for (int at = 0; at < 8; at++)
			for (int del = 0; del < 2; del++) {
				memset(b, 'a', 8);
				b[at] = (unsigned char)v;
				memcpy(&x, b, 8);
				assert_int_equal(tsec__json_special_mask(x, del), special_ref(b, del));
				if (special_ref(b, del))
					assert_int_equal(tsec__first_marked(tsec__json_special_mask(x, del)),
							 at);
			}
	/* Words of mixed bytes: several marked, the first found. */
	for (int i = 0; i < 200000; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		x = seed ^ (seed >> 29);
		memcpy(b, &x, 8);
		for (int del = 0; del < 2; del++) {
			uint64_t m = tsec__json_special_mask(x, del);
			assert_int_equal(m, special_ref(b, del));
			if (m) {
				unsigned f = tsec__first_marked(m);
				assert_true(special_ref(b, del) & (0x80ull << (8 * f)));
				for (unsigned k = 0; k < f; k++)
					assert_false(special_ref(b, del) & (0x80ull << (8 * k)));
			}
		}
	}
}

/*
 * A reply with a member twice is malformed (found by fuzz_client): the
 * client hands a result on as its text, and {"id":5,"result":1,"id":5}
 * read by jansson (which keeps the last) gave the caller 1,"id":5,
 * which is no JSON value.  A plain reply still gives its result.
 */
static void test_wire_client_reply_twice(void **state)
{
	static const char *twice[] = {
		"{\"id\":5,\"result\":1,\"id\":5}",
		"{\"id\":5,\"result\":1,\"result\":2}",
		"{\"id\":5,\"error\":{\"code\":-1},\"error\":{\"code\":-2}}",
	};
	struct tsec_client c;
	struct tsec_error err;
	char *result = NULL;

	(void)state;
	memset(&c, 0, sizeof(c));
	for (size_t i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
		assert_int_equal(tsec__client_finish(&c, 5, strdup(twice[i]), &result, &err),
				 TSEC_EPROTO);
		assert_null(result);
		assert_string_equal(err.msg, "malformed reply");
	}
	assert_int_equal(tsec__client_finish(&c, 5, strdup("{\"id\":5,\"result\":[1, 2]}"),
					     &result, &err), 0);
	assert_string_equal(result, "[1, 2]");
	free(result);
	free(c.last_error);
}

/*
 * What the client sends again after a failover comes from the method
 * list (issue 53, item 1): every method that changes nothing, and
 * lock.renew and cert.obtain; nothing that writes once.  Before, the
 * client kept a list of its own, and remote.load, remote.exists and
 * remote.load_archived, all reads, were never resent.
 */
static void test_wire_client_resends_reads(void **state)
{
	static const char *again[] = {
		"check", "evaluate", "health", "stats", "store.get", "store.exists",
		"store.list", "store.stat", "store.load_cert", "remote.load", "remote.exists",
		"remote.load_archived", "lock.renew", "cert.obtain",
	};
	static const char *once[] = {
		"store.put", "store.put_many", "store.delete", "store.move", "store.save_cert",
		"remote.publish", "remote.archive_key", "remote.sweep", "remote.recover",
		"lock.acquire", "lock.release", "batch", "reload", "policy.publish", "cancel",
		"no.such", "", NULL,
	};

	(void)state;
	for (size_t i = 0; i < sizeof(again) / sizeof(again[0]); i++)
		if (!tsec__client_resendable(again[i]))
			fail_msg("%s is not sent again", again[i]);
	for (size_t i = 0; i < sizeof(once) / sizeof(once[0]); i++)
		if (tsec__client_resendable(once[i]))
			fail_msg("%s would be sent again", once[i]);
	assert_int_equal(sizeof(again) / sizeof(again[0]) + sizeof(once) / sizeof(once[0]) - 3,
			 TSEC__M_COUNT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_every_error_round_trips),
		cmocka_unit_test(test_wire_writer_strings),
		cmocka_unit_test(test_wire_special_mask),
		cmocka_unit_test(test_wire_fast_reader_agrees),
		cmocka_unit_test(test_wire_fast_minus_null),
		cmocka_unit_test(test_wire_tree_reader_agrees),
		cmocka_unit_test(test_wire_hostile_errors),
		cmocka_unit_test(test_wire_writer_decisions),
		cmocka_unit_test(test_wire_writer_numbers),
		cmocka_unit_test(test_wire_names_distinct),
		cmocka_unit_test(test_wire_error_fallbacks),
		cmocka_unit_test(test_wire_module_strings_bounded),
		cmocka_unit_test(test_wire_client_reply_twice),
		cmocka_unit_test(test_wire_client_resends_reads),
	};
	return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
