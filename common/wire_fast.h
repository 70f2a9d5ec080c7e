/*
 * Internal: a Check message read without building a tree (issue 21).
 *
 * tsec-broker reads every message with jansson, which builds a tree of
 * allocated nodes: about 26,000 instructions for a 227-byte Check, half a
 * call.  This reader takes only the common shape of a Check,
 *   {"id": INT|STRING|null, "method": "check",
 *    "params": {"requests": [{"action": S, "resource": S,
 *                             "context": {"ttl_ms": N, "size": N,
 *                                         "recursive": B, "dest": S}}...]}}
 * (members in any order, any JSON whitespace), strictly: strings without
 * escapes, control characters or invalid UTF-8, integers without sign
 * surprises, fraction or exponent, no member twice.  The strings it hands
 * back point into the message.  Anything else, valid or not, it leaves to
 * jansson (returns 0), which then accepts or refuses it and says why as
 * before: so every error still comes from one place, and a message this
 * reader takes is one jansson takes with the same values (test_wire's
 * differential test and the wire fuzzer check both).
 *
 * The shape the client library writes (jansson's compact text, its
 * members in the order above) is tried first as text: each member's
 * name, quotes and punctuation compared as the bytes they must be, only
 * the values read.  At the first byte that differs, the reader starts
 * over in the general way.
 */
#ifndef TSEC_COMMON_WIRE_FAST_H
#define TSEC_COMMON_WIRE_FAST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tinysecurity/types.h"

enum { TSEC__FAST_ID_ABSENT, TSEC__FAST_ID_NULL, TSEC__FAST_ID_INT, TSEC__FAST_ID_STRING };

struct tsec__fast_check {
	int id_kind;
	int64_t id_int;
	struct tsec_str id_str;
	size_t n;                        /* requests read into r */
};

/*
 * Reads message p[0..len) into fc and r[0..max) (the principal and roles
 * left empty: the caller's come from authentication).  1 when it is a
 * Check of 1 to max requests in the shape above, else 0 (read it with
 * jansson).
 */
int tsec__fast_check_read(const char *p, size_t len, struct tsec__fast_check *fc,
			  struct tsec_request *r, size_t max);

/*
 * Any message read the same strict way into the tree json_loadb (with
 * JSON_REJECT_DUPLICATES) builds from it: objects, arrays, strings
 * without escapes, integers of at most 18 digits, true, false, null,
 * at most 16 deep, no member twice, an object at the top.  NULL for
 * anything else, valid or not: read it with json_loadb then, which
 * accepts or refuses it and says why.  tsec-broker's storage and lock
 * calls (their values travel as frames, so their JSON is short and
 * plain) are read so: jansson's reader cost about 26,000 instructions
 * for a 100-byte call, a third of a renewal turn's (issue 36).
 */
json_t *tsec__fast_tree(const char *p, size_t len);

#endif
