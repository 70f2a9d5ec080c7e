/*
 * The MemoryBus: endpoints hold loaded modules; a call finds its endpoint
 * and calls the module's function in the caller's thread.
 *
 * Endpoints are filled under the admin mutex and published with a release
 * store of `ready`; calls read `ready` with acquire and take no lock unless
 * the module did not declare TSEC_MODULE_CONCURRENT.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/bus/bus_private.h"

static void default_log(void *host, int level, const char *msg)
{
	static const char *const names[] = { "error", "warn", "info" };
	(void)host;
	fprintf(stderr, "tsec: %s: %s\n",
		level >= 0 && level <= 2 ? names[level] : "log", msg);
}

int tsec_bus_new(struct tsec_bus **out)
{
	struct tsec_bus *bus;

	*out = NULL;
	bus = calloc(1, sizeof(*bus));
	if (!bus)
		return TSEC_ENOMEM;
	pthread_mutex_init(&bus->admin, NULL);
	bus->host.abi_major = TSEC_MODULE_ABI_MAJOR;
	bus->host.abi_minor = TSEC_MODULE_ABI_MINOR;
	bus->host.size = sizeof(bus->host);
	bus->host.host = bus;
	bus->host.log = default_log;
	bus->host.refuse = tsec__host_refuse;
	for (int i = 0; i < TSEC_BUS_ENDPOINTS; i++)
		atomic_init(&bus->ep[i].ready, 0);
	atomic_init(&bus->generation, 0);
	*out = bus;
	return 0;
}

void tsec_bus_free(struct tsec_bus **busp)
{
	struct tsec_bus *bus;

	if (!busp || !*busp)
		return;
	bus = *busp;
	for (int i = 0; i < TSEC_BUS_ENDPOINTS; i++) {
		struct tsec_endpoint *ep = &bus->ep[i];
		if (!atomic_load(&ep->ready))
			continue;
		ep->desc->fini(ep->state);
		if (ep->serial)
			pthread_mutex_destroy(&ep->lock);
		dlclose(ep->dl);
	}
	pthread_mutex_destroy(&bus->admin);
	free(bus);
	*busp = NULL;
}

/* The host table is the bus's own member, so the bus is found from it
 * whatever tsec_bus_set_log made host->host. */
static struct tsec_bus *bus_of(const struct tsec_host_api *host)
{
	return (struct tsec_bus *)(void *)((char *)(uintptr_t)host -
					   offsetof(struct tsec_bus, host));
}

void tsec__host_refuse(const struct tsec_host_api *host, const char *reason)
{
	struct tsec_bus *bus = bus_of(host);
	size_t i = 0;

	/* One line of printable text: the reason goes into messages and logs. */
	for (; reason && reason[i] && i + 1 < sizeof(bus->refusal); i++)
		bus->refusal[i] = reason[i] >= 0x20 && reason[i] < 0x7f ? reason[i] : '?';
	bus->refusal[i] = '\0';
}

const char *tsec__host_refusal(const struct tsec_host_api *host)
{
	return bus_of(host)->refusal;
}

static void discard_log(void *ctx, int level, const char *msg)
{
	(void)ctx;
	(void)level;
	(void)msg;
}

void tsec_bus_set_log(struct tsec_bus *bus, tsec_log_fn fn, void *ctx)
{
	bus->host.log = fn ? fn : discard_log;
	bus->host.host = ctx;
}

static struct tsec_endpoint *find(struct tsec_bus *bus, const char *name)
{
	for (int i = 0; i < TSEC_BUS_ENDPOINTS; i++) {
		struct tsec_endpoint *ep = &bus->ep[i];
		if (!atomic_load_explicit(&ep->ready, memory_order_acquire))
			continue;
		if (strcmp(ep->name, name) == 0)
			return ep;
	}
	return NULL;
}

