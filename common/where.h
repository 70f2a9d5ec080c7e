/*
 * Internal: where in a JSON text a problem is, as FILE:LINE:COLUMN.
 *
 * The module names a policy error by a JSON pointer ("/rules/3/effect")
 * or, for a syntax error, by line and column; every command that says so
 * to a person (tsec, tsec-broker) words it one way:
 *
 *     policy.json:12:7: /rules/3/effect: effect must be "allow" or "deny"
 *
 * Lines and columns count from 1; a column counts characters (UTF-8
 * sequences), as jansson and editors do.
 */
#ifndef TSEC_COMMON_WHERE_H
#define TSEC_COMMON_WHERE_H

#include <stddef.h>

#include <jansson.h>

/*
 * Past the JSON value at p (strings followed through their escapes,
 * brackets counted, nothing built); NULL if it does not end before end.
 * items, if given, counts the objects directly inside a top-level array.
 */
const char *tsec__json_past(const char *p, const char *end, size_t *items);

/* Line and column of text[off]. */
void tsec__text_pos(const char *text, size_t len, size_t off, int *line, int *col);

/*
 * The offset in text of what the JSON pointer ptr names: a member's key,
 * an element's first byte; or, when the last parts do not exist (a
 * missing field), of the deepest part that does.  0 when text is no
 * JSON object or array to walk.
 */
size_t tsec__pointer_at(const char *text, size_t len, const char *ptr);

/*
 * Line and column of a module error (where, msg) in text: a syntax
 * error's own ("JSON error at line L column C: ..."; *rest then points
 * past that prefix), or the pointer's.  *rest is msg otherwise.
 */
void tsec__error_pos(const char *text, size_t len, const char *where, const char *msg,
		     int *line, int *col, const char **rest);

/* "PATH:L:C: [WHERE: ]MSG" into out[0..n), for a module error in text. */
void tsec__error_say(char *out, size_t n, const char *path, const char *text, size_t len,
		     const char *where, const char *msg);

/* "PATH:L:C: TEXT" into out[0..n) for jansson's error je reading path;
 * "PATH: TEXT" when je has no position (the file could not be read). */
void tsec__json_error_say(char *out, size_t n, const char *path, const json_error_t *je);

#endif
