/*
 * Gated storage and what the disk holds: files planted under the root,
 * folders kept and removed, listings of an empty store, a reopen that
 * recovers an interrupted transaction, and the old lock layout.  Waits
 * behind a commit are test_store_waits.c; the LocalCache's races
 * test_localcache.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "common/clock.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tests/certgen.h"
#include "broker/storage/file/file_private.h"
#include "broker/storage/fleet.h"
#include "tests/store_fixture.h"
#include "broker/storage/localcache.h"


/*
 * Planted files: a FIFO, a socket-like special file and a hard link to a
 * file outside the root are refused at once (nothing blocks), never
 * listed, never counted as values.
 */
/* Writes a file at root/rel (folders made as needed). */
static void plant(const char *root, const char *rel, const char *text)
{
	char path[4096], cmd[8192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static void test_store_planted_files(void **state)
{
	struct tu_store *t = *state;
	char path[4096], outside[4096];
	struct tsec_strlist l;
	struct tsec_error err;
	char *v;
	size_t n;
	int ex;

	put(t->store, "planted/ok", "fine");
	snprintf(path, sizeof(path), "%s/planted/fifo", t->root);
	assert_int_equal(mkfifo(path, 0600), 0);
	/* Opening a FIFO for reading would wait for a writer forever. */
	assert_int_equal(tsec_store_get(t->store, &app, "planted/fifo", &v, &n, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "not a regular file"));
	assert_int_equal(tsec_store_exists(t->store, &app, "planted/fifo", &ex, &err), 0);
	assert_false(ex);
	snprintf(outside, sizeof(outside), "%s/outside-secret", t->dir);
	plant(t->dir, "outside-secret", "secret");
	snprintf(path, sizeof(path), "%s/planted/hardlink", t->root);
	assert_int_equal(link(outside, path), 0);
	assert_int_equal(tsec_store_get(t->store, &app, "planted/hardlink", &v, &n, &err), TSEC_EIO);
	assert_int_equal(tsec_store_move(t->store, &app, "planted/hardlink", "planted/moved", &err),
			 TSEC_EIO);
	assert_int_equal(tsec_store_list(t->store, &app, "planted", 0, &l, &err), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.v[0], "planted/ok");
	tsec_strlist_free(&l);
}

/*
 * The file backend keeps resolved folders open (file_folders.c).  A
 * second store on the same root stands for another process: its
 * recursive delete and re-creation of a folder the first keeps open are
 * seen by the first at once; a folder moved away behind the store's back
 * and replaced by a link to a folder outside never lets the first see a
 * file outside the root.
 */
static void test_store_kept_folders(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store_opts o = { .backend = "file", .root = t->root };
	char from[4096], to[4200], outside[4096];
	struct tsec_store *other = NULL;
	struct tsec_error err;
	struct tsec_stat st;
	char *v;
	size_t n;
	int ex;

	put(t->store, "kept/a/x", "1");
	assert_int_equal(tsec_store_exists(t->store, &app, "kept/a/x", &ex, &err), 0);
	assert_true(ex);
	assert_int_equal(tsec_store_open_opts(&other, &o, t->bus, NULL, &err), 0);
	/* The other removes the folder and makes it again, with another value. */
	assert_int_equal(tsec_store_delete(other, &app, "kept/a", 1, &err), 0);
	put(other, "kept/a/y", "2");
	assert_int_equal(tsec_store_exists(t->store, &app, "kept/a/y", &ex, &err), 0);
	assert_true(ex);
	assert_int_equal(tsec_store_exists(t->store, &app, "kept/a/x", &ex, &err), 0);
	assert_false(ex);
	assert_int_equal(tsec_store_stat(t->store, &app, "kept/a/y", &st, &err), 0);
	assert_int_equal(st.size, 1);

	/* Behind the store's back: kept/b moves away, a link to outside
	 * takes its name. */
	put(t->store, "kept/b/z", "3");
	assert_int_equal(tsec_store_exists(t->store, &app, "kept/b/z", &ex, &err), 0);
	assert_true(ex);
	snprintf(outside, sizeof(outside), "%s/outside-folder", t->dir);
	plant(t->dir, "outside-folder/secret", "secret");
	snprintf(from, sizeof(from), "%s/kept/b", t->root);
	snprintf(to, sizeof(to), "%s/kept/b-moved", t->root);
	assert_int_equal(rename(from, to), 0);
	assert_int_equal(symlink(outside, from), 0);
	for (int i = 0; i < 2; i++) {
		struct tsec_store *s = i ? other : t->store;
		assert_int_equal(tsec_store_exists(s, &app, "kept/b/secret", &ex, &err), 0);
		assert_false(ex);
		assert_int_not_equal(tsec_store_stat(s, &app, "kept/b/secret", &st, &err), 0);
		assert_int_not_equal(tsec_store_get(s, &app, "kept/b/secret", &v, &n, &err), 0);
	}
	/* A link as the value's own name is not followed either. */
	snprintf(from, sizeof(from), "%s/kept/a/link", t->root);
	snprintf(to, sizeof(to), "%s/secret", outside);
	assert_int_equal(symlink(to, from), 0);
	assert_int_equal(tsec_store_exists(t->store, &app, "kept/a/link", &ex, &err), 0);
	assert_false(ex);
	assert_int_equal(tsec_store_stat(t->store, &app, "kept/a/link", &st, &err), TSEC_ENOENT);
	assert_non_null(strstr(err.msg, "symbolic link"));
	tsec_store_close(&other);
}

/*
 * A write through a folder that is a symbolic link is refused and says
 * so (issue 37, 8), whether the link is the key's folder or one above,
 * in a fresh store and in one that kept the folder; nothing is written
 * where the link points.
 */
static void test_store_write_through_link(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store_opts o = { .backend = "file", .root = t->root };
	struct tsec_store *fresh;
	struct tsec_error err;
	char from[4096], outside[4096];
	static const char *const keys[] = { "lnk/x", "lnk/deeper/x", "up/lnk2/x" };

	snprintf(outside, sizeof(outside), "%s/outside-for-writes", t->dir);
	assert_int_equal(mkdir(outside, 0700), 0);
	snprintf(from, sizeof(from), "%s/lnk", t->root);
	assert_int_equal(symlink(outside, from), 0);
	put(t->store, "up/kept", "1");
	snprintf(from, sizeof(from), "%s/up/lnk2", t->root);
	assert_int_equal(symlink(outside, from), 0);
	assert_int_equal(tsec_store_open_opts(&fresh, &o, t->bus, NULL, &err), 0);
	for (int i = 0; i < 2; i++) {
		struct tsec_store *s = i ? fresh : t->store;

		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			int rc = tsec_store_put(s, &app, keys[k], "v", 1, &err);

			if (rc == 0)
				fail_msg("a write through the link at %s succeeded", keys[k]);
			if (!strstr(err.msg, "symbolic link"))
				fail_msg("%s: the refusal does not say why: %s (%s)", keys[k],
					 err.msg, tsec_errname(rc));
		}
	}
	assert_int_equal(tu_count_prefixed(outside, ""), 0);
	tsec_store_close(&fresh);
}

/*
 * A folder emptied by a delete is gone; an empty folder made outside the
 * store lists as empty; the root lists the same every time.
 */
static void test_store_list_empty_and_again(void **state)
{
	struct tu_store *t = *state;
	struct tsec_strlist l, again;
	struct tsec_error err;
	char path[4096];

	put(t->store, "emptied/x", "1");
	assert_int_equal(tsec_store_delete(t->store, &app, "emptied/x", 0, &err), 0);
	assert_int_equal(tsec_store_list(t->store, &app, "emptied", 0, &l, &err), TSEC_ENOENT);
	snprintf(path, sizeof(path), "%s/emptied", t->root);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(tsec_store_list(t->store, &app, "emptied", 0, &l, &err), 0);
	assert_int_equal(l.n, 0);
	tsec_strlist_free(&l);
	assert_int_equal(tsec_store_list(t->store, &app, "", 0, &l, &err), 0);
	assert_true(l.n > 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tsec_store_list(t->store, &app, "", 0, &again, &err), 0);
		assert_int_equal(again.n, l.n);
		for (size_t k = 0; k < l.n; k++)
			assert_string_equal(again.v[k], l.v[k]);
		tsec_strlist_free(&again);
	}
	tsec_strlist_free(&l);
}

