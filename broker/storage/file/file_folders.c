/*
 * The file backend's folder descriptors: a key's folder, once resolved
 * beneath the root without following any link, is kept open, so that
 * `exists` and `stat` are one fstatat of one name relative to it (no
 * path walk, and no link can be met: the name has no '/', and a link
 * there is reported as a link, not followed).
 *
 * Why a kept descriptor cannot answer wrongly, or reach outside the root:
 * - The store never renames a folder; it removes folders only in a
 *   recursive delete, which forgets every kept descriptor in this
 *   process.  A folder removed by another process is empty and unlinked:
 *   a lookup in it finds nothing, so a "not found" is confirmed with the
 *   folder's link count (0 when removed) and resolved afresh if stale.
 * - Anything that renames folders behind the store's back (only the
 *   store's own user or root can, the folders being 0700), or gives one
 *   to another user or opens it to others (only root can, or the store's
 *   user), is seen within a second: a descriptor older than that is
 *   replaced by a fresh resolution of its path, every folder on it
 *   checked, before it answers.  Values are read through the same kept
 *   descriptors (one openat of one name), so a folder given to another
 *   user is refused as planted within a second too.
 * The cache is per process, 64 folders, direct-mapped; a read lock is
 * held while a descriptor is used, so it is never closed under a caller.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"

#define RECHECK_MS 1000

void tsec__folders_init(struct tsec__folders *f)
{
	memset(f, 0, sizeof(*f));
	pthread_rwlock_init(&f->lock, NULL);
	for (unsigned i = 0; i < TSEC__FOLDER_SLOTS; i++)
		f->slot[i].fd = -1;
}

static void slot_clear(struct tsec__folder_slot *s)
{
	if (s->fd >= 0)
		close(s->fd);
	free(s->path);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

void tsec__folders_forget(struct tsec__folders *f)
{
	pthread_rwlock_wrlock(&f->lock);
	for (unsigned i = 0; i < TSEC__FOLDER_SLOTS; i++)
		slot_clear(&f->slot[i]);
	pthread_rwlock_unlock(&f->lock);
}

void tsec__folders_free(struct tsec__folders *f)
{
	for (unsigned i = 0; i < TSEC__FOLDER_SLOTS; i++)
		slot_clear(&f->slot[i]);
	pthread_rwlock_destroy(&f->lock);
}

static uint64_t path_hash(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
	return h;
}

/* Opens the key's folder (segments seg[0..upto)) beneath the root, off
 * every link, each folder on the way checked as the store's own
 * (tsec__fb_open_dirs); -1 and errno. */
static int open_folder(struct tsec__filebe *fb, const struct tsec__skey *sk, unsigned upto)
{
	struct tsec_error err;
	int fd;

	return tsec__fb_open_dirs(fb, sk, upto, false, &fd, &err) == 0 ? fd : -1;
}

/* A link is not followed: it reads as "reached through a link". */
static int leaf_stat(int dirfd, const char *leaf, struct stat *sb)
{
	if (fstatat(dirfd, leaf, sb, AT_SYMLINK_NOFOLLOW) < 0)
		return -1;
	if (S_ISLNK(sb->st_mode)) {
		errno = ELOOP;
		return -1;
	}
	return 0;
}

/*
 * op(dirfd, leaf, ctx) on the key's last segment in its folder: the kept
 * descriptor when it is fresh, else the folder resolved afresh (every
 * folder on the way checked) and kept.  op's answer (0, or -1 and
 * errno); -1 and errno when the folder cannot be had (EPERM: planted).
 */
static int at_folder(struct tsec__filebe *fb, const struct tsec__skey *sk,
		     int (*op)(int dirfd, const char *leaf, void *ctx), void *ctx)
{
	struct tsec__folders *f = &fb->folders;
	const char *leaf = sk->seg[sk->n - 1];
	size_t n;
	uint64_t h;
	struct tsec__folder_slot *s;
	int64_t now;
	int fd, rc, e;

	if (sk->n == 1)
		return op(fb->rootfd, leaf, ctx);
	/* The folder: the normalised key's text up to its last '/'. */
	n = sk->k.off[sk->n - 1] - 1u;
	h = path_hash(sk->text, n);
	s = &f->slot[h % TSEC__FOLDER_SLOTS];
	now = tsec__mono_ms();

	pthread_rwlock_rdlock(&f->lock);
	if (s->fd >= 0 && s->hash == h && s->len == n && !memcmp(s->path, sk->text, n) &&
	    now - s->checked_ms < RECHECK_MS) {
		struct stat ds;

		rc = op(s->fd, leaf, ctx);
		e = errno;
		/* Found, or not there in a folder still linked: the answer. */
		if (rc == 0 || e != ENOENT || (fstat(s->fd, &ds) == 0 && ds.st_nlink > 0)) {
			pthread_rwlock_unlock(&f->lock);
			errno = e;
			return rc;
		}
	}
	pthread_rwlock_unlock(&f->lock);

	/* Resolve the folder afresh, answer, and keep it. */
	if ((fd = open_folder(fb, sk, sk->n - 1)) < 0)
		return -1;
	rc = op(fd, leaf, ctx);
	e = errno;
	{
		char *copy = malloc(n + 1);

		pthread_rwlock_wrlock(&f->lock);
		if (copy) {
			memcpy(copy, sk->text, n);
			copy[n] = '\0';
			slot_clear(s);
			s->path = copy;
			s->len = n;
			s->hash = h;
			s->fd = fd;
			s->checked_ms = now;
			fd = -1;
		}
		pthread_rwlock_unlock(&f->lock);
	}
	if (fd >= 0)
		close(fd);
	errno = e;
	return rc;
}

static int stat_op(int dirfd, const char *leaf, void *ctx)
{
	return leaf_stat(dirfd, leaf, ctx);
}

int tsec__fb_stat_key(struct tsec__filebe *fb, const struct tsec__skey *sk, struct stat *sb)
{
	if (sk->n == 0) /* the root */
		return fstat(fb->rootfd, sb);
	return at_folder(fb, sk, stat_op, sb);
}

struct open_ctx {
	int flags, fd;
};

static int open_op(int dirfd, const char *leaf, void *ctx)
{
	struct open_ctx *o = ctx;

	o->fd = openat(dirfd, leaf, o->flags | O_CLOEXEC | O_NOFOLLOW);
	return o->fd < 0 ? -1 : 0;
}

int tsec__fb_open_key(struct tsec__filebe *fb, const struct tsec__skey *sk, int flags)
{
	struct open_ctx o = { flags, -1 };

	if (sk->n == 0) {
		errno = EISDIR;
		return -1;
	}
	return at_folder(fb, sk, open_op, &o) ? -1 : o.fd;
}
