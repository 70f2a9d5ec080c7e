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
