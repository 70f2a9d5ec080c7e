/*
 * The policy document's reader.
 *
 * The policy is read as a stream of top-level members and, inside "floor"
 * and "rules", of single rules: jansson parses each member value and each
 * rule on its own (JSON_DISABLE_EOF_CHECK reports how many bytes it read)
 * and the tree is freed before the next rule.  Peak memory stays at one
 * rule's tree instead of the whole document's, and the allocator reuses
 * the same few hot chunks.  This file only checks the punctuation between
 * values; every value is parsed by jansson.
 */
#include <string.h>

#include "common/where.h"
#include "module/compile_private.h"

void tsec__doc_skip_ws(struct tsec__doc *d)
{
	while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' ||
				 *d->p == '\n' || *d->p == '\r'))
		d->p++;
}

static int syntax_at(struct tsec__doc *d, int line, int col, const char *what)
{
	return tsec__seterr(d->err, TSEC_EPOLICY, "",
			    "JSON error at line %d column %d: %s", line, col, what);
}

/* A syntax error at `at`, with line and column (common/where.h). */
int tsec__doc_syntax(struct tsec__doc *d, const char *at, const char *what)
{
	int line, col;

	tsec__text_pos(d->base, (size_t)(d->end - d->base), (size_t)(at - d->base), &line, &col);
	return syntax_at(d, line, col, what);
}

int tsec__doc_expect(struct tsec__doc *d, char c, const char *what)
{
	tsec__doc_skip_ws(d);
	if (d->p >= d->end || *d->p != c)
		return tsec__doc_syntax(d, d->p, what);
	d->p++;
	return 0;
}

/* Parses one JSON value at the current position into *out (new ref). */
int tsec__doc_value(struct tsec__doc *d, json_t **out)
{
	json_error_t je;

	tsec__doc_skip_ws(d);
	*out = json_loadb(d->p, (size_t)(d->end - d->p), JFLAGS, &je);
	if (!*out) {
		/* jansson's line and column count from d->p: moved to the
		 * document's, they name the character it stopped at. */
		int line, col;

		if (je.line < 1)
			return tsec__doc_syntax(d, d->p, je.text);
		tsec__text_pos(d->base, (size_t)(d->end - d->base), (size_t)(d->p - d->base),
			       &line, &col);
		col = je.line > 1 ? je.column : col + je.column - 1;
		return syntax_at(d, line + je.line - 1, col > 1 ? col : 1, je.text);
	}
	d->p += je.position;
	return 0;
}

/*
 * Skips one value without building it, for the first pass: strings are
 * followed through their escapes and brackets are counted.  Returns NULL
 * on an unterminated value.  Only finds the end; the second pass has
 * jansson parse what was skipped.
 */
const char *tsec__doc_skip_value(const char *p, const char *end, size_t *items)
{
	return tsec__json_past(p, end, items);
}

