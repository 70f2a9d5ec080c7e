/*
 * Reading a caller's option struct by its leading size (types.h,
 * TSEC_OPTS_HAS): what the library's open functions do first.
 */
#ifndef TSEC_COMMON_OPTS_H
#define TSEC_COMMON_OPTS_H

#include <stddef.h>

#include "tinysecurity/types.h"

/* The largest option struct a caller may pass (size above it: refused). */
#define TSEC__OPTS_MAX 4096

/*
 * Copies the caller's struct in (its first member a size_t `size`: 0
 * for min) into out, this library's struct of have bytes: what in holds
 * of it, the rest zero, out's size set to have.  TSEC_EINVAL with err
 * set when size is below min (no struct of this kind was ever that
 * small) or above TSEC__OPTS_MAX (no size at all), or when in is larger
 * than have and sets a byte past it (a field this library does not
 * know).  in is read for its size's bytes only.
 */
int tsec__opts_take(void *out, size_t have, size_t min, const void *in, const char *what,
		    struct tsec_error *err);

/*
 * Backend options by name, as a URI's query (SQLite's URI parameters):
 * "name=value&name=value".  A name is 1-32 of [a-z0-9_], each at most
 * once; a value up to TSEC__PARAM_MAX bytes once its %XX escapes are
 * decoded (write '&', '=' and '%' in a value as %26, %3D and %25).  A
 * backend lists the names it reads (struct tsec__backend_kind), so a new
 * backend option changes no public struct.
 */
#define TSEC__PARAM_MAX 1024
#define TSEC__PARAMS_MAX 64      /* names in one params: each is checked
				   against every other, so bounded */

/* 0 when params (NULL: none) is well formed and names only names of
 * known (NULL-terminated; NULL: none); else TSEC_EINVAL with err saying
 * which, and the nearest known name.  who names the taker ("the redis
 * backend"). */
int tsec__params_check(const char *params, const char *const *known, const char *who,
		       struct tsec_error *err);

/* name's value in params (checked), decoded into out: 1; 0 when absent. */
int tsec__param(const char *params, const char *name, char out[TSEC__PARAM_MAX + 1]);

#endif
