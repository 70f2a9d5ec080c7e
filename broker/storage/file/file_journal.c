/*
 * The file backend's transactions: a group of writes (put_many,
 * save_cert) that is applied whole or not at all, across SIGKILL and
 * power loss.
 *
 * 1. An intent record is taken: one of the store's record slots,
 *    .tsec-journal/tx-<owner>-<k>, flocked by the store for its life and
 *    empty while idle (a slot is made once, flocked under a dotted name
 *    and renamed in, and the journal fsynced then, so its name is
 *    durable before it ever holds a record); or, with every slot busy, a
 *    record file of its own, created and flocked.  The flock says "its
 *    writer is alive" to anyone recovering.
 * 2. Each new value is written to a temporary file beside its target,
 *    its writeback started at once (sync_file_range); then each is
 *    fdatasynced.  Started together, the temporaries reach the disk in
 *    one journal commit on ext4 and XFS, which the first fdatasync waits
 *    for and the others mostly find done: three syncs cost about one.
 *    A failure here removes the temporaries: nothing changed.
 * 3. The record gets one line per write (temporary, key) and a final
 *    "commit" line, in one write, and is synced: a slot's with
 *    fdatasync alone (its name is durable already; its header's hash
 *    tells a whole record from one a crash tore over an older one's),
 *    a record file of its own with fsync and the journal's fsync.  This
 *    is the commit point.
 * 4. Under the store-wide commit flock (so two groups' renames never
 *    interleave, even across processes), each temporary is renamed over
 *    its target; then, the flock let go, the targets' folders are
 *    fsynced.
 * 5. The record is removed (a slot emptied, unsynced: a crash may bring
 *    back the old record, whose temporaries are gone, so replaying it
 *    does nothing).
 *
 * The syncs a certificate's renewal (three files in one folder) needs,
 * five, each for the promise that a save that returned survives a power
 * loss whole: the three temporaries' (a rename may reach the disk
 * before the data it names: without them a crash could leave an empty
 * or old file under the new name, with the group's record saying done);
 * the record's (without it nothing says the group was committed, and a
 * crash after the renames began could leave one file new and two old);
 * the folder's (the renames themselves, before the record may go; a
 * later group's record may reuse the slot only after). Before slots a
 * record was a new file each time and its name cost the journal's fsync
 * too: six.
 *
 * Recovery: a record whose flock can be taken belongs to a dead writer;
 * with its commit line it is rolled forward (renames whose temporary is
 * gone had happened), without it its temporaries are removed.  It runs
 * under the commit flock exclusive, so its renames never interleave with
 * a group's, and before every write becomes visible (settle): a group
 * recovers dead records once it holds the commit flock, before its own
 * renames; a single put, a delete and a move make their change under the
 * commit flock shared, after finding no dead record (or recovering them
 * first).  So a group committed by a writer that died (or that could not
 * apply it) lands before any later write, never over it, and a lock's
 * next holder never has its fenced write undone by a past holder's.
 * When a store opens it recovers the same way, then removes temporaries
 * of dead writers and old backup files, and the files of free locks.  A
 * temporary is named after the open store that wrote it, which holds a
 * flock on its owner file in the journal while it is open: a flock, not
 * a pid, so a writer in another pid namespace (a container sharing the
 * folder) is seen alive, and a reused pid does not keep litter.
 *
 * What a crash can do: lose a group that had not reached its commit
 * point (the old values stay), or delay a committed one until the next
 * write or open.  It cannot leave a group half applied once another
 * write or open has come.
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
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker/storage/file/file_private.h"
#include "common/clock.h"


struct item {
	int dirfd;
	int fd;                      /* the temporary's, until it is synced */
	char tmp[64];
};

static void record_name(char *buf, size_t n)
{
	unsigned char r[12];
	char hex[25];

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(buf, n, "tx-%s", hex);
}

/*
 * A record's text: "put\t<tmp>\t<key>\n" lines and "commit\n" (the body),
 * after a header line.  In a file of its own (slot < 0): "tsec-journal
 * 1".  In a slot, which is written over where an older record was:
 * "tsec-journal 2 <length> <hash>", the body's length and BLAKE2b-128, so
 * that a write torn by a crash (new lines over an older record's, its
 * "commit" line among them) is never taken for a committed record.  NULL
 * when too big.
 */
#define HEADER2 "tsec-journal 2 "
#define HASH_LEN 16

