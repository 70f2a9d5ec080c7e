/* Reading a caller's option struct by its leading size (opts.h). */
#include <string.h>

#include "common/error.h"
#include "common/opts.h"

int tsec__opts_take(void *out, size_t have, size_t min, const void *in, const char *what,
		    struct tsec_error *err)
{
	size_t size;

	memcpy(&size, in, sizeof(size));
	if (size == 0)
		size = min;
	/* No options struct is this large: what stands in size is something
	 * else, most likely the first pointer of a struct from before options
	 * carried their size (a program built against an older header; a Go
	 * build cache holding such an object).  Refused before a byte past
	 * the struct is read. */
	if (size > TSEC__OPTS_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "size", "%s: the leading size (%zu) is no "
				    "struct's: a program built against a tinysecurity header "
				    "from before options had a size? rebuild it", what, size);
	if (size < min)
		return tsec__seterr(err, TSEC_EINVAL, "size", "%s of %zu bytes: none was ever "
				    "below %zu (set .size = sizeof, or 0)", what, size, min);
	for (size_t i = have; i < size; i++)
		if (((const unsigned char *)in)[i])
			return tsec__seterr(err, TSEC_EINVAL, "size", "%s of %zu bytes set a field "
					    "past the %zu this library knows: built against a "
					    "newer tinysecurity", what, size, have);
	memset(out, 0, have);
	memcpy(out, in, size < have ? size : have);
	memcpy(out, &have, sizeof(have));
	return 0;
}
