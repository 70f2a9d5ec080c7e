/*
 * tinysecurity module ABI.
 *
 * A module is a shared object exporting exactly one symbol,
 * TSEC_MODULE_ENTRY_NAME, of type tsec_module_entry_fn.  The host calls it
 * once with its API table and gets back a const descriptor that lives as
 * long as the module is loaded.  Both tables are versioned: the major
 * changes only on an incompatible change, and new fields are only ever
 * appended, with `size` telling the reader how much the writer knew.
 *
 * Calling convention for every function pointer below:
 * - requests are borrowed for the call only;
 * - responses go into caller-owned memory; nothing is allocated across the
 *   boundary on the hot path (evaluate, check);
 * - the return value is 0 or a negative TSEC_E* code, with details in the
 *   caller's struct tsec_error; anything but 0 is a deny, whatever the
 *   output buffer holds.
 */
#ifndef TINYSECURITY_MODULE_H
#define TINYSECURITY_MODULE_H

#include "tinysecurity/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSEC_MODULE_ABI_MAJOR 1
#define TSEC_MODULE_ABI_MINOR 3
#define TSEC_MODULE_ENTRY_NAME "tsec_module_entry"

#define TSEC_BUILD_DEBUG 1
#define TSEC_BUILD_RELEASE 2

#ifdef NDEBUG
#define TSEC_BUILD_THIS TSEC_BUILD_RELEASE
#else
#define TSEC_BUILD_THIS TSEC_BUILD_DEBUG
#endif

static inline const char *tsec_build_name(uint32_t build)
{
	return build == TSEC_BUILD_RELEASE ? "release"
	     : build == TSEC_BUILD_DEBUG ? "debug" : "unknown";
}

/* Capability flags of a module. */
#define TSEC_MODULE_CONCURRENT (1u << 0) /* evaluate/check may run at once */

#define TSEC_LOG_ERROR 0
#define TSEC_LOG_WARN 1
#define TSEC_LOG_INFO 2

/*
 * What the host offers a module.  The first four fields stay where they
 * are in every ABI major, so any module can read which host it met.
 * Fields are only appended; a module reads one only when
 * TSEC_HOST_API_HAS says the host's table holds it, and accepts any
 * table of at least TSEC_HOST_API_MIN_SIZE (a host of ABI 1.0).
 */
struct tsec_host_api {
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t size;               /* sizeof(struct tsec_host_api) of the host */
	uint32_t reserved;
	void *host;                  /* opaque, passed back to log */
	/* Off the hot path only (load, reload, fini). Thread-safe. */
	void (*log)(void *host, int level, const char *msg);

	/* ---- ABI 1.2 ---- */

	/*
	 * A module's entry that refuses this host calls refuse with why
	 * (one line, copied by the host) and then returns NULL; the loader
	 * puts the reason in its error.  Only during the entry call.
	 */
	void (*refuse)(const struct tsec_host_api *host, const char *reason);
};

/* The size of a version 1.0 host table: the least a module may accept. */
#define TSEC_HOST_API_MIN_SIZE \
	(offsetof(struct tsec_host_api, log) + sizeof(void (*)(void)))

/* Whether a host table is long enough to hold `field`. */
#define TSEC_HOST_API_HAS(h, field) \
	((h)->size >= offsetof(struct tsec_host_api, field) + sizeof((h)->field))

/*
 * What a module offers.  Versioned like the host table: appended fields,
 * TSEC_MODULE_DESC_HAS before reading one.  The host refuses a descriptor whose
 * abi_major differs, whose size is below TSEC_MODULE_DESC_MIN_SIZE, or with
 * a NULL function among init, fini, reload, evaluate and check.
 */
struct tsec_module_desc {
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t size;               /* sizeof(struct tsec_module_desc) of module */
	uint32_t build;              /* TSEC_BUILD_* */
	uint32_t caps;               /* TSEC_MODULE_* */
	uint32_t reserved;
	const char *name;
	const char *version;

	/*
	 * Compiles `policy` (len bytes, need not be NUL-terminated) and
	 * creates the module's state in *state.  Not on the hot path.
	 */
	int (*init)(const struct tsec_host_api *host, const char *policy,
		    size_t len, void **state, struct tsec_error *err);
	/* Frees the state.  No call may be in flight. */
	void (*fini)(void *state);
	/*
	 * Compiles a new policy and swaps it in atomically: calls in flight
	 * finish on the old policy, later calls see the new one.  On error
	 * the old policy keeps serving.  Safe to call while other threads
	 * call evaluate and check.
	 */
	int (*reload)(void *state, const char *policy, size_t len,
		      struct tsec_error *err);
	/* One request, full diagnostic report; no side effects. */
	int (*evaluate)(void *state, const struct tsec_request *req,
			struct tsec_report *out, struct tsec_error *err);
	/* n >= 1 requests, one decision each into out[0..n-1]. */
	int (*check)(void *state, const struct tsec_request *reqs, size_t n,
		     struct tsec_decision *out, struct tsec_error *err);

	/* ---- ABI 1.1 ---- */

	/*
	 * Optional (NULL, or absent when size says so): checks a policy
	 * without loading it and reports every error it can, each with its
	 * place, into errs[0..max); *nerrs counts them all.  Returns 0 for a
	 * good policy.  Needs no state; not on the hot path.
	 */
	int (*lint)(const char *policy, size_t len, struct tsec_error *errs,
		    size_t max, size_t *nerrs);

	/* ---- ABI 1.3 ---- */

	/*
	 * Optional: evaluate with why-not.  Fills *out as evaluate does and
	 * *ex (ex_size bytes of the host's struct tsec_explain: the module
	 * writes no more) with the rules that matched principal, action and
	 * resource but did not apply, and why.  No side effects; not on the
	 * hot path.
	 */
	int (*explain)(void *state, const struct tsec_request *req,
		       struct tsec_report *out, struct tsec_explain *ex, size_t ex_size,
		       struct tsec_error *err);
};

/* The size of a version 1.0 descriptor: the least the host accepts. */
#define TSEC_MODULE_DESC_MIN_SIZE \
	(offsetof(struct tsec_module_desc, check) + sizeof(void (*)(void)))

/* Whether a descriptor is long enough to hold `field`. */
#define TSEC_MODULE_DESC_HAS(d, field) \
	((d)->size >= offsetof(struct tsec_module_desc, field) + sizeof((d)->field))

typedef const struct tsec_module_desc *(*tsec_module_entry_fn)(
	const struct tsec_host_api *host);

#ifdef __cplusplus
}
#endif

#endif
