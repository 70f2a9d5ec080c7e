/*
 * The file backend's locks.  locks/<name>.lock holds a lease (owner
 * token, fence, expiry, queued waiter) and is read and changed only under
 * an OS file lock (flock) on the guard file locks/.tsec-guard-<name>.
 * flock works across processes and, because each attempt opens the guard
 * anew, across threads of one process too: a stale lock has exactly one
 * taker.  The lease rules themselves are lease.c's.
 *
 * Guards are removed when a lock is released (and by recovery): the
 * remover unlinks the guard while holding it, and a taker that got the
 * flock checks that the name still leads to the inode it locked,
 * starting over otherwise, so a removed guard never lets two in.
 *
 * The lock file is not fsynced: a lock is shared through the page cache;
 * one lost in a power failure only ends a lease early, and fences stay
 * increasing through lease.c's clock floor.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker/storage/file_private.h"

#define LOCK_FILE_MAX 512
#define GUARD_WAIT_MS 2000            /* the guard is held for microseconds */
#define GUARD_PREFIX TSEC__RESERVED "guard-"

/* The names of one lock's files, and the folder "locks". */
struct lockfiles {
	struct tsec__skey sk;        /* locks/<name> */
	char file[TSEC_LOCK_NAME_MAX + 8];
	char guard[TSEC_LOCK_NAME_MAX + 16];
	int dirfd;
	int gfd;
};

static int names(const char *name, struct lockfiles *l, struct tsec_error *err)
{
	char key[TSEC_LOCK_NAME_MAX + 8];
	int rc;

	l->dirfd = l->gfd = -1;
	snprintf(key, sizeof(key), "locks/%s", name);
	if ((rc = tsec__skey_parse(key, false, &l->sk, err)))
		return rc;
	if (l->sk.n != 2)
		return tsec__seterr(err, TSEC_EKEY, "name", "lock name must be one key segment");
	snprintf(l->file, sizeof(l->file), "%s.lock", l->sk.seg[1]);
	snprintf(l->guard, sizeof(l->guard), GUARD_PREFIX "%s", l->sk.seg[1]);
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Whether fd is still the file the guard's name leads to. */
static bool same_file(int dirfd, const char *name, int fd)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/*
 * Opens locks/ and takes the guard; both stay open in l until done().
 * With `wait` false one attempt only (try-acquire never waits).
 */
static int guard_take(struct tsec__filebe *fb, struct lockfiles *l, bool wait,
		      struct tsec_error *err)
{
	int64_t deadline = wait ? tsec__mono_ms() + GUARD_WAIT_MS : 0;
	int rc;

	if ((rc = tsec__fb_open_dirs(fb, &l->sk, 1, true, &l->dirfd, err)))
		return rc;
	for (;;) {
		int fd = openat(l->dirfd, l->guard, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
				O_NONBLOCK, 0600);
		if (fd < 0)
			return tsec__seterr(err, TSEC_EIO, l->sk.text, "cannot open lock guard: %s",
					    strerror(errno));
		while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			if (errno != EWOULDBLOCK && errno != EINTR) {
				rc = tsec__seterr(err, TSEC_EIO, l->sk.text, "flock: %s",
						  strerror(errno));
				close(fd);
				return rc;
			}
			if (tsec__mono_ms() >= deadline) {
				close(fd);
				return tsec__seterr(err, TSEC_EBUSY, l->sk.text, "lock guard busy");
			}
			sleep_ms(1);
		}
		if (same_file(l->dirfd, l->guard, fd)) {
			l->gfd = fd;
			return 0;
		}
		close(fd); /* removed by a releaser while we waited: again */
	}
}

/* Lets the guard go (removing it first when `remove`) and closes. */
static void done(struct lockfiles *l, bool remove)
{
	if (l->gfd >= 0) {
		if (remove)
			unlinkat(l->dirfd, l->guard, 0);
		close(l->gfd);
	}
	if (l->dirfd >= 0)
		close(l->dirfd);
	l->gfd = l->dirfd = -1;
}

static bool hex16(const char *hex, uint8_t *out)
{
	size_t bin;

	return sodium_hex2bin(out, 16, hex, 32, NULL, &bin, NULL) == 0 && bin == 16;
}

/* Reads the lease; a missing or unreadable file is a free lock, fence 0. */
static void state_read(const struct lockfiles *l, struct tsec__lease_state *st)
{
	char buf[LOCK_FILE_MAX + 1], tok[33], wt[33];
	unsigned long long fence;
	long long expires, seen;
	struct stat sb;
	ssize_t n;
	int fd;

	memset(st, 0, sizeof(*st));
	fd = openat(l->dirfd, l->file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_nlink != 1) {
		close(fd);
		return;
	}
	n = read(fd, buf, LOCK_FILE_MAX);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	if (sscanf(buf, "tsec-lock 2\ntoken %32s\nfence %llu\nexpires_ms %lld\n"
		   "waiter %32s\nwaiter_seen_ms %lld\n", tok, &fence, &expires, wt, &seen) != 5 ||
	    !hex16(tok, st->token) || !hex16(wt, st->waiter)) {
		memset(st, 0, sizeof(*st));
		return;
	}
	st->fence = fence;
	st->expires_ms = expires;
	st->waiter_seen_ms = seen;
}

