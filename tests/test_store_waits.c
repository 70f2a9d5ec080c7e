/*
 * The file store's waits behind a group being applied (issue 47): a load
 * and a write that find the commit lock held wait, but not for ever
 * (bounded on the injected clock), and a group committing goes before
 * the loads that arrive meanwhile.
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
 * A certificate's load waits for a group being applied (its renames hold
 * the store's commit lock, for microseconds), but not for ever: with a
 * process paused inside one (the test holds the lock), load_cert answers
 * "busy" once TSEC__FB_READ_WAIT_MS have passed on the injected clock,
 * and loads once the lock is let go.  Before, the wait had no end.
 */
/* The three files of domain's certificate, "c<tag>", "k<tag>" and
 * "m<tag>", as one group. */
static int put_cert(struct tsec_store *s, const char *domain, const char *tag)
{
	char k[3][256], v[3][16];
	struct tsec_put p[3];
	struct tsec_error err;

	for (int i = 0; i < 3; i++) {
		snprintf(k[i], sizeof(k[i]), "certificates/acme/%s/%s.%s", domain, domain,
			 i == 0 ? "crt" : i == 1 ? "key" : "json");
		snprintf(v[i], sizeof(v[i]), "%c%s", "ckm"[i], tag);
		p[i] = (struct tsec_put){ k[i], v[i], strlen(v[i]) };
	}
	return tsec_store_put_many(s, &app, p, 3, &err);
}

/* The store's commit flock, taken `how` by the test (as a group or a
 * load of another process would hold it); its descriptor. */
static int hold_commit(const struct tu_store *t, int how)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/.tsec-journal/.tsec-commit", t->root);
	assert_true((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) >= 0);
	assert_int_equal(flock(fd, how), 0);
	return fd;
}

/* A load_cert in a thread: its code, message and certificate. */
struct loader {
	struct tsec_store *store;
	const char *domain;
	atomic_int done;
	int rc;
	char msg[256], crt[16];
};

static void *load_one(void *arg)
{
	struct loader *l = arg;
	struct tsec_cert_files f;
	struct tsec_error err;

	l->rc = tsec_store_load_cert(l->store, &app, "acme", l->domain, &f, &err);
	if (l->rc) {
		snprintf(l->msg, sizeof(l->msg), "%s", err.msg);
	} else {
		snprintf(l->crt, sizeof(l->crt), "%s", f.cert);
		tsec_cert_files_free(&f);
	}
	atomic_store(&l->done, 1);
	return NULL;
}

static void test_store_load_waits_bounded(void **state)
{
	struct tu_store *t = *state;
	struct loader l = { .store = t->store, .domain = "held.org" };
	pthread_t th;
	int fd;

	assert_int_equal(put_cert(t->store, "held.org", "1"), 0);
	fd = hold_commit(t, LOCK_EX);
	assert_int_equal(pthread_create(&th, NULL, load_one, &l), 0);
	/* A second of the injected clock at a time, until it gives up. */
	TU_WAIT((tsec__clock_advance(1000), atomic_load(&l.done)));
	assert_true(atomic_load(&l.done));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(l.rc, TSEC_EBUSY);
	assert_non_null(strstr(l.msg, "commit lock"));
	close(fd);
	load_one(&l);
	assert_int_equal(l.rc, 0);
	assert_string_equal(l.crt, "c1");
}

/* A put in a thread: its code and message. */
struct putter {
	struct tsec_store *store;
	atomic_int done;
	int rc;
	char msg[256];
};

static void *put_one(void *arg)
{
	struct putter *p = arg;
	struct tsec_error err;

	p->rc = tsec_store_put(p->store, &app, "held/value", "new", 3, &err);
	if (p->rc)
		snprintf(p->msg, sizeof(p->msg), "%s", err.msg);
	atomic_store(&p->done, 1);
	return NULL;
}

/*
 * A write that must settle behind a paused holder of the commit lock
 * (the journal holds a record: a live writer's, here) waits a bounded
 * time, changes nothing, and says why, as a load does; once the lock is
 * free it goes through.
 */
