/*
 * Locks in the store: locks/<name>.lock holds a random 128-bit owner token
 * and the lease, and is read and changed only under an OS file lock
 * (flock) on the guard file locks/.tsec-guard-<name>.  flock works across
 * processes and, because each attempt opens the guard anew, across
 * threads of one process too; that is what makes a stale lock have
 * exactly one taker.
 */
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

#include "broker/storage/store_private.h"

#define LOCK_FILE_MAX 256
#define GUARD_WAIT_MS 1000            /* renew/release: wait for the guard */
#define BACKOFF_MIN_MS 1
#define BACKOFF_MAX_MS 50

struct lockfile {
	uint8_t token[16];
	int64_t created_ms;
	int64_t expires_ms;
};

/* The store, the folder "locks" and the names for one lock. */
struct lockctx {
	struct tsec__skey sk;        /* locks/<name> */
	char file[TSEC_LOCK_NAME_MAX + 8];
	char guard[TSEC_LOCK_NAME_MAX + 16];
};

static int lock_names(const char *name, struct lockctx *c,
		      struct tsec_error *err)
{
	char key[TSEC_LOCK_NAME_MAX + 8];
	int rc;

	if (!name || !*name || strlen(name) > TSEC_LOCK_NAME_MAX || strchr(name, '/'))
		return tsec__seterr(err, TSEC_EKEY, "name",
				    "lock name must be one key segment of 1-%d bytes",
				    TSEC_LOCK_NAME_MAX);
	snprintf(key, sizeof(key), "locks/%s", name);
	if ((rc = tsec__skey_parse(key, false, &c->sk, err)))
		return rc;
	if (c->sk.n != 2)
		return tsec__seterr(err, TSEC_EKEY, "name", "lock name must be one key segment");
	snprintf(c->file, sizeof(c->file), "%s.lock", c->sk.seg[1]);
	snprintf(c->guard, sizeof(c->guard), TSEC__RESERVED "guard-%s", c->sk.seg[1]);
	return 0;
}

static int check(struct tsec_store *s, const struct tsec_principal *who,
		 struct lockctx *c, const char *action, uint64_t ttl_ms,
		 struct tsec_error *err)
{
	struct tsec_request r;

	memset(&r, 0, sizeof(r));
	r.action = tsec_str_c(action);
	r.resource = tsec_str_c(c->sk.text);
	if (ttl_ms) {
		r.ctx.has = TSEC_CTX_TTL_MS;
		r.ctx.ttl_ms = ttl_ms;
	}
	return tsec__store_check(s, who, &r, 1, err);
}

/* now + ms, saturating instead of overflowing. */
static int64_t deadline_after(int64_t now, uint64_t ms)
{
	return ms > (uint64_t)(INT64_MAX - now) ? INT64_MAX : now + (int64_t)ms;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * Opens locks/ (created if needed) and takes the guard, polling until the
 * monotonic deadline (a deadline already passed means one attempt).
 * On success *dirfd and *gfd are open; close gfd to let the guard go.
 */
static int guard_take(struct tsec_store *s, struct lockctx *c, int64_t deadline,
		      int *dirfd, int *gfd, struct tsec_error *err)
{
	int rc, fd;

	*gfd = -1;
	if ((rc = tsec__open_dirs(s, &c->sk, 1, true, dirfd, err)))
		return rc;
	fd = openat(*dirfd, c->guard, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = tsec__seterr(err, TSEC_EIO, c->sk.text, "cannot open lock guard: %s",
				  strerror(errno));
		close(*dirfd);
		*dirfd = -1;
		return rc;
	}
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			*gfd = fd;
			return 0;
		}
		if (errno != EWOULDBLOCK && errno != EINTR)
			break;
		if (tsec__mono_ms() >= deadline) {
			close(fd);
			close(*dirfd);
			*dirfd = -1;
			return tsec__seterr(err, TSEC_EBUSY, c->sk.text, "lock guard busy");
		}
		sleep_ms(BACKOFF_MIN_MS);
	}
	rc = tsec__seterr(err, TSEC_EIO, c->sk.text, "flock: %s", strerror(errno));
	close(fd);
	close(*dirfd);
	*dirfd = -1;
	return rc;
}

