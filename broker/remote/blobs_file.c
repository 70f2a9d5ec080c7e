/*
 * Blobs in a folder (one machine, or shared storage): <root>/<kind>/<hex>.
 *
 * Every path is opened relative to the folders' descriptors, taken once
 * at open without following links, so a link planted later under the
 * root leads nowhere.  A blob is written whole into a temporary file,
 * synced, then linked under its name: link(2) fails where the name is
 * taken, which is the "only if absent" the store needs, and a reader
 * sees no blob or the whole one.
 *
 * Also under the root:
 *   .tsec-owners/<owner>   flocked while the provider of that name is
 *                          open; its temporaries are
 *                          <kind>/.tsec-tmp-<owner>-<16 hex>, litter once
 *                          the flock is free (a writer killed mid-write),
 *                          whatever pid namespace the writer ran in
 *   .tsec-claim            the coordinator this store belongs to
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/file.h>

#include <sodium.h>

#include "broker/remote/blobs.h"
#include "common/error.h"
#include "common/trust.h"

static const char *const kinds[] = { "crt", "key", "meta" };
#define NKINDS 3
#define OWNERS ".tsec-owners"
#define TMP ".tsec-tmp-"
#define CLAIM ".tsec-claim"
#define OWNER_LEN 17                 /* "o" and 16 hex digits */

struct fblobs {
	struct tsec__blobs base;
	int root;
	int kind[NKINDS];
	int owners;                  /* root/.tsec-owners */
	int ownerfd;                 /* our owner file, flocked */
	char owner[OWNER_LEN + 1];
	char path[512];
	bool fenced;                 /* registered: no key file inside */
	dev_t dev;
	ino_t ino;
};

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Writes data, synced, into a new temporary of this provider in dir;
 * its name into tmp. */
static int write_temp(struct fblobs *f, int dir, const void *data, size_t len, char *tmp,
		      size_t n, const char *name, struct tsec_error *err)
{
	unsigned char r[8];
	char hex[17];
	int fd, e;

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(tmp, n, TMP "%s-%s", f->owner, hex);
	if ((fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			 0600)) < 0)
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: cannot create a temporary "
				    "file: %s", name, strerror(errno));
	if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		e = errno;
		close(fd);
		unlinkat(dir, tmp, 0);
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: cannot write: %s", name,
				    strerror(e));
	}
	if (close(fd) < 0) {
		e = errno;
		unlinkat(dir, tmp, 0);
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: cannot write: %s", name,
				    strerror(e));
	}
	return 0;
}

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
	if ((rc = write_temp(f, dir, data, len, tmp, sizeof(tmp), name, err)))
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
	return S_ISREG(st.st_mode) ? 0 : tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is not "
						       "a regular file (planted)", name);
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
	if (fd < 0 && errno == ENOENT)
		return tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name);
	/* A link, FIFO, socket or folder planted under a blob's name is
	 * damage like altered bytes: TSEC_ECORRUPT, which a publish of the
	 * content repairs (issue 49: a link made load and republish fail). */
	if (fd < 0 && errno == ELOOP)
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is a symbolic link "
				    "(planted): not read", name);
	if (fd < 0)
		return tsec__seterr(err, TSEC_EIO, name, "blob %s: %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is not a regular file "
				    "(planted): not read", name);
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
	/* (A folder planted under the name goes too, when empty.) */
	if (unlinkat(dir, hex, 0) < 0 && errno != ENOENT &&
	    (errno != EISDIR || unlinkat(dir, hex, AT_REMOVEDIR) < 0))
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
	/* Our owner file goes with us: a clean close leaves no owner to
	 * judge (a killed one leaves a file whose flock is free). */
	if (f->ownerfd >= 0) {
		unlinkat(f->owners, f->owner, 0);
		close(f->ownerfd);
	}
	if (f->owners >= 0)
		close(f->owners);
	if (f->root >= 0)
		close(f->root);
	if (f->fenced)
		tsec__trusted_fence_drop(f->dev, f->ino);
	free(f);
}

