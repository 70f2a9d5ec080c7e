/*
 * libFuzzer: the remote certificate store's on-store formats.  The input,
 * split at its first NUL, becomes a certificate's reference (under all
 * three keys), its generation record, and the bytes of the blob it
 * names; the store then loads the certificate, reads its presence and
 * sweeps.  Nothing may crash or leak, nothing the fuzzer writes may load
 * (it cannot make a MAC), and the fast reference reader must read what
 * jansson reads.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "broker/remote/remote_private.h"
#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "tinysecurity/remote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"all\", \"effect\": \"allow\","
	" \"action\": [\"*\"], \"resource\": [\"**\"]}]}";
static struct tsec_bus *bus;
static struct tsec_store *store;
static struct tsec_remote *remote;
static struct tsec_principal who;
static char keyfile[64];

static void remove_key(void)
{
	unlink(keyfile);
}

static void start(void)
{
	struct tsec_store_opts so = { .backend = "memory" };
	struct tsec_remote_opts ro = { .blobs = "memory:", .blob_max = 65536 };
	struct tsec_error err;
	FILE *f;
	int fd;

	snprintf(keyfile, sizeof(keyfile), "/tmp/tsec-fuzz-remote-XXXXXX");
	if ((fd = mkstemp(keyfile)) < 0 || !(f = fdopen(fd, "w")))
		abort();
	fputs("0f0e0d0c0b0a09080706050403020100000102030405060708090a0b0c0d0e0f\n", f);
	fclose(f);
	atexit(remove_key);
	ro.key_file = keyfile;
	who.id = tsec_str_c("svc:fuzz");
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", TSEC_FUZZ_MODULE, policy, strlen(policy), &err) ||
	    tsec_store_open_opts(&store, &so, bus, NULL, &err) ||
	    tsec_remote_open(&remote, store, &ro, &err)) {
		fprintf(stderr, "fuzz_remote: %s\n", err.msg);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *cut = memchr(data, 0, size);
	size_t a = cut ? (size_t)(cut - data) : size;
	const char *keys[3] = { "certificates/acme/f.example/f.example.crt",
				"certificates/acme/f.example/f.example.key",
				"certificates/acme/f.example/f.example.json" };
	struct tsec__blobs *b;
	struct tsec_cert_files got;
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	char name[TSEC__BLOB_NAME_MAX + 1] = "crt/0000000000000000000000000000000000000000000000000000000000000000";
	int ex;

	if (!remote)
		start();
	b = tsec__remote_blobs(remote);
	if (tsec__remote_ref_agree((const char *)data, a))
		abort();
	/* The reference under the three keys; the blob where it points. */
	{
		json_t *j = json_loadb((const char *)data, a, 0, NULL);
		const char *n = json_string_value(json_object_get(j, "blob"));
		if (n && tsec__blob_name_ok(n))
			snprintf(name, sizeof(name), "%s", n);
		json_decref(j);
	}
	for (int i = 0; i < 3; i++)
		tsec_store_put(store, &who, keys[i], data, a, &err);
	{
		struct tsec__skey sk;
		struct tsec__bput p;
		if (tsec__skey_parse_any(".tsec-remote/certificates/acme/f.example", &sk, &err))
			abort();
		p = (struct tsec__bput){ &sk, data, a };
		store->be->ops->put_many(store->be, &p, 1, NULL, NULL, &err);
	}
	b->ops->del(b, name, &err);
	if (cut)
		b->ops->put_new(b, name, cut + 1, size - a - 1, &err);
	if (tsec_remote_load(remote, &who, "acme", "f.example", &got, &err) == 0)
		abort();   /* a forgery loaded */
	tsec_remote_exists(remote, &who, "acme", "f.example", &ex, &err);
	tsec_remote_sweep(remote, 0, &sw, &err);
	return 0;
}
