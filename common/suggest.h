/* Internal: "did you mean ...?" for misspelt names (configuration keys,
 * and anywhere a closed set of names is typed by hand). */
#ifndef TSEC_COMMON_SUGGEST_H
#define TSEC_COMMON_SUGGEST_H

#include <stddef.h>

/*
 * The name of names[0..n) nearest to word by edit distance (insert,
 * delete, substitute, swap two neighbours), if it is near enough to be a
 * likely misspelling (at most a third of the longer word, and at least
 * 2 edits allowed); else NULL.  Borrowed from names.
 */
const char *tsec__nearest(const char *word, const char *const *names, size_t n);

/* The edits from a to b (as above); (size_t)-1 past 64 bytes. */
size_t tsec__edit_distance(const char *a, const char *b);

#endif
