/* "Did you mean ...?": the nearest name by edit distance (see suggest.h). */
#include <string.h>

#include "common/suggest.h"

#define LONGEST 64

/* Optimal string alignment distance: Levenshtein plus adjacent swaps. */
size_t tsec__edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d[LONGEST + 1][LONGEST + 1];

	if (la > LONGEST || lb > LONGEST)
		return (size_t)-1;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
			size_t best = sub < del ? sub : del;
			best = best < ins ? best : ins;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[la][lb];
}

const char *tsec__nearest(const char *word, const char *const *names, size_t n)
{
	const char *best = NULL;
	size_t bestd = (size_t)-1;

	for (size_t i = 0; word && i < n; i++) {
		size_t d = tsec__edit_distance(word, names[i]), la = strlen(word), lb = strlen(names[i]);
		size_t allowed = (la > lb ? la : lb) / 3;
		if (allowed < 2)
			allowed = 2;
		if (d <= allowed && d < bestd) {
			best = names[i];
			bestd = d;
		}
	}
	return best;
}
