/*
 * The file backend's commit flock and its turnstile: what orders a
 * group's renames (file_journal.c) against other groups, recoveries
 * (file_recover.c) and reads of several values, in this process (a
 * rwlock) and across processes (flocks in the journal folder).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"

#define COMMIT_LOCK ".tsec-commit"
#define TURNSTILE ".tsec-turnstile"

/*
 * flock `how` on the journal's file `name` (made if missing): its
 * descriptor, or -1 and errno.  With wait_ms < 0 it waits as long as it
 * takes; else it looks again, less often each time, for at most wait_ms
 * of tsec__mono_ms, then fails with EWOULDBLOCK.
 */
static int take(struct tsec__filebe *fb, const char *name, int how, int64_t wait_ms)
{
	int fd = openat(fb->journalfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	int64_t deadline = 0;
	long pause_ns = 50000;

	if (fd < 0)
		return -1;
	while (flock(fd, how | (wait_ms >= 0 ? LOCK_NB : 0)) < 0) {
		int e = errno;
		if (e == EWOULDBLOCK && wait_ms >= 0) {
			int64_t now = tsec__mono_ms();
			if (!deadline) {
				deadline = now + wait_ms;
				atomic_fetch_add_explicit(&tsec__fb_read_waits, 1,
							  memory_order_relaxed);
			}
			if (now >= deadline) {
				close(fd);
				errno = EWOULDBLOCK;
				return -1;
			}
			tsec__nap_ns((uint64_t)pause_ns);
			if (pause_ns < 5000000)
				pause_ns *= 2;
		} else if (e != EINTR) {
			close(fd);
			errno = e;
			return -1;
		}
	}
	return fd;
}

/*
 * Readers (get_many) hold the commit flock shared, and Linux grants a
 * shared flock while an exclusive one waits, so overlapping readers
 * could hold a group's renames back for ever.  A turnstile stops that:
 * a group holds it exclusive while it waits for the commit flock, and a
 * reader passes through it (takes it and lets it go) before it asks: a
 * waiting group lets the readers already in finish and no new one in.
 */
/*
 * The store's own threads first (commit_rw, file_private.h): wait_ms < 0
 * as long as it takes, else at most that long on the monotonic clock
 * (0, or -1 with EWOULDBLOCK).  A thread holding it is the only one of
 * this process at the flock exclusive, or one of its readers there.
 */
static int rw_take(struct tsec__filebe *fb, bool write, int64_t wait_ms)
{
	struct timespec until;
	int rc;

	if (!write && pthread_rwlock_tryrdlock(&fb->commit_rw) == 0)
		return 0;
	if (!write)   /* a read that waits, counted as take() counts one */
		atomic_fetch_add_explicit(&tsec__fb_read_waits, 1, memory_order_relaxed);
	if (wait_ms < 0) {
		rc = write ? pthread_rwlock_wrlock(&fb->commit_rw)
			   : pthread_rwlock_rdlock(&fb->commit_rw);
	} else {
		until = tsec__abstime(CLOCK_MONOTONIC, wait_ms);
		rc = write ? pthread_rwlock_clockwrlock(&fb->commit_rw, CLOCK_MONOTONIC, &until)
			   : pthread_rwlock_clockrdlock(&fb->commit_rw, CLOCK_MONOTONIC, &until);
	}
	if (rc) {
		errno = rc == ETIMEDOUT ? EWOULDBLOCK : rc;
		return -1;
	}
	return 0;
}

void tsec__fb_commit_end(struct tsec__filebe *fb, int cfd)
{
	if (cfd < 0)
		return;
	close(cfd);
	pthread_rwlock_unlock(&fb->commit_rw);
}

/* What is left of a wait of wait_ms until `until` (< 0: no bound). */
static int64_t left_of(int64_t until, int64_t wait_ms)
{
	int64_t left = until - tsec__mono_ms();

	return wait_ms < 0 ? -1 : left > 0 ? left : 0;
}

/*
 * The commit flock, through the turnstile, waiting at most wait_ms
 * (< 0: as long as it takes): exclusive for a group, which holds the
 * turnstile while it waits, so that reads coming after it wait too;
 * shared for a read, which only passes through it.
 */
static int commit_take(struct tsec__filebe *fb, bool write, int64_t wait_ms)
{
	int64_t until = tsec__mono_ms() + wait_ms;
	int tfd, fd = -1, e;

	if (rw_take(fb, write, wait_ms) < 0)
		return -1;
	if ((tfd = take(fb, TURNSTILE, LOCK_EX, left_of(until, wait_ms))) >= 0) {
		if (!write)
			close(tfd);
		fd = take(fb, COMMIT_LOCK, write ? LOCK_EX : LOCK_SH, left_of(until, wait_ms));
		e = errno;
		if (write)
			close(tfd);
		errno = e;
	}
	if (fd >= 0)
		return fd;
	e = errno;
	pthread_rwlock_unlock(&fb->commit_rw);
	errno = e;
	return -1;
}

int tsec__fb_commit_write_within(struct tsec__filebe *fb, int64_t wait_ms)
{
	return commit_take(fb, true, wait_ms);
}

int tsec__fb_commit_write(struct tsec__filebe *fb)
{
	return commit_take(fb, true, -1);
}

int tsec__fb_commit_read(struct tsec__filebe *fb, int64_t wait_ms)
{
	return commit_take(fb, false, wait_ms);
}
