/*
 * The file backend's locks.  .tsec-locks/<name>.lock holds a lease (owner
 * token, fence, expiry, queued waiter) as one fixed-size record, read and
 * rewritten in place only while its reader holds an OS file lock (flock)
 * on that very file.  flock works across processes and, because each
 * attempt opens the file anew, across threads of one process too: a stale
 * lock has exactly one taker.  The lease rules themselves are lease.c's.
 *
 * A released lock nobody waits for is unlinked by its releaser while it
 * still holds the flock.  A taker that got the flock checks that the file
 * it locked still has a name (st_nlink > 0), starting over otherwise, so a
 * removed file never lets two in; names are only ever removed, never
 * replaced, so a linked file is the one the name leads to.
 *
 * A fenced write (file.c, file_journal.c) does not hold that flock while
 * it writes: it holds the file's write lock (an open-file-description
 * lock on byte 0, which flock does not see), takes the flock shared only
 * to read the lease, checks it, and writes.  So a holder paused inside
 * its write never keeps a taker from the lock (issue 34, item 5); the
 * new holder's own fenced writes take the write lock after it, so the
 * paused write, checked while its lease was live, lands before any of
 * theirs, never after (classic fencing: a write with an older fence is
 * never applied after one with a newer fence).  No one removes a lock's
 * file while its write lock is held, so every writer of one lock meets
 * on the same file.
 *
 * The record is not fsynced: a lock is shared through the page cache; one
 * lost or torn in a power failure reads as a free lock, which only ends a
 * lease early, and fences stay increasing through lease.c's clock floor.
 *
 * Leases are judged on the machine's boot clock (CLOCK_BOOTTIME, which
 * every process shares and no wall-clock step moves), with the boot's id
 * beside it: a process whose wall clock is an hour fast cannot end
 * another's lease early, and a lease written before a reboot is over.
 *
 * The folder's name starts with ".tsec-", which no key may name, so no
 * storage call reads a token, overwrites a lease or deletes a lock file
 * (they lived at locks/<name>.lock once, where `store get` printed the
 * token and `store rm` freed the lock for a second holder).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"
#include "broker/storage/lease.h"

#define RECORD 256                    /* bytes; one write, within a sector */
#define LOCK_WAIT_MS 2000             /* the flock is held for microseconds */

/* One lock's file in the locks folder. */
struct lockfile {
	struct tsec__skey sk;        /* locks/<name>: the name's rules, the text of errors */
	char file[TSEC_LOCK_NAME_MAX + 8];
	int dirfd;                   /* the backend's locksfd, borrowed */
	int fd;
};

static int names(const char *name, struct lockfile *l, struct tsec_error *err)
{
	char key[TSEC_LOCK_NAME_MAX + 8];
	int rc;

	l->dirfd = l->fd = -1;
	snprintf(key, sizeof(key), "locks/%s", name);
	if ((rc = tsec__skey_parse_any(key, &l->sk, err)))
		return rc;
	if (l->sk.n != 2)
		return tsec__seterr(err, TSEC_EKEY, "name", "lock name must be one key segment");
	snprintf(l->file, sizeof(l->file), "%s.lock", l->sk.seg[1]);
	return 0;
}

/* The write lock of a lock's file (see the top): 0, or -1 with errno. */
static int write_lock(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };

	return fcntl(fd, F_OFD_SETLK, &fl);
}

enum hold { STATE, WRITER };

/*
 * Opens locks/<name>.lock (created when `create`) and takes its flock
 * (STATE) or its write lock (WRITER); the descriptor stays open in l
 * until done().  With `wait` false, one attempt only (try-acquire never
 * waits).  TSEC_ENOENT when the file is absent and not to be created.
 */
static int take(struct tsec__filebe *fb, struct lockfile *l, bool create, bool wait,
		enum hold hold, struct tsec_error *err)
{
	int64_t deadline = wait ? tsec__mono_ms() + LOCK_WAIT_MS : 0;
	struct stat sb;
	int rc;

	l->dirfd = fb->locksfd;
	for (;;) {
		int fd = openat(l->dirfd, l->file, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
				(create ? O_CREAT : 0), 0600);
		if (fd < 0)
			return errno == ENOENT ? tsec__seterr(err, TSEC_ENOENT, l->sk.text,
							      "no such lock is held")
					       : tsec__seterr(err, TSEC_EIO, l->sk.text,
							      "cannot open the lock: %s",
							      strerror(errno));
		if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			close(fd);
			return tsec__seterr(err, TSEC_EIO, l->sk.text,
					    "the lock file is not a regular file; refused");
		}
		while ((hold == STATE ? flock(fd, LOCK_EX | LOCK_NB) : write_lock(fd)) < 0) {
			if (errno != EWOULDBLOCK && errno != EAGAIN && errno != EACCES &&
			    errno != EINTR) {
				rc = tsec__seterr(err, TSEC_EIO, l->sk.text, "%s: %s",
						  hold == STATE ? "flock" : "write lock",
						  strerror(errno));
				close(fd);
				return rc;
			}
			if (tsec__mono_ms() >= deadline) {
				close(fd);
				return hold == STATE
					? tsec__seterr(err, TSEC_EBUSY, l->sk.text, "lock file busy")
					: tsec__seterr(err, TSEC_EBUSY, l->sk.text,
						       "a fenced write of lock '%s' is still under way "
						       "(its writer may be paused); try again",
						       l->sk.seg[1]);
			}
			tsec__nap_ms(1);
		}
		if (fstat(fd, &sb) == 0 && sb.st_nlink > 0) {
			l->fd = fd;
			return 0;
		}
		close(fd); /* unlinked by a releaser while we waited: again */
	}
}

