/*
 * libFuzzer: the file backend's on-disk formats.  The input, split at
 * its first NUL, becomes a lock file and a transaction record; the store
 * then opens (recovery reads the record and the lock files) and takes,
 * renews and releases that lock.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tinysecurity/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"all\", \"effect\": \"allow\","
	" \"action\": [\"*\"], \"resource\": [\"**\"]}]}";
static struct tsec_bus *bus;
static char root[64];

static void put(const char *rel, const uint8_t *p, size_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (!(f = fopen(path, "w")))
		abort();
	fwrite(p, 1, n, f);
	fclose(f);
}

/* The run's folder goes when the fuzzer exits (libFuzzer ends by exit()). */
static void remove_root(void)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *cut = memchr(data, 0, size);
	size_t a = cut ? (size_t)(cut - data) : size;
	struct tsec_principal who = { .id = tsec_str_c("svc:x") };
	struct tsec_store *s = NULL;
	struct tsec_error err;
	struct tsec_lock lk;
	char dirs[128];

	if (!bus) {
		snprintf(root, sizeof(root), "/tmp/tsec-fuzz-store-%ld", (long)getpid());
		if (tsec_bus_new(&bus) ||
		    tsec_bus_load(bus, "policy", TSEC_FUZZ_MODULE, policy, strlen(policy), &err))
			abort();
		atexit(remove_root);
	}
	snprintf(dirs, sizeof(dirs), "%s/locks", root);
	mkdir(root, 0700);
	mkdir(dirs, 0700);
	snprintf(dirs, sizeof(dirs), "%s/.tsec-journal", root);
	mkdir(dirs, 0700);
	put("locks/f.lock", data, a);
	put(".tsec-journal/tx-fuzz", cut ? cut + 1 : data, cut ? size - a - 1 : 0);
	if (tsec_store_open(&s, root, bus, NULL, &err))
		return 0;
	if (tsec_lock_try_acquire(s, &who, "f", 1000, &lk, &err) == 0) {
		tsec_lock_renew(s, &who, &lk, 2000, &err);
		tsec_lock_release(s, &who, &lk, &err);
	}
	tsec_store_close(&s);
	return 0;
}