static char *record_text(const struct tsec__bput *p, const struct item *it, size_t n,
			 bool slot, size_t *len)
{
	size_t cap = 96, o, body;
	char *t;

	for (size_t i = 0; i < n; i++)
		cap += strlen(it[i].tmp) + p[i].sk->tlen + 8;
	if (cap > TSEC__FB_RECORD_MAX || !(t = malloc(cap)))
		return NULL;
	/* The body first, at a fixed place after room for the header. */
	o = body = 80;
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(t + o, cap - o, "put\t%s\t%s\n", it[i].tmp, p[i].sk->text);
	o += (size_t)snprintf(t + o, cap - o, "commit\n");
	if (slot) {
		unsigned char h[HASH_LEN];
		char hex[2 * HASH_LEN + 1], head[80];
		int hl;

		crypto_generichash(h, sizeof(h), (const unsigned char *)t + body, o - body, NULL, 0);
		sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
		hl = snprintf(head, sizeof(head), HEADER2 "%zu %s\n", o - body, hex);
		memcpy(t + body - (size_t)hl, head, (size_t)hl);
		memmove(t, t + body - (size_t)hl, o - body + (size_t)hl);
		*len = o - body + (size_t)hl;
	} else {
		memmove(t + 15, t + body, o - body);
		memcpy(t, "tsec-journal 1\n", 15);
		*len = o - body + 15;
	}
	return t;
}

/*
 * The body of a record read back: for a slot's ("tsec-journal 2"), the
 * body its header names if its hash holds, else NULL (torn, or a slot
 * being written: not committed); any other text as it is.
 */
char *tsec__fb_record_body(char *text, size_t n)
{
	unsigned char h[HASH_LEN], want[HASH_LEN];
	char *end, *nl;
	unsigned long long len;

	if (strncmp(text, HEADER2, strlen(HEADER2)))
		return text;
	len = strtoull(text + strlen(HEADER2), &end, 10);
	if (*end != ' ' || !(nl = memchr(end, '\n', n - (size_t)(end - text))) ||
	    nl - end - 1 != 2 * HASH_LEN ||
	    sodium_hex2bin(want, sizeof(want), end + 1, 2 * HASH_LEN, NULL, NULL, NULL) ||
	    len > n - (size_t)(nl + 1 - text))
		return NULL;
	crypto_generichash(h, sizeof(h), (const unsigned char *)nl + 1, (size_t)len, NULL, 0);
	if (sodium_memcmp(h, want, sizeof(h)))
		return NULL;
	nl[1 + len] = '\0';
	return nl + 1;
}

/* ---- record slots (file_private.h) ---- */

static void slot_name(const struct tsec__filebe *fb, unsigned k, char *buf, size_t n)
{
	snprintf(buf, n, "tx-%s-%u", fb->owner, k);
}

/*
 * A slot for one group: an idle one, or one made now (flocked under a
 * dotted name, then renamed into the journal, as the owner file is, so no
 * one recovering takes it for a dead writer's; its name made durable
 * with the journal's fsync, once for the slot's life).  Its index, or
 * -1: every slot is busy, or one cannot be made (the group then makes a
 * record file of its own, as before slots).
 */
static int slot_take(struct tsec__filebe *fb)
{
	char making[80], name[64];
	int i, at = -1, fd;
	unsigned k;

	pthread_mutex_lock(&fb->slots_mu);
	for (i = 0; i < TSEC__SLOTS; i++) {
		if (fb->slot[i].fd >= 0 && !fb->slot[i].busy) {
			fb->slot[i].busy = true;
			pthread_mutex_unlock(&fb->slots_mu);
			return i;
		}
		if (fb->slot[i].fd == -1 && at < 0)
			at = i;
	}
	if (at >= 0) {
		fb->slot[at].fd = -2;            /* being made */
		k = fb->slots_made++;
	}
	pthread_mutex_unlock(&fb->slots_mu);
	if (at < 0)
		return -1;
	slot_name(fb, k, name, sizeof(name));
	snprintf(making, sizeof(making), TSEC__FB_OWNING "%s", name);
	fd = openat(fb->journalfd, making, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		    0600);
	if (fd >= 0 && (flock(fd, LOCK_EX) < 0 ||
			renameat(fb->journalfd, making, fb->journalfd, name) < 0 ||
			fsync(fb->journalfd) < 0)) {
		unlinkat(fb->journalfd, making, 0);
		unlinkat(fb->journalfd, name, 0);
		close(fd);
		fd = -1;
	}
	pthread_mutex_lock(&fb->slots_mu);
	fb->slot[at].fd = fd;
	fb->slot[at].k = k;
	fb->slot[at].busy = fd >= 0;
	pthread_mutex_unlock(&fb->slots_mu);
	return fd >= 0 ? at : -1;
}