/* Reads the lock file: 1 read, 0 absent or unreadable as a lock. */
static int lock_read(int dirfd, const char *file, struct lockfile *lf)
{
	char buf[LOCK_FILE_MAX + 1], hex[33];
	int64_t created, expires;
	ssize_t n;
	size_t bin;
	int fd;

	fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, LOCK_FILE_MAX);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "tsec-lock 1\ntoken %32s\ncreated_ms %" SCNd64 "\nexpires_ms %" SCNd64 "\n",
		   hex, &created, &expires) != 3 ||
	    sodium_hex2bin(lf->token, sizeof(lf->token), hex, 32, NULL, &bin, NULL) != 0 ||
	    bin != sizeof(lf->token))
		return 0;
	lf->created_ms = created;
	lf->expires_ms = expires;
	return 1;
}

static int lock_write(int dirfd, const char *file, const struct lockfile *lf,
		      struct tsec_error *err)
{
	char buf[LOCK_FILE_MAX], hex[33];
	int n;

	sodium_bin2hex(hex, sizeof(hex), lf->token, sizeof(lf->token));
	n = snprintf(buf, sizeof(buf), "tsec-lock 1\ntoken %s\ncreated_ms %" PRId64
		     "\nexpires_ms %" PRId64 "\n", hex, lf->created_ms, lf->expires_ms);
	/*
	 * Not durable: a lock is shared through the page cache, and one lost
	 * in a crash only ends a lease early.  Skipping the two fsyncs makes
	 * acquire and release about a hundred times cheaper.
	 */
	return tsec__write_atomic(dirfd, file, buf, (size_t)n, false, err);
}

/* One attempt under the guard: TSEC_EBUSY while a live lease holds it. */
static int attempt(struct tsec_store *s, struct lockctx *c, uint64_t ttl_ms,
		   int64_t guard_deadline, struct tsec_lock *out,
		   struct tsec_error *err)
{
	struct lockfile cur, mine;
	int dirfd, gfd, rc;
	int64_t now;

	if ((rc = guard_take(s, c, guard_deadline, &dirfd, &gfd, err)))
		return rc;
	now = tsec__wall_ms();
	if (lock_read(dirfd, c->file, &cur) && cur.expires_ms > now) {
		rc = tsec__seterr(err, TSEC_EBUSY, c->sk.text,
				  "lock is held for another %" PRId64 " ms",
				  cur.expires_ms - now);
		goto out;
	}
	/* Free, or its lease ran out: take it. */
	randombytes_buf(mine.token, sizeof(mine.token));
	mine.created_ms = now;
	mine.expires_ms = deadline_after(now, ttl_ms);
	if ((rc = lock_write(dirfd, c->file, &mine, err)))
		goto out;
	snprintf(out->name, sizeof(out->name), "%s", c->sk.seg[1]);
	memcpy(out->token, mine.token, sizeof(out->token));
	out->expires_ms = mine.expires_ms;
out:
	close(gfd);
	close(dirfd);
	return rc;
}

static int acquire(struct tsec_store *s, const struct tsec_principal *who,
		   const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
		   int wait, struct tsec_lock *out, struct tsec_error *err)
{
	struct lockctx c;
	int64_t deadline, backoff = BACKOFF_MIN_MS;
	int rc;

	if (!s || !out)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no lock to fill");
	memset(out, 0, sizeof(*out));
	if ((rc = lock_names(name, &c, err)))
		return rc;
	if (ttl_ms == 0)
		return tsec__seterr(err, TSEC_EINVAL, "ttl_ms", "a lease needs ttl_ms > 0");
	if ((rc = check(s, who, &c, "lock.acquire", ttl_ms, err)))
		return rc;
	/* One deadline for every attempt and every wait. */
	deadline = wait ? deadline_after(tsec__mono_ms(), timeout_ms) : 0;
	for (;;) {
		int64_t left;
		rc = attempt(s, &c, ttl_ms, deadline, out, err);
		if (rc != TSEC_EBUSY || !wait)
			return rc;
		left = deadline - tsec__mono_ms();
		if (left <= 0)
			return tsec__seterr(err, TSEC_ETIMEDOUT, c.sk.text,
					    "lock still held when the deadline passed");
		sleep_ms(backoff < left ? backoff : left);
		if (backoff < BACKOFF_MAX_MS)
			backoff *= 2;
	}
}

