/*
 * Opening a path the broker was given (a store's root, a key file, a
 * secret), checked as written rather than as realpath() would resolve it
 * later: a folder or link on the way that another user owns or may
 * write could otherwise be swapped for one pointing anywhere (issue 49:
 * a storage root `p2/link`, p2 another user's, served /etc).
 *
 * The walk starts at "/" (a relative path is taken from the working
 * folder) and holds a descriptor for every folder it has checked; each
 * next component is looked at with fstatat(AT_SYMLINK_NOFOLLOW) beneath
 * the folder before it and opened with O_NOFOLLOW, and what was opened is
 * judged by fstat.  A folder nobody else may write cannot have its
 * entries changed by anybody else, so what was checked is what is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/trust.h"

#define MAX_LINKS 40
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

static bool ours(const struct stat *sb)
{
	return sb->st_uid == geteuid() || sb->st_uid == 0;
}

struct walk {
	int fd[TSEC__TRUST_DEPTH];
	struct stat st[TSEC__TRUST_DEPTH];
	size_t len[TSEC__TRUST_DEPTH];   /* of `at` when each was pushed */
	unsigned n;
	char at[PATH_MAX];               /* the folders resolved so far */
	const char *path, *role;
	struct tsec_error *err;
};

static void pop(struct walk *w)
{
	close(w->fd[--w->n]);
	w->at[w->len[w->n]] = '\0';
}

static void pop_all(struct walk *w)
{
	while (w->n)
		pop(w);
}

/* A folder on the way: ours, and writable by others only if sticky. */
static int way_ok(struct walk *w, const struct stat *sb)
{
	const char *at = *w->at ? w->at : "/";

	if (!ours(sb))
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s, above %s %s, belongs to uid "
				    "%ld (not this user, %ld, nor root): it could swap what is "
				    "below; refused", at, w->role, w->path, (long)sb->st_uid,
				    (long)geteuid());
	if ((sb->st_mode & 022) && !(sb->st_mode & S_ISVTX))
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s, above %s %s, is mode %04o: "
				    "others can write it (and swap what is below): refused", at,
				    w->role, w->path, (unsigned)(sb->st_mode & 07777));
	return 0;
}

static int push(struct walk *w, int fd, const char *name)
{
	size_t l = strlen(w->at);

	if (w->n == TSEC__TRUST_DEPTH || l + 1 + strlen(name) >= sizeof(w->at)) {
		close(fd);
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is too deep", w->role,
				    w->path);
	}
	if (fstat(fd, &w->st[w->n]) < 0) {
		int e = errno;

		close(fd);
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s: %s", w->role, w->path,
				    strerror(e));
	}
	w->len[w->n] = l;
	if (*name)
		snprintf(w->at + l, sizeof(w->at) - l, "/%s", name);
	w->fd[w->n++] = fd;
	return way_ok(w, &w->st[w->n - 1]);
}

/* The next component of *rest (NUL-terminated into it), or NULL. */
static char *next_name(char **rest)
{
	char *p = *rest, *s;

	while (*p == '/' || (p[0] == '.' && (p[1] == '/' || !p[1])))
		p++;
	if (!*p)
		return NULL;
	s = strchr(p, '/');
	if (s) {
		*s = '\0';
		*rest = s + 1;
	} else {
		*rest = p + strlen(p);
	}
	return p;
}

/* Whether *rest holds another component. */
static bool more(const char *rest)
{
	for (const char *p = rest; *p; p++)
		if (*p != '/' && !(p[0] == '.' && (p[1] == '/' || !p[1])))
			return true;
	return false;
}

static int last_ok(struct walk *w, enum tsec__trust_kind kind, const struct stat *sb)
{
	if (kind == TSEC__TRUST_FOLDER && !S_ISDIR(sb->st_mode))
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is not a folder", w->role,
				    w->path);
	if (kind != TSEC__TRUST_FOLDER && !S_ISREG(sb->st_mode))
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is not a regular file",
				    w->role, w->path);
	if (!ours(sb))
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s belongs to uid %ld, not this "
				    "user (%ld) nor root: refused", w->role, w->path,
				    (long)sb->st_uid, (long)geteuid());
	if (kind == TSEC__TRUST_SECRET && (sb->st_mode & 077))
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is readable by others "
				    "(mode %03o): refused; chmod 600 it", w->role, w->path,
				    (unsigned)(sb->st_mode & 0777));
	if (sb->st_mode & 022)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s is mode %04o: others can "
				    "write it: refused; chmod %s it", w->role, w->path,
				    (unsigned)(sb->st_mode & 07777),
				    kind == TSEC__TRUST_FOLDER ? "700" : "644");
	if (kind == TSEC__TRUST_SECRET && sb->st_nlink != 1)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s has %lu names (hard links): "
				    "one may be where others can read it; refused", w->role,
				    w->path, (unsigned long)sb->st_nlink);
	return 0;
}