/* A group done with its slot: idle again (emptied: an empty record is
 * nothing to recover), or, `keep` false, given up (its record left for
 * a recovery: the flock goes with the descriptor). */
static void slot_give(struct tsec__filebe *fb, int i, bool keep)
{
	pthread_mutex_lock(&fb->slots_mu);
	if (keep && ftruncate(fb->slot[i].fd, 0) == 0) {
		fb->slot[i].busy = false;
	} else {
		close(fb->slot[i].fd);
		fb->slot[i].fd = -1;
		fb->slot[i].busy = false;
	}
	pthread_mutex_unlock(&fb->slots_mu);
}

/* Whether `name` is one of this store's slots (alive: it holds them). */
bool tsec__fb_slot_mine(struct tsec__filebe *fb, const char *name)
{
	size_t ol = strlen(fb->owner);
	char *end;
	unsigned long k;
	bool mine = false;

	if (strncmp(name, "tx-", 3) || strncmp(name + 3, fb->owner, ol) || name[3 + ol] != '-')
		return false;
	k = strtoul(name + 4 + ol, &end, 10);
	if (*end)
		return false;
	pthread_mutex_lock(&fb->slots_mu);
	for (int i = 0; i < TSEC__SLOTS && !mine; i++)
		mine = fb->slot[i].fd >= 0 && fb->slot[i].k == k;
	pthread_mutex_unlock(&fb->slots_mu);
	return mine;
}

void tsec__fb_slots_end(struct tsec__filebe *fb)
{
	char name[64];

	for (int i = 0; i < TSEC__SLOTS; i++) {
		if (fb->slot[i].fd < 0)
			continue;
		/* Idle (the store is closing): empty, nothing to keep. */
		slot_name(fb, fb->slot[i].k, name, sizeof(name));
		unlinkat(fb->journalfd, name, 0);
		close(fb->slot[i].fd);
		fb->slot[i].fd = -1;
	}
}

