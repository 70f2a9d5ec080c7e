/*
 * The file backend's operations on folders: listings, deletes (a value,
 * or a folder with everything below it) and moves, each refusing what
 * the store did not write, and the pruning of folders left empty.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/storage/file/file_private.h"

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct listing {
	struct tsec_strlist *out;
	size_t cap;
	int failed;
};

static void list_add(struct listing *l, const char *prefix, const char *name,
		     const char *suffix)
{
	char *k;
	int n;

	if (l->failed)
		return;
	if (l->out->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 32;
		char **nv = realloc(l->out->v, nc * sizeof(*nv));
		if (!nv) {
			l->failed = 1;
			return;
		}
		l->out->v = nv;
		l->cap = nc;
	}
	n = *prefix ? asprintf(&k, "%s/%s%s", prefix, name, suffix)
		    : asprintf(&k, "%s%s", name, suffix);
	if (n < 0) {
		l->failed = 1;
		return;
	}
	l->out->v[l->out->n++] = k;
}

/* Lists folder fd (whose key is prefix); consumes fd. */
static void list_dir(struct listing *l, int fd, const char *prefix, int recursive,
		     unsigned depth)
{
	struct dirent *e;
	DIR *d = fdopendir(fd);

	if (!d) {
		close(fd);
		l->failed = 1;
		return;
	}
	while ((e = readdir(d))) {
		struct stat sb;
		const char *nm = e->d_name;
		if (!strcmp(nm, ".") || !strcmp(nm, "..") ||
		    !strncmp(nm, TSEC__RESERVED, TSEC__RESERVED_LEN))
			continue;
		if (fstatat(fd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (tsec__fb_plain_file(&sb)) {
			list_add(l, prefix, nm, "");
		} else if (tsec__fb_plain_folder(&sb)) {
			/* (A folder another user owns or may write was planted:
			 * neither it nor what is below is the store's.) */
			if (!recursive) {
				list_add(l, prefix, nm, "/");
			} else if (depth < TSEC_KEY_SEGMENTS) {
				char sub[TSEC_KEY_MAX * 2];
				int cfd = openat(fd, nm, DIR_FLAGS);
				if (cfd < 0)
					continue;
				snprintf(sub, sizeof(sub), "%s%s%s", prefix, *prefix ? "/" : "", nm);
				list_dir(l, cfd, sub, recursive, depth + 1);
			}
		}
	}
	closedir(d);
}

int tsec__fb_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct listing l = { out, 0, 0 };
	int fd, rc, kind;

	if ((rc = tsec__fb_open_dirs(tsec__fb_of(b), sk, sk->n, false, &fd, err))) {
		if (rc == TSEC_ENOENT && tsec__fb_kind(b, sk, &kind, err) == 0 && kind == 1)
			return tsec__seterr(err, TSEC_EINVAL, sk->text,
					    "'%s' is a file, not a folder", sk->text);
		return rc;
	}
	list_dir(&l, fd, sk->text, recursive, sk->n);
	if (l.failed) {
		tsec_strlist_free(out);
		return tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
	}
	return 0;
}

/* Removes the folder `name` in dirfd and everything below it. */
static int rm_tree(int dirfd, const char *name)
{
	struct dirent *e;
	DIR *d;
	int fd, rc = 0;

	fd = openat(dirfd, name, DIR_FLAGS);
	if (fd < 0)
		return -1;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d))) {
		struct stat sb;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -1;
			continue;
		}
		if (S_ISDIR(sb.st_mode))
			rc |= rm_tree(fd, e->d_name);
		else if (unlinkat(fd, e->d_name, 0) < 0)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
		rc = -1;
	return rc;
}

/*
 * Removes the folders of sk that are empty now, deepest first, as far up
 * as they are empty: a folder exists only while a value is below it, as
 * on every other backend.  rmdir refuses a folder that is not empty, so
 * a value written meanwhile keeps its folder; a writer that resolved a
 * folder this removed finds it gone when it creates its file (ENOENT in
 * a removed folder) and resolves again (fb_put_many, fb_move).
 */
void tsec__fb_prune(struct tsec__filebe *fb, const struct tsec__skey *sk, unsigned folders)
{
	bool removed = false;

	for (unsigned i = folders; i > 0; i--) {
		struct tsec_error ignore;
		int parent, gone;
		if (tsec__fb_open_dirs(fb, sk, i - 1, false, &parent, &ignore))
			break;
		gone = unlinkat(parent, sk->seg[i - 1], AT_REMOVEDIR) == 0;
		if (gone)
			fsync(parent);
		close(parent);
		if (!gone)
			break;
		removed = true;
	}
	/* Folders went: none kept open may answer for their paths. */
	if (removed)
		tsec__folders_forget(&fb->folders);
}