/*
 * Opening a store recovers: a committed record is rolled forward, an
 * uncommitted one undone, dead writers' temporaries and old backups
 * removed; a live writer's temporary (our own pid) is left alone.
 */
static void test_store_reopen_recovers(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store *again;
	struct tsec_error err;
	char rec[8192];
	int lfd;

	put(t->store, "rec/value", "old");
	plant(t->root, "rec/.tsec-tmp-999999999-aaaa", "committed new");
	plant(t->root, "rec/.tsec-tmp-999999999-bbbb", "never committed");
	plant(t->root, "rec/.tsec-tmp-999999999-cccc", "stray");
	plant(t->root, "rec/deep/.tsec-bak-0123", "old backup");
	snprintf(rec, sizeof(rec), "tsec-journal 1\nput\t.tsec-tmp-999999999-aaaa\trec/value\n"
		 "put\t.tsec-tmp-999999999-gone\trec/other\ncommit\n");
	plant(t->root, ".tsec-journal/tx-committed", rec);
	plant(t->root, ".tsec-journal/tx-torn",
	      "tsec-journal 1\nput\t.tsec-tmp-999999999-bbbb\trec/never\n");
	/* A record naming a path outside the store is ignored. */
	plant(t->root, ".tsec-journal/tx-hostile",
	      "tsec-journal 1\nput\t.tsec-tmp-x\t../../etc/passwd\ncommit\n");
	snprintf(rec, sizeof(rec), "rec/.tsec-tmp-%ld-live", (long)getpid());
	plant(t->root, rec, "a write in flight (a build before owners)");
	/* Named after their stores: one open (its owner file's flock held,
	 * here by this test, as by a store in another process or pid
	 * namespace), one gone (its file's flock free), one whose file a
	 * sweep already removed. */
	plant(t->root, ".tsec-journal/" TSEC__OWNER_PREFIX "w00000000000a1ive", "");
	plant(t->root, "rec/.tsec-tmp-w00000000000a1ive-0001", "a write in flight");
	plant(t->root, ".tsec-journal/" TSEC__OWNER_PREFIX "w000000000000dead", "");
	plant(t->root, "rec/.tsec-tmp-w000000000000dead-0002", "litter");
	plant(t->root, "rec/.tsec-tmp-w000000000000gone-0003", "litter");
	snprintf(rec, sizeof(rec), "%s/.tsec-journal/" TSEC__OWNER_PREFIX "w00000000000a1ive",
		 t->root);
	assert_true((lfd = open(rec, O_RDONLY | O_CLOEXEC)) >= 0);
	assert_int_equal(flock(lfd, LOCK_EX), 0);
	assert_int_equal(tsec_store_open(&again, t->root, t->bus, NULL, &err), 0);
	check_value(again, "rec/value", "committed new");
	assert_int_equal(tsec_store_get(again, &app, "rec/never", &(char *){ NULL },
					&(size_t){ 0 }, &err), TSEC_ENOENT);
	/* Only the live ones: the two writes in flight and the live
	 * owner's file (tu_count_litter passes over held owner files). */
	assert_int_equal(tu_count_litter(t->root), 2);
	assert_int_equal(access(rec, F_OK), 0);
	snprintf(rec, sizeof(rec), "%s/.tsec-journal/" TSEC__OWNER_PREFIX "w000000000000dead",
		 t->root);
	assert_int_equal(access(rec, F_OK), -1);
	tsec_store_close(&again);
	snprintf(rec, sizeof(rec), "%s/rec/.tsec-tmp-%ld-live", t->root, (long)getpid());
	unlink(rec);
	snprintf(rec, sizeof(rec), "%s/rec/.tsec-tmp-w00000000000a1ive-0001", t->root);
	unlink(rec);
	/* Its store gone, its file is litter too, and the next open takes it. */
	close(lfd);
	assert_int_equal(tu_count_litter(t->root), 1);
	assert_int_equal(tsec_store_open(&again, t->root, t->bus, NULL, &err), 0);
	tsec_store_close(&again);
	assert_int_equal(tu_count_litter(t->root), 0);
}