static int write_full(int fd, const char *t, size_t len)
{
	while (len) {
		ssize_t w = write(fd, t, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		t += w;
		len -= (size_t)w;
	}
	return 0;
}

/* All of t at offset 0 (a slot's record, written over an emptied one). */
static int pwrite_full(int fd, const char *t, size_t len)
{
	off_t at = 0;

	while (len) {
		ssize_t w = pwrite(fd, t, len, at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		t += w;
		at += w;
		len -= (size_t)w;
	}
	return 0;
}


/* Steps 3 to 5 of a group whose temporaries are written. */
struct group {
	struct tsec__filebe *fb;
	const struct tsec__bput *p;
	size_t n;
	const struct tsec__guard *guard;
	struct item *it;
	int recfd;
	const char *rec;
	int committed;
	int slot;                    /* its record slot, or -1: a file of its own */
	bool wrote;                  /* its record was written (or tried) */
};

/* Whether the guard holds (the commit flock held exclusive, so no group
 * lands meanwhile): 0 or TSEC_ECHANGED. */
static int guard_holds(struct tsec__filebe *fb, const struct tsec__guard *gd,
		       struct tsec_error *err)
{
	char *v = NULL;
	size_t n = 0;
	int rc = fb->base.ops->get(&fb->base, gd->sk, gd->value ? gd->len : 0, &v, &n, err);
	bool same;

	if (rc && rc != TSEC_ENOENT && rc != TSEC_ETOOBIG)
		return rc;
	same = gd->value ? rc == 0 && n == gd->len && !memcmp(v, gd->value, n)
			 : rc == TSEC_ENOENT;
	free(v);
	return same ? 0 : tsec__seterr(err, TSEC_ECHANGED, gd->sk->text, "%s changed meanwhile",
				       gd->sk->text);
}

/* Test hook (tests only): called after a fenced group's temporaries are
 * written, before its lock's write lock is taken. */
void (*tsec__fb_fenced_hook)(void);
atomic_ulong tsec__fb_read_waits;

/* Whether an item before i is in the same folder as item i. */
static bool same_folder_before(const struct tsec__bput *p, size_t i)
{
	const struct tsec__skey *a = p[i].sk;
	size_t al = a->tlen - strlen(a->seg[a->n - 1]);

	for (size_t j = 0; j < i; j++) {
		const struct tsec__skey *b = p[j].sk;
		size_t bl = b->tlen - strlen(b->seg[b->n - 1]);

		if (al == bl && !memcmp(a->text, b->text, al))
			return true;
	}
	return false;
}

/* Step 4's renames, each temporary over its target, the commit flock
 * held. */
static int apply_renames(struct group *g, struct tsec_error *err)
{
	for (size_t i = 0; i < g->n; i++) {
		const struct tsec__skey *sk = g->p[i].sk;

		if (renameat(g->it[i].dirfd, g->it[i].tmp, g->it[i].dirfd, sk->seg[sk->n - 1]) < 0)
			/* Gone, its temporary is nothing a recovery can apply:
			 * someone removed it behind the store's back. */
			return errno == ENOENT
				? tsec__seterr(err, TSEC_EIO, sk->text,
					       "committed, but the new value's temporary file "
					       "was removed by someone else: this key keeps "
					       "its old value, the group is not whole")
				: tsec__seterr(err, TSEC_EIO, sk->text,
					       "committed, but cannot apply now (%s); the store "
					       "completes it before its next write",
					       strerror(errno));
		g->it[i].tmp[0] = '\0';
	}
	return 0;
}

/* The commit flock, then any group a dead writer committed before, rolled
 * forward (its record's flock is ours to take; ours is held, so it is
 * passed over): the flock's descriptor, or -1 (errno). */
static int commit_lock(struct group *g)
{
	int cfd = tsec__fb_commit_write(g->fb);

	if (cfd >= 0 && tsec__fb_any_record(g->fb, g->rec))
		tsec__fb_recover_dead(g->fb);
	return cfd;
}

/*
 * 3: the commit point, the group's record written and durable.  With one
 * sync in a slot: the slot's name has been in the journal, synced, since
 * the slot was made, and the hash in its header tells a whole record
 * from a torn one; so a slot record needs its own data synced, nothing
 * more (fdatasync: its size is data it needs).  A record file of its own
 * needs the journal's fsync too, for its name.
 */
static int commit_point(struct group *g, struct tsec_error *err)
{
	size_t len = 0;
	char *text = record_text(g->p, g->it, g->n, g->slot >= 0, &len);
	int rc = 0;

	if (!text)
		return tsec__seterr(err, TSEC_ETOOBIG, "", "transaction too large");
	g->wrote = true;
	if ((g->slot >= 0 ? pwrite_full(g->recfd, text, len) : write_full(g->recfd, text, len)) < 0 ||
	    (g->slot >= 0 ? fdatasync(g->recfd) : fsync(g->recfd)) < 0 ||
	    (g->slot < 0 && fsync(g->fb->journalfd) < 0))
		rc = tsec__seterr(err, TSEC_EIO, "", "cannot commit: %s", strerror(errno));
	else
		g->committed = 1;
	free(text);
	return rc;
}

static int commit_apply(void *ctx, struct tsec_error *err)
{
	struct group *g = ctx;
	int cfd = -1, rc;

	/*
	 * Guarded: the commit flock first, so that the guard is read and
	 * the group committed and applied with no other group in between
	 * (an ordinary group takes it after its commit point).
	 */
	if (g->guard) {
		if ((cfd = commit_lock(g)) < 0) {
			rc = tsec__seterr(err, TSEC_EIO, "", "cannot take the commit lock: %s",
					  strerror(errno));
			goto out;
		}
		if ((rc = guard_holds(g->fb, g->guard, err)))
			goto out;
	}
	if ((rc = commit_point(g, err)))
		goto out;
	/* 4: apply, one group at a time across the store, after any group
	 * a dead writer committed before. */
	if (!g->guard && (cfd = commit_lock(g)) < 0) {
		rc = tsec__seterr(err, TSEC_EIO, "", "committed, but cannot apply now (%s); the "
				  "store completes it before its next write", strerror(errno));
		goto out;
	}
	if ((rc = apply_renames(g, err)))
		goto out;
	/*
	 * The renames reach the disk before the record goes: one fsync per
	 * folder, not per file (a certificate's three files share one
	 * folder, and one fsync of it makes every entry in it durable;
	 * syncing it three times cost two fsyncs a save_cert, issue 36).
	 * After the commit flock is let go (the renames are what it orders;
	 * a later group's renames in the same folder are made durable by
	 * whichever fsync of it comes last, and this record stays until
	 * ours returns): groups of different names sync their folders at
	 * once instead of one after another (an unguarded group only: a
	 * guarded one holds it from before its commit, and keeps it).
	 */
	if (cfd >= 0 && !g->guard) {
		tsec__fb_commit_end(g->fb, cfd);
		cfd = -1;
	}
	for (size_t i = 0; i < g->n; i++)
		if (!same_folder_before(g->p, i))
			fsync(g->it[i].dirfd);
	/* 5: done; a record left by a crash here is harmless to replay
	 * (its temporaries are gone).  A slot is emptied and kept. */
	if (g->slot < 0)
		unlinkat(g->fb->journalfd, g->rec, 0);
	rc = 0;
out:
	tsec__fb_commit_end(g->fb, cfd);
	return rc;
}

#define SYNC_WINDOW 16

/* Step 2's syncs of items [from, to), each closed once synced. */
static int sync_temps(const struct tsec__bput *p, struct item *it, size_t from, size_t to,
		      struct tsec_error *err)
{
	for (size_t i = from; i < to; i++) {
		if (fdatasync(it[i].fd) < 0)
			return tsec__fb_io_err(err, p[i].sk->text, "cannot write");
		close(it[i].fd);
		it[i].fd = -1;
	}
	return 0;
}

/* 2: each new value in a temporary file beside its target, synced a
 * window at a time: 0 or the error (what was made, the caller undoes). */
static int write_temps(struct group *g, struct tsec_error *err)
{
	const struct tsec__bput *p = g->p;
	struct item *it = g->it;
	int rc;

	for (size_t i = 0; i < g->n; i++) {
		const struct tsec__skey *sk = p[i].sk;
		struct stat sb;

		if ((rc = tsec__fb_open_dirs(g->fb, sk, sk->n - 1, true, &it[i].dirfd, err)))
			return rc;
		if (fstatat(it[i].dirfd, sk->seg[sk->n - 1], &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(sb.st_mode))
			return tsec__seterr(err, TSEC_EEXIST, sk->text, "'%s' is a folder; a folder "
					    "is never replaced by a file", sk->text);
		if ((rc = tsec__fb_write_temp_started(g->fb->owner, it[i].dirfd, p[i].value,
						      p[i].len, it[i].tmp, sizeof(it[i].tmp),
						      sk->text, &it[i].fd, err)))
			return rc;
		/* Their syncs, once a window of them is written and on its
		 * way: the first waits for the journal commit that carries
		 * them all, the others mostly find their part done.  (A
		 * window, not the whole group: a group of thousands would
		 * hold a descriptor for each.) */
		if ((i + 1) % SYNC_WINDOW == 0 || i + 1 == g->n)
			if ((rc = sync_temps(p, it, i - i % SYNC_WINDOW, i + 1, err)))
				return rc;
	}
	return 0;
}

int tsec__fb_put_group(struct tsec__filebe *fb, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *gd,
		       struct tsec_error *err)
{
	struct item *it = calloc(n, sizeof(*it));
	char rec[64];
	struct group g = { fb, p, n, gd, it, -1, rec, 0, -1, false };
	size_t i;
	int rc;

	if (!it)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	for (i = 0; i < n; i++)
		it[i].dirfd = it[i].fd = -1;
	/* A slot of the store's if one is free or can be made; else a
	 * record file of its own. */
	if ((g.slot = slot_take(fb)) >= 0) {
		g.recfd = fb->slot[g.slot].fd;   /* fixed while the slot is busy */
		slot_name(fb, fb->slot[g.slot].k, rec, sizeof(rec));
	} else {
		record_name(rec, sizeof(rec));
		g.recfd = openat(fb->journalfd, rec,
				 O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	}
	if (g.recfd < 0 || (g.slot < 0 && flock(g.recfd, LOCK_EX) < 0)) {
		rc = tsec__seterr(err, TSEC_EIO, "", "cannot start a transaction: %s",
				  strerror(errno));
		goto out;
	}
	/* 2: the new values, beside their targets (the slow part: outside
	 * any lock's write lock, so a writer paused here blocks no one). */
	if ((rc = write_temps(&g, err)))
		goto out;
	/* 3-5, fenced: under the lock's write lock, checked then committed and
	 * applied, so no holder after it can be overwritten by it. */
	if (f && tsec__fb_fenced_hook)
		tsec__fb_fenced_hook();
	rc = f ? tsec__fb_fenced(fb, f, commit_apply, &g, err) : commit_apply(&g, err);
out:
	for (i = 0; i < n; i++) {
		if (it[i].fd >= 0)
			close(it[i].fd);
		if (!g.committed && it[i].dirfd >= 0 && it[i].tmp[0])
			unlinkat(it[i].dirfd, it[i].tmp, 0);
		if (it[i].dirfd >= 0)
			close(it[i].dirfd);
	}
	if (g.slot >= 0) {
		/* Kept when done, or when nothing reached it; given up after
		 * a failed commit or apply (its record is a recovery's). */
		slot_give(fb, g.slot, rc == 0 || !g.wrote);
	} else if (g.recfd >= 0) {
		if (!g.committed)
			unlinkat(fb->journalfd, rec, 0);
		close(g.recfd);
	}
	free(it);
	return rc;
}
