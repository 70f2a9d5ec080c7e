/*
 * tinysecurity MemoryBus: named endpoints backed by loaded modules, with
 * calls dispatched in the caller's thread.
 */
#ifndef TINYSECURITY_BUS_H
#define TINYSECURITY_BUS_H

#include "tinysecurity/module.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tsec_bus;

#define TSEC_BUS_ENDPOINTS 8     /* endpoints one bus can hold */
#define TSEC_ENDPOINT_NAME_MAX 32

/* What the bus knows of a loaded module. */
struct tsec_module_info {
	char path[1024];
	char name[64];
	char version[32];
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t build;              /* TSEC_BUILD_* */
	uint32_t caps;
};

/* Creates an empty bus into *out.  Returns 0 or TSEC_ENOMEM. */
TSEC_API int tsec_bus_new(struct tsec_bus **out);

/* Where the bus and its modules log (load, reload, fini; never per call). */
typedef void (*tsec_log_fn)(void *ctx, int level, const char *msg);

/*
 * Sets the log sink of the bus (NULL: discard).  The default writes
 * "tsec: LEVEL: message" lines to stderr.  Call before loading modules.
 */
TSEC_API void tsec_bus_set_log(struct tsec_bus *bus, tsec_log_fn fn, void *ctx);

/*
 * Finalises every module, unloads them and frees the bus; sets *bus to
 * NULL.  No call may be in flight.  Accepts NULL and *bus == NULL.
 */
TSEC_API void tsec_bus_free(struct tsec_bus **bus);

/*
 * Loads the module at `path` onto the endpoint `name` and initialises it
 * with the policy text (len bytes).  Errors: TSEC_ENOENT (no file),
 * TSEC_ENOTSO, TSEC_ENOSYM, TSEC_EABI, TSEC_ESHORT, TSEC_ENULLFN,
 * TSEC_EMODULE (module refused the host), TSEC_EPOLICY (policy did not
 * compile), TSEC_EBUSY (endpoint taken or bus full), TSEC_EINVAL.
 * Thread-safe against calls on other endpoints.
 */
TSEC_API int tsec_bus_load(struct tsec_bus *bus, const char *name, const char *path,
		  const char *policy, size_t len, struct tsec_error *err);

/* As tsec_bus_load, reading the policy from `policy_path`. */
TSEC_API int tsec_bus_load_file(struct tsec_bus *bus, const char *name,
		       const char *path, const char *policy_path,
		       struct tsec_error *err);

/* Fills *info for the endpoint.  Returns 0 or TSEC_ENOENT. */
TSEC_API int tsec_bus_info(struct tsec_bus *bus, const char *name,
		  struct tsec_module_info *info);

/*
 * Check n >= 1 requests through the endpoint.  On any error every
 * decision in out[0..n-1] is forced to deny.  Thread-safe; a module that
 * does not declare TSEC_MODULE_CONCURRENT is serialised by the bus.
 */
TSEC_API int tsec_bus_check(struct tsec_bus *bus, const char *name,
		   const struct tsec_request *reqs, size_t n,
		   struct tsec_decision *out, struct tsec_error *err);

/* Evaluate one request; same rules as tsec_bus_check. */
TSEC_API int tsec_bus_evaluate(struct tsec_bus *bus, const char *name,
		      const struct tsec_request *req, struct tsec_report *out,
		      struct tsec_error *err);

/*
 * The endpoint loaded as `name`, or NULL: a handle for the calls below,
 * which skip finding the endpoint by its name (a string compare a call).
 * Valid as long as the bus: an endpoint is never unloaded, and a reload
 * swaps the policy behind the same handle.
 */
struct tsec_endpoint;
TSEC_API struct tsec_endpoint *tsec_bus_endpoint(struct tsec_bus *bus, const char *name);

/* tsec_bus_check and tsec_bus_evaluate through a handle; the same rules
 * (a NULL handle is TSEC_EINVAL, every decision denied). */
TSEC_API int tsec_endpoint_check(struct tsec_endpoint *ep,
				 const struct tsec_request *reqs, size_t n,
				 struct tsec_decision *out, struct tsec_error *err);
TSEC_API int tsec_endpoint_evaluate(struct tsec_endpoint *ep,
				    const struct tsec_request *req, struct tsec_report *out,
				    struct tsec_error *err);

/*
 * Evaluate with why-not (tsec_explain).  A module older than ABI 1.3 is
 * answered with Evaluate's report alone and ex->explained 0.
 */
TSEC_API int tsec_bus_explain(struct tsec_bus *bus, const char *name,
			      const struct tsec_request *req, struct tsec_report *out,
			      struct tsec_explain *ex, struct tsec_error *err);

/*
 * Recompiles the endpoint's policy and swaps it in atomically.  On error
 * the old policy keeps serving.  Safe while other threads call.
 */
TSEC_API int tsec_bus_reload(struct tsec_bus *bus, const char *name,
		    const char *policy, size_t len, struct tsec_error *err);

/*
 * A count that moves after every policy loaded or reloaded on the bus
 * (any endpoint), for a caller that keeps an earlier decision across
 * time, such as a lock wait: while it is unchanged, no policy changed
 * since.  Safe while other threads call.
 */
TSEC_API uint64_t tsec_bus_generation(struct tsec_bus *bus);

/*
 * Lints a policy with the endpoint's module: every error it finds, each
 * with its place, into errs[0..max); *nerrs counts them all.  Returns 0
 * for a good policy, TSEC_EPOLICY for a bad one, TSEC_EMODULE when the
 * module offers no lint (ABI 1.0).
 */
TSEC_API int tsec_bus_lint(struct tsec_bus *bus, const char *name, const char *policy,
		  size_t len, struct tsec_error *errs, size_t max,
		  size_t *nerrs);

/*
 * Reads a whole file of at most `max` bytes into a new NUL-terminated
 * buffer (*out, caller frees) of *len bytes.  Returns 0, TSEC_ENOENT,
 * TSEC_EIO, TSEC_ETOOBIG or TSEC_ENOMEM, with details in err.
 */
TSEC_API int tsec_read_file(const char *path, size_t max, char **out, size_t *len,
		   struct tsec_error *err);

/* A tsec_str over a NUL-terminated string (NULL gives an empty one). */
static inline struct tsec_str tsec_str_c(const char *s)
{
	struct tsec_str r = { s, 0 };
	if (s)
		while (s[r.len])
			r.len++;
	return r;
}

#ifdef __cplusplus
}
#endif

#endif