/*
 * A writer in another pid namespace (a container sharing the store's
 * folder), paused with its group's temporaries written, while a store
 * opens here and sweeps: its temporaries stay and its group lands whole.
 * Before, the sweep judged a temporary by the pid in its name, and the
 * writer's pid (chosen here so that no process of this namespace has
 * it) named no process it could see: it removed them, and the group
 * failed after its commit point ("committed, but cannot apply now")
 * with its values lost.  Needs root (a pid and a mount namespace, and
 * /proc mounted in them to choose the pid); skipped without.
 */
static int ns_ready[2], ns_go[2], ns_done[2];

static void ns_pause(void)
{
	char c = 'R';

	if (write(ns_ready[1], &c, 1) != 1 || read(ns_go[0], &c, 1) != 1)
		_exit(3);
}

/* In the namespace: a fenced group of two values, paused in ns_pause. */
static void ns_writer(const struct tu_store *t)
{
	struct tsec_put p[2] = { { "ns/a", "value a", 7 }, { "ns/b", "value b", 7 } };
	struct tsec_store *s;
	struct tsec_error err;
	struct tsec_lock lk;
	char rc = 'F';

	if (tsec_store_open(&s, t->root, t->bus, NULL, &err) == 0 &&
	    tsec_lock_acquire(s, &app, "ns", 60000, 0, &lk, &err) == 0) {
		tsec__fb_fenced_hook = ns_pause;
		if (tsec_store_put_fenced(s, &app, &lk, p, 2, &err) == 0)
			rc = 'K';
		else
			fprintf(stderr, "writer in the namespace: %s\n", err.msg);
		tsec_lock_release(s, &app, &lk, &err);
		tsec_store_close(&s);
	}
	if (write(ns_done[1], &rc, 1) != 1)
		_exit(3);
	_exit(0);
}

/* The namespace's first process: /proc of its own, the writer as pid+1. */
static void ns_init(const struct tu_store *t, long pid)
{
	char c = 'S', v[32];
	int fd, st;
	pid_t w;

	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", 0, NULL) < 0 ||
	    (fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC)) < 0) {
		(void)!write(ns_ready[1], &c, 1);
		_exit(0);
	}
	snprintf(v, sizeof(v), "%ld", pid - 1);
	if (write(fd, v, strlen(v)) < 0) {
		(void)!write(ns_ready[1], &c, 1);
		_exit(0);
	}
	close(fd);
	if ((w = fork()) == 0)
		ns_writer(t);
	_exit(w > 0 && waitpid(w, &st, 0) == w && WIFEXITED(st) ? WEXITSTATUS(st) : 4);
}

static void ns_pipes_close(void)
{
	for (int i = 0; i < 2; i++) {
		close(ns_ready[i]);
		close(ns_go[i]);
		close(ns_done[i]);
	}
}

/* One byte from the namespace, or 0 at its end or after TU_WAIT_SECONDS
 * (a hung writer fails the test instead of hanging it). */
static char ns_read(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	char c = 0;

	if (poll(&pf, 1, TU_WAIT_SECONDS * 1000) != 1 || read(fd, &c, 1) != 1)
		return 0;
	return c;
}

static void test_store_sweep_other_pid_namespace(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store *again;
	struct tsec_error err;
	long pid = 0;
	char c;
	int st;
	pid_t a;

	/* A pid no process here has, for the writer there. */
	for (long p = 30000; p > 20000 && !pid; p -= 97)
		if (kill((pid_t)p, 0) < 0 && errno == ESRCH)
			pid = p;
	assert_true(pid > 0);
	assert_int_equal(pipe(ns_ready), 0);
	assert_int_equal(pipe(ns_go), 0);
	assert_int_equal(pipe(ns_done), 0);
	if ((a = fork()) == 0) {
		pid_t b;
		/* Only the ends it writes, and the one it reads: a test
		 * that ends leaves it reading the end of the pipe. */
		close(ns_ready[0]);
		close(ns_go[1]);
		close(ns_done[0]);
		if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0) {
			c = 'S';
			(void)!write(ns_ready[1], &c, 1);
			_exit(0);
		}
		if ((b = fork()) == 0)
			ns_init(t, pid);
		_exit(b > 0 && waitpid(b, &st, 0) == b && WIFEXITED(st) ? WEXITSTATUS(st) : 4);
	}
	assert_true(a > 0);
	close(ns_ready[1]);
	close(ns_done[1]);
	ns_ready[1] = ns_done[1] = -1;
	if ((c = ns_read(ns_ready[0])) == 'S') {
		assert_int_equal(tu_waitpid(a, &st), a);
		ns_pipes_close();
		skip();
	}
	assert_int_equal(c, 'R');
	/* The writer's temporaries are in place; a store opens here. */
	assert_int_equal(tsec_store_open(&again, t->root, t->bus, NULL, &err), 0);
	tsec_store_close(&again);
	c = 'G';
	assert_int_equal(write(ns_go[1], &c, 1), 1);
	c = ns_read(ns_done[0]);
	assert_int_equal(tu_waitpid(a, &st), a);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(c, 'K');
	check_value(t->store, "ns/a", "value a");
	check_value(t->store, "ns/b", "value b");
	ns_pipes_close();
	assert_int_equal(tu_count_litter(t->root), 0);
}

