/*
 * Reading a whole file, bounded, and replacing one whole (common/file.h).  In common/ because the
 * signature checks read files too and common/ depends on nothing above
 * it; exported as part of the bus's API (tinysecurity/bus.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/error.h"
#include "common/file.h"

int tsec_read_file(const char *path, size_t max, char **out, size_t *len,
		   struct tsec_error *err)
{
	FILE *f = NULL;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*len = 0;
	f = fopen(path, "rb");
	if (!f)
		return tsec__seterr(err, errno == ENOENT ? TSEC_ENOENT : TSEC_EIO,
				    path, "%s: %s", path, strerror(errno));
	for (;;) {
		size_t got;
		if (cap - n < 4096 + 1) {
			char *nb;
			cap = cap ? cap * 2 : 65536;
			if (cap > max + 4096 + 1)
				cap = max + 4096 + 1;
			nb = realloc(buf, cap);
			if (!nb) {
				rc = tsec__seterr(err, TSEC_ENOMEM, path, NULL);
				goto out;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (n > max) {
			rc = tsec__seterr(err, TSEC_ETOOBIG, path,
					  "%s: larger than %zu bytes", path, max);
			goto out;
		}
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		rc = tsec__seterr(err, TSEC_EIO, path, "%s: read error", path);
		goto out;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	fclose(f);
	return rc;
}

int tsec__file_replace(const char *path, const void *data, size_t len, unsigned mode)
{
	char tmp[4200];
	uint64_t r;
	int fd, e;

	/*
	 * A name of its own, created exclusively: never one another writer
	 * may be using.  (Before, the pid alone named it and a leftover of
	 * that name was removed first, which took the file of a writer of
	 * the same pid in another pid namespace, a container sharing the
	 * folder, and renamed a half-written file into place.)
	 */
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tsec-tmp-%ld-%016llx", path, (long)getpid(),
			     (unsigned long long)r) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -1;
	if (fchmod(fd, (mode_t)mode) || write(fd, data, len) != (ssize_t)len || fsync(fd)) {
		e = errno ? errno : EIO;
		close(fd);
		unlink(tmp);
		errno = e;
		return -1;
	}
	if (close(fd) || rename(tmp, path)) {
		e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	return 0;
}
