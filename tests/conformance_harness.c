/* The store conformance suites' harness (tests/conformance_harness.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/conformance_harness.h"
#include "tests/wait.h"


const struct variant *cur;
struct tsec_principal app;
struct tu_server etcd, redis;
char cur_prefix[64];                /* the fleet backends' prefix of this test */

int setup(void **state)
{
	struct tu_store *t = calloc(1, sizeof(*t));
	static int serial;
	char *prefix = cur_prefix;

	app = tu_who("svc:app");
	if (!strcmp(cur->backend, "etcd") || !strcmp(cur->backend, "redis")) {
		/* Each test in a prefix of its own on the shared server. */
		struct tsec_store_opts o = {
			.backend = cur->backend, .cache_bytes = cur->cache_bytes,
			.endpoints = cur->backend[0] == 'e' ? etcd.endpoints : redis.endpoints,
			.prefix = prefix,
			/* One machine, one clock: no allowance for skew. */
		};
		snprintf(cur_prefix, sizeof(cur_prefix), "conf/%d-%d", (int)getpid(), ++serial);
		tu_store_open_with(t, &o);
	} else {
		tu_store_open_on(t, cur->backend, cur->cache_bytes);
	}
	*state = t;
	return 0;
}

int teardown(void **state)
{
	tsec__wall_skew_ms = 0;          /* a failed clock test leaves none behind */
	tu_store_close(*state);
	free(*state);
	return 0;
}

/*
 * Ends a lease: the injected clock moves past it, which ends it on every
 * backend whose leases this process times (file, memory, etcd's
 * deadline, its keeper); redis times its own, so its lock key goes as it
 * does at the lease's end (tu_redis_lease_end).  Then waits until a
 * fenced write is refused (on a key of its own).
 */
void lease_ends(struct tsec_store *s, const struct tsec_lock *lk)
{
	struct tsec_put probe = { .key = "probe/lease", .value = "x", .len = 1 };
	struct tsec_error err;
	int rc = 0;

	tsec__clock_advance((int64_t)(lk->expires_ms - tsec__wall_ms()) + 1);
	if (!strcmp(cur->backend, "redis"))
		tu_redis_lease_end(&redis, cur_prefix, lk->name);
	TU_WAIT((rc = tsec_store_put_fenced(s, &app, lk, &probe, 1, &err)) ==
		TSEC_ENOTOWNER);
	assert_int_equal(rc, TSEC_ENOTOWNER);
}

void put(struct tsec_store *s, const char *k, const char *v)
{
	struct tsec_error err;

	if (tsec_store_put(s, &app, k, v, strlen(v), &err))
		fail_msg("put %s: %s", k, err.msg);
}

void want(struct tsec_store *s, const char *k, const char *v)
{
	struct tsec_error err;
	char *got;
	size_t n;

	if (tsec_store_get(s, &app, k, &got, &n, &err))
		fail_msg("get %s: %s (want '%s')", k, err.msg, v);
	assert_int_equal(n, strlen(v));
	assert_string_equal(got, v);
	free(got);
}

void absent(struct tsec_store *s, const char *k)
{
	struct tsec_error err;
	char *got;
	size_t n;

	assert_int_equal(tsec_store_get(s, &app, k, &got, &n, &err), TSEC_ENOENT);
	assert_null(got);
}


int conf_run(const char *suite, const struct CMUnitTest *tests, size_t n)
{
	static const struct variant variants[] = {
		{ "file", 0, "file" },
		{ "memory", 0, "memory" },
		{ "file", 1 << 20, "LocalCache over file" },
		{ "memory", 1 << 20, "LocalCache over memory" },
		{ "etcd", 0, "etcd" },
		{ "etcd", 1 << 20, "LocalCache over etcd" },
		{ "redis", 0, "redis" },
		{ "redis", 1 << 20, "LocalCache over redis" },
	};
	const char *names[16];
	size_t nb = tsec__backend_names(0, names, 16);
	int failed = 0;

	/* HACKING's recipe for a backend, checked: every backend of the
	 * registry runs here plain and under the LocalCache. */
	for (size_t b = 0; b < nb; b++) {
		int plain = 0, cached = 0;

		for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++)
			if (!strcmp(variants[v].backend, names[b]))
				*(variants[v].cache_bytes ? &cached : &plain) = 1;
		if (!plain || !cached) {
			fprintf(stderr, "%s: the backend %s has no variant%s in conf_run "
				"(tests/conformance_harness.c; docs/HACKING.md, \"A backend\")\n",
				suite, names[b], plain ? " under the LocalCache" : "");
			return 1;
		}
	}
	/* The real servers, on loopback, for the whole run. */
	if (tu_etcd_start(&etcd, 1) || tu_redis_start(&redis)) {
		fprintf(stderr, "%s: cannot start etcd and redis-server "
			"(scripts/deps.sh servers installs them)\n", suite);
		tu_server_stop(&etcd);
		tu_server_stop(&redis);
		return 1;
	}
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		char name[128];

		cur = &variants[v];
		snprintf(name, sizeof(name), "%s: %s", suite, cur->name);
		failed += _cmocka_run_group_tests(name, tests, n, NULL, NULL);
	}
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	return failed;
}