int tsec_lock_acquire(struct tsec_store *s, const struct tsec_principal *who,
		      const char *name, uint64_t ttl_ms, uint64_t timeout_ms,
		      struct tsec_lock *out, struct tsec_error *err)
{
	return acquire(s, who, name, ttl_ms, timeout_ms, 1, out, err);
}

int tsec_lock_try_acquire(struct tsec_store *s,
			  const struct tsec_principal *who, const char *name,
			  uint64_t ttl_ms, struct tsec_lock *out,
			  struct tsec_error *err)
{
	return acquire(s, who, name, ttl_ms, 0, 0, out, err);
}

/* Renew (ttl_ms > 0) or release (ttl_ms == 0) a lock the caller holds. */
static int owned_op(struct tsec_store *s, const struct tsec_principal *who,
		    const struct tsec_lock *lk, uint64_t ttl_ms,
		    int64_t *expires, struct tsec_error *err)
{
	struct lockctx c;
	struct lockfile cur;
	int dirfd, gfd, rc;

	if (!s || !lk)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store or no lock");
	if ((rc = lock_names(lk->name, &c, err)))
		return rc;
	if ((rc = check(s, who, &c, ttl_ms ? "lock.renew" : "lock.release", ttl_ms, err)))
		return rc;
	if ((rc = guard_take(s, &c, tsec__mono_ms() + GUARD_WAIT_MS, &dirfd, &gfd, err)))
		return rc;
	if (!lock_read(dirfd, c.file, &cur)) {
		rc = tsec__seterr(err, TSEC_ENOENT, c.sk.text, "no such lock");
		goto out;
	}
	/* Constant time: the comparison says nothing of the token. */
	if (sodium_memcmp(cur.token, lk->token, sizeof(cur.token)) != 0) {
		rc = tsec__seterr(err, TSEC_ENOTOWNER, c.sk.text,
				  "the lock belongs to another owner");
		goto out;
	}
	if (ttl_ms) {
		cur.expires_ms = deadline_after(tsec__wall_ms(), ttl_ms);
		if ((rc = lock_write(dirfd, c.file, &cur, err)))
			goto out;
		*expires = cur.expires_ms;
	} else {
		if (unlinkat(dirfd, c.file, 0) < 0) {
			rc = tsec__seterr(err, TSEC_EIO, c.sk.text, "cannot remove lock: %s",
					  strerror(errno));
			goto out;
		}
	}
	rc = 0;
out:
	close(gfd);
	close(dirfd);
	return rc;
}

int tsec_lock_renew(struct tsec_store *s, const struct tsec_principal *who,
		    struct tsec_lock *lk, uint64_t ttl_ms,
		    struct tsec_error *err)
{
	int64_t expires = 0;
	int rc;

	if (ttl_ms == 0)
		return tsec__seterr(err, TSEC_EINVAL, "ttl_ms", "a lease needs ttl_ms > 0");
	rc = owned_op(s, who, lk, ttl_ms, &expires, err);
	if (rc == 0)
		lk->expires_ms = expires;
	return rc;
}

int tsec_lock_release(struct tsec_store *s, const struct tsec_principal *who,
		      const struct tsec_lock *lk, struct tsec_error *err)
{
	int64_t unused;

	return owned_op(s, who, lk, 0, &unused, err);
}
