/* Internal: reading a whole file (declared for users in tinysecurity/bus.h),
 * and replacing one. */
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

/*
 * Replaces the file at path with data[0..len), mode `mode` whatever the
 * umask or the old file's mode: a new file beside it, written, synced and
 * renamed over it, so a reader sees the old file or the whole new one.
 * A link at path is replaced, never followed.  0, or -1 with errno.
 */
int tsec__file_replace(const char *path, const void *data, size_t len, unsigned mode);

#endif