static int state_write(const struct lockfiles *l, const struct tsec__lease_state *st,
		       struct tsec_error *err)
{
	char buf[LOCK_FILE_MAX], tok[33], wt[33];
	int n;

	sodium_bin2hex(tok, sizeof(tok), st->token, 16);
	sodium_bin2hex(wt, sizeof(wt), st->waiter, 16);
	n = snprintf(buf, sizeof(buf), "tsec-lock 2\ntoken %s\nfence %llu\nexpires_ms %lld\n"
		     "waiter %s\nwaiter_seen_ms %lld\n", tok, (unsigned long long)st->fence,
		     (long long)st->expires_ms, wt, (long long)st->waiter_seen_ms);
	return tsec__fb_write_atomic(l->dirfd, l->file, buf, (size_t)n, false, err);
}

int tsec__fb_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		      const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct tsec__filebe *fb = (struct tsec__filebe *)b;
	struct tsec__lease_state st;
	struct lockfiles l;
	bool dirty;
	int rc;

	if ((rc = names(name, &l, err)) || (rc = guard_take(fb, &l, waiter != NULL, err)))
		goto out;
	state_read(&l, &st);
	rc = tsec__lease_try(&st, waiter, ttl_ms, tsec__wall_ms(), out, &dirty);
	if (dirty) {
		int wrc = state_write(&l, &st, err);
		if (!rc)
			rc = wrc;
	}
	if (rc == TSEC_EBUSY)
		tsec__seterr(err, TSEC_EBUSY, l.sk.text, "the lock is held or promised to a waiter");
out:
	done(&l, false);
	return rc;
}

/* Renew (ttl_ms > 0) or release (0) a lock the caller holds. */
static int owned_op(struct tsec__filebe *fb, const char *name, const uint8_t token[16],
		    uint64_t ttl_ms, int64_t *expires, struct tsec_error *err)
{
	struct tsec__lease_state st;
	struct lockfiles l;
	bool gone = false;
	int64_t now;
	int rc;

	if ((rc = names(name, &l, err)) || (rc = guard_take(fb, &l, true, err)))
		goto out;
	state_read(&l, &st);
	now = tsec__wall_ms();
	if ((rc = tsec__lease_owned(&st, token, now, l.sk.text, err)))
		goto out;
	if (ttl_ms) {
		st.expires_ms = tsec__deadline_after(now, ttl_ms);
		*expires = st.expires_ms;
		rc = state_write(&l, &st, err);
	} else if (!sodium_is_zero(st.waiter, 16)) {
		tsec__lease_release(&st); /* kept: it holds the queued waiter */
		rc = state_write(&l, &st, err);
	} else if (unlinkat(l.dirfd, l.file, 0) < 0) {
		/* Nobody waits: no file at all (the next fence comes from the
		 * clock floor, lease.c). */
		rc = tsec__seterr(err, TSEC_EIO, l.sk.text, "cannot remove lock: %s",
				  strerror(errno));
	} else {
		gone = true;
	}
out:
	/* A released lock nobody waits for needs no guard file either. */
	done(&l, gone);
	return rc;
}

int tsec__fb_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	return owned_op((struct tsec__filebe *)b, name, token, ttl_ms, expires_ms, err);
}

int tsec__fb_lock_release(struct tsec__backend *b, const char *name,
			  const uint8_t token[16], struct tsec_error *err)
{
	int64_t unused;

	return owned_op((struct tsec__filebe *)b, name, token, 0, &unused, err);
}

int tsec__fb_put_fenced(struct tsec__filebe *fb, const struct tsec__bput *p, size_t n,
			const struct tsec__fence *f, struct tsec_error *err)
{
	struct tsec__lease_state st;
	struct lockfiles l;
	int dirfd, rc;

	if ((rc = names(f->name, &l, err)) || (rc = guard_take(fb, &l, true, err)))
		goto out;
	state_read(&l, &st);
	/* Under the guard no one can take the lock between check and write. */
	if ((rc = tsec__lease_fenced(&st, f, tsec__wall_ms(), err)))
		goto out;
	if (n > 1) {
		rc = tsec__fb_put_group(fb, p, n, err);
	} else if (!(rc = tsec__fb_open_dirs(fb, p->sk, p->sk->n - 1, true, &dirfd, err))) {
		rc = tsec__fb_write_atomic(dirfd, p->sk->seg[p->sk->n - 1], p->value, p->len,
					   true, err);
		close(dirfd);
	}
out:
	done(&l, false);
	return rc;
}

void tsec__fb_clean_guards(struct tsec__filebe *fb)
{
	int fd = openat(fb->rootfd, "locks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d))) {
		int g;
		if (strncmp(e->d_name, GUARD_PREFIX, strlen(GUARD_PREFIX)))
			continue;
		g = openat(fd, e->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (g < 0)
			continue;
		/* Held by nobody now: removing it is safe (see the top). */
		if (flock(g, LOCK_EX | LOCK_NB) == 0 && same_file(fd, e->d_name, g))
			unlinkat(fd, e->d_name, 0);
		close(g);
	}
	closedir(d);
}
