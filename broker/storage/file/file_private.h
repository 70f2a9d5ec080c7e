/*
 * Internal to the file backend (file.c, file_tree.c, file_folders.c,
 * file_journal.c, file_commit.c, file_recover.c, file_lock.c).
 *
 * Layout under the root: values as files (0600) in folders (0700); names
 * starting with ".tsec-" belong to the backend:
 *   .tsec-tmp-<owner>-<random>   a value being written by the open
 *                                store <owner> ("w" and 16 hex digits;
 *                                before, the writer's pid)
 *   .tsec-journal/.tsec-owner-<owner>
 *                                flocked while that store is open: its
 *                                temporaries are litter only once the
 *                                flock is free, in whatever pid
 *                                namespace the writer ran
 *   .tsec-journal/<txid>         a transaction's intent record
 *   .tsec-journal/.tsec-commit   the lock taken while records are applied
 *   .tsec-locks/<name>.lock      a lease (token, fence, expiry, waiter),
 *                                flocked while it is read or changed;
 *                                outside every key a caller can name
 *                                (before, locks/<name>.lock: moved here
 *                                when the store opens)
 */
#ifndef TSEC_STORAGE_FILE_PRIVATE_H
#define TSEC_STORAGE_FILE_PRIVATE_H

#include <stdatomic.h>

#include "broker/storage/backend.h"
#include "common/clock.h"

#define TSEC__JOURNAL ".tsec-journal"
#define TSEC__TMP_PREFIX ".tsec-tmp-"
#define TSEC__LOCKS ".tsec-locks"
#define TSEC__OWNER_PREFIX ".tsec-owner-"
#define TSEC__OWNER_LEN 17           /* "w" and 16 hex digits */
#define TSEC__SLOTS 32               /* record slots a store keeps (groups at once) */

#include <pthread.h>
#include <sys/stat.h>

/* file_folders.c: folders kept open once resolved (see there). */
#define TSEC__FOLDER_SLOTS 64
struct tsec__folder_slot {
	char *path;                  /* the folder's key text, NUL-terminated */
	size_t len;
	uint64_t hash;
	int fd;                      /* -1: empty */
	int64_t checked_ms;          /* resolved at (monotonic) */
};
struct tsec__folders {
	pthread_rwlock_t lock;       /* read while a descriptor is used */
	struct tsec__folder_slot slot[TSEC__FOLDER_SLOTS];
};

struct tsec__filebe {
	struct tsec__backend base;
	int rootfd;                  /* O_DIRECTORY, never closed early */
	bool fenced;                 /* registered with tsec__trusted_fence_add */
	dev_t root_dev;
	ino_t root_ino;
	int journalfd;               /* root/.tsec-journal */
	int locksfd;                 /* root/.tsec-locks */
	int ownerfd;                 /* .tsec-journal/.tsec-owner-<owner>, flocked */
	char owner[TSEC__OWNER_LEN + 1]; /* names this store's temporaries */
	struct tsec__folders folders;
	/*
	 * The commit flock's stand-in among this store's own threads, taken
	 * before it and let go after it (tsec__fb_commit_end): threads wait
	 * on it without polling, woken at once, writers first; the flock then
	 * orders this process against others only.  Without it the store's
	 * threads polled the turnstile and the flock with naps of up to 5 ms,
	 * and 16 renewals at once ran little faster than one (issue 36).
	 */
	pthread_rwlock_t commit_rw;
	/*
	 * The journal's record files this store keeps for its groups
	 * (file_journal.c, "slots"), each flocked for the store's life: a
	 * group commits by writing one and syncing that file alone, its
	 * name made durable once, when the slot was made.  Under slots_mu.
	 */
	pthread_mutex_t slots_mu;
	struct tsec__slot {
		int fd;                  /* -1: the entry is unused */
		bool busy;               /* a group's, now */
		unsigned k;              /* its name: "tx-<owner>-<k>" */
	} slot[TSEC__SLOTS];
	unsigned slots_made;         /* names k below this were used */
	/* Told each key a dead writer's group rolled forward at run time
	 * (a LocalCache above drops it); set once, before any write. */
	struct tsec__feed_sink feed;    /* told each key a recovery renames */
};

void tsec__folders_init(struct tsec__folders *f);
/* Closes every kept folder (after this process removed folders). */
void tsec__folders_forget(struct tsec__folders *f);
void tsec__folders_free(struct tsec__folders *f);

/*
 * stat of the key's file or folder beneath the root, following no link:
 * one fstatat relative to its kept folder.  -1 and errno (ENOENT,
 * ENOTDIR, ELOOP for a link on the way or at the end, ...).
 */