/*
 * A group whose temporary someone else removes before its renames says
 * so: not that the store will complete it (nothing can), but which key
 * keeps its old value.
 */
static const char *taken_root;

static void take_a_temporary(void)
{
	char path[4200];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%s/taken", taken_root);
	assert_non_null(d = opendir(path));
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, ".tsec-tmp-", 10)) {
			snprintf(path, sizeof(path), "%s/taken/%s", taken_root, e->d_name);
			assert_int_equal(unlink(path), 0);
			break;
		}
	closedir(d);
}

static void test_store_temporary_taken(void **state)
{
	struct tu_store *t = *state;
	struct tsec_put p[1] = { { "taken/a", "new", 3 } };
	struct tsec_error err;
	struct tsec_lock lk;

	put(t->store, "taken/a", "old");
	assert_int_equal(tsec_lock_acquire(t->store, &app, "taken", 60000, 0, &lk, &err), 0);
	taken_root = t->root;
	tsec__fb_fenced_hook = take_a_temporary;
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &lk, p, 1, &err), TSEC_EIO);
	tsec__fb_fenced_hook = NULL;
	assert_non_null(strstr(err.msg, "removed by someone else"));
	assert_null(strstr(err.msg, "completes it"));
	check_value(t->store, "taken/a", "old");
	assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	/* Its record, committed and not applicable, is the next write's to
	 * clear (its temporary is gone: nothing to roll forward). */
	put(t->store, "taken/b", "next");
	check_value(t->store, "taken/a", "old");
	assert_int_equal(tu_count_litter(t->root), 0);
}

/*
 * A record slot's record (file_journal.c: a store's groups commit by
 * writing over an emptied slot and syncing it alone) is taken as
 * committed only whole.  One torn by a crash, new lines over an older
 * record's "commit" line, fails its hash: undone, its temporary removed,
 * the old value kept.  A whole one of a dead store is rolled forward,
 * and a dead store's empty slot is nothing; the next write clears all
 * three.
 */
static void test_store_slot_records(void **state)
{
	struct tu_store *t = *state;
	char rec[1024], body[512], hex[2 * 16 + 1];
	unsigned char h[16];

	put(t->store, "slot/a", "old");
	put(t->store, "slot/b", "old");
	plant(t->root, "slot/.tsec-tmp-w000000000000dead-0001", "torn new");
	snprintf(body, sizeof(body), "put\t.tsec-tmp-w000000000000dead-0001\tslot/a\ncommit\n");
	snprintf(rec, sizeof(rec), "tsec-journal 2 %zu %032x\n%s", strlen(body), 0u, body);
	plant(t->root, ".tsec-journal/tx-w000000000000dead-0", rec);
	plant(t->root, "slot/.tsec-tmp-w000000000000dead-0002", "whole new");
	snprintf(body, sizeof(body), "put\t.tsec-tmp-w000000000000dead-0002\tslot/b\ncommit\n");
	crypto_generichash(h, sizeof(h), (const unsigned char *)body, strlen(body), NULL, 0);
	sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
	snprintf(rec, sizeof(rec), "tsec-journal 2 %zu %s\n%s", strlen(body), hex, body);
	plant(t->root, ".tsec-journal/tx-w000000000000dead-1", rec);
	plant(t->root, ".tsec-journal/tx-w000000000000dead-2", "");
	put(t->store, "slot/c", "c");
	check_value(t->store, "slot/a", "old");
	check_value(t->store, "slot/b", "whole new");
	assert_int_equal(tu_count_litter(t->root), 0);
}

/*
 * A group wider than the window of temporaries synced together (16,
 * file_journal.c): every value lands; and one whose last window fails
 * (a key there is a folder) changes nothing and leaves no temporary of
 * any window behind.
 */
static void test_store_wide_group(void **state)
{
	struct tu_store *t = *state;
	static char keys[40][32], vals[40][32];
	struct tsec_put p[40];
	struct tsec_error err;

	for (int i = 0; i < 40; i++) {
		snprintf(keys[i], sizeof(keys[i]), "wide/f%d/v%d", i % 7, i);
		snprintf(vals[i], sizeof(vals[i]), "value %d", i);
		p[i] = (struct tsec_put){ keys[i], vals[i], strlen(vals[i]) };
	}
	assert_int_equal(tsec_store_put_many(t->store, &app, p, 40, &err), 0);
	for (int i = 0; i < 40; i++)
		check_value(t->store, keys[i], vals[i]);
	put(t->store, "wide/dir/inner", "x");
	for (int i = 0; i < 40; i++) {
		snprintf(vals[i], sizeof(vals[i]), "second %d", i);
		p[i].len = strlen(vals[i]);
	}
	p[37] = (struct tsec_put){ "wide/dir", "no", 2 };
	assert_int_equal(tsec_store_put_many(t->store, &app, p, 40, &err), TSEC_EEXIST);
	for (int i = 0; i < 40; i++)
		if (i != 37) {
			char old[32];
			snprintf(old, sizeof(old), "value %d", i);
			check_value(t->store, keys[i], old);
		}
	assert_int_equal(tu_count_litter(t->root), 0);
}

