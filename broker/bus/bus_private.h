/* Internal: the bus and the module loader. */
#ifndef TSEC_BUS_PRIVATE_H
#define TSEC_BUS_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "tinysecurity/bus.h"
#include "common/error.h"

struct tsec_endpoint {
	_Atomic int ready;               /* set last, after all fields */
	char name[TSEC_ENDPOINT_NAME_MAX];
	void *dl;
	const struct tsec_module_desc *desc;
	void *state;
	int serial;                      /* module is not concurrency-safe */
	pthread_mutex_t lock;            /* used only when serial */
	char path[1024];
};

struct tsec_bus {
	pthread_mutex_t admin;           /* load and free; never on calls */
	struct tsec_host_api host;
	char refusal[TSEC_ERR_MSG];      /* why a module refused, under admin */
	_Atomic uint64_t generation;     /* +1 after each load and reload */
	struct tsec_endpoint ep[TSEC_BUS_ENDPOINTS];
};


/* host->refuse: keeps a module's reason for the loader (under admin). */
void tsec__host_refuse(const struct tsec_host_api *host, const char *reason);

/* The reason the last refusing module gave, or "" (under admin). */
const char *tsec__host_refusal(const struct tsec_host_api *host);

/*
 * Opens the module at path with dlopen(RTLD_NOW | RTLD_LOCAL), resolves
 * the entry symbol, calls it with `host` and validates the descriptor.
 * On success *dl and *desc are set (close *dl with dlclose).  Errors:
 * TSEC_ENOENT, TSEC_ENOTSO, TSEC_ENOSYM, TSEC_EMODULE, TSEC_EABI,
 * TSEC_ESHORT, TSEC_ENULLFN, each with the file and the cause in err.
 */
int tsec__module_open(const char *path, const struct tsec_host_api *host,
		      void **dl, const struct tsec_module_desc **desc,
		      struct tsec_error *err);

#endif