int tsec__fb_stat_key(struct tsec__filebe *fb, const struct tsec__skey *sk, struct stat *sb);
/* Opens the key's value (flags, with O_NOFOLLOW) through the same kept
 * folder descriptors: the descriptor, or -1 and errno (EPERM: a planted
 * folder on the way). */
int tsec__fb_open_key(struct tsec__filebe *fb, const struct tsec__skey *sk, int flags);

/*
 * Opens the folders seg[0..upto) below the root, never following a
 * symbolic link, creating missing ones (0700) when `create`.  *dirfd is
 * a new descriptor with its own offset.  Errors: TSEC_ENOENT, TSEC_EEXIST
 * (a file stands where a folder must), TSEC_EIO; errno is left as the
 * failing open set it (ELOOP for a link).
 */
int tsec__fb_open_dirs(struct tsec__filebe *fb, const struct tsec__skey *sk,
		       unsigned upto, bool create, int *dirfd,
		       struct tsec_error *err);

static inline struct tsec__filebe *tsec__fb_of(struct tsec__backend *b)
{
	return (struct tsec__filebe *)b;
}

/* file.c: errors and checks the operations share.  errno as a store
 * error (ENOENT: TSEC_ENOENT, else TSEC_EIO), "what: strerror". */
int tsec__fb_io_err(struct tsec_error *err, const char *where, const char *what);
/* A failed open of sk's value or folder (errno): not found, reached
 * through a symbolic link, or I/O. */
int tsec__fb_open_err(const struct tsec__skey *sk, struct tsec_error *err);
/* A read or change that could not have the commit flock: TSEC_EBUSY
 * after the wait (EWOULDBLOCK), else I/O.  Nothing read or changed. */
int tsec__fb_commit_lock_err(struct tsec_error *err, const char *where);
/* A value: a regular file of this user (or root) with at most one link. */
bool tsec__fb_plain_file(const struct stat *sb);
/* Whether the folder open on fd may be trusted (this user's or root's,
 * writable by nobody else); refused as planted otherwise. */
int tsec__fb_folder_ok(int fd, const char *where, const char *name, struct tsec_error *err);
/* The same, judged from a stat. */
bool tsec__fb_plain_folder(const struct stat *sb);
/* Refuses anything but a value, or a folder when folder_ok, with the
 * error naming what was planted. */
int tsec__fb_plain(const struct stat *sb, const struct tsec__skey *sk, bool folder_ok,
		   struct tsec_error *err);
int tsec__fb_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		  struct tsec_error *err);

/* A folder pruned under a writer: resolve again, a few times at most. */
#define TSEC__FB_PRUNED_RETRIES 8

/* file_tree.c: the backend's list, del and move, and the pruning of the
 * empty folders above sk's first `folders` segments. */
int tsec__fb_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  struct tsec_strlist *out, struct tsec_error *err);
int tsec__fb_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		 const struct tsec__fence *f, struct tsec_error *err);
int tsec__fb_move(struct tsec__backend *b, const struct tsec__skey *src,
		  const struct tsec__skey *dst, const struct tsec__fence *f,
		  struct tsec_error *err);
void tsec__fb_prune(struct tsec__filebe *fb, const struct tsec__skey *sk, unsigned folders);

/* Fills buf with ".tsec-tmp-<owner>-<16 hex digits>". */
void tsec__fb_temp_name(const char *owner, char *buf, size_t n);

/*
 * The store-wide commit flock (file_commit.c), held exclusive by a
 * group between its commit point and its last rename, shared by a read
 * of several values (get_many) while it opens them; its descriptor
 * (close() lets it go), or -1 and errno.  A group waits as long as it
 * takes; a read at most wait_ms of tsec__mono_ms, then -1 with
 * EWOULDBLOCK.  A waiting group goes before reads that come after it.
 */
int tsec__fb_commit_write(struct tsec__filebe *fb);
int tsec__fb_commit_read(struct tsec__filebe *fb, int64_t wait_ms);
/* Lets go of what tsec__fb_commit_write, tsec__fb_commit_read or
 * tsec__fb_settle took (cfd; nothing when it is -1). */
void tsec__fb_commit_end(struct tsec__filebe *fb, int cfd);
/* The commit flock exclusive, waiting at most wait_ms (< 0: as long as
 * it takes): its descriptor, or -1 and errno (file_commit.c). */
int tsec__fb_commit_write_within(struct tsec__filebe *fb, int64_t wait_ms);

/* The journal's records (file_journal.c writes them, file_recover.c
 * reads back those of dead writers). */
#define TSEC__FB_RECORD_MAX (64u << 10)
#define TSEC__FB_OWNING ".tsec-owning-"   /* an owner file being made */
/* The lines of a whole record text[0..n) (its header checked), or NULL
 * for a torn or foreign one. */
char *tsec__fb_record_body(char *text, size_t n);
/* Whether name is one of this store's own record slots. */
bool tsec__fb_slot_mine(struct tsec__filebe *fb, const char *name);
/* Recovers every dead writer's record (the commit flock held
 * exclusive). */
