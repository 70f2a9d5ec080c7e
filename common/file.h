/* Internal: reading a whole file (declared for users in tinysecurity/bus.h). */
#ifndef TSEC_COMMON_FILE_H
#define TSEC_COMMON_FILE_H

#include <stddef.h>

#include "tinysecurity/types.h"

/*
 * Reads a whole file of at most `max` bytes into a new NUL-terminated
 * buffer (*out, caller frees) of *len bytes.  Returns 0, TSEC_ENOENT,
 * TSEC_EIO, TSEC_ETOOBIG or TSEC_ENOMEM, with details in err.
 */
TSEC_API int tsec_read_file(const char *path, size_t max, char **out, size_t *len,
			    struct tsec_error *err);

#endif