/*
 * A group whose writer died after its commit point and before its
 * renames (a record with its "commit" line, no flock on it, its
 * temporaries in place) is applied before any later write, never after
 * it.  Before, only a store opening rolled it forward: a live store's
 * put, put_many or delete of the same keys went first, and the next open
 * overwrote them with the dead group's older values (a lost write; with
 * a lock's fence, a write by a past holder landing after the next
 * holder's).
 */
static void plant_dead_group(const struct tu_store *t, const char *tag, const char *key,
			     const char *value)
{
	char rel[256], rec[512];
	const char *slash = strrchr(key, '/');

	snprintf(rel, sizeof(rel), "%.*s/.tsec-tmp-999999999-%s", (int)(slash - key), key, tag);
	plant(t->root, rel, value);
	snprintf(rec, sizeof(rec), "tsec-journal 1\nput\t.tsec-tmp-999999999-%s\t%s\ncommit\n",
		 tag, key);
	snprintf(rel, sizeof(rel), ".tsec-journal/tx-dead-%s", tag);
	plant(t->root, rel, rec);
}

static void test_store_dead_group_before_write(void **state)
{
	struct tu_store *t = *state;
	const char *keys[2] = { "dead/g1", "dead/g2" };
	const char *vals[2] = { "group one", "group two" };
	struct tsec_put p[2];
	struct tsec_store *again;
	struct tsec_error err;
	struct tsec_lock lk;
	char live[4200];
	int lfd;

	put(t->store, "dead/value", "old");
	put(t->store, "dead/g1", "old");
	/* A live writer's record (its flock held, not yet committed) is
	 * passed over, and waited for by no one. */
	snprintf(live, sizeof(live), "%s/.tsec-journal/tx-live", t->root);
	assert_true((lfd = open(live, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) >= 0);
	assert_int_equal(flock(lfd, LOCK_EX), 0);
	/* One write each way, each after a dead group on its key. */
	plant_dead_group(t, "aaaa", "dead/value", "the dead group's");
	put(t->store, "dead/value", "newer");
	check_value(t->store, "dead/value", "newer");
	plant_dead_group(t, "bbbb", "dead/g1", "the dead group's");
	for (int i = 0; i < 2; i++)
		p[i] = (struct tsec_put){ keys[i], vals[i], strlen(vals[i]) };
	assert_int_equal(tsec_store_put_many(t->store, &app, p, 2, &err), 0);
	plant_dead_group(t, "cccc", "dead/gone", "the dead group's");
	assert_int_equal(tsec_store_delete(t->store, &app, "dead/gone", 0, &err), 0);
	/* A past holder's group, then the lock's next holder: its fenced
	 * write and fenced delete stand. */
	assert_int_equal(tsec_lock_acquire(t->store, &app, "dead", 60000, 0, &lk, &err), 0);
	plant_dead_group(t, "eeee", "dead/fenced", "the past holder's");
	p[0] = (struct tsec_put){ "dead/fenced", "the holder's", 12 };
	assert_int_equal(tsec_store_put_fenced(t->store, &app, &lk, p, 1, &err), 0);
	plant_dead_group(t, "ffff", "dead/fgone", "the past holder's");
	assert_int_equal(tsec_store_delete_fenced(t->store, &app, &lk, "dead/fgone", 0, &err),
			 0);
	assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	/* Reopening finds nothing left to apply. */
	assert_int_equal(tsec_store_open(&again, t->root, t->bus, NULL, &err), 0);
	check_value(again, "dead/value", "newer");
	check_value(again, "dead/g1", "group one");
	check_value(again, "dead/g2", "group two");
	check_value(again, "dead/fenced", "the holder's");
	assert_int_equal(tsec_store_get(again, &app, "dead/gone", &(char *){ NULL },
					&(size_t){ 0 }, &err), TSEC_ENOENT);
	assert_int_equal(tsec_store_get(again, &app, "dead/fgone", &(char *){ NULL },
					&(size_t){ 0 }, &err), TSEC_ENOENT);
	assert_int_equal(tu_count_litter(t->root), 0);
	tsec_store_close(&again);
	/* The live record was left alone all along. */
	assert_int_equal(access(live, F_OK), 0);
	unlink(live);
	close(lfd);
}

/*
 * The same over a LocalCache: the dead group a write rolls forward drops
 * the values it replaced from the cache, which sees no other writer over
 * files.  Before, a value cached before the write was served after it,
 * though the file under it had changed.
 */
static void test_store_dead_group_cache(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store_opts o = { .backend = "file", .root = t->root, .cache_bytes = 1 << 20 };
	struct tsec_store *cached;
	struct tsec_error err;

	assert_int_equal(tsec_store_open_opts(&cached, &o, t->bus, NULL, &err), 0);
	put(cached, "deadc/value", "old");
	check_value(cached, "deadc/value", "old");           /* now cached */
	plant_dead_group(t, "dddd", "deadc/value", "the dead group's");
	put(cached, "deadc/other", "x");                     /* rolls it forward */
	check_value(cached, "deadc/value", "the dead group's");
	check_value(t->store, "deadc/value", "the dead group's");
	tsec_store_close(&cached);
}

static void test_store_bad_input(void **state)
{
	struct tu_store *t = *state;
	struct tsec_principal empty = tu_who("");
	struct tsec_error err;
	char *big = malloc(TSEC_STORE_VALUE_MAX + 1), *longkey = malloc(2000);
	char *v;
	size_t n;

	assert_int_equal(tsec_store_put(t->store, &app, NULL, "x", 1, &err), TSEC_EKEY);
	assert_int_equal(tsec_store_put(t->store, &app, "k", NULL, 5, &err), TSEC_EINVAL);
	assert_int_equal(tsec_store_put(t->store, &app, "k", big, TSEC_STORE_VALUE_MAX + 1, &err),
			 TSEC_ETOOBIG);
	memset(longkey, 'a', 1999);
	longkey[1999] = '\0';
	assert_int_equal(tsec_store_put(t->store, &app, longkey, "x", 1, &err), TSEC_EKEY);
	assert_int_equal(tsec_store_get(t->store, NULL, "a/b/c.txt", &v, &n, &err), TSEC_EINVAL);
	/* An empty principal is an invalid request: denied. */
	assert_int_equal(tsec_store_get(t->store, &empty, "a/b/c.txt", &v, &n, &err), TSEC_EDENIED);
	assert_non_null(strstr(err.msg, "invalid request"));
	free(big);
	free(longkey);
}

/*
 * A value that reads as a lock record, at the key an old layout kept
 * locks under (locks/<name>.lock, inside the key space), stays a value:
 * no open of the store turns a caller's write into a lock (issue 37: the
 * migration of that layout, which no release used, did; here it held
 * "old" for a token the writer chose).
 */
static void test_store_lock_record_as_value(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store *again;
	struct tsec_lock lk;
	struct tsec_error err;
	char rec[512];

	snprintf(rec, sizeof(rec), "tsec-lock 2\ntoken %s\nfence 7\nexpires_ms %lld\n"
		 "waiter %s\nwaiter_seen_ms 0\n", "0123456789abcdef0123456789abcdef",
		 4102444800000LL, "00000000000000000000000000000000");
	plant(t->root, "locks/old.lock", rec);
	assert_int_equal(tsec_store_open(&again, t->root, t->bus, NULL, &err), 0);
	check_value(again, "locks/old.lock", rec);
	assert_int_equal(tsec_lock_try_acquire(again, &app, "old", 60000, &lk, &err), 0);
	assert_int_equal(tsec_lock_release(again, &app, &lk, &err), 0);
	tsec_store_close(&again);
}

/*
 * Lock records name the boot whose clock timed them (issue 34, item 3):
 * a lease of another boot is over, however far its end reads, and its
 * fence still rises; this boot's record is judged as written.
 */
static void test_store_lock_other_boot(void **state)
{
	struct tu_store *t = *state;
	struct tsec_lock lk, b;
	struct tsec_error err;
	char rec[512];

	snprintf(rec, sizeof(rec), "tsec-lock 3\nboot %s\ntoken %s\nfence 9000000000000000000\n"
		 "expires_ms %lld\nwaiter %s\nwaiter_seen_ms 0\n",
		 "00000000-0000-0000-0000-000000000000", "0123456789abcdef0123456789abcdef",
		 (long long)INT64_MAX, "00000000000000000000000000000000");
	plant(t->root, ".tsec-locks/rebooted.lock", rec);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "rebooted", 60000, &lk, &err), 0);
	assert_true(lk.fence > 9000000000000000000ull);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "rebooted", 60000, &b, &err),
			 TSEC_EBUSY);
	assert_int_equal(tsec_lock_release(t->store, &app, &lk, &err), 0);
	/* This boot's: held as written. */
	snprintf(rec, sizeof(rec), "tsec-lock 3\nboot %s\ntoken %s\nfence 5\n"
		 "expires_ms %lld\nwaiter %s\nwaiter_seen_ms 0\n", tsec__boot_id(),
		 "0123456789abcdef0123456789abcdef", (long long)(tsec__boot_ms() + 60000),
		 "00000000000000000000000000000000");
	plant(t->root, ".tsec-locks/here.lock", rec);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "here", 60000, &b, &err), TSEC_EBUSY);
	tsec__clock_advance(60001);
	assert_int_equal(tsec_lock_try_acquire(t->store, &app, "here", 60000, &b, &err), 0);
	assert_true(b.fence > 5);
	assert_int_equal(tsec_lock_release(t->store, &app, &b, &err), 0);
}

