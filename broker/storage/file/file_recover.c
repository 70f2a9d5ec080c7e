/*
 * The file backend's recovery (the "Recovery" of file_journal.c's
 * header): dead writers' records rolled forward or back under the
 * commit flock, the settle before a single write, the store's owner
 * file, and the sweep of dead writers' litter when a store opens.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"

static void replay_line(struct tsec__filebe *fb, char *line, bool forward)
{
	char *tmp, *key, *tab;
	struct tsec__skey sk;
	struct tsec_error err;
	int dirfd;

	if (strncmp(line, "put\t", 4))
		return;
	tmp = line + 4;
	if (!(tab = strchr(tmp, '\t')))
		return;
	*tab = '\0';
	key = tab + 1;
	/* Only our own temporary names, only keys by the key rules. */
	if (strncmp(tmp, TSEC__TMP_PREFIX, strlen(TSEC__TMP_PREFIX)) || strchr(tmp, '/') ||
	    tsec__skey_parse_any(key, &sk, &err))
		return;
	if (tsec__fb_open_dirs(fb, &sk, sk.n - 1, false, &dirfd, &err))
		return;
	if (forward) {
		if (renameat(dirfd, tmp, dirfd, sk.seg[sk.n - 1]) == 0)
			tsec__feed_changed(&fb->feed, sk.text);
	} else
		unlinkat(dirfd, tmp, 0);
	fsync(dirfd);
	close(dirfd);
}

/*
 * The record `name` if its writer is dead: opened, with its flock taken
 * `how` (LOCK_EX to recover it; LOCK_SH only to look, so that two who
 * look at once both see it dead), or -1 (a live writer holds it, or
 * someone recovered and removed it since it was listed).
 */
