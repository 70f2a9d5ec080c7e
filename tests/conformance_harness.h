/*
 * The store conformance suites' harness (tests/test_conformance.c: values,
 * folders, groups, records, the feed; tests/test_conformance_locks.c:
 * locks, fences, deadlines, waiters): the backends each suite runs on,
 * their servers, a store per case and the helpers the cases share.
 */
#ifndef TSEC_TESTS_CONFORMANCE_HARNESS_H
#define TSEC_TESTS_CONFORMANCE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/servers.h"
#include "tests/testutil.h"

struct variant {
	const char *backend;
	size_t cache_bytes;
	const char *name;
};

extern const struct variant *cur;
extern struct tsec_principal app;
extern struct tu_server etcd, redis;
extern char cur_prefix[64];

int setup(void **state);
int teardown(void **state);
void lease_ends(struct tsec_store *s, const struct tsec_lock *lk);
void put(struct tsec_store *s, const char *k, const char *v);
void want(struct tsec_store *s, const char *k, const char *v);
void absent(struct tsec_store *s, const char *k);

/* Runs tests[0..n) once on every backend and over a LocalCache on each,
 * the servers started for the run (suite names it in what it says); how
 * many groups failed, or 1 when the servers could not start. */
int conf_run(const char *suite, const struct CMUnitTest *tests, size_t n);

#endif