static void test_store_write_waits_bounded(void **state)
{
	struct tu_store *t = *state;
	struct putter p = { .store = t->store };
	char live[4200];
	pthread_t th;
	int fd, lfd;

	put(t->store, "held/value", "old");
	snprintf(live, sizeof(live), "%s/.tsec-journal/tx-live", t->root);
	assert_true((lfd = open(live, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) >= 0);
	assert_int_equal(flock(lfd, LOCK_EX), 0);
	fd = hold_commit(t, LOCK_EX);
	assert_int_equal(pthread_create(&th, NULL, put_one, &p), 0);
	TU_WAIT((tsec__clock_advance(1000), atomic_load(&p.done)));
	assert_true(atomic_load(&p.done));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.rc, TSEC_EBUSY);
	assert_non_null(strstr(p.msg, "nothing was changed"));
	check_value(t->store, "held/value", "old");
	assert_int_equal(tu_count_litter(t->root), 0);
	close(fd);
	put_one(&p);
	assert_int_equal(p.rc, 0);
	check_value(t->store, "held/value", "new");
	unlink(live);
	close(lfd);
}

struct writer {
	struct tsec_store *store;
	int rc;
};

static void *put_cert_2(void *arg)
{
	struct writer *w = arg;

	w->rc = put_cert(w->store, "turn.org", "2");
	return NULL;
}

/* Whether a group has reached its commit point and not finished: an
 * intent record in the journal that ends in its "commit" line. */
static bool group_committing(const struct tu_store *t)
{
	char path[4200], text[4096];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "%s/.tsec-journal", t->root);
	if (!(d = opendir(path)))
		return false;
	while (!found && (e = readdir(d))) {
		FILE *f;
		size_t n;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/.tsec-journal/%s", t->root, e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
		text[n] = '\0';
		found = n >= 7 && !strcmp(text + n - 7, "commit\n");
	}
	closedir(d);
	return found;
}

/* Whether someone holds the journal's file `name` (flock). */
static bool held(const struct tu_store *t, const char *name)
{
	char path[4200];
	int fd, busy;

	snprintf(path, sizeof(path), "%s/.tsec-journal/%s", t->root, name);
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return false;
	busy = flock(fd, LOCK_EX | LOCK_NB) < 0;
	close(fd);
	return busy;
}

/*
 * A group waiting for the commit lock goes before the loads that come
 * after it.  With a load in (the test holds the lock shared, as a load
 * does while it opens its files) and a group waiting, a new load waits
 * for the group and reads what it wrote.  Before, the new load was let
 * in beside the first and read the old files, so a stream of
 * overlapping loads could hold a group back for ever.
 */
static void test_store_group_before_loads(void **state)
{
	struct tu_store *t = *state;
	struct writer w = { .store = t->store };
	struct loader l = { .store = t->store, .domain = "turn.org" };
	unsigned long waits;
	pthread_t wt, lt;
	int fd;

	assert_int_equal(put_cert(t->store, "turn.org", "1"), 0);
	fd = hold_commit(t, LOCK_SH);
	assert_int_equal(pthread_create(&wt, NULL, put_cert_2, &w), 0);
	/* The group is past its commit point, waiting for the lock in the
	 * turnstile (file_commit.c). */
	TU_WAIT(group_committing(t) && held(t, ".tsec-turnstile"));
	assert_true(group_committing(t) && held(t, ".tsec-turnstile"));
	waits = atomic_load(&tsec__fb_read_waits);
	assert_int_equal(pthread_create(&lt, NULL, load_one, &l), 0);
	/* The load waits (or, as before, reads at once). */
	TU_WAIT(atomic_load(&tsec__fb_read_waits) > waits || atomic_load(&l.done));
	close(fd);
	assert_int_equal(pthread_join(wt, NULL), 0);
	assert_int_equal(w.rc, 0);
	assert_int_equal(pthread_join(lt, NULL), 0);
	assert_int_equal(l.rc, 0);
	assert_string_equal(l.crt, "c2");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_load_waits_bounded),
		cmocka_unit_test(test_store_write_waits_bounded),
		cmocka_unit_test(test_store_group_before_loads),
	};
	return cmocka_run_group_tests_name("store: waits behind a commit", tests, setup, teardown);
}
