/*
 * The file backend: values as files under one root folder.
 *
 * Paths are resolved beneath a held root descriptor without following
 * any symbolic link (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or a
 * walk with O_NOFOLLOW where the kernel lacks openat2).  A value is read
 * only if it is a regular file with one link, opened without blocking: a
 * FIFO, socket, device or hard link planted in the tree is refused and
 * never stalls the caller.  Writes go to a temporary file that is
 * fsynced and renamed into place, then the folder is fsynced; groups go
 * through the journal (file_journal.c); locks are in file_lock.c.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>
#include <sodium.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"
#include "common/trust.h"

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/*
 * Whether this process's user (or root) owns it: every file and folder
 * the store makes is, so one another user made was planted (a shared
 * folder, or a root others can write, which open refuses anyway).
 */
static bool owned(const struct stat *sb)
{
	return sb->st_uid == geteuid() || sb->st_uid == 0;
}

int tsec__fb_io_err(struct tsec_error *err, const char *where, const char *what)
{
	int e = errno;

	/* The key it was about, named (issue 51, item 14: `store rm` of a
	 * missing key said only "cannot open folder"). */
	return tsec__seterr(err, e == ENOENT ? TSEC_ENOENT : TSEC_EIO, where,
			    "%.300s: %s: %s", where, what, strerror(e));
}

void tsec__fb_temp_name(const char *owner, char *buf, size_t n)
{
	unsigned char r[8];
	char hex[17];

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(buf, n, TSEC__TMP_PREFIX "%s-%s", owner, hex);
}

int tsec__fb_open_dirs(struct tsec__filebe *fb, const struct tsec__skey *sk,
		       unsigned upto, bool create, int *dirfd, struct tsec_error *err)
{
	/* A descriptor of our own: a dup would share the root's offset. */
	int fd = openat(fb->rootfd, ".", DIR_FLAGS), rc0;

	*dirfd = -1;
	if (fd < 0)
		return tsec__fb_io_err(err, "", "cannot open the store root");
	for (unsigned i = 0; i < upto; i++) {
		int next = openat(fd, sk->seg[i], DIR_FLAGS);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, sk->seg[i], 0700) < 0 && errno != EEXIST) {
				int rc = tsec__fb_io_err(err, sk->text, "cannot create folder");
				close(fd);
				return rc;
			}
			/* Make the new folder's name durable. */
			fsync(fd);
			next = openat(fd, sk->seg[i], DIR_FLAGS);
		}
		if (next < 0) {
			int e = errno, rc;
			struct stat st;

			/* O_NOFOLLOW with O_DIRECTORY answers a link with ENOTDIR:
			 * say what it is, not "a file". */
			if (e == ENOTDIR && !fstatat(fd, sk->seg[i], &st, AT_SYMLINK_NOFOLLOW) &&
			    S_ISLNK(st.st_mode))
				e = ELOOP;
			if (e == ENOTDIR)
				rc = tsec__seterr(err, create ? TSEC_EEXIST : TSEC_ENOENT, sk->text,
						  "'%s' is a file, not a folder", sk->seg[i]);
			else if (e == ELOOP)
				rc = tsec__seterr(err, TSEC_EIO, sk->text,
						  "'%s' is a symbolic link; the store follows none",
						  sk->seg[i]);
			else
				rc = tsec__fb_io_err(err, sk->text, "cannot open folder");
			close(fd);
			errno = e; /* the cause, for callers that answer by errno */
			return rc;
		}
		close(fd);
		fd = next;
		if ((rc0 = tsec__fb_folder_ok(fd, sk->text, sk->seg[i], err))) {
			close(fd);
			errno = EPERM;
			return rc0;
		}
	}
	*dirfd = fd;
	return 0;
}

/*
 * A folder in the store: this user's (or root's), and writable by nobody
 * else.  The store makes every folder so; one another user owns or may
 * write was planted, and its owner could swap the values below it (issue
 * 49, item 2).
 */