/* The fenced folders (tsec__trusted_fence_add). */
#define FENCES 32
static struct fence {
	dev_t dev;
	ino_t ino;
	unsigned refs;
	char role[48];
	char path[208];
} fences[FENCES];
static pthread_mutex_t fences_mu = PTHREAD_MUTEX_INITIALIZER;

int tsec__trusted_fence_add(dev_t dev, ino_t ino, const char *role, const char *path)
{
	struct fence *free_one = NULL;
	int rc = -1;

	pthread_mutex_lock(&fences_mu);
	for (unsigned i = 0; i < FENCES; i++) {
		if (fences[i].refs && fences[i].dev == dev && fences[i].ino == ino) {
			fences[i].refs++;
			rc = 0;
			break;
		}
		if (!fences[i].refs && !free_one)
			free_one = &fences[i];
	}
	if (rc && free_one) {
		free_one->dev = dev;
		free_one->ino = ino;
		free_one->refs = 1;
		snprintf(free_one->role, sizeof(free_one->role), "%s", role);
		snprintf(free_one->path, sizeof(free_one->path), "%s", path);
		rc = 0;
	}
	pthread_mutex_unlock(&fences_mu);
	return rc;
}

void tsec__trusted_fence_drop(dev_t dev, ino_t ino)
{
	pthread_mutex_lock(&fences_mu);
	for (unsigned i = 0; i < FENCES; i++)
		if (fences[i].refs && fences[i].dev == dev && fences[i].ino == ino) {
			fences[i].refs--;
			break;
		}
	pthread_mutex_unlock(&fences_mu);
}

/* A secret reached through a fenced folder: refused, saying which. */
static int fenced(const char *path, const char *role, const struct tsec__trusted *t,
		  struct tsec_error *err)
{
	int rc = 0;

	pthread_mutex_lock(&fences_mu);
	for (unsigned i = 0; i < FENCES && !rc; i++)
		if (fences[i].refs && tsec__trusted_within(t, fences[i].dev, fences[i].ino))
			rc = tsec__seterr(err, TSEC_EINVAL, path, "%s %s is inside %s %s, "
					  "where callers may read it or the broker remove it: "
					  "refused; keep it in a folder of its own",
					  role, path, fences[i].role, fences[i].path);
	pthread_mutex_unlock(&fences_mu);
	return rc;
}

/* The walk's folders into t, which is open on fd (dev, ino). */
static void fill(const struct walk *w, struct tsec__trusted *t, int fd, const struct stat *sb)
{
	t->fd = fd;
	t->dev = sb->st_dev;
	t->ino = sb->st_ino;
	for (unsigned i = 0; i < w->n; i++) {
		t->dir[i].dev = w->st[i].st_dev;
		t->dir[i].ino = w->st[i].st_ino;
	}
	t->ndirs = w->n;
}

/*
 * The link name in top: followed, if this user or root owns it, by
 * putting its text before what is left of the path (*rest, rewritten
 * into the other of the two buffers); from "/" when it is absolute.
 */
static int follow(struct walk *w, int top, const char *name, const struct stat *sb, char **rest,
		  char buf[2][PATH_MAX * 2], unsigned *cur, unsigned *links)
{
	char target[PATH_MAX];
	ssize_t l;
	int fd, rc;

	if (++*links > MAX_LINKS)
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s: more than %d symbolic "
				    "links", w->role, w->path, MAX_LINKS);
	if (!ours(sb))
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s/%s, on the way to %s %s, is a "
				    "symbolic link uid %ld owns (not this user, %ld, nor root): "
				    "refused", w->at, name, w->role, w->path, (long)sb->st_uid,
				    (long)geteuid());
	l = readlinkat(top, name, target, sizeof(target) - 1);
	if (l <= 0)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s: cannot read the link %s/%s",
				    w->role, w->path, w->at, name);
	target[l] = '\0';
	if ((size_t)snprintf(buf[*cur ^ 1], sizeof(buf[0]), "%s/%s", target, *rest) >=
	    sizeof(buf[0]))
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is too long once its "
				    "links are followed", w->role, w->path);
	*cur ^= 1;
	*rest = buf[*cur];
	if (target[0] != '/')
		return 0;
	pop_all(w);
	if ((fd = open("/", DIR_FLAGS)) < 0)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "cannot open /: %s", strerror(errno));
	return (rc = push(w, fd, "")) ? rc : 0;
}

/* The last component, a file, opened beneath top and judged. */
static int open_file(struct walk *w, enum tsec__trust_kind kind, int top, const char *name,
		     struct tsec__trusted *t)
{
	struct stat sb;
	int fd, rc = 0;