static int f_probe(struct tsec__blobs *b, struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;

	if (faccessat(f->root, ".", W_OK, AT_EACCESS) < 0)
		return tsec__seterr(err, errno == EACCES ? TSEC_EAUTH : TSEC_EIO, f->path,
				    "the blob folder %s: %s", f->path, strerror(errno));
	return 0;
}

/* Whether the owner named name (in .tsec-owners) is gone: its file
 * missing, or its flock free. */
static bool owner_gone(struct fblobs *f, const char *name)
{
	int fd;
	bool gone;

	if (!strcmp(name, f->owner))
		return false;
	if ((fd = openat(f->owners, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)) < 0)
		return errno == ENOENT;
	gone = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return gone;
}

/* Temporaries of writers that are gone, then their owner files. */
static int f_litter(struct tsec__blobs *b, size_t *removed, struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	int dirs[NKINDS + 1];

	(void)err;
	*removed = 0;
	for (int i = 0; i < NKINDS; i++)
		dirs[i] = f->kind[i];
	dirs[NKINDS] = f->owners;
	for (int i = 0; i <= NKINDS; i++) {
		int fd = dup(dirs[i]);
		DIR *d;
		struct dirent *e;

		if (fd < 0 || !(d = fdopendir(fd))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		rewinddir(d);
		while ((e = readdir(d))) {
			char owner[OWNER_LEN + 1];
			bool gone;

			if (i == NKINDS) {
				/* An owner file whose flock is free: unlinked
				 * while we hold it, so no new owner of that
				 * name is judged by it. */
				int ofd;
				if (e->d_name[0] == '.' || !strcmp(e->d_name, f->owner))
					continue;
				ofd = openat(f->owners, e->d_name, O_RDONLY | O_NOFOLLOW |
					     O_CLOEXEC | O_NONBLOCK);
				if (ofd >= 0 && flock(ofd, LOCK_EX | LOCK_NB) == 0)
					unlinkat(f->owners, e->d_name, 0);
				if (ofd >= 0)
					close(ofd);
				continue;
			}
			if (strncmp(e->d_name, TMP, strlen(TMP)))
				continue;
			/* .tsec-tmp-<owner>-<hex>; "blob" for the temporaries
			 * of versions before owners (no writer keeps any). */
			snprintf(owner, sizeof(owner), "%.*s", OWNER_LEN, e->d_name + strlen(TMP));
			if (!strncmp(owner, "blob-", 5))
				gone = true;
			else if (strlen(owner) != OWNER_LEN || e->d_name[strlen(TMP) + OWNER_LEN] != '-')
				continue;
			else
				gone = owner_gone(f, owner);
			if (gone && unlinkat(dirs[i], e->d_name, 0) == 0)
				(*removed)++;
		}
		closedir(d);
	}
	return 0;
}

/* The claim: made where none is (written to a temporary, then linked:
 * never seen half written), then read. */
static int f_claim(struct tsec__blobs *b, const char *id, char *holder, size_t n,
		   struct tsec_error *err)
{
	struct fblobs *f = (struct fblobs *)b;
	char tmp[64], buf[TSEC__STORE_ID_HEX + 2];
	ssize_t got;
	int rc, fd;

	if (id) {
		if ((rc = write_temp(f, f->root, id, strlen(id), tmp, sizeof(tmp), CLAIM, err)))
			return rc;
		if (linkat(f->root, tmp, f->root, CLAIM, 0) < 0 && errno != EEXIST) {
			rc = tsec__seterr(err, TSEC_EIO, CLAIM, "%s/" CLAIM ": %s", f->path,
					  strerror(errno));
			unlinkat(f->root, tmp, 0);
			return rc;
		}
		unlinkat(f->root, tmp, 0);
	}
	if ((fd = openat(f->root, CLAIM, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)) < 0 &&
	    errno == ENOENT && !id) {
		*holder = '\0';
		return 0;
	}
	if (fd < 0)
		return tsec__seterr(err, TSEC_EIO, CLAIM, "%s/" CLAIM ": %s", f->path,
				    strerror(errno));
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got < 0)
		return tsec__seterr(err, TSEC_EIO, CLAIM, "%s/" CLAIM ": %s", f->path,
				    strerror(errno));
	buf[got] = 0;
	snprintf(holder, n, "%s", buf);
	return 0;
}