/*
 * A value read while another writer replaces it: exists, get, stat and
 * list each see the old value or the new, never "absent" and never an
 * error.  A rename over a file drops the old file's link count to 0
 * before the name points at the new one, so a lookup in that moment
 * finds a file with no links.  Before, the backend read that as "not a
 * plain file" (the check against planted hard links): exists answered
 * false, get and stat "not a regular file", list left it out, and
 * tsec-broker told a caller its certificate was missing
 * (test_daemon_workers_full, now and then).  Bounded by counts, never
 * by time: the writer makes WRITES replacements, the reader reads until
 * the writer is done.
 */
enum { WRITES = 2000 };

struct replacer {
	struct tsec_store *store;
	atomic_int done;
	int rc;
};

static void *replace_loop(void *arg)
{
	struct replacer *r = arg;
	struct tsec_error err;

	for (int i = 0; i < WRITES && !r->rc; i++)
		r->rc = tsec_store_put(r->store, &app, "replaced/v", i & 1 ? "odd" : "even",
				       i & 1 ? 3 : 4, &err);
	atomic_store(&r->done, 1);
	return NULL;
}

static void test_store_read_while_replaced(void **state)
{
	struct tu_store *t = *state;
	struct tsec_store_opts o = { .backend = "file", .root = t->root };
	struct replacer r = { 0 };
	unsigned long reads = 0, wrong = 0;
	char first[320] = "";
	pthread_t th;

	put(t->store, "replaced/v", "even");
	assert_int_equal(tsec_store_open_opts(&r.store, &o, t->bus, NULL, NULL), 0);
	assert_int_equal(pthread_create(&th, NULL, replace_loop, &r), 0);
	while (!atomic_load(&r.done)) {
		struct tsec_error err = { 0 };
		struct tsec_strlist l = { 0 };
		struct tsec_stat st;
		char *v = NULL;
		size_t n;
		int ex = 0, bad = 0;

		if (tsec_store_exists(t->store, &app, "replaced/v", &ex, &err) || !ex)
			bad = 1;
		else if (tsec_store_get(t->store, &app, "replaced/v", &v, &n, &err) ||
			 (strcmp(v, "odd") && strcmp(v, "even")))
			bad = 2;
		else if (tsec_store_stat(t->store, &app, "replaced/v", &st, &err) ||
			 (st.size != 3 && st.size != 4))
			bad = 3;
		else if (tsec_store_list(t->store, &app, "replaced", 0, &l, &err) || l.n != 1)
			bad = 4;
		free(v);
		tsec_strlist_free(&l);
		reads++;
		if (bad && !wrong++)
			snprintf(first, sizeof(first), "read %d: exists %d, %s", bad, ex, err.msg);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(r.rc, 0);
	tsec_store_close(&r.store);
	if (wrong)
		fail_msg("%lu of %lu reads saw no value while it was replaced; first: %s", wrong,
			 reads, first);
}

/* Opens a file store on root: 0, or the error's code (its text into err). */
static int open_root(const char *root, struct tsec_error *err)
{
	struct tsec_store_opts o = { .backend = "file", .root = root };
	struct tsec_bus *bus = tu_bus_with_policy("tests/data/store_policy.json");
	struct tsec_store *s = NULL;
	int rc = tsec_store_open_opts(&s, &o, bus, NULL, err);

	tsec_store_close(&s);
	tsec_bus_free(&bus);
	return rc;
}

/*
 * A store root others can write, one under a folder others can write
 * (without the sticky bit), or another user's, is refused at open; a
 * value another user planted in the store is refused when read (issue
 * 33, item 8: 'store get' served a certificate another user planted in a
 * storage folder others could write).  /tmp's sticky bit is fine: nobody
 * else can rename what is below it.
 */
static void test_store_root_trusted(void **state)
{
	struct tu_store *t = *state;
	char base[] = "/tmp/tsec-root-XXXXXX", path[512], cmd[600];
	struct tsec_error err;
	char *v = NULL;
	size_t n;
	int ex = -1;

	assert_non_null(mkdtemp(base));
	/* Writable by others: refused, saying so. */
	snprintf(path, sizeof(path), "%s/open", base);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chmod(path, 0777), 0);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "others can write"));
	/* Under a folder others can write (no sticky bit). */
	snprintf(path, sizeof(path), "%s/open/store", base);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "above the store's root"));
	/* With the sticky bit, as /tmp: fine. */
	snprintf(path, sizeof(path), "%s/open", base);
	assert_int_equal(chmod(path, 01777), 0);
	snprintf(path, sizeof(path), "%s/open/store", base);
	if (open_root(path, &err))
		fail_msg("a root under a sticky folder: %s", err.msg);
	/* Group-writable root: refused. */
	snprintf(path, sizeof(path), "%s/group", base);
	assert_int_equal(mkdir(path, 0770), 0);
	assert_int_equal(chmod(path, 0770), 0);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	if (geteuid() == 0) {
		/* Another user's root, and another user's folder above it. */
		snprintf(path, sizeof(path), "%s/theirs", base);
		assert_int_equal(mkdir(path, 0700), 0);
		assert_int_equal(chown(path, 65534, 65534), 0);
		assert_int_equal(open_root(path, &err), TSEC_EIO);
		assert_non_null(strstr(err.msg, "belongs to uid 65534"));
		snprintf(path, sizeof(path), "%s/theirs/store", base);
		assert_int_equal(open_root(path, &err), TSEC_EIO);
		/* A value another user planted in the store: refused, not
		 * served; not there for exists either. */
		put(t->store, "certificates/acme/x/x.crt", "ours");
		snprintf(path, sizeof(path), "%s/certificates/acme/x/planted.crt", t->root);
		plant(t->root, "certificates/acme/x/planted.crt", "theirs");
		assert_int_equal(chown(path, 65534, 65534), 0);
		assert_int_equal(tsec_store_get(t->store, &app, "certificates/acme/x/planted.crt",
						&v, &n, &err), TSEC_EIO);
		assert_non_null(strstr(err.msg, "planted"));
		assert_null(v);
		assert_int_equal(tsec_store_exists(t->store, &app, "certificates/acme/x/planted.crt",
						   &ex, &err), 0);
		assert_false(ex);
		check_value(t->store, "certificates/acme/x/x.crt", "ours");
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	assert_int_equal(system(cmd), 0);
}

