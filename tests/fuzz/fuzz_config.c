/* libFuzzer: the broker's configuration file, any bytes. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "broker/daemon/daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tsec__config c;
static char path[64];

/* The run's file goes when the fuzzer exits (libFuzzer ends by exit()). */
static void remove_file(void)
{
	unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec_error err;
	FILE *f;
	int fd;

	if (!path[0]) {
		snprintf(path, sizeof(path), "/tmp/tsec-fuzz-config-%ld.json", (long)getpid());
		if ((tsec__say_fd = open("/dev/null", O_WRONLY)) < 0)
			abort();
		atexit(remove_file);
	}
	/* Private, as a configuration holding a secret key must be. */
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
	    !(f = fdopen(fd, "w")))
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	if (tsec__config_load(path, &c, &err) == 0)
		tsec__config_free(&c);
	return 0;
}
