/*
 * libFuzzer: archive unpacking (verify_module --archive) on any bytes,
 * under tight bounds so a bomb is stopped quickly.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "tinysecurity/module.h"
#include "verifier/verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

/* The run's folder goes when the fuzzer exits (libFuzzer ends by exit()). */
static void remove_dir(void)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/a.tar", dir);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char url[80];
	struct tsec_verify_opts o = {
		.policy = "examples/policy.json", .calls = 1, .warmup = 0,
		.max_unpacked = 4u << 20, .max_entry = 1u << 20, .max_entries = 64,
		.verifier_build = TSEC_BUILD_THIS,
	};
	unsigned char md[32];
	unsigned int l;
	char hex[65], path[128];
	FILE *f, *null;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/tsec-fuzz-archive-%ld", (long)getpid());
		snprintf(url, sizeof(url), "file://%s", dir);
		if (mkdir(dir, 0700) && access(dir, W_OK))
			abort();
		atexit(remove_dir);
	}
	snprintf(path, sizeof(path), "%s/a.tar", dir);
	if (!(f = fopen(path, "wb")))
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	EVP_Digest(data, size, md, &l, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	null = fopen("/dev/null", "w");
	tsec_verify_archive(&o, url, "a.tar", hex, null, null);
	fclose(null);
	return 0;
}
