/*
 * libFuzzer: common/where.c, which walks a policy's text (any bytes a
 * file holds) to the place a JSON pointer names.  The input, split at its
 * first NUL, is the text and the pointer; the module's own error for the
 * text is placed too.  Nothing may read past the text, and every place
 * found must lie inside it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/where.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t tl = nul ? (size_t)(nul - data) : size;
	char *text = malloc(tl ? tl : 1), *ptr;
	char out[512];
	const char *rest;
	size_t off;
	int line, col;

	if (!text)
		return 0;
	memcpy(text, data, tl);         /* exactly tl bytes: no NUL after them */
	ptr = nul ? strndup((const char *)nul + 1, size - tl - 1) : strdup("/rules/0/effect");
	if (!ptr) {
		free(text);
		return 0;
	}
	off = tsec__pointer_at(text, tl, ptr);
	if (off > tl)
		abort();
	tsec__text_pos(text, tl, off, &line, &col);
	if (line < 1 || col < 1)
		abort();
	tsec__error_say(out, sizeof(out), "p.json", text, tl, ptr, "a message");
	tsec__error_pos(text, tl, "", ptr, &line, &col, &rest);
	if (line < 1 && rest == ptr)
		abort();
	free(ptr);
	free(text);
	return 0;
}
