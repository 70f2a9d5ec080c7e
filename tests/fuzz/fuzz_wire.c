/*
 * libFuzzer: wire messages through the daemon's real handler
 * (tsec__dispatch), as an authenticated caller, with a store on the
 * memory backend.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/daemon/daemon.h"
#include "tests/wire_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tsec__daemon d;

static void start(void)
{
	struct tsec_store_opts o = { .backend = "memory" };
	struct tsec_error err;

	if ((tsec__say_fd = open("/dev/null", O_WRONLY)) < 0)
		abort();
	snprintf(d.cfg.callers[0].principal, sizeof(d.cfg.callers[0].principal), "svc:acme-issuer");
	d.cfg.callers[0].uid = 0;
	d.cfg.callers[0].admin = 1;
	d.cfg.ncallers = 1;
	d.cfg.policy = strdup("examples/policy.json");
	d.cfg.state_dir = strdup("/tmp");
	d.cfg.allow_unsigned = 1;
	pthread_mutex_init(&d.reload_lock, NULL);
	pthread_mutex_init(&d.policy_lock, NULL);
	tsec__held_init(&d.held);
	d.st.by_method = calloc(tsec__nmethods, sizeof(*d.st.by_method));
	d.st.hist = calloc(tsec__nmethods, sizeof(*d.st.hist));
	if (!d.st.by_method || !d.st.hist || tsec_bus_new(&d.bus) ||
	    tsec_bus_load_file(d.bus, "policy", TSEC_FUZZ_MODULE, "examples/policy.json", &err) ||
	    tsec_store_open_opts(&d.store, &o, d.bus, NULL, &err))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *reply;

	int took;

	if (!d.bus)
		start();
	/* The tree-less Check reader agrees with jansson (issue 21). */
	if (tu_wire_diff((const char *)data, size, &took))
		__builtin_trap();
	reply = tsec__dispatch(&d, 0, (const char *)data, size);
	if (!reply)
		__builtin_trap(); /* every message gets a reply */
	if (took) {
		/* The fast path's reply is the one jansson's path writes. */
		char *tree = tsec__dispatch_tree(&d, 0, (const char *)data, size);

		if (!tree || strcmp(reply, tree))
			__builtin_trap();
		free(tree);
	}
	free(reply);
	tsec__is_inline((const char *)data, size);
	return 0;
}
