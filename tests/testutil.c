#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

struct tsec_bus *tu_bus_with_policy_or_null(const char *policy_path)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err;

	if (tsec_bus_new(&bus) || tsec_bus_load_file(bus, "policy", MODULE_PATH, policy_path, &err))
		tsec_bus_free(&bus);
	return bus;
}

struct tsec_bus *tu_bus_with_policy(const char *policy_path)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err = { 0 };

	assert_int_equal(tsec_bus_new(&bus), 0);
	if (tsec_bus_load_file(bus, "policy", MODULE_PATH, policy_path, &err)) {
		fprintf(stderr, "load failed: %s: %s\n", err.where, err.msg);
		fail();
	}
	return bus;
}

struct tsec_bus *tu_bus_with_text(const char *text)
{
	struct tsec_bus *bus = NULL;
	struct tsec_error err = { 0 };

	assert_int_equal(tsec_bus_new(&bus), 0);
	tsec_bus_set_log(bus, NULL, NULL);
	if (tsec_bus_load(bus, "policy", MODULE_PATH, text, strlen(text), &err)) {
		fprintf(stderr, "load failed: %s: %s\n", err.where, err.msg);
		fail();
	}
	return bus;
}

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct tsec_principal tu_who(const char *id)
{
	struct tsec_principal p = { .id = tsec_str_c(id) };
	return p;
}

void tu_store_open_on(struct tu_store *t, const char *backend, size_t cache_bytes)
{
	char tmpl[] = "/tmp/tsec-test-XXXXXX";
	struct tsec_store_opts o = { .backend = backend, .cache_bytes = cache_bytes };
	struct tsec_error err;

	assert_non_null(mkdtemp(tmpl));
	t->dir = strdup(tmpl);
	assert_true(asprintf(&t->root, "%s/store", tmpl) > 0);
	t->bus = tu_bus_with_policy("tests/data/store_policy.json");
	o.root = t->root;
	if (tsec_store_open_opts(&t->store, &o, t->bus, NULL, &err)) {
		fprintf(stderr, "store open: %s\n", err.msg);
		fail();
	}
}

void tu_store_open_with(struct tu_store *t, const struct tsec_store_opts *opts)
{
	char tmpl[] = "/tmp/tsec-test-XXXXXX";
	struct tsec_error err;

	assert_non_null(mkdtemp(tmpl));
	t->dir = strdup(tmpl);
	assert_true(asprintf(&t->root, "%s/store", tmpl) > 0);
	t->bus = tu_bus_with_policy("tests/data/store_policy.json");
	if (tsec_store_open_opts(&t->store, opts, t->bus, NULL, &err)) {
		fprintf(stderr, "store open: %s\n", err.msg);
		fail();
	}
}

void tu_store_open(struct tu_store *t)
{
	tu_store_open_on(t, "file", 0);
}

void tu_store_close(struct tu_store *t)
{
	char *cmd;

	tsec_store_close(&t->store);
	tsec_bus_free(&t->bus);
	assert_true(asprintf(&cmd, "rm -rf '%s'", t->dir) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(t->root);
	free(t->dir);
}

struct snap {
	char *buf;
	size_t len, cap;
};

static void snap_add(struct snap *s, const char *line)
{
	size_t n = strlen(line);
	if (s->len + n + 1 > s->cap) {
		s->cap = (s->len + n + 1) * 2;
		s->buf = realloc(s->buf, s->cap);
		assert_non_null(s->buf);
	}
	memcpy(s->buf + s->len, line, n + 1);
	s->len += n;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void snap_dir(struct snap *s, const char *path, const char *rel)
{
	DIR *d = opendir(path);
	struct dirent *e;
	char *names[4096];
	size_t n = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && n < 4096)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, n, sizeof(names[0]), cmp_names);
	for (size_t i = 0; i < n; i++) {
		char full[4096], r[4096], line[8192];
		struct stat sb;
		snprintf(full, sizeof(full), "%s/%s", path, names[i]);
		snprintf(r, sizeof(r), "%s/%s", rel, names[i]);
		if (lstat(full, &sb) < 0)
			continue;
		if (S_ISDIR(sb.st_mode)) {
			snprintf(line, sizeof(line), "d %o %s\n", sb.st_mode & 07777, r);
			snap_add(s, line);
			snap_dir(s, full, r);
		} else {
			unsigned long long h = 1469598103934665603ull;
			int c;
			FILE *f = fopen(full, "rb");
			while (f && (c = fgetc(f)) != EOF)
				h = (h ^ (unsigned)c) * 1099511628211ull;
			if (f)
				fclose(f);
			snprintf(line, sizeof(line), "f %o %lld %llx %s\n", sb.st_mode & 07777,
				 (long long)sb.st_size, h, r);
			snap_add(s, line);
		}
		free(names[i]);
	}
}