int tsec_bus_load(struct tsec_bus *bus, const char *name, const char *path,
		  const char *policy, size_t len, struct tsec_error *err)
{
	const struct tsec_module_desc *desc = NULL;
	struct tsec_endpoint *slot = NULL;
	void *dl = NULL, *state = NULL;
	int rc;

	if (!bus || !name || !*name || strlen(name) >= TSEC_ENDPOINT_NAME_MAX ||
	    !path || (!policy && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_bus_load");
	if (strlen(path) >= sizeof(slot->path))
		return tsec__seterr(err, TSEC_EINVAL, "", "module path too long");
	pthread_mutex_lock(&bus->admin);
	if (find(bus, name)) {
		rc = tsec__seterr(err, TSEC_EBUSY, name, "endpoint '%s' is taken", name);
		goto out;
	}
	for (int i = 0; i < TSEC_BUS_ENDPOINTS && !slot; i++)
		if (!atomic_load(&bus->ep[i].ready))
			slot = &bus->ep[i];
	if (!slot) {
		rc = tsec__seterr(err, TSEC_EBUSY, name, "bus has no free endpoint");
		goto out;
	}
	rc = tsec__module_open(path, &bus->host, &dl, &desc, err);
	if (rc)
		goto out;
	rc = desc->init(&bus->host, policy, len, &state, err);
	if (rc) {
		if (rc > 0 || rc == TSEC_OK)
			rc = TSEC_EMODULE;
		goto out;
	}
	snprintf(slot->name, sizeof(slot->name), "%s", name);
	snprintf(slot->path, sizeof(slot->path), "%s", path);
	slot->dl = dl;
	slot->desc = desc;
	slot->state = state;
	slot->serial = !(desc->caps & TSEC_MODULE_CONCURRENT);
	if (slot->serial)
		pthread_mutex_init(&slot->lock, NULL);
	atomic_store_explicit(&slot->ready, 1, memory_order_release);
	atomic_fetch_add(&bus->generation, 1);
	dl = NULL;
out:
	if (dl)
		dlclose(dl);
	pthread_mutex_unlock(&bus->admin);
	return rc;
}

#define POLICY_FILE_MAX (64u << 20)

int tsec_bus_load_file(struct tsec_bus *bus, const char *name,
		       const char *path, const char *policy_path,
		       struct tsec_error *err)
{
	char *text = NULL;
	size_t len;
	int rc;

	rc = tsec_read_file(policy_path, POLICY_FILE_MAX, &text, &len, err);
	if (rc)
		return rc;
	rc = tsec_bus_load(bus, name, path, text, len, err);
	free(text);
	return rc;
}

int tsec_bus_info(struct tsec_bus *bus, const char *name,
		  struct tsec_module_info *info)
{
	struct tsec_endpoint *ep = bus && name ? find(bus, name) : NULL;

	if (!ep)
		return TSEC_ENOENT;
	memset(info, 0, sizeof(*info));
	snprintf(info->path, sizeof(info->path), "%s", ep->path);
	snprintf(info->name, sizeof(info->name), "%s", ep->desc->name ? ep->desc->name : "");
	snprintf(info->version, sizeof(info->version), "%s",
		 ep->desc->version ? ep->desc->version : "");
	info->abi_major = ep->desc->abi_major;
	info->abi_minor = ep->desc->abi_minor;
	info->build = ep->desc->build;
	info->caps = ep->desc->caps;
	return 0;
}

static void deny_all(struct tsec_decision *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		out[i].allow = 0;
		out[i].status = TSEC_STATUS_NONE;
		out[i].nrules = 0;
	}
}

/* A module may only return 0 or a negative code; anything else is odd. */
static int normalise(int rc, struct tsec_error *err)
{
	if (rc > 0)
		return tsec__seterr(err, TSEC_EMODULE, "", "module returned %d", rc);
	return rc;
}

struct tsec_endpoint *tsec_bus_endpoint(struct tsec_bus *bus, const char *name)
{
	return bus && name ? find(bus, name) : NULL;
}

/* The call itself, once the arguments are known good. */
static inline int ep_check(struct tsec_endpoint *ep, const struct tsec_request *reqs,
			   size_t n, struct tsec_decision *out, struct tsec_error *err)
{
	int rc;

	if (ep->serial)
		pthread_mutex_lock(&ep->lock);
	rc = normalise(ep->desc->check(ep->state, reqs, n, out, err), err);
	if (ep->serial)
		pthread_mutex_unlock(&ep->lock);
	if (rc)
		deny_all(out, n);
	return rc;
}

static inline int ep_evaluate(struct tsec_endpoint *ep, const struct tsec_request *req,
			      struct tsec_report *out, struct tsec_error *err)
{
	int rc;

	if (ep->serial)
		pthread_mutex_lock(&ep->lock);
	rc = normalise(ep->desc->evaluate(ep->state, req, out, err), err);
	if (ep->serial)
		pthread_mutex_unlock(&ep->lock);
	if (rc)
		deny_all(&out->decision, 1);
	return rc;
}

int tsec_endpoint_check(struct tsec_endpoint *ep, const struct tsec_request *reqs,
			size_t n, struct tsec_decision *out, struct tsec_error *err)
{
	if (!out)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL output");
	if (!ep || !reqs || n == 0) {
		deny_all(out, n);
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_endpoint_check");
	}
	return ep_check(ep, reqs, n, out, err);
}

int tsec_endpoint_evaluate(struct tsec_endpoint *ep, const struct tsec_request *req,
			   struct tsec_report *out, struct tsec_error *err)
{
	if (!out)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL output");
	if (!ep || !req) {
		deny_all(&out->decision, 1);
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_endpoint_evaluate");
	}
	return ep_evaluate(ep, req, out, err);
}

int tsec_bus_check(struct tsec_bus *bus, const char *name,
		   const struct tsec_request *reqs, size_t n,
		   struct tsec_decision *out, struct tsec_error *err)
{
	struct tsec_endpoint *ep;

	if (!out)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL output");
	if (!bus || !name || !reqs || n == 0) {
		deny_all(out, n);
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_bus_check");
	}
	if (!(ep = find(bus, name))) {
		deny_all(out, n);
		return tsec__seterr(err, TSEC_ENOENT, name, "no endpoint '%s'", name);
	}
	return ep_check(ep, reqs, n, out, err);
}

int tsec_bus_evaluate(struct tsec_bus *bus, const char *name,
		      const struct tsec_request *req, struct tsec_report *out,
		      struct tsec_error *err)
{
	struct tsec_endpoint *ep;

	if (!out)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL output");
	if (!bus || !name || !req) {
		deny_all(&out->decision, 1);
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_bus_evaluate");
	}
	if (!(ep = find(bus, name))) {
		deny_all(&out->decision, 1);
		return tsec__seterr(err, TSEC_ENOENT, name, "no endpoint '%s'", name);
	}
	return ep_evaluate(ep, req, out, err);
}

int tsec_bus_explain(struct tsec_bus *bus, const char *name,
		     const struct tsec_request *req, struct tsec_report *out,
		     struct tsec_explain *ex, struct tsec_error *err)
{
	struct tsec_endpoint *ep;
	int rc;

	if (!ex)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL explain");
	memset(ex, 0, sizeof(*ex));
	if (!bus || !name || !(ep = find(bus, name)) ||
	    !TSEC_MODULE_DESC_HAS(ep->desc, explain) || !ep->desc->explain)
		return tsec_bus_evaluate(bus, name, req, out, err);
	if (!out || !req)
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_bus_explain");
	if (ep->serial)
		pthread_mutex_lock(&ep->lock);
	rc = normalise(ep->desc->explain(ep->state, req, out, ex, sizeof(*ex), err), err);
	if (ep->serial)
		pthread_mutex_unlock(&ep->lock);
	if (rc)
		deny_all(&out->decision, 1);
	return rc;
}

int tsec_bus_reload(struct tsec_bus *bus, const char *name,
		    const char *policy, size_t len, struct tsec_error *err)
{
	struct tsec_endpoint *ep;
	int rc;

	if (!bus || !name || (!policy && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "bad arguments to tsec_bus_reload");
	ep = find(bus, name);
	if (!ep)
		return tsec__seterr(err, TSEC_ENOENT, name, "no endpoint '%s'", name);
	/*
	 * A serial module is swapped under its lock; a concurrent one
	 * promises in the ABI that reload is safe alongside calls.
	 */
	if (ep->serial)
		pthread_mutex_lock(&ep->lock);
	rc = normalise(ep->desc->reload(ep->state, policy, len, err), err);
	if (ep->serial)
		pthread_mutex_unlock(&ep->lock);
	/* After the new policy is in force: a reader that sees the new
	 * count asks the new policy. */
	if (rc == 0)
		atomic_fetch_add(&bus->generation, 1);
	return rc;
}

uint64_t tsec_bus_generation(struct tsec_bus *bus)
{
	return atomic_load(&bus->generation);
}

int tsec_bus_lint(struct tsec_bus *bus, const char *name, const char *policy,
		  size_t len, struct tsec_error *errs, size_t max,
		  size_t *nerrs)
{
	struct tsec_endpoint *ep = bus && name ? find(bus, name) : NULL;
	int rc;

	*nerrs = 0;
	if (!ep)
		return TSEC_ENOENT;
	if (!TSEC_MODULE_DESC_HAS(ep->desc, lint) || !ep->desc->lint)
		return TSEC_EMODULE;
	rc = ep->desc->lint(policy, len, errs, max, nerrs);
	return rc > 0 ? TSEC_EMODULE : rc;
}
