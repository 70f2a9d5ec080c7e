/*
 * Module loader: dlopen plus every check the ABI promises, each refusal
 * with its own code and a message naming the file and the cause.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/bus/bus_private.h"

/* Whether the file starts with the ELF magic; errno-style result. */
static int is_elf(const char *path, struct tsec_error *err)
{
	unsigned char magic[4];
	struct stat sb;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return tsec__seterr(err, TSEC_ENOENT, path,
					    "%s: no such module file", path);
		return tsec__seterr(err, TSEC_EIO, path, "%s: cannot open: %s",
				    path, strerror(errno));
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return tsec__seterr(err, TSEC_ENOTSO, path,
				    "%s: not a regular file", path);
	}
	n = read(fd, magic, sizeof(magic));
	close(fd);
	if (n != (ssize_t)sizeof(magic) || memcmp(magic, "\177ELF", 4) != 0)
		return tsec__seterr(err, TSEC_ENOTSO, path,
				    "%s: not a shared object (no ELF header)", path);
	return 0;
}

int tsec__module_open(const char *path, const struct tsec_host_api *host,
		      void **dlp, const struct tsec_module_desc **descp,
		      struct tsec_error *err)
{
	const struct tsec_module_desc *d;
	tsec_module_entry_fn entry;
	void *dl = NULL, *sym;
	int rc;

	*dlp = NULL;
	*descp = NULL;
	if (!path || !*path)
		return tsec__seterr(err, TSEC_EINVAL, "", "empty module path");
	if ((rc = is_elf(path, err)))
		return rc;
	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		return tsec__seterr(err, TSEC_ENOTSO, path,
				    "%s: cannot load: %s", path, e ? e : "unknown");
	}
	dlerror();
	sym = dlsym(dl, TSEC_MODULE_ENTRY_NAME);
	if (!sym) {
		rc = tsec__seterr(err, TSEC_ENOSYM, path,
				  "%s: no symbol %s: not a tinysecurity module",
				  path, TSEC_MODULE_ENTRY_NAME);
		goto out;
	}
	/* POSIX guarantees data and function pointers convert via dlsym. */
	memcpy(&entry, &sym, sizeof(entry));
	tsec__host_refuse(host, "");
	d = entry(host);
	if (!d) {
		const char *why = tsec__host_refusal(host);
		rc = tsec__seterr(err, TSEC_EMODULE, path,
				  "%s: module refused the host API (host ABI %u.%u)%s%s",
				  path, host->abi_major, host->abi_minor,
				  *why ? ": " : "", why);
		goto out;
	}
	if (d->abi_major != TSEC_MODULE_ABI_MAJOR) {
		rc = tsec__seterr(err, TSEC_EABI, path,
				  "%s: module ABI major %u, host needs %u",
				  path, d->abi_major, TSEC_MODULE_ABI_MAJOR);
		goto out;
	}
	if (d->size < TSEC_MODULE_DESC_MIN_SIZE) {
		rc = tsec__seterr(err, TSEC_ESHORT, path,
				  "%s: module descriptor is %u bytes, ABI %u needs %zu",
				  path, d->size, TSEC_MODULE_ABI_MAJOR,
				  (size_t)TSEC_MODULE_DESC_MIN_SIZE);
		goto out;
	}
	{
		const char *missing = !d->init ? "init" : !d->fini ? "fini"
			: !d->reload ? "reload" : !d->evaluate ? "evaluate"
			: !d->check ? "check" : NULL;
		if (missing) {
			rc = tsec__seterr(err, TSEC_ENULLFN, path,
					  "%s: module descriptor has no %s function",
					  path, missing);
			goto out;
		}
	}
	*dlp = dl;
	*descp = d;
	dl = NULL;
	rc = 0;
out:
	if (dl)
		dlclose(dl);
	return rc;
}