char *tu_snapshot(const char *path)
{
	struct snap s = { NULL, 0, 0 };
	snap_add(&s, "");
	snap_dir(&s, path, "");
	return s.buf;
}

static int count_dir(const char *path, const char *prefix)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char full[4096];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!strncmp(e->d_name, prefix, strlen(prefix)))
			n++;
		snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
		if (e->d_type == DT_DIR)
			n += count_dir(full, prefix);
	}
	closedir(d);
	return n;
}

int tu_count_prefixed(const char *path, const char *prefix)
{
	return count_dir(path, prefix);
}

/* Owner files (.tsec-journal/.tsec-owner-*) of stores open now: their
 * flock is held. */
static int live_owners(const char *journal)
{
	DIR *d = opendir(journal);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		int fd;
		if (strncmp(e->d_name, ".tsec-owner-", 12) ||
		    (fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK)
			n++;
		close(fd);
	}
	closedir(d);
	return n;
}

/* Records in the journal no open store holds (a closed store's record
 * slots, a dead writer's record): their flock is free. */
static int free_records(const char *journal)
{
	DIR *d = opendir(journal);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		int fd;
		if (e->d_name[0] == '.' ||
		    (fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		if (flock(fd, LOCK_SH | LOCK_NB) == 0)
			n++;
		close(fd);
	}
	closedir(d);
	return n;
}

/* What belongs to the store and is always there: the journal folder, its
 * commit lock, the owner files of open stores and their records.
 * Anything else named ".tsec-", and a record no open store holds, is
 * litter. */
int tu_count_litter(const char *root)
{
	char journal[4096];

	int n = count_dir(root, ".tsec-");

	snprintf(journal, sizeof(journal), "%s/.tsec-journal", root);
	if (access(journal, F_OK) == 0) /* the folder, its lock files, open stores' owners */
		n += free_records(journal) -
		     (1 + count_dir(journal, ".tsec-commit") + count_dir(journal, ".tsec-turnstile") +
		      live_owners(journal));
	snprintf(journal, sizeof(journal), "%s/.tsec-locks", root);
	if (access(journal, F_OK) == 0)
		n -= 1;                  /* the locks' folder, not litter */
	return n;
}

void tu_put(struct tsec_store *s, const struct tsec_principal *who, const char *key,
	    const char *value)
{
	struct tsec_error err;

	if (tsec_store_put(s, who, key, value, strlen(value), &err))
		fail_msg("put %s: %s", key, err.msg);
}

void tu_want(struct tsec_store *s, const struct tsec_principal *who, const char *key,
	     const char *want)
{
	struct tsec_error err;
	char *v;
	size_t n;

	if (tsec_store_get(s, who, key, &v, &n, &err))
		fail_msg("get %s: %s", key, err.msg);
	assert_int_equal(n, strlen(want));
	assert_string_equal(v, want);
	free(v);
}

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

static atomic_bool interrupting;
static atomic_long interruptions;
static pthread_t interrupted, interrupter_thread;
static struct sigaction interrupt_old;

static void on_interrupt(int sig)
{
	(void)sig;
	atomic_fetch_add(&interruptions, 1);
}

static void *interrupter(void *arg)
{
	(void)arg;
	while (atomic_load(&interrupting)) {
		pthread_kill(interrupted, SIGUSR2);
		sched_yield();
	}
	return NULL;
}

void tu_interrupt_start(void)
{
	struct sigaction sa = { .sa_handler = on_interrupt };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, &interrupt_old);
	atomic_store(&interruptions, 0);
	atomic_store(&interrupting, true);
	interrupted = pthread_self();
	if (pthread_create(&interrupter_thread, NULL, interrupter, NULL)) {
		atomic_store(&interrupting, false);
		sigaction(SIGUSR2, &interrupt_old, NULL);
	}
}

long tu_interrupt_stop(void)
{
	if (atomic_exchange(&interrupting, false)) {
		pthread_join(interrupter_thread, NULL);
		sigaction(SIGUSR2, &interrupt_old, NULL);
	}
	return atomic_load(&interruptions);
}

/* Runs a shell command; its exit status, output in out (if given). */
int tu_sh_out(char *out, size_t cap, const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	FILE *p;
	size_t n = 0;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	assert_non_null(p = popen(cmd, "r"));
	if (out) {
		n = fread(out, 1, cap - 1, p);
		out[n] = '\0';
	}
	{
		/* The rest read too: a command cut off would die of SIGPIPE. */
		char sink[4096];
		while (fread(sink, 1, sizeof(sink), p) > 0)
			;
	}
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
