/* The decision log: a ring of fixed slots drained by one writer thread. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "broker/daemon/declog.h"
#include "common/clock.h"
#include "common/error.h"

#define SLOT (TSEC_DECLOG_LINE_MAX + 1) /* a line and its newline */
#define REPORT_EVERY_MS 1000

struct tsec__declog {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	char *ring;                  /* lines * SLOT bytes */
	uint16_t *lens;
	size_t lines, head, count;   /* head: next to write out */
	int stop, reopen;
	char *path;
	long gid;                    /* group of a new file, or -1 */
	int fd;                      /* -1: not open */
	pthread_t writer;
	_Atomic uint64_t dropped, written;
	uint64_t reported;           /* writer-only: drops already reported */
	int64_t reported_ms;
};

/* Writer: says on stderr how many lines were lost since the last word,
 * at most once a second. */
static void report_drops(struct tsec__declog *l)
{
	uint64_t now_dropped = atomic_load(&l->dropped);
	struct timespec ts;
	int64_t now;

	if (now_dropped == l->reported)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (l->reported_ms && now - l->reported_ms < REPORT_EVERY_MS)
		return;
	fprintf(stderr, "tsec-broker: decision log: %llu lines dropped (buffer full or write "
		"failed; %llu in all)\n", (unsigned long long)(now_dropped - l->reported),
		(unsigned long long)now_dropped);
	l->reported = now_dropped;
	l->reported_ms = now;
}

/* Opens the log for appending, a new file private to its owner (0600) or
 * to a group the configuration names (0640); -1 if it cannot. */
static int open_log(const char *path, long gid)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
		      gid >= 0 ? 0640 : 0600);

	if (fd < 0)
		return -1;
	if (gid >= 0 && (fchown(fd, (uid_t)-1, (gid_t)gid) < 0 || fchmod(fd, 0640) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Writes the iovecs out whole (a short write goes on where it stopped). */
static int writev_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/*
 * The writer wakes when lines arrive, lets more gather for a few
 * milliseconds (so a busy broker pays one write and one wake-up per batch,
 * not per call), then writes the batch with the lock released.
 */
#define BATCH_WAIT_MS 5

static void *writer_main(void *arg)
{
	struct tsec__declog *l = arg;
	struct iovec iov[64];

	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->count && !l->stop && !l->reopen) {
			/* Idle: wake each second to report drops from a full ring. */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&l->wake, &l->lock, &ts);
			report_drops(l);
		}
		if (l->reopen) {
			int nfd;
			l->reopen = 0;
			pthread_mutex_unlock(&l->lock);
			nfd = open_log(l->path, l->gid);
			if (nfd >= 0) {
				if (l->fd >= 0)
					close(l->fd);
				l->fd = nfd;
			}
			pthread_mutex_lock(&l->lock);
			continue;
		}
		if (!l->count && l->stop)
			break;
		if (!l->stop && l->count < 64) {
			struct timespec ts = tsec__abstime(CLOCK_REALTIME, BATCH_WAIT_MS);
			pthread_cond_timedwait(&l->wake, &l->lock, &ts);
		}
		/*
		 * Up to 64 lines, written from their slots in one writev with
		 * the lock released: the slots stay ours until `head` moves on
		 * (push only fills slots past head + count).
		 */
		size_t taken = 0, at = l->head;
		while (taken < l->count && taken < 64) {
			iov[taken].iov_base = l->ring + at * SLOT;
			iov[taken].iov_len = l->lens[at];
			at = (at + 1) % l->lines;
			taken++;
		}
		pthread_mutex_unlock(&l->lock);
		if (l->fd >= 0 && writev_all(l->fd, iov, (int)taken) == 0)
			atomic_fetch_add(&l->written, taken);
		else
			atomic_fetch_add(&l->dropped, taken);
		report_drops(l);
		pthread_mutex_lock(&l->lock);
		l->head = at;
		l->count -= taken;
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int tsec__declog_open(struct tsec__declog **out, const char *path,
		      size_t lines, long gid, struct tsec_error *err)
{
	struct tsec__declog *l;

	*out = NULL;
	if (!path || lines == 0)
		return tsec__seterr(err, TSEC_EINVAL, "", "decision log needs a path");
	l = calloc(1, sizeof(*l));
	if (!l)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	l->lines = lines;
	l->ring = malloc(lines * SLOT);
	l->lens = calloc(lines, sizeof(*l->lens));
	l->path = strdup(path);
	l->gid = gid;
	l->fd = open_log(path, gid);
	if (!l->ring || !l->lens || !l->path || l->fd < 0) {
		int rc = tsec__seterr(err, l->fd >= 0 ? TSEC_ENOMEM : TSEC_EIO, path,
				      "%s: cannot open the decision log", path);
		if (l->fd >= 0)
			close(l->fd);
		free(l->ring);
		free(l->lens);
		free(l->path);
		free(l);
		return rc;
	}
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->wake, NULL);
	pthread_create(&l->writer, NULL, writer_main, l);
	*out = l;
	return 0;
}

void tsec__declog_push(struct tsec__declog *l, const char *line, size_t len)
{
	if (!l)
		return;
	if (len > SLOT - 1) {
		/* Callers cut their fields to fit (methods.c); never half a line. */
		atomic_fetch_add(&l->dropped, 1);
		return;
	}
	pthread_mutex_lock(&l->lock);
	if (l->count == l->lines || l->stop) {
		pthread_mutex_unlock(&l->lock);
		atomic_fetch_add(&l->dropped, 1);
		return;
	}
	size_t slot = (l->head + l->count) % l->lines;
	memcpy(l->ring + slot * SLOT, line, len);
	l->ring[slot * SLOT + len] = '\n';
	l->lens[slot] = (uint16_t)(len + 1);
	/* Wake the writer only when it may be asleep on an empty ring. */
	if (l->count++ == 0)
		pthread_cond_signal(&l->wake);
	pthread_mutex_unlock(&l->lock);
}

void tsec__declog_reopen(struct tsec__declog *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->reopen = 1;
	pthread_cond_signal(&l->wake);
	pthread_mutex_unlock(&l->lock);
}

uint64_t tsec__declog_dropped(struct tsec__declog *l)
{
	return l ? atomic_load(&l->dropped) : 0;
}

uint64_t tsec__declog_written(struct tsec__declog *l)
{
	return l ? atomic_load(&l->written) : 0;
}

void tsec__declog_close(struct tsec__declog **pl)
{
	struct tsec__declog *l;

	if (!pl || !*pl)
		return;
	l = *pl;
	pthread_mutex_lock(&l->lock);
	l->stop = 1;
	pthread_cond_signal(&l->wake);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->writer, NULL);
	if (l->fd >= 0)
		close(l->fd);
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->wake);
	free(l->ring);
	free(l->lens);
	free(l->path);
	free(l);
	*pl = NULL;
}