static int del_plain(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		     struct tsec_error *err)
{
	struct stat sb;
	int dirfd, rc, cfd;

	if ((rc = tsec__fb_open_dirs(tsec__fb_of(b), sk, sk->n - 1, false, &dirfd, err)))
		return rc;
	/* Settled: a dead writer's group on these keys lands first. */
	if (tsec__fb_settle(tsec__fb_of(b), TSEC__FB_READ_WAIT_MS, &cfd) < 0) {
		rc = tsec__fb_commit_lock_err(err, sk->text);
		close(dirfd);
		return rc;
	}
	if (fstatat(dirfd, sk->seg[sk->n - 1], &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = tsec__fb_io_err(err, sk->text, "cannot delete");
	} else if (S_ISDIR(sb.st_mode)) {
		if (!recursive)
			rc = tsec__seterr(err, TSEC_EINVAL, sk->text,
					  "'%s' is a folder; delete it recursively", sk->text);
		else if (rm_tree(dirfd, sk->seg[sk->n - 1]) < 0)
			rc = tsec__fb_io_err(err, sk->text, "cannot delete all of the folder");
		/* Folders went: none kept open may answer for their paths. */
		tsec__folders_forget(&tsec__fb_of(b)->folders);
	} else if (unlinkat(dirfd, sk->seg[sk->n - 1], 0) < 0) {
		rc = tsec__fb_io_err(err, sk->text, "cannot delete");
	}
	tsec__fb_commit_end(tsec__fb_of(b), cfd);
	if (rc == 0)
		fsync(dirfd);
	close(dirfd);
	if (rc == 0)
		tsec__fb_prune(tsec__fb_of(b), sk, sk->n - 1);
	return rc;
}

/*
 * A move is one rename that never replaces (renameat2 RENAME_NOREPLACE):
 * the value is under exactly one name at every moment, a crash included.
 */
static int move_once(struct tsec__filebe *fb, const struct tsec__skey *src,
		     const struct tsec__skey *dst, struct tsec_error *err)
{
	int srcdir = -1, dstdir = -1, rc, cfd;
	struct stat sb;

	if ((rc = tsec__fb_open_dirs(fb, src, src->n - 1, false, &srcdir, err)))
		return rc;
	/* Settled: a dead writer's group on these keys lands first. */
	if (tsec__fb_settle(fb, TSEC__FB_READ_WAIT_MS, &cfd) < 0) {
		rc = tsec__fb_commit_lock_err(err, src->text);
		close(srcdir);
		return rc;
	}
	if (fstatat(srcdir, src->seg[src->n - 1], &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = tsec__fb_open_err(src, err);
		goto out;
	}
	if (S_ISDIR(sb.st_mode)) {
		rc = tsec__seterr(err, TSEC_EINVAL, src->text,
				  "'%s' is a folder; only values move", src->text);
		goto out;
	}
	if ((rc = tsec__fb_plain(&sb, src, false, err)))
		goto out;
	if ((rc = tsec__fb_open_dirs(fb, dst, dst->n - 1, true, &dstdir, err)))
		goto out;
	if (renameat2(srcdir, src->seg[src->n - 1], dstdir, dst->seg[dst->n - 1],
		      RENAME_NOREPLACE) < 0) {
		rc = errno == EEXIST
			? tsec__seterr(err, TSEC_EEXIST, dst->text,
				       "'%s' exists; move never replaces", dst->text)
			: errno == EINVAL
			? tsec__seterr(err, TSEC_EIO, dst->text,
				       "this file system cannot rename without replacing")
			: tsec__fb_io_err(err, dst->text, "cannot move");
		goto out;
	}
	fsync(dstdir);
	fsync(srcdir);
	rc = 0;
out:
	tsec__fb_commit_end(fb, cfd);
	if (srcdir >= 0)
		close(srcdir);
	if (dstdir >= 0)
		close(dstdir);
	return rc;
}

static int move_plain(struct tsec__backend *b, const struct tsec__skey *src,
		      const struct tsec__skey *dst, struct tsec_error *err)
{
	struct tsec__filebe *fb = tsec__fb_of(b);
	int rc, tries = 0;

	while ((rc = move_once(fb, src, dst, err)) == TSEC_ENOENT && ++tries < TSEC__FB_PRUNED_RETRIES)
		;
	if (rc == 0)
		tsec__fb_prune(fb, src, src->n - 1);
	return rc;
}

/* A delete or a move, run under its lock's write lock (tsec__fb_fenced). */
struct fenced_op {
	struct tsec__backend *b;
	const struct tsec__skey *a, *b2;
	int recursive;
};

static int del_op(void *ctx, struct tsec_error *err)
{
	struct fenced_op *o = ctx;

	return del_plain(o->b, o->a, o->recursive, err);
}

static int move_op(void *ctx, struct tsec_error *err)
{
	struct fenced_op *o = ctx;

	return move_plain(o->b, o->a, o->b2, err);
}

int tsec__fb_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	struct fenced_op o = { b, sk, NULL, recursive };

	return f ? tsec__fb_fenced(tsec__fb_of(b), f, del_op, &o, err)
		 : del_plain(b, sk, recursive, err);
}

int tsec__fb_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct fenced_op o = { b, src, dst, 0 };

	return f ? tsec__fb_fenced(tsec__fb_of(b), f, move_op, &o, err)
		 : move_plain(b, src, dst, err);
}
