/*
 * The differential check of the tree-less Check reader (common/wire_fast.c)
 * against jansson, for test_wire and the wire fuzzer: a message the fast
 * reader takes, jansson takes too, as a Check with the same id and the
 * same requests; a message jansson refuses, the fast reader refuses.
 * Returns NULL when they agree, else what differs.
 */
#ifndef TSEC_TESTS_WIRE_DIFF_H
#define TSEC_TESTS_WIRE_DIFF_H

#include <string.h>

#include <jansson.h>

#include "common/wire.h"
#include "common/wire_fast.h"

static inline int tu_str_eq(struct tsec_str a, struct tsec_str b)
{
	return a.len == b.len && (a.len == 0 || !memcmp(a.ptr, b.ptr, a.len));
}

static inline const char *tu_wire_diff(const char *m, size_t len, int *fast_took)
{
	static struct tsec_request fr[256];
	struct tsec__fast_check fc;
	int fast = tsec__fast_check_read(m, len, &fc, fr, 256);
	json_t *j = json_loadb(m, len, JSON_REJECT_DUPLICATES, NULL), *id, *params, *reqs, *v;
	const char *why = NULL;
	size_t i;

	*fast_took = fast;
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return fast ? "the fast reader took what jansson refuses" : NULL;
	}
	if (!fast) {
		json_decref(j);
		return NULL;                     /* left to jansson: always allowed */
	}
	id = json_object_get(j, "id");
	params = json_object_get(j, "params");
	reqs = json_object_get(params, "requests");
	if (!json_is_string(json_object_get(j, "method")) ||
	    strcmp(json_string_value(json_object_get(j, "method")), "check"))
		why = "not a check to jansson";
	else if (json_object_get(j, "principal") || json_object_get(params, "principal"))
		why = "a principal claim taken";
	else if (fc.id_kind == TSEC__FAST_ID_ABSENT ? id != NULL
		 : fc.id_kind == TSEC__FAST_ID_NULL ? !json_is_null(id)
		 : fc.id_kind == TSEC__FAST_ID_INT ? !json_is_integer(id) ||
		   json_integer_value(id) != fc.id_int
		 : !json_is_string(id) || !tu_str_eq(fc.id_str, (struct tsec_str){
			   json_string_value(id), json_string_length(id) }))
		why = "the id differs";
	else if (!json_is_array(reqs) || json_array_size(reqs) != fc.n)
		why = "the requests differ in number";
	json_array_foreach(reqs, i, v) {
		struct tsec_request r;
		struct tsec_error err;

		if (why)
			break;
		if (tsec__request_from_json(v, &r, false, &err))
			why = "jansson's reading refuses a request the fast reader took";
		else if (!tu_str_eq(r.action, fr[i].action) || !tu_str_eq(r.resource, fr[i].resource) ||
			 r.ctx.has != fr[i].ctx.has ||
			 ((r.ctx.has & TSEC_CTX_TTL_MS) && r.ctx.ttl_ms != fr[i].ctx.ttl_ms) ||
			 ((r.ctx.has & TSEC_CTX_SIZE) && r.ctx.size != fr[i].ctx.size) ||
			 ((r.ctx.has & TSEC_CTX_RECURSIVE) && r.ctx.recursive != fr[i].ctx.recursive) ||
			 ((r.ctx.has & TSEC_CTX_DEST) && !tu_str_eq(r.ctx.dest, fr[i].ctx.dest)))
			why = "a request differs";
	}
	json_decref(j);
	return why;
}

/*
 * The same for the tree reader (tsec__fast_tree): a message it takes,
 * jansson takes too, into an equal tree.  NULL when they agree.
 */
static inline const char *tu_tree_diff(const char *m, size_t len, int *fast_took)
{
	json_t *t = tsec__fast_tree(m, len);
	json_t *j = json_loadb(m, len, JSON_REJECT_DUPLICATES, NULL);
	const char *why = NULL;

	*fast_took = t != NULL;
	if (t && !j)
		why = "the tree reader took what jansson refuses";
	else if (t && !json_equal(t, j))
		why = "the tree reader's tree differs from jansson's";
	json_decref(t);
	json_decref(j);
	return why;
}

#endif