/*
 * The root as written, not as realpath() resolves it (issue 49, item
 * 1): the configured root p2/link, p2 another user's, link a symbolic
 * link to a good root.  That user can point link anywhere (/etc) between
 * the check and the open, so the path is refused as written; so is a
 * link another user owns in a sticky folder on the way, and a link to a
 * root others can write.  Our own link to a good root is followed.
 * Before: every case but the last was accepted (the check looked only at
 * realpath()'s folders).
 */
static void test_store_root_as_written(void **state)
{
	char base[] = "/tmp/tsec-root-XXXXXX", path[512], to[512], cmd[600];
	struct tsec_error err;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_non_null(mkdtemp(base));
	snprintf(to, sizeof(to), "%s/good", base);
	assert_int_equal(mkdir(to, 0700), 0);
	/* Our own link to a good root: followed, accepted. */
	snprintf(path, sizeof(path), "%s/ours", base);
	assert_int_equal(symlink(to, path), 0);
	if (open_root(path, &err))
		fail_msg("our own link to a good root: %s", err.msg);
	/* The link in a folder another user owns: refused, naming it. */
	snprintf(path, sizeof(path), "%s/p2", base);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/p2/link", base);
	assert_int_equal(symlink(to, path), 0);
	snprintf(path, sizeof(path), "%s/p2", base);
	assert_int_equal(lchown(path, 65534, 65534), 0);
	snprintf(path, sizeof(path), "%s/p2/link", base);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "belongs to uid 65534"));
	/* ... and after that user points it at /etc. */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink("/etc", path), 0);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	/* A link another user owns, in a sticky folder others may write. */
	snprintf(path, sizeof(path), "%s/sticky", base);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chmod(path, 01777), 0);
	snprintf(path, sizeof(path), "%s/sticky/link", base);
	assert_int_equal(symlink(to, path), 0);
	assert_int_equal(lchown(path, 65534, 65534), 0);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "symbolic link uid 65534 owns"));
	/* Our link to a root others can write: the root is judged. */
	snprintf(path, sizeof(path), "%s/open", base);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chmod(path, 0777), 0);
	snprintf(path, sizeof(path), "%s/to-open", base);
	assert_int_equal(symlink("open", path), 0);
	assert_int_equal(open_root(path, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "others can write"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	assert_int_equal(system(cmd), 0);
}

/*
 * A folder inside the store that another user owns reads as planted, as
 * a file does (issue 49, item 2): a root-owned value inside a folder
 * owned by nobody was served (that user can swap what the folder holds).
 * Not served, not listed, not there for exists.
 */
static void test_store_planted_folder(void **state)
{
	struct tu_store *t = *state;
	char path[700];
	struct tsec_strlist l = { 0 };
	struct tsec_error err;
	char *v = NULL;
	size_t n;
	int ex = -1;

	if (geteuid() != 0)
		skip();
	/* Made by hand, as a value put before the folder changed hands (a
	 * folder the store has just looked in is judged again within a
	 * second: file_folders.c). */
	put(t->store, "certificates/acme/z/z.crt", "ours");
	plant(t->root, "certificates/acme/y/y.crt", "value");
	snprintf(path, sizeof(path), "%s/certificates/acme/y", t->root);
	assert_int_equal(chmod(path, 0700), 0);
	assert_int_equal(chown(path, 65534, 65534), 0);
	assert_int_equal(tsec_store_get(t->store, &app, "certificates/acme/y/y.crt", &v, &n, &err),
			 TSEC_EIO);
	assert_non_null(strstr(err.msg, "planted"));
	assert_null(v);
	assert_int_equal(tsec_store_exists(t->store, &app, "certificates/acme/y/y.crt", &ex, &err),
			 0);
	assert_false(ex);
	assert_int_equal(tsec_store_list(t->store, &app, "certificates/acme", true, &l, &err), 0);
	for (size_t i = 0; i < l.n; i++)
		if (strstr(l.v[i], "acme/y"))
			fail_msg("a planted folder listed: %s", l.v[i]);
	tsec_strlist_free(&l);
	/* Writable by others, though ours: planted too. */
	assert_int_equal(chown(path, 0, 0), 0);
	assert_int_equal(chmod(path, 0777), 0);
	assert_int_equal(tsec_store_get(t->store, &app, "certificates/acme/y/y.crt", &v, &n, &err),
			 TSEC_EIO);
	assert_null(v);
	assert_int_equal(chmod(path, 0700), 0);
	check_value(t->store, "certificates/acme/y/y.crt", "value");
	check_value(t->store, "certificates/acme/z/z.crt", "ours");
}

/* ---- The LocalCache's concurrency promises (issue 37, item 11) ---- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_root_trusted),
		cmocka_unit_test(test_store_root_as_written),
		cmocka_unit_test(test_store_planted_folder),
		cmocka_unit_test(test_store_planted_files),
		cmocka_unit_test(test_store_kept_folders),
		cmocka_unit_test(test_store_list_empty_and_again),
		cmocka_unit_test(test_store_reopen_recovers),
		cmocka_unit_test(test_store_sweep_other_pid_namespace),
		cmocka_unit_test(test_store_temporary_taken),
		cmocka_unit_test(test_store_slot_records),
		cmocka_unit_test(test_store_wide_group),
		cmocka_unit_test(test_store_dead_group_before_write),
		cmocka_unit_test(test_store_dead_group_cache),
		cmocka_unit_test(test_store_bad_input),
		cmocka_unit_test(test_store_lock_record_as_value),
		cmocka_unit_test(test_store_lock_other_boot),
		cmocka_unit_test(test_store_read_while_replaced),
		cmocka_unit_test(test_store_write_through_link),
	};
	return cmocka_run_group_tests_name("store: the disk", tests, setup, teardown);
}