/* The flock shared, to read the lease (held by others for microseconds):
 * 0 or TSEC_EBUSY after LOCK_WAIT_MS. */
static int peek(struct lockfile *l, struct tsec_error *err)
{
	int64_t deadline = tsec__mono_ms() + LOCK_WAIT_MS;

	while (flock(l->fd, LOCK_SH | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR)
			return tsec__seterr(err, TSEC_EIO, l->sk.text, "flock: %s", strerror(errno));
		if (tsec__mono_ms() >= deadline)
			return tsec__seterr(err, TSEC_EBUSY, l->sk.text, "lock file busy");
		tsec__nap_ms(1);
	}
	return 0;
}

/* Whether no fenced write of this lock is under way (then none can begin
 * on this file until l->fd closes): only then may its file go. */
static bool no_writer(const struct lockfile *l)
{
	return write_lock(l->fd) == 0;
}

/* Lets the lock file go (unlinking it first when `remove`, which the
 * caller decided holding the flock and the write lock) and closes. */
static void done(struct lockfile *l, bool remove)
{
	if (l->fd >= 0) {
		if (remove)
			unlinkat(l->dirfd, l->file, 0);
		close(l->fd);
	}
	l->fd = l->dirfd = -1;
}

static bool hex16(const char *hex, uint8_t *out)
{
	size_t bin;

	return sodium_hex2bin(out, 16, hex, 32, NULL, &bin, NULL) == 0 && bin == 16;
}

/*
 * Reads the lease, its times on this boot's clock (tsec__boot_ms); an
 * empty or unreadable record is a free lock, fence 0.  A lease of
 * another boot is over (its fence stays); one of format 2 (wall-clock
 * times) is read across onto the boot clock.
 */
static void state_read(const struct lockfile *l, struct tsec__lease_state *st)
{
	char buf[RECORD + 1], tok[33], wt[33], boot[40];
	unsigned long long fence;
	long long expires, seen;
	ssize_t n;

	memset(st, 0, sizeof(*st));
	n = pread(l->fd, buf, RECORD, 0);
	if (n <= 0)
		return;
	buf[n] = '\0';
	if (sscanf(buf, "tsec-lock 3\nboot %39s\ntoken %32s\nfence %llu\nexpires_ms %lld\n"
		   "waiter %32s\nwaiter_seen_ms %lld\n", boot, tok, &fence, &expires, wt,
		   &seen) == 6 && hex16(tok, st->token) && hex16(wt, st->waiter)) {
		st->fence = fence;
		if (strcmp(boot, tsec__boot_id())) {
			/* Another boot's: nobody holds it or waits now. */
			memset(st->token, 0, sizeof(st->token));
			memset(st->waiter, 0, sizeof(st->waiter));
			return;
		}
		st->expires_ms = expires;
		st->waiter_seen_ms = seen;
		return;
	}
	if (sscanf(buf, "tsec-lock 2\ntoken %32s\nfence %llu\nexpires_ms %lld\n"
		   "waiter %32s\nwaiter_seen_ms %lld\n", tok, &fence, &expires, wt, &seen) == 5 &&
	    hex16(tok, st->token) && hex16(wt, st->waiter)) {
		int64_t wall = tsec__wall_ms(), boot_now = tsec__boot_ms();
		st->fence = fence;
		st->expires_ms = expires > wall ? boot_now + (expires - wall) : 0;
		st->waiter_seen_ms = seen <= wall ? boot_now - (wall - seen) : 0;
		return;
	}
	memset(st, 0, sizeof(*st));
}

/* Rewrites the record in place: one pwrite of RECORD bytes. */
static int state_write(const struct lockfile *l, const struct tsec__lease_state *st,
		       struct tsec_error *err)
{
	char buf[RECORD], tok[33], wt[33];
	int n;

	sodium_bin2hex(tok, sizeof(tok), st->token, 16);
	sodium_bin2hex(wt, sizeof(wt), st->waiter, 16);
	n = snprintf(buf, sizeof(buf), "tsec-lock 3\nboot %s\ntoken %s\nfence %llu\n"
		     "expires_ms %lld\nwaiter %s\nwaiter_seen_ms %lld\n", tsec__boot_id(), tok,
		     (unsigned long long)st->fence, (long long)st->expires_ms, wt,
		     (long long)st->waiter_seen_ms);
	memset(buf + n, ' ', sizeof(buf) - (size_t)n - 1);
	buf[sizeof(buf) - 1] = '\n';
	if (pwrite(l->fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf))
		return tsec__seterr(err, TSEC_EIO, l->sk.text, "cannot write the lock: %s",
				    strerror(errno));
	return 0;
}

