/*
 * Blobs in a folder (one machine, or shared storage): <root>/<kind>/<hex>.
 *
 * Every path is opened relative to the folders' descriptors, taken once
 * at open without following links, so a link planted later under the
 * root leads nowhere.  A blob is written whole into a temporary file,
 * synced, then linked under its name: link(2) fails where the name is
 * taken, which is the "only if absent" the store needs, and a reader
 * sees no blob or the whole one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/remote/blobs.h"
#include "broker/storage/file/file_private.h"
#include "common/error.h"

static const char *const kinds[] = { "crt", "key", "meta" };
#define NKINDS 3

struct fblobs {
	struct tsec__blobs base;
	int root;
	int kind[NKINDS];
	char path[512];
};

/* The folder of name's kind and where its hex digits start, or -1. */
static int kind_fd(struct fblobs *f, const char *name, const char **hex)
{
	if (!tsec__blob_name_ok(name))
		return -1;
	for (int i = 0; i < NKINDS; i++) {
		size_t n = strlen(kinds[i]);
		if (!strncmp(name, kinds[i], n) && name[n] == '/') {
			*hex = name + n + 1;
			return f->kind[i];
		}
	}
	return -1;
}

static int bad_name(const char *name, struct tsec_error *err)
{
	return tsec__seterr(err, TSEC_EKEY, "", "not a blob name: '%.80s'", name);
}

static int f_put_new(struct tsec__blobs *b, const char *name, const void *data, size_t len,
		     struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	const char *hex;
	int dir = kind_fd(f, name, &hex), rc, e;
	char tmp[64];

	if (dir < 0)
		return bad_name(name, err);
	/* Written and synced as the file backend writes a value. */
	if ((rc = tsec__fb_write_temp("blob", dir, data, len, true, tmp, sizeof(tmp), name, err)))
		return rc;
	if (linkat(dir, tmp, dir, hex, 0) < 0) {
		e = errno;
		rc = e == EEXIST ? tsec__seterr(err, TSEC_EEXIST, name, "blob %s exists", name)
				 : tsec__seterr(err, TSEC_EIO, name, "blob %s: cannot link: %s",
						name, strerror(e));
	}
	unlinkat(dir, tmp, 0);
	if (rc == 0 && fsync(dir) < 0)
		rc = tsec__seterr(err, TSEC_EIO, name, "blob %s: cannot sync its folder: %s", name,
				  strerror(errno));
	return rc;
}

static int f_has(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	const char *hex;
	int dir = kind_fd(f, name, &hex);
	struct stat st;

	if (dir < 0)
		return bad_name(name, err);
	if (fstatat(dir, hex, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT
			? tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name)
			: tsec__seterr(err, TSEC_EIO, name, "blob %s: %s", name, strerror(errno));
	return S_ISREG(st.st_mode) ? 0 : tsec__seterr(err, TSEC_EIO, name, "blob %s is not a "
						       "regular file", name);
}

static int f_get(struct tsec__blobs *b, const char *name, size_t max, uint8_t **out,
		 size_t *len, struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	const char *hex;
	int dir = kind_fd(f, name, &hex), fd;
	struct stat st;
	uint8_t *buf;
	size_t got = 0;

	*out = NULL;
	*len = 0;
	if (dir < 0)
		return bad_name(name, err);
	fd = openat(dir, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT
			? tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name)
			: tsec__seterr(err, TSEC_EIO, name, "blob %s: %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return tsec__seterr(err, TSEC_EIO, name, "blob %s is not a regular file", name);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return tsec__seterr(err, TSEC_ETOOBIG, name, "blob %s is %lld bytes (at most %zu)",
				    name, (long long)st.st_size, max);
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got != (size_t)st.st_size) {
		free(buf);
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: short read", name);
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return 0;
}

static int f_del(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	const char *hex;
	int dir = kind_fd(f, name, &hex);

	if (dir < 0)
		return bad_name(name, err);
	if (unlinkat(dir, hex, 0) < 0 && errno != ENOENT)
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: %s", name, strerror(errno));
	return 0;
}

static int f_list(struct tsec__blobs *b, tsec__blob_list_fn fn, void *ctx,
		  struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;

	for (int i = 0; i < NKINDS; i++) {
		int fd = dup(f->kind[i]), rc = 0;
		DIR *d;
		struct dirent *e;

		if (fd < 0 || !(d = fdopendir(fd))) {
			if (fd >= 0)
				close(fd);
			return tsec__seterr(err, TSEC_EIO, kinds[i], "cannot list %s/%s: %s",
					    f->path, kinds[i], strerror(errno));
		}
		rewinddir(d);
		while (rc == 0 && (e = readdir(d))) {
			char name[TSEC__BLOB_NAME_MAX + 1];
			struct stat st;

			size_t kl = strlen(kinds[i]);

			if (strlen(e->d_name) != 64)
				continue;
			memcpy(name, kinds[i], kl);
			name[kl] = '/';
			memcpy(name + kl + 1, e->d_name, 65);
			/* Only the store's own names, only regular files: a
			 * planted link or folder is not a blob. */
			if (!tsec__blob_name_ok(name) ||
			    fstatat(f->kind[i], e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(st.st_mode))
				continue;
			rc = fn(ctx, name, (int64_t)st.st_mtim.tv_sec * 1000 +
					   st.st_mtim.tv_nsec / 1000000);
		}
		closedir(d);
		if (rc)
			return rc;
	}
	return 0;
}

static void f_close(struct tsec__blobs *b)
{
	struct fblobs *f = (struct fblobs *)b;

	for (int i = 0; i < NKINDS; i++)
		if (f->kind[i] >= 0)
			close(f->kind[i]);
	if (f->root >= 0)
		close(f->root);
	free(f);
}

static const struct tsec__blob_ops file_ops = {
	"file", f_put_new, f_has, f_get, f_del, f_list, f_close,
};

/* A folder under dir (made 0700 when missing), never through a link. */
static int open_folder(int dir, const char *path, struct tsec_error *err)
{
	int fd;

	if (mkdirat(dir, path, 0700) < 0 && errno != EEXIST)
		return tsec__seterr(err, TSEC_EIO, path, "cannot make %s: %s", path,
				    strerror(errno));
	fd = openat(dir, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return tsec__seterr(err, TSEC_EIO, path, "%s: %s", path,
				    errno == ELOOP || errno == ENOTDIR ? "not a folder (a link?)"
								       : strerror(errno));
	return fd;
}

int tsec__blobs_file_open(struct tsec__blobs **out, const char *root,
			  const struct tsec_remote_opts *o, struct tsec_error *err)
{
	(void)o;
	struct fblobs *f;
	int rc;

	*out = NULL;
	if (!root || !*root)
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "file: needs a folder");
	if (!(f = calloc(1, sizeof(*f))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	f->base.ops = &file_ops;
	f->root = -1;
	for (int i = 0; i < NKINDS; i++)
		f->kind[i] = -1;
	snprintf(f->path, sizeof(f->path), "%s", root);
	if ((rc = open_folder(AT_FDCWD, root, err)) < 0)
		goto fail;
	f->root = rc;
	for (int i = 0; i < NKINDS; i++) {
		if ((rc = open_folder(f->root, kinds[i], err)) < 0)
			goto fail;
		f->kind[i] = rc;
	}
	*out = &f->base;
	return 0;
fail:
	f_close(&f->base);
	return rc;
}