void tsec__blobs_file_owner(struct tsec__blobs *b, char *out, size_t n)
{
	snprintf(out, n, "%s", ((struct fblobs *)b)->owner);
}

static const struct tsec__blob_ops file_ops = {
	"file", f_put_new, f_has, f_get, f_del, f_list, f_close, f_probe, f_claim, f_litter,
};

/* Names this provider by an owner file in .tsec-owners, flocked for as
 * long as it is open (made under another name, flocked, then renamed:
 * never seen unlocked). */
static int own(struct fblobs *f, struct tsec_error *err)
{
	unsigned char r[8];
	char making[OWNER_LEN + 16];

	randombytes_buf(r, sizeof(r));
	f->owner[0] = 'o';
	sodium_bin2hex(f->owner + 1, sizeof(f->owner) - 1, r, sizeof(r));
	snprintf(making, sizeof(making), ".making-%s", f->owner);
	f->ownerfd = openat(f->owners, making, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			    0600);
	if (f->ownerfd < 0 || flock(f->ownerfd, LOCK_EX) < 0 ||
	    renameat(f->owners, making, f->owners, f->owner) < 0) {
		int e = errno;
		if (f->ownerfd >= 0) {
			unlinkat(f->owners, making, 0);
			close(f->ownerfd);
			f->ownerfd = -1;
		}
		return tsec__seterr(err, TSEC_EIO, OWNERS, "%s/" OWNERS ": %s", f->path,
				    strerror(e));
	}
	return 0;
}

/* A folder under dir (made 0700 when missing), never through a link;
 * this user's or root's, and writable by nobody else. */
static int open_folder(struct fblobs *f, int dir, const char *path, struct tsec_error *err)
{
	struct stat st;
	int fd;

	if (mkdirat(dir, path, 0700) < 0 && errno != EEXIST)
		return tsec__seterr(err, TSEC_EIO, path, "cannot make %s/%s: %s", f->path, path,
				    strerror(errno));
	fd = openat(dir, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return tsec__seterr(err, TSEC_EIO, path, "%s/%s: %s", f->path, path,
				    errno == ELOOP || errno == ENOTDIR ? "not a folder (a link?)"
								       : strerror(errno));
	if (fstat(fd, &st) < 0) {
		int e = errno;

		close(fd);
		return tsec__seterr(err, TSEC_EIO, path, "%s/%s: %s", f->path, path, strerror(e));
	}
	if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		close(fd);
		return tsec__seterr(err, TSEC_EIO, path, "the blob folder's %s/%s belongs to uid "
				    "%ld, mode %04o: another user could plant or remove blobs; "
				    "refused", f->path, path, (long)st.st_uid,
				    (unsigned)(st.st_mode & 07777));
	}
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
	f->owners = -1;
	f->ownerfd = -1;
	for (int i = 0; i < NKINDS; i++)
		f->kind[i] = -1;
	snprintf(f->path, sizeof(f->path), "%s", root);
	{
		struct tsec__trusted t;

		/* As written, every folder and link on the way checked (issue
		 * 49: accepted at 0777 and when another user owned it). */
		if ((rc = tsec__trusted_open(root, TSEC__TRUST_FOLDER, true, "the blob folder", &t,
					     err)))
			goto fail;
		f->root = t.fd;
		if (tsec__trusted_fence_add(t.dev, t.ino, "the blob folder", root)) {
			rc = tsec__seterr(err, TSEC_ENOMEM, root, "too many blob folders open");
			goto fail;
		}
		f->fenced = true;
		f->dev = t.dev;
		f->ino = t.ino;
	}
	for (int i = 0; i < NKINDS; i++) {
		if ((rc = open_folder(f, f->root, kinds[i], err)) < 0)
			goto fail;
		f->kind[i] = rc;
	}
	if ((rc = open_folder(f, f->root, OWNERS, err)) < 0)
		goto fail;
	f->owners = rc;
	if ((rc = own(f, err)))
		goto fail;
	*out = &f->base;
	return 0;
fail:
	f_close(&f->base);
	return rc;
}