static int dead_record(struct tsec__filebe *fb, const char *name, int how)
{
	int fd = openat(fb->journalfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat sb;

	if (fd < 0)
		return -1;
	if (flock(fd, how | LOCK_NB) < 0 || fstat(fd, &sb) < 0 || sb.st_nlink == 0 ||
	    !S_ISREG(sb.st_mode)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Recovers one record if its writer is dead; removes it, and counts it
 * in *(unsigned *)recovered when given.  The caller holds the commit
 * flock exclusive. */
static bool recover_record(struct tsec__filebe *fb, const char *name, void *recovered)
{
	char *text, *body, *line, *next;
	ssize_t n;
	bool commit;
	int fd = tsec__fb_slot_mine(fb, name) ? -1 : dead_record(fb, name, LOCK_EX);

	if (fd < 0)
		return false;
	if (recovered)
		(*(unsigned *)recovered)++;
	if (!(text = malloc(TSEC__FB_RECORD_MAX + 1))) {
		close(fd);
		return false;
	}
	n = pread(fd, text, TSEC__FB_RECORD_MAX, 0);
	text[n > 0 ? n : 0] = '\0';
	/* A slot's record whose hash fails was torn or never whole: not
	 * committed, its temporaries removed (those it names that exist
	 * are its own group's: a committed group's are renamed away). */
	if ((body = tsec__fb_record_body(text, n > 0 ? (size_t)n : 0))) {
		n = (ssize_t)strlen(body);
		commit = n >= 7 && !strcmp(body + n - 7, "commit\n");
	} else {
		body = strchr(text, '\n') ? strchr(text, '\n') + 1 : text;
		commit = false;
	}
	for (line = body; line && *line; line = next) {
		if ((next = strchr(line, '\n')))
			*next++ = '\0';
		replay_line(fb, line, commit);
	}
	unlinkat(fb->journalfd, name, 0);
	free(text);
	close(fd);
	return false;
}

/* Whether record `name` is a dead writer's (nothing is kept). */
static bool is_dead(struct tsec__filebe *fb, const char *name, void *unused)
{
	int fd = tsec__fb_slot_mine(fb, name) ? -1 : dead_record(fb, name, LOCK_SH);

	(void)unused;
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/*
 * Calls fn(fb, name, arg) on each name in the journal, those starting
 * with '.' when `dotted` (the flock files ".tsec-commit" and
 * ".tsec-turnstile", the stores' owner files), the records otherwise,
 * until it returns true; returns whether it did, -1 when the journal
 * cannot be read.  No allocation: an empty journal costs a write an
 * open, two reads of it and a close (tsec__fb_settle).
 */
typedef bool (*record_fn)(struct tsec__filebe *fb, const char *name, void *arg);

static int each_name(struct tsec__filebe *fb, bool dotted, record_fn fn, void *arg)
{
	uint64_t buf[256];           /* aligned for struct dirent64 */
	int fd = openat(fb->journalfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool hit = false;
	ssize_t n = 0;

	if (fd < 0)
		return -1;
	while (!hit && (n = getdents64(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t o = 0; o < n && !hit;) {
			const struct dirent64 *e = (const void *)((const char *)buf + o);
			if ((e->d_name[0] == '.') == dotted)
				hit = fn(fb, e->d_name, arg);
			o += e->d_reclen;
		}
	}
	close(fd);
	return n < 0 && !hit ? -1 : hit;
}

static int each_record(struct tsec__filebe *fb, record_fn fn, void *arg)
{
	return each_name(fb, false, fn, arg);
}

/*
 * Rolls every dead writer's record forward or back (the caller holds
 * the commit flock exclusive).  The journal is synced only when a record
 * went: with groups of live writers in flight (their records are not
 * dead) there is nothing to make durable, and the fsync, under the
 * flock every group takes, was one more per group whenever others were
 * in flight, one after another (issue 36: 16 renewals of different
 * names ran 1.6x one).
 */
void tsec__fb_recover_dead(struct tsec__filebe *fb)
{
	unsigned recovered = 0;

	if (each_record(fb, recover_record, &recovered) >= 0 && recovered)
		fsync(fb->journalfd);
}

/* A record other than `mine` and this store's slots (their groups are
 * this live process's; an empty slot is not a record at all). */
static bool not_mine(struct tsec__filebe *fb, const char *name, void *mine)
{
	return (!mine || strcmp(name, (const char *)mine)) && !tsec__fb_slot_mine(fb, name);
}

/*
 * Whether the journal holds a record other than `mine` (NULL: any),
 * without locks.  None means no dead group waits and no recovery is
 * under way: a recovery removes a record only after its renames.
 * Cannot tell: true.
 */
bool tsec__fb_any_record(struct tsec__filebe *fb, const char *mine)
{
	return each_record(fb, not_mine, (void *)mine) != 0;
}

int tsec__fb_settle(struct tsec__filebe *fb, int64_t wait_ms, int *cfd)
{
	int64_t until = tsec__mono_ms() + wait_ms;

	*cfd = -1;
	/* The usual case: an empty journal, nothing to wait for. */
	if (!tsec__fb_any_record(fb, NULL))
		return 0;
	for (;;) {
		int64_t left = until - tsec__mono_ms();
		int fd = tsec__fb_commit_read(fb, left > 0 ? left : 0), dead;

		if (fd < 0)
			return -1;
		if ((dead = each_record(fb, is_dead, NULL)) <= 0) {
			if (dead == 0) {
				*cfd = fd;
				return 0;
			}
			tsec__fb_commit_end(fb, fd);
			errno = EIO;
			return -1;
		}
		/* A dead writer's group first: exclusive, then look again. */
		tsec__fb_commit_end(fb, fd);
		left = until - tsec__mono_ms();
		if ((fd = tsec__fb_commit_write_within(fb, left > 0 ? left : 0)) < 0)
			return -1;
		tsec__fb_recover_dead(fb);
		tsec__fb_commit_end(fb, fd);
	}
}

int tsec__fb_owner_begin(struct tsec__filebe *fb, struct tsec_error *err)
{
	char making[64], name[64];
	int fd = -1, e = 0;

	/*
	 * Flocked under another name, then renamed: a store that opens in
	 * between never finds the owner's file with its flock free, so never
	 * takes this store for dead.  Another store's sweep may remove the
	 * file being made before its flock is taken (it looks like one a
	 * crash left): then again with another name.
	 */
	for (int tries = 0; tries < 8; tries++) {
		unsigned char r[8];
		char hex[17];

		randombytes_buf(r, sizeof(r));
		sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
		snprintf(fb->owner, sizeof(fb->owner), "w%s", hex);
		snprintf(making, sizeof(making), TSEC__FB_OWNING "%s", fb->owner);
		snprintf(name, sizeof(name), TSEC__OWNER_PREFIX "%s", fb->owner);
		fd = openat(fb->journalfd, making,
			    O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			e = errno;
			break;
		}
		if (flock(fd, LOCK_EX) == 0 &&
		    renameat(fb->journalfd, making, fb->journalfd, name) == 0) {
			fb->ownerfd = fd;
			return 0;
		}
		e = errno;
		unlinkat(fb->journalfd, making, 0);
		close(fd);
		if (e != ENOENT)
			break;
	}
	return tsec__seterr(err, TSEC_EIO, TSEC__JOURNAL, "cannot make this store's owner "
			    "file in the journal: %s", strerror(e));
}

void tsec__fb_owner_end(struct tsec__filebe *fb)
{
	char name[64];

	if (fb->ownerfd < 0)
		return;
	/* Removed before its flock goes: its temporaries are all gone. */
	snprintf(name, sizeof(name), TSEC__OWNER_PREFIX "%s", fb->owner);
	unlinkat(fb->journalfd, name, 0);
	close(fb->ownerfd);
	fb->ownerfd = -1;
}

/* The owners found dead before recovery (their files' flocks free); past
 * DEAD_MAX, the rest wait for a later open. */
#define DEAD_MAX 64
struct dead_owners {
	unsigned n;
	char id[DEAD_MAX][TSEC__OWNER_LEN + 1];
};

/* Whether owner file `name` (".tsec-owner-..." or ".tsec-owning-...")
 * has no live holder. */
static bool owner_file_free(int journalfd, const char *name)
{
	int fd = openat(journalfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	bool free_ = false;

	if (fd < 0)
		return false;
	free_ = flock(fd, LOCK_SH | LOCK_NB) == 0;
	close(fd);
	return free_;
}

/* each_name: notes owner file `name` in d when its store is gone. */
static bool note_dead(struct tsec__filebe *fb, const char *name, void *d_)
{
	struct dead_owners *d = d_;
	const char *id = name + strlen(TSEC__OWNER_PREFIX);

	if (d->n < DEAD_MAX && !strncmp(name, TSEC__OWNER_PREFIX, strlen(TSEC__OWNER_PREFIX)) &&
	    strlen(id) == TSEC__OWNER_LEN && strcmp(id, fb->owner) &&
	    owner_file_free(fb->journalfd, name))
		memcpy(d->id[d->n++], id, TSEC__OWNER_LEN + 1);
	return false;
}

/* each_name: removes an owner file a store crashed while making. */
static bool drop_making(struct tsec__filebe *fb, const char *name, void *unused)
{
	(void)unused;
	if (!strncmp(name, TSEC__FB_OWNING, strlen(TSEC__FB_OWNING)) && owner_file_free(fb->journalfd, name))
		unlinkat(fb->journalfd, name, 0);
	return false;
}

/*
 * Whether temporary `name` is litter.  Its owner's: when that owner was
 * found dead before the recovery, or has no file now (its store closed,
 * or another store's sweep found it dead and recovered its records).
 * A name of the format before owners (".tsec-tmp-<pid>-..."): when no
 * process of that pid runs here, as before (a writer of an older build).
 */
static bool litter(struct tsec__filebe *fb, const struct dead_owners *d, const char *name)
{
	const char *o = name + strlen(TSEC__TMP_PREFIX);
	char file[64];
	long pid;

	if (o[0] == 'w' && strlen(o) > TSEC__OWNER_LEN && o[TSEC__OWNER_LEN] == '-') {
		for (unsigned i = 0; i < d->n; i++)
			if (!strncmp(o, d->id[i], TSEC__OWNER_LEN))
				return true;
		snprintf(file, sizeof(file), TSEC__OWNER_PREFIX "%.*s", TSEC__OWNER_LEN, o);
		return faccessat(fb->journalfd, file, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
		       errno == ENOENT;
	}
	if (o[0] < '0' || o[0] > '9')
		return true;             /* no writer of ours names one so */
	pid = strtol(o, NULL, 10);
	if (pid <= 0 || pid == (long)getpid())
		return pid <= 0;
	return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Removes dead writers' temporaries and old backups below folder fd. */
static void sweep(struct tsec__filebe *fb, const struct dead_owners *dead, int fd,
		  unsigned depth)
{
	struct dirent *e;
	DIR *d = fdopendir(fd);

	if (!d) {
		close(fd);
		return;
	}
	while ((e = readdir(d))) {
		const char *nm = e->d_name;
		struct stat sb;
		if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, TSEC__JOURNAL))
			continue;
		if (fstatat(fd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(sb.st_mode)) {
			int cfd;
			if (depth < TSEC_KEY_SEGMENTS &&
			    (cfd = openat(fd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
				sweep(fb, dead, cfd, depth + 1);
		} else if ((!strncmp(nm, TSEC__TMP_PREFIX, strlen(TSEC__TMP_PREFIX)) &&
			    litter(fb, dead, nm)) ||
			   !strncmp(nm, TSEC__RESERVED "bak-", TSEC__RESERVED_LEN + 4)) {
			unlinkat(fd, nm, 0);
		}
	}
	closedir(d);
}

/* After the sweep: the dead owners' files, and owner files a store
 * crashed while making (flock free). */
static void forget_owners(struct tsec__filebe *fb, const struct dead_owners *d)
{
	char name[64];

	for (unsigned i = 0; i < d->n; i++) {
		snprintf(name, sizeof(name), TSEC__OWNER_PREFIX "%s", d->id[i]);
		unlinkat(fb->journalfd, name, 0);
	}
	each_name(fb, true, drop_making, NULL);
}

int tsec__fb_recover(struct tsec__filebe *fb, struct tsec_error *err)
{
	int cfd = tsec__fb_commit_write_within(fb, TSEC__FB_READ_WAIT_MS), rfd;
	struct dead_owners dead;

	/*
	 * Held by a paused or stuck process: the dead groups wait for the
	 * next write (tsec__fb_settle), and so do their temporaries, which
	 * the sweep would take for litter.
	 */
	if (cfd < 0)
		return errno == EWOULDBLOCK ? 0
			: tsec__seterr(err, TSEC_EIO, TSEC__JOURNAL,
				       "cannot take the journal's commit lock: %s", strerror(errno));
	/*
	 * Dead before their records are recovered: an owner dead now writes
	 * nothing later, so once its records are recovered its temporaries
	 * are litter (see litter()).  Unreadable, none: then only owners
	 * whose files are gone.
	 */
	dead.n = 0;
	each_name(fb, true, note_dead, &dead);
	if (each_record(fb, recover_record, NULL) < 0) {
		tsec__fb_commit_end(fb, cfd);
		return tsec__seterr(err, TSEC_EIO, TSEC__JOURNAL, "cannot read the journal: %s",
				    strerror(errno));
	}
	fsync(fb->journalfd);
	tsec__fb_commit_end(fb, cfd);
	if ((rfd = openat(fb->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
		sweep(fb, &dead, rfd, 0);
	forget_owners(fb, &dead);
	tsec__fb_clean_guards(fb);
	return 0;
}