void tsec__fb_recover_dead(struct tsec__filebe *fb);
/* Whether the journal holds any record but `mine` (NULL: any). */
bool tsec__fb_any_record(struct tsec__filebe *fb, const char *mine);
/* Removes the store's idle record slots (at close, before its owner file). */
void tsec__fb_slots_end(struct tsec__filebe *fb);

/*
 * Before a single put, a delete or a move makes its change: no record of
 * a dead writer left in the journal (any found is recovered first, under
 * the commit flock exclusive), and while the journal holds records, the
 * commit flock held shared (*cfd; -1 when the journal was empty and none
 * is needed).  So a group committed before cannot land after the change.
 * Returns 0; or waits at most wait_ms, then -1 with EWOULDBLOCK, and -1
 * and errno on another failure.
 */
int tsec__fb_settle(struct tsec__filebe *fb, int64_t wait_ms, int *cfd);

/* How long a read of several values (get_many) waits for a group being
 * applied before it answers TSEC_EBUSY: a group's renames take
 * microseconds, so only a paused or stuck process holds it this long. */
#define TSEC__FB_READ_WAIT_MS 5000

/*
 * Writes data into a new temporary file in dirfd (created exclusively,
 * 0600), fsynced when `durable`; *tmp names it, after `owner` (the
 * store's, or what names the writer where no store sweeps).  On failure
 * nothing is left behind.
 */
int tsec__fb_write_temp(const char *owner, int dirfd, const void *data, size_t len,
			bool durable, char *tmp, size_t tmpn, const char *where,
			struct tsec_error *err);
/*
 * The same, not synced: its writeback started (sync_file_range), and its
 * descriptor left open in *fd for the caller to fdatasync (a group's
 * temporaries then reach the disk together, their fdatasyncs waiting on
 * one journal commit instead of one each) and close.
 */
int tsec__fb_write_temp_started(const char *owner, int dirfd, const void *data, size_t len,
				char *tmp, size_t tmpn, const char *where, int *fd,
				struct tsec_error *err);

/*
 * Writes data atomically as `leaf` in dirfd (a temporary file renamed
 * over it; with `durable`, the file is fsynced before the rename and the
 * folder after).  Never replaces a folder (TSEC_EEXIST).  The rename is
 * made settled (tsec__fb_settle).
 */
int tsec__fb_write_atomic(struct tsec__filebe *fb, int dirfd, const char *leaf,
			  const void *data, size_t len, bool durable, struct tsec_error *err);

/* file_journal.c: a group of writes, all or nothing across a crash. */
int tsec__fb_put_group(struct tsec__filebe *fb, const struct tsec__bput *p,
		       size_t n, const struct tsec__fence *f, const struct tsec__guard *gd,
		       struct tsec_error *err);
/* Tests only: runs inside a fenced write, before the lock's flock. */
extern void (*tsec__fb_fenced_hook)(void);
/* Test hook (tests only): called inside a fenced write, after its lease
 * was checked, before it writes. */
extern void (*tsec__fb_checked_hook)(void);
/* Tests only: how many times a read of several values found a group in
 * its way (the turnstile or the commit flock held) and waited. */
extern atomic_ulong tsec__fb_read_waits;

/*
 * Names this store (fb->owner) by a file in the journal it holds flocked
 * until tsec__fb_owner_end: before it writes any temporary.
 */
int tsec__fb_owner_begin(struct tsec__filebe *fb, struct tsec_error *err);
void tsec__fb_owner_end(struct tsec__filebe *fb);

/* Rolls every dead transaction forward or back and removes the litter of
 * dead writers.  Called when the backend opens, after tsec__fb_owner_begin. */
int tsec__fb_recover(struct tsec__filebe *fb, struct tsec_error *err);

/* file_lock.c */
void tsec__fb_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16]);
int tsec__fb_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		      const uint8_t *waiter, struct tsec__lease *out,
		      struct tsec_error *err);
int tsec__fb_lock_renew(struct tsec__backend *b, const char *name,
			const uint8_t token[16], uint64_t ttl_ms, int64_t *expires_ms,
			struct tsec_error *err);
int tsec__fb_lock_release(struct tsec__backend *b, const char *name,
			  const uint8_t token[16], struct tsec_error *err);
/* op(ctx) run only while the fence's lease is held, under its flock. */
int tsec__fb_fenced(struct tsec__filebe *fb, const struct tsec__fence *f,
		    int (*op)(void *ctx, struct tsec_error *err), void *ctx,
		    struct tsec_error *err);
/* Removes the files of free locks nobody is using (and old guards). */
void tsec__fb_clean_guards(struct tsec__filebe *fb);

#endif
