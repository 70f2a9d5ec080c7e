/* Helpers shared by the tests that go through the bus. */
#ifndef TSEC_TESTUTIL_H
#define TSEC_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tinysecurity/bus.h"

#include <stdio.h>

/* Each line a suite prints reaches the log at once (stdout is a pipe
 * there), so a suite killed for hanging has named the case it was in. */
__attribute__((constructor)) static void tu_line_buffered(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

#define MODULE_PATH TSEC_BUILD_DIR "/libtinysecurity_module.so"
#define LIBRARY_PATH TSEC_BUILD_DIR "/libtinysecurity.so"
#define FIXTURE(name) TSEC_BUILD_DIR "/fixtures/" name ".so"

/* A new bus with the real module on "policy" loaded from a policy file. */
struct tsec_bus *tu_bus_with_policy(const char *policy_path);
/* The same, NULL when the policy does not load. */
struct tsec_bus *tu_bus_with_policy_or_null(const char *policy_path);

/* The same with policy text. */
struct tsec_bus *tu_bus_with_text(const char *text);

#include "tinysecurity/store.h"

/* A principal with no roles. */
struct tsec_principal tu_who(const char *id);

/* A new temporary folder (free() the path) and a store on it, checked
 * through a new bus loaded with tests/data/store_policy.json. */
struct tu_store {
	char *dir;                   /* the test's temporary folder */
	char *root;                  /* dir/store */
	struct tsec_bus *bus;
	struct tsec_store *store;
};

void tu_store_open(struct tu_store *t);
/* The same on a backend ("file", "memory"), with a LocalCache of
 * cache_bytes when not 0. */
void tu_store_open_on(struct tu_store *t, const char *backend, size_t cache_bytes);
/* The same with any options (dir is made, root unused). */
void tu_store_open_with(struct tu_store *t, const struct tsec_store_opts *o);
void tu_store_close(struct tu_store *t);

/* Puts key = value as who; fails the test on an error. */
void tu_put(struct tsec_store *s, const struct tsec_principal *who, const char *key,
	    const char *value);
/* Reads key as who; fails the test unless it holds want. */
void tu_want(struct tsec_store *s, const struct tsec_principal *who, const char *key,
	     const char *want);

/*
 * Describes every file and folder below path (names, modes, sizes,
 * contents' hash), sorted, into a new string (free() it): two calls
 * compare equal iff nothing changed.
 */
char *tu_snapshot(const char *path);

/* Counts entries below path whose name starts with prefix. */
int tu_count_prefixed(const char *path, const char *prefix);
/* Names starting with ".tsec-" under a store's root, less the journal
 * folder and its commit lock: temporaries, records, guards, backups. */
int tu_count_litter(const char *root);

/*
 * A host's signals during calls: a thread sends the calling thread
 * SIGUSR2 (a handler without SA_RESTART, as Go's runtime preempts a
 * thread in a cgo call with SIGURG) as fast as it can, until
 * tu_interrupt_stop, which returns how many arrived.
 */
void tu_interrupt_start(void);
long tu_interrupt_stop(void);

/* Runs a shell command (its stderr with its stdout): its exit status,
 * or -1 when it did not exit; the first cap - 1 bytes of its output into
 * out (if given), the rest read and dropped. */
int tu_sh_out(char *out, size_t cap, const char *fmt, ...);

#endif
