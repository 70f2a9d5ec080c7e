/* Internal: shared error helpers (see common/error.c). */
#ifndef TSEC_COMMON_ERROR_H
#define TSEC_COMMON_ERROR_H

#include <string.h>
#include "tinysecurity/types.h"

/*
 * Fills *err (if not NULL) with code, place and a printf-style message
 * (fmt NULL: the code's name) and returns code, so callers can write
 * `return tsec__seterr(err, TSEC_EINVAL, "x", "...")`.
 */
int tsec__seterr(struct tsec_error *err, int code, const char *where,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Copies src into dst of size n, truncating, always NUL-terminating. */
static inline void tsec__strlcpy(char *dst, const char *src, size_t len,
				 size_t n)
{
	if (len >= n)
		len = n - 1;
	memcpy(dst, src, len);
	dst[len] = '\0';
}

#endif