int tsec__fb_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		      const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct tsec__filebe *fb = (struct tsec__filebe *)b;
	struct tsec__lease_state st;
	struct lockfile l;
	int64_t now;
	bool dirty;
	int rc;

	if ((rc = names(name, &l, err)) ||
	    (rc = take(fb, &l, true, waiter != NULL, STATE, err)))
		goto out;
	state_read(&l, &st);
	now = tsec__boot_ms();
	rc = tsec__lease_try(&st, waiter, ttl_ms, now, out, &dirty);
	if (rc == 0)
		out->expires_ms = tsec__wall_of(out->expires_ms, now);
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

void tsec__fb_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16])
{
	struct tsec__filebe *fb = (struct tsec__filebe *)b;
	struct tsec__lease_state st;
	struct tsec_error ignored;
	struct lockfile l;

	/* (Unwritten, the waiter is passed over once it stops asking.) */
	if (!names(name, &l, &ignored) && !take(fb, &l, false, true, STATE, &ignored)) {
		state_read(&l, &st);
		if (tsec__lease_unwait(&st, waiter))
			state_write(&l, &st, &ignored);
	}
	done(&l, false);
}

/* Renew (ttl_ms > 0) or release (0) a lock the caller holds. */
static int owned_op(struct tsec__filebe *fb, const char *name, const uint8_t token[16],
		    uint64_t ttl_ms, int64_t *expires, struct tsec_error *err)
{
	struct tsec__lease_state st;
	struct lockfile l;
	bool gone = false;
	int64_t now;
	int rc;

	if ((rc = names(name, &l, err)) || (rc = take(fb, &l, false, true, STATE, err)))
		goto out;
	state_read(&l, &st);
	now = tsec__boot_ms();
	if ((rc = tsec__lease_owned(&st, token, now, l.sk.text, err)))
		goto out;
	if (ttl_ms) {
		st.expires_ms = tsec__deadline_after(now, ttl_ms);
		*expires = tsec__wall_of(st.expires_ms, now);
		rc = state_write(&l, &st, err);
	} else if (!sodium_is_zero(st.waiter, 16) || !no_writer(&l)) {
		/* Kept: it holds the queued waiter, or a past holder's fenced
		 * write is under way on it, which the next holder's must meet. */
		tsec__lease_release(&st);
		rc = state_write(&l, &st, err);
	} else {
		/* Nobody waits: no file at all (the next fence comes from the
		 * clock floor, lease.c); unlinked while still locked. */
		gone = true;
	}
out:
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

void (*tsec__fb_checked_hook)(void);

int tsec__fb_fenced(struct tsec__filebe *fb, const struct tsec__fence *f,
		    int (*op)(void *ctx, struct tsec_error *err), void *ctx,
		    struct tsec_error *err)
{
	struct tsec__lease_state st;
	struct lockfile l;
	int rc;

	/* The write lock, then the lease read under the flock, shared, and
	 * let go at once: a taker never waits for this write (see the top). */
	if ((rc = names(f->name, &l, err)) || (rc = take(fb, &l, false, true, WRITER, err)) ||
	    (rc = peek(&l, err)))
		goto out;
	state_read(&l, &st);
	flock(l.fd, LOCK_UN);
	if (!(rc = tsec__lease_fenced(&st, f, tsec__boot_ms(), err))) {
		if (tsec__fb_checked_hook)
			tsec__fb_checked_hook();
		rc = op(ctx, err);
	}
out:
	done(&l, false);
	return rc;
}

/*
 * Recovery: removes the lock files of free locks (released or ended
 * leases with no live waiter) nobody has open.  Lock files live only in
 * the locks folder, outside the key space: a value a caller wrote is
 * never read as a lock (no release kept them anywhere else).
 */
void tsec__fb_clean_guards(struct tsec__filebe *fb)
{
	int fd;
	int64_t now = tsec__boot_ms();
	struct dirent *e;
	DIR *d;

	fd = openat(fb->locksfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		struct tsec__lease_state st;
		struct lockfile l = { .dirfd = fd };
		struct stat sb;
		if (n < 6 || strcmp(e->d_name + n - 5, ".lock"))
			continue;
		l.fd = openat(fd, e->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (l.fd < 0)
			continue;
		if (fstat(l.fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
		    flock(l.fd, LOCK_EX | LOCK_NB) == 0 && sb.st_nlink > 0 && no_writer(&l)) {
			state_read(&l, &st);
			/* Held by nobody now: removing it is safe (see the top). */
			if ((sodium_is_zero(st.token, 16) || st.expires_ms <= now) &&
			    (sodium_is_zero(st.waiter, 16) ||
			     tsec__ms_since(now, st.waiter_seen_ms) > 1000))
				unlinkat(fd, e->d_name, 0);
		}
		close(l.fd);
	}
	closedir(d);
}
