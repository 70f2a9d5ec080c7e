/*
 * The backends, listed once: what `backend` names in the options and the
 * configuration, what each can do, and how it opens.  A new backend (an
 * object store, PostgreSQL) is a folder of its own implementing
 * backend.h, and one row here; nothing else changes.
 */
#include "broker/storage/backend.h"
#include "broker/storage/fleet.h"

static int open_file(struct tsec__backend **out, const struct tsec_store_opts *o,
		     struct tsec_error *err)
{
	if (!o->root || !*o->root)
		return tsec__seterr(err, TSEC_EINVAL, "root", "the file backend needs a root");
	return tsec__file_open(out, o->root, err);
}

static int open_memory(struct tsec__backend **out, const struct tsec_store_opts *o,
		       struct tsec_error *err)
{
	return tsec__memory_open(out, o->delay_us, err);
}

static const char *const redis_params[] = { "db", NULL };

const struct tsec__backend_kind tsec__backends[] = {
	{ "file", TSEC__BACKEND_VERSION, TSEC__CAP_SERVED | TSEC__CAP_DURABLE | TSEC__CAP_ROOT,
	  open_file, tsec__file_feed, NULL },
	{ "memory", TSEC__BACKEND_VERSION, 0, open_memory, NULL, NULL },
	{ "etcd", TSEC__BACKEND_VERSION,
	  TSEC__CAP_SERVED | TSEC__CAP_DURABLE | TSEC__CAP_SHARED | TSEC__CAP_NETWORK,
	  tsec__etcd_open, tsec__etcd_feed, NULL },
	{ "redis", TSEC__BACKEND_VERSION, TSEC__CAP_SERVED | TSEC__CAP_SHARED | TSEC__CAP_NETWORK,
	  tsec__redis_open, tsec__redis_feed, redis_params },
};

const size_t tsec__nbackends = sizeof(tsec__backends) / sizeof(tsec__backends[0]);

const struct tsec__backend_kind *tsec__backend_find(const char *name)
{
	for (size_t i = 0; name && i < tsec__nbackends; i++)
		if (!strcmp(tsec__backends[i].name, name))
			return &tsec__backends[i];
	return NULL;
}

size_t tsec__backend_names(unsigned caps, const char **out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < tsec__nbackends && n < max; i++)
		if ((tsec__backends[i].caps & caps) == caps)
			out[n++] = tsec__backends[i].name;
	return n;
}
