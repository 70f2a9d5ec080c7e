/*
 * libFuzzer: etcd's answers to the backend's calls (issue 52, item 8).  A
 * scripted member on loopback (tests/httpfake.c) answers every request
 * 200 with the input (text: cut at its first NUL); the first byte picks
 * what the store asks: get, exists, stat, list flat or recursive, put,
 * delete, move.  Each call must come back, with a value or an error,
 * and nothing the fake wrote may load: it cannot seal a value.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/httpfake.h"
#include "tinysecurity/bus.h"
#include "tinysecurity/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tu_fake fake;
static struct tsec_bus *bus;
static struct tsec_store *store;
static const struct tsec_principal app = { .id = { "svc:app", 7 } };

static void stop(void)
{
	tsec_store_close(&store);
	tsec_bus_free(&bus);
	tu_fake_stop(&fake);
}

static void start(void)
{
	static const struct tu_fake_rule rule = { "/", 200, "{}", 0 };
	struct tsec_store_opts o = { .backend = "etcd", .prefix = "fz", .timeout_ms = 50 };
	struct tsec_error err;
	static char ep[64];

	if (tu_fake_start(&fake, &rule, 1))
		abort();
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", fake.port);
	o.endpoints = ep;
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load_file(bus, "policy", TSEC_FUZZ_MODULE, "tests/data/store_policy.json",
			       &err) ||
	    tsec_store_open_opts(&store, &o, bus, NULL, &err))
		abort();
	atexit(stop);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *keys[] = { "certificates/a/b.crt", "acme/x", "locks/l" };
	struct tsec_error err;
	struct tsec_strlist l = { 0 };
	struct tsec_stat st;
	struct tsec_put p = { "certificates/a/b.crt", "v", 1 };
	char *body, *v = NULL;
	size_t n = 0;
	int ex = 0;
	unsigned op;

	if (!store)
		start();
	if (!size)
		return 0;
	op = data[0];
	if (!(body = strndup((const char *)data + 1, size - 1)))
		return 0;
	pthread_mutex_lock(&fake.mu);
	fake.rule[0].body = body;
	fake.nheads = 0;
	for (int i = 0; i < TU_FAKE_HEADS; i++) {
		free(fake.heads[i]);
		fake.heads[i] = NULL;
	}
	pthread_mutex_unlock(&fake.mu);
	switch (op % 8) {
	case 0:
		if (tsec_store_get(store, &app, keys[op / 8 % 3], &v, &n, &err) == 0)
			abort();     /* the fake cannot seal a value */
		break;
	case 1:
		tsec_store_exists(store, &app, keys[op / 8 % 3], &ex, &err);
		break;
	case 2:
		tsec_store_stat(store, &app, "certificates/a", &st, &err);
		break;
	case 3:
	case 4:
		if (tsec_store_list(store, &app, "certificates", op % 8 == 4, &l, &err) == 0)
			tsec_strlist_free(&l);
		break;
	case 5:
		tsec_store_put_many(store, &app, &p, 1, &err);
		break;
	case 6:
		tsec_store_delete(store, &app, "certificates/a/b.crt", op & 8, &err);
		break;
	case 7:
		tsec_store_move(store, &app, "certificates/a/b.crt", "certificates/a/c.crt", &err);
		break;
	}
	free(v);
	pthread_mutex_lock(&fake.mu);
	fake.rule[0].body = "{}";
	pthread_mutex_unlock(&fake.mu);
	free(body);
	return 0;
}