int tsec__fb_folder_ok(int fd, const char *where, const char *name, struct tsec_error *err)
{
	struct stat sb;

	if (fstat(fd, &sb) < 0)
		return tsec__fb_io_err(err, where, "cannot stat folder");
	if (!owned(&sb))
		return tsec__seterr(err, TSEC_EIO, where, "the folder '%s' belongs to uid %ld, not "
				    "this store's user: planted in the store; refused", name,
				    (long)sb.st_uid);
	if (sb.st_mode & 022)
		return tsec__seterr(err, TSEC_EIO, where, "the folder '%s' is mode %04o: others "
				    "can write it (and plant or swap values): refused", name,
				    (unsigned)(sb.st_mode & 07777));
	return 0;
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A new temporary in dirfd, named into tmp, holding data: its descriptor
 * in *fd; on failure none, and no file. */
static int temp_written(const char *owner, int dirfd, const void *data, size_t len, char *tmp,
			size_t tmpn, const char *where, int *fd, struct tsec_error *err)
{
	int rc;

	tsec__fb_temp_name(owner, tmp, tmpn);
	*fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (*fd < 0)
		return tsec__fb_io_err(err, where, "cannot create temporary file");
	if (write_all(*fd, data, len) < 0) {
		rc = tsec__fb_io_err(err, where, "cannot write");
		close(*fd);
		*fd = -1;
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	return 0;
}

int tsec__fb_write_temp(const char *owner, int dirfd, const void *data, size_t len,
			bool durable, char *tmp, size_t tmpn, const char *where,
			struct tsec_error *err)
{
	bool bad;
	int fd, rc;

	if ((rc = temp_written(owner, dirfd, data, len, tmp, tmpn, where, &fd, err)))
		return rc;
	bad = durable && fsync(fd) < 0;
	if (close(fd) < 0)
		bad = true;
	if (bad) {
		rc = tsec__fb_io_err(err, where, "cannot write");
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	return 0;
}

int tsec__fb_write_temp_started(const char *owner, int dirfd, const void *data, size_t len,
				char *tmp, size_t tmpn, const char *where, int *fd,
				struct tsec_error *err)
{
	int rc = temp_written(owner, dirfd, data, len, tmp, tmpn, where, fd, err);

	/* Only a hint (the fdatasync after is what is relied on): a
	 * filesystem without it writes back at the fdatasync. */
	if (!rc)
		(void)sync_file_range(*fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	return rc;
}

/* The error of a read or a change that could not have the store's
 * commit flock (tsec__fb_commit_read, tsec__fb_settle): nothing was
 * read or changed. */
int tsec__fb_commit_lock_err(struct tsec_error *err, const char *where)
{
	return errno == EWOULDBLOCK
		? tsec__seterr(err, TSEC_EBUSY, where,
			       "a group write has been applying for %d s (a paused or stuck "
			       "process holds the store's commit lock); nothing was changed; "
			       "try again", TSEC__FB_READ_WAIT_MS / 1000)
		: tsec__fb_io_err(err, where, "cannot take the store's commit lock");
}

int tsec__fb_write_atomic(struct tsec__filebe *fb, int dirfd, const char *leaf,
			  const void *data, size_t len, bool durable, struct tsec_error *err)
{
	char tmp[64];
	struct stat sb;
	int rc, cfd = -1;

	if (fstatat(dirfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
		return tsec__seterr(err, TSEC_EEXIST, leaf,
				    "'%s' is a folder; a folder is never replaced by a file", leaf);
	if ((rc = tsec__fb_write_temp(fb->owner, dirfd, data, len, durable, tmp, sizeof(tmp),
				      leaf, err)))
		return rc;
	if (tsec__fb_settle(fb, TSEC__FB_READ_WAIT_MS, &cfd) < 0) {
		rc = tsec__fb_commit_lock_err(err, leaf);
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	if (renameat(dirfd, tmp, dirfd, leaf) < 0) {
		rc = errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST
			? tsec__seterr(err, TSEC_EEXIST, leaf, "'%s' is a folder", leaf)
			: tsec__fb_io_err(err, leaf, "cannot rename into place");
		unlinkat(dirfd, tmp, 0);
		tsec__fb_commit_end(fb, cfd);
		return rc;
	}
	tsec__fb_commit_end(fb, cfd);
	if (durable && fsync(dirfd) < 0)
		return tsec__fb_io_err(err, leaf, "cannot sync folder");
	return 0;
}

/*
 * Opens the key's value beneath the root, off every link, through its
 * folder's kept descriptor (file_folders.c: every folder on the way
 * checked as the store's own when it was resolved, within the last
 * second; openat2 would reach the value in one call, but past folders
 * another user may own, issue 49).  The descriptor into *fd, or an
 * error: TSEC_ENOENT for a key that is not there (errno says why:
 * ENOENT, ENOTDIR, ELOOP), TSEC_EIO for a planted folder on the way
 * (errno EPERM) or a failure.
 */
static int open_beneath(struct tsec__filebe *fb, const struct tsec__skey *sk, int flags, int *fd,
			struct tsec_error *err)
{
	if ((*fd = tsec__fb_open_key(fb, sk, flags)) >= 0)
		return 0;
	if (errno == EPERM)
		return tsec__seterr(err, TSEC_EIO, sk->text, "a folder on the way to '%s' belongs "
				    "to another user or others can write it: planted in the store; "
				    "refused", sk->text);
	return tsec__fb_open_err(sk, err);
}

/* Whether a failed lookup means "no such key" (not an I/O error). */
static bool absent(int e)
{
	return e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV;
}

int tsec__fb_open_err(const struct tsec__skey *sk, struct tsec_error *err)
{
	if (errno == ENOENT || errno == ENOTDIR)
		return tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	if (errno == ELOOP || errno == EXDEV)
		return tsec__seterr(err, TSEC_ENOENT, sk->text,
				    "%s: reached through a symbolic link; the store follows none",
				    sk->text);
	return tsec__fb_io_err(err, sk->text, "cannot open");
}

/*
 * A value: a regular file with at most one name.  None (0) is a file
 * replaced or removed since it was looked up (a rename over a value
 * drops the old file's count before the name moves to the new one): it
 * was the value at that moment, and reads as such.  More than one is a
 * hard link planted in the store.
 */
bool tsec__fb_plain_folder(const struct stat *sb)
{
	return S_ISDIR(sb->st_mode) && owned(sb) && !(sb->st_mode & 022);
}

bool tsec__fb_plain_file(const struct stat *sb)
{
	return S_ISREG(sb->st_mode) && sb->st_nlink <= 1 && owned(sb);
}

/* Refuses anything but a value (plain_file), or a folder when
 * folder_ok. */

int tsec__fb_plain(const struct stat *sb, const struct tsec__skey *sk, bool folder_ok,
		 struct tsec_error *err)
{
	if (S_ISDIR(sb->st_mode))
		return folder_ok ? 0 : tsec__seterr(err, TSEC_EINVAL, sk->text,
						    "'%s' is a folder, not a value", sk->text);
	if (!owned(sb))
		return tsec__seterr(err, TSEC_EIO, sk->text,
				    "'%s' belongs to uid %ld, not this store's user: planted in "
				    "the store; refused", sk->text, (long)sb->st_uid);
	if (!tsec__fb_plain_file(sb))
		return tsec__seterr(err, TSEC_EIO, sk->text,
				    "'%s' is not a regular file with one link (a FIFO, "
				    "socket, device or hard link planted in the store); refused",
				    sk->text);
	return 0;
}

/* Reads the value open on fd (a plain file, at most max bytes) into a
 * new buffer; closes fd.  A folder is TSEC_EINVAL, or with folder_none
 * no value (0, *out NULL). */
static int read_value(int fd, const struct tsec__skey *sk, size_t max, bool folder_none,
		      char **out, size_t *len, struct tsec_error *err)
{
	struct stat sb;
	size_t n = 0;
	char *buf;
	int rc = 0;

	if (fstat(fd, &sb) < 0) {
		rc = tsec__fb_io_err(err, sk->text, "cannot stat");
		goto out;
	}
	if (folder_none && S_ISDIR(sb.st_mode))
		goto out; /* rc 0, no value */
	if ((rc = tsec__fb_plain(&sb, sk, false, err)))
		goto out;
	if ((uint64_t)sb.st_size > max) {
		rc = tsec__seterr(err, TSEC_ETOOBIG, sk->text, "value larger than %zu bytes", max);
		goto out;
	}
	if (!(buf = malloc((size_t)sb.st_size + 1))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, sk->text, NULL);
		goto out;
	}
	while (n < (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	rc = 0;
out:
	close(fd);
	return rc;
}

/* O_NONBLOCK: opening a planted FIFO must not wait for a writer. */
#define VALUE_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY)

static int fb_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	int fd, rc;

	*out = NULL;
	*len = 0;
	if ((rc = open_beneath(tsec__fb_of(b), sk, VALUE_FLAGS, &fd, err)))
		return rc;
	return read_value(fd, sk, max, false, out, len, err);
}

/*
 * A group's renames run under the store's commit flock (file_commit.c);
 * the values are opened under it, shared, so none of them is renamed
 * over between two opens.  An open file keeps what it held when it was
 * opened (a value is replaced by a rename, never written in place), so
 * the reads run after the flock is let go.
 */
static int fb_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		       size_t max, char **out, size_t *len, struct tsec_error *err)
{
	struct tsec__filebe *fb = tsec__fb_of(b);
	int fd[TSEC__GET_MANY_MAX], cfd, rc;
	size_t i;

	if ((rc = tsec__values_begin(out, len, n, err)))
		return rc;
	for (i = 0; i < n; i++)
		fd[i] = -1;
	if ((cfd = tsec__fb_commit_read(fb, TSEC__FB_READ_WAIT_MS)) < 0)
		return tsec__fb_commit_lock_err(err, k[0].text);
	for (i = 0; i < n && !rc; i++)
		if ((rc = open_beneath(fb, &k[i], VALUE_FLAGS, &fd[i], err)) == TSEC_ENOENT)
			rc = 0; /* not there: no value */
	tsec__fb_commit_end(fb, cfd);
	for (i = 0; i < n; i++) {
		if (fd[i] < 0)
			continue;
		if (rc)
			close(fd[i]);
		else
			rc = read_value(fd[i], &k[i], max, true, &out[i], &len[i], err);
	}
	if (rc)
		tsec__values_free(out, len, n);
	return rc;
}

/* Stats the key's path (never through a link).  0, or -1 with errno. */
static int stat_key(struct tsec__filebe *fb, const struct tsec__skey *sk, struct stat *sb)
{
	return tsec__fb_stat_key(fb, sk, sb);
}

int tsec__fb_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err)
{
	struct stat sb;

	*kind = 0;
	if (stat_key(tsec__fb_of(b), sk, &sb) < 0) {
		/* Not there, or not the store's: none.  Anything else is an
		 * error, never read as "absent" (a caller that believed it
		 * could write over what is there). */
		if (absent(errno) || errno == EPERM)
			return 0;
		return tsec__fb_open_err(sk, err);
	}
	if (S_ISDIR(sb.st_mode))
		*kind = 2;
	else if (tsec__fb_plain_file(&sb))
		*kind = 1;
	return 0;
}

static int fb_stat(struct tsec__backend *b, const struct tsec__skey *sk,
		   struct tsec_stat *st, struct tsec_error *err)
{
	struct stat sb;
	int rc;

	if (stat_key(tsec__fb_of(b), sk, &sb) < 0)
		return tsec__fb_open_err(sk, err);
	if ((rc = tsec__fb_plain(&sb, sk, true, err)))
		return rc;
	st->size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
	st->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	st->is_file = S_ISREG(sb.st_mode);
	return 0;
}

/* A group, or one value, fenced or not (a lock's write lock around it). */
struct put_args {
	struct tsec__filebe *fb;
	const struct tsec__bput *p;
	size_t n;
};

static int put_plain(void *ctx, struct tsec_error *err)
{
	struct put_args *a = ctx;
	int dirfd, rc;

	if (a->n > 1)
		return tsec__fb_put_group(a->fb, a->p, a->n, NULL, NULL, err);
	if ((rc = tsec__fb_open_dirs(a->fb, a->p->sk, a->p->sk->n - 1, true, &dirfd, err)))
		return rc;
	/* One value: the rename alone is atomic. */
	rc = tsec__fb_write_atomic(a->fb, dirfd, a->p->sk->seg[a->p->sk->n - 1], a->p->value,
				   a->p->len, true, err);
	close(dirfd);
	return rc;
}

static int fb_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *g,
		       struct tsec_error *err)
{
	struct put_args a = { tsec__fb_of(b), p, n };
	int rc, tries = 0;

	/*
	 * Every path below creates the folders it needs, so ENOENT means one
	 * was pruned (see prune) after it was resolved, before anything was
	 * written or committed: the write is made again.
	 */
	do {
		/* Fenced or guarded: always a group, whose slow part runs
		 * before the lock's write lock is taken (file_journal.c). */
		rc = f || g ? tsec__fb_put_group(a.fb, p, n, f, g, err) : put_plain(&a, err);
		/* (Not when it is the lock that is gone.) */
	} while (rc == TSEC_ENOENT && !(f && err && !strcmp(err->where, f->name)) &&
		 ++tries < TSEC__FB_PRUNED_RETRIES);
	/* Failed: the folders it made for its values go again (only the
	 * empty ones: a folder exists only while a value is below it). */
	for (size_t i = 0; rc && i < n; i++)
		tsec__fb_prune(a.fb, p[i].sk, p[i].sk->n - 1);
	return rc;
}

static void fb_close(struct tsec__backend *b)
{
	struct tsec__filebe *fb = tsec__fb_of(b);

	if (!fb)
		return;
	tsec__folders_free(&fb->folders);
	pthread_rwlock_destroy(&fb->commit_rw);
	tsec__fb_slots_end(fb);
	pthread_mutex_destroy(&fb->slots_mu);
	tsec__fb_owner_end(fb);
	close(fb->journalfd);
	close(fb->locksfd);
	close(fb->rootfd);
	if (fb->fenced)
		tsec__trusted_fence_drop(fb->root_dev, fb->root_ino);
	free(fb);
}

static const struct tsec__backend_ops file_ops = {
	.name = "file",
	.close = fb_close,
	.get = fb_get,
	.get_many = fb_get_many,
	.kind = tsec__fb_kind,
	.stat = fb_stat,
	.list = tsec__fb_list,
	.del = tsec__fb_del,
	.move = tsec__fb_move,
	.put_many = fb_put_many,
	.lock_try = tsec__fb_lock_try,
	.lock_unwait = tsec__fb_lock_unwait,
	.lock_renew = tsec__fb_lock_renew,
	.lock_release = tsec__fb_lock_release,
};

int tsec__file_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		    struct tsec_error *err)
{
	(void)err;
	tsec__fb_of(b)->feed = *sink;
	return 0;
}

/* One of the store's own folders under its root (the journal, the
 * locks): made if absent, opened, and checked as the root's: 0 or the
 * error, *fd open on success. */
static int own_folder(struct tsec__filebe *fb, const char *root, const char *name, int *fd,
		      struct tsec_error *err)
{
	const char *failed = NULL;
	char what[64];
	int e;

	if (mkdirat(fb->rootfd, name, 0700) < 0 && errno != EEXIST)
		failed = "create";
	else if ((*fd = openat(fb->rootfd, name, DIR_FLAGS)) < 0)
		failed = "open";
	if (!failed)
		return tsec__fb_folder_ok(*fd, root, name, err);
	e = errno;
	snprintf(what, sizeof(what), "cannot %s the folder %s", failed, name);
	errno = e;                   /* what tsec__fb_io_err says */
	return tsec__fb_io_err(err, root, what);
}

/* A file backend over the root held open at rootfd: its locks made. */
static struct tsec__filebe *fb_new(int rootfd)
{
	struct tsec__filebe *fb = calloc(1, sizeof(*fb));
	pthread_rwlockattr_t a;

	if (!fb)
		return NULL;
	fb->base.ops = &file_ops;
	fb->journalfd = fb->locksfd = fb->ownerfd = -1;
	tsec__folders_init(&fb->folders);
	/* Writers first, as the turnstile does across processes. */
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fb->commit_rw, &a);
	pthread_rwlockattr_destroy(&a);
	pthread_mutex_init(&fb->slots_mu, NULL);
	for (int i = 0; i < TSEC__SLOTS; i++)
		fb->slot[i].fd = -1;
	fb->rootfd = rootfd;
	return fb;
}

int tsec__file_open(struct tsec__backend **out, const char *root, struct tsec_error *err)
{
	struct tsec__filebe *fb;
	struct tsec__trusted tr;
	char why[256];
	int rc;

	*out = NULL;
	/* Its locks are judged on the boot clock, with the boot's id: a
	 * process that cannot tell which boot it runs in would take a lock
	 * another boot left, or one that is live (issue 48). */
	if (tsec__boot_known(why, sizeof(why)))
		return tsec__seterr(err, TSEC_EINVAL, "storage", "the file store cannot judge its "
				    "locks' leases: %s", why);
	/*
	 * The root as written, every folder and link on its way checked and
	 * the root opened beneath them (common/trust.c), as sshd's
	 * StrictModes judges a home folder: otherwise another user could
	 * plant values, or point the root elsewhere (/etc).  Everything
	 * after is reached from the descriptor held here.
	 */
	if ((rc = tsec__trusted_open(root, TSEC__TRUST_FOLDER, true, "the store's root", &tr,
				     err)))
		return rc;
	if (!(fb = fb_new(tr.fd))) {
		close(tr.fd);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	/* No key or secret file may be read from inside it (common/trust.c). */
	if (tsec__trusted_fence_add(tr.dev, tr.ino, "the store's root", root)) {
		rc = tsec__seterr(err, TSEC_ENOMEM, root, "too many stores open");
		close(fb->rootfd);
		free(fb);
		return rc;
	}
	fb->fenced = true;
	fb->root_dev = tr.dev;
	fb->root_ino = tr.ino;
	if ((rc = own_folder(fb, root, TSEC__JOURNAL, &fb->journalfd, err)) ||
	    (rc = own_folder(fb, root, TSEC__LOCKS, &fb->locksfd, err)) ||
	    (rc = tsec__fb_owner_begin(fb, err)) || (rc = tsec__fb_recover(fb, err))) {
		fb_close(&fb->base);
		return rc;
	}
	*out = &fb->base;
	return 0;
}