	fd = openat(top, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "cannot open %s %s: %s", w->role,
				    w->path, strerror(errno));
	if (fstat(fd, &sb) < 0 || (rc = last_ok(w, kind, &sb))) {
		rc = rc ? rc : tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s: %s", w->role,
					    w->path, strerror(errno));
		close(fd);
		return rc;
	}
	fill(w, t, fd, &sb);
	if (kind == TSEC__TRUST_SECRET && (rc = fenced(w->path, w->role, t, w->err))) {
		close(fd);
		t->fd = -1;
	}
	return rc;
}

static int walk(struct walk *w, enum tsec__trust_kind kind, bool create, char *rest,
		struct tsec__trusted *t)
{
	static __thread char buf[2][PATH_MAX * 2];
	unsigned links = 0, cur = 0;
	char *name;
	struct stat sb;
	int fd, rc;

	if ((fd = open("/", DIR_FLAGS)) < 0)
		return tsec__seterr(w->err, TSEC_EIO, w->path, "cannot open /: %s",
				    strerror(errno));
	if ((rc = push(w, fd, "")))
		return rc;
	while ((name = next_name(&rest))) {
		bool last = !more(rest);
		int top = w->fd[w->n - 1];

		if (!strcmp(name, "..")) {
			if (w->n > 1)
				pop(w);
			continue;
		}
		if (fstatat(top, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT && last && create && kind == TSEC__TRUST_FOLDER) {
				if (mkdirat(top, name, 0700) < 0 && errno != EEXIST)
					return tsec__seterr(w->err, TSEC_EIO, w->path, "cannot create "
							    "%s %s: %s", w->role, w->path,
							    strerror(errno));
				fsync(top);
				if (fstatat(top, name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
					goto found;
			}
			return tsec__seterr(w->err, errno == ENOENT ? TSEC_ENOENT : TSEC_EIO,
					    w->path, "%s %s: %s/%s: %s", w->role, w->path, w->at,
					    name, strerror(errno));
		}
found:
		if (S_ISLNK(sb.st_mode)) {
			if ((rc = follow(w, top, name, &sb, &rest, buf, &cur, &links)))
				return rc;
			continue;
		}
		if (!last || kind == TSEC__TRUST_FOLDER) {
			if ((fd = openat(top, name, DIR_FLAGS)) < 0)
				return tsec__seterr(w->err, TSEC_EIO, w->path, "%s %s: %s/%s: %s",
						    w->role, w->path, w->at, name,
						    errno == ENOTDIR ? "not a folder"
								     : strerror(errno));
			if ((rc = push(w, fd, name)))
				return rc;
			continue;
		}
		/* The file itself. */
		return open_file(w, kind, top, name, t);
	}
	if (kind != TSEC__TRUST_FOLDER)
		return tsec__seterr(w->err, TSEC_EINVAL, w->path, "%s %s is a folder, not a file",
				    w->role, w->path);
	if ((rc = last_ok(w, kind, &w->st[w->n - 1])))
		return rc;
	/* The folder itself is the top of the walk; those below it hold it. */
	w->n--;
	fill(w, t, w->fd[w->n], &w->st[w->n]);
	return 0;
}

int tsec__trusted_open(const char *path, enum tsec__trust_kind kind, bool create,
		       const char *role, struct tsec__trusted *t, struct tsec_error *err)
{
	static __thread struct walk w;   /* 16 KiB of paths: not on a worker's stack */
	char whole[PATH_MAX * 2];
	int rc;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	if (!path || !*path)
		return tsec__seterr(err, TSEC_EINVAL, "", "%s: no path given", role);
	if (strlen(path) >= PATH_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "", "%s: the path is too long", role);
	if (path[0] == '/') {
		snprintf(whole, sizeof(whole), "%s", path);
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)))
			return tsec__seterr(err, TSEC_EIO, path, "%s %s: cannot tell the working "
					    "folder: %s", role, path, strerror(errno));
		snprintf(whole, sizeof(whole), "%s/%s", cwd, path);
	}
	w.n = 0;
	w.at[0] = '\0';
	w.path = path;
	w.role = role;
	w.err = err;
	rc = walk(&w, kind, create, whole, t);
	pop_all(&w);
	return rc;
}

bool tsec__trusted_within(const struct tsec__trusted *t, dev_t dev, ino_t ino)
{
	for (unsigned i = 0; i < t->ndirs; i++)
		if (t->dir[i].dev == dev && t->dir[i].ino == ino)
			return true;
	return false;
}

int tsec__trusted_outside(const char *path, enum tsec__trust_kind kind, const char *role,
			  struct tsec_error *err)
{
	struct tsec__trusted t;
	int rc;

	if ((rc = tsec__trusted_open(path, kind, false, role, &t, err)))
		return rc;
	close(t.fd);
	return fenced(path, role, &t, err);
}
