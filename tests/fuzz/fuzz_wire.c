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
	tsec__held_init(&d.held, d.cfg.ncallers);
	d.st.by_method = calloc(tsec__nmethods, sizeof(*d.st.by_method));
	d.st.hist = calloc(tsec__nmethods, sizeof(*d.st.hist));
	if (!d.st.by_method || !d.st.hist || tsec_bus_new(&d.bus) ||
	    tsec_bus_load_file(d.bus, "policy", TSEC_FUZZ_MODULE, "examples/policy.json", &err) ||
	    tsec_store_open_opts(&d.store, &o, d.bus, NULL, &err))
		abort();
	/* A value for a store.get with frames to find, whatever ran before. */
	{
		struct tsec_principal who = { .id = tsec_str_c("svc:acme-issuer") };

		if (tsec_store_put(d.store, &who, "certificates/acme/a.example/seed.json", "{}", 2,
				   &err))
			abort();
	}
}

/*
 * An input with a NUL (never in JSON text) is a message with binary
 * frames: the JSON before the first NUL, up to TSEC_D_MAX_FRAMES frames
 * between the NULs after it (none when nothing follows it), answered as
 * a worker answers them, with frames asked back.  Every such message gets a reply, and a reply's
 * frames are ones its JSON names.
 */
static void with_frames(const uint8_t *data, size_t size, const uint8_t *nul)
{
	struct tsec__frames in = { 0 }, out;
	const uint8_t *p = nul + 1, *end = data + size;
	struct tsec__run run = { 0 };
	char *reply;

	/* "JSON\0" alone: no frames, its values asked back as frames. */
	while (p < end && in.n < TSEC_D_MAX_FRAMES) {
		const uint8_t *q = memchr(p, 0, (size_t)(end - p));

		in.ptr[in.n] = (void *)p;
		in.len[in.n++] = (size_t)((q ? q : end) - p);
		if (!q)
			break;
		p = q + 1;
	}
	/* As a worker runs a call with frames: it never parks. */
	reply = tsec__dispatch_step(&d, 0, (const char *)data, (size_t)(nul - data), &in, &run,
				    &out);
	if (!reply || run.parked)
		__builtin_trap();
	if (out.n && (!reply || !strstr(reply, "_frame\":")))
		__builtin_trap();
	tsec__frames_free(&out);
	free(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	char *reply;

	int took, tree_took;

	if (!d.bus)
		start();
	/* The tree-less Check reader agrees with jansson (issue 21), and
	 * the tree reader builds jansson's tree (issue 36): on the JSON
	 * part of a message with frames. */
	if (tu_wire_diff((const char *)data, nul ? (size_t)(nul - data) : size, &took) ||
	    tu_tree_diff((const char *)data, nul ? (size_t)(nul - data) : size, &tree_took))
		__builtin_trap();
	if (nul) {
		with_frames(data, size, nul);
		return 0;
	}
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
