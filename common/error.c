/*
 * Error names and the error-struct filler, compiled into both the broker
 * library and the module (each keeps its own hidden copy, so the module
 * links no broker symbol).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

const char *tsec_strerror(int code)
{
	switch (code) {
	case TSEC_OK: return "success";
	case TSEC_EINVAL: return "invalid argument";
	case TSEC_ENOMEM: return "out of memory";
	case TSEC_EIO: return "input/output error";
	case TSEC_ENOENT: return "not found";
	case TSEC_ENOTSO: return "not a loadable shared object";
	case TSEC_ENOSYM: return "module entry symbol missing";
	case TSEC_EABI: return "module ABI major mismatch";
	case TSEC_ESHORT: return "module descriptor too short";
	case TSEC_ENULLFN: return "module descriptor lacks a function";
	case TSEC_EPOLICY: return "invalid policy";
	case TSEC_EDENIED: return "denied by policy";
	case TSEC_EEXIST: return "conflict: target exists";
	case TSEC_EBUSY: return "busy";
	case TSEC_ETOOBIG: return "value too large";
	case TSEC_EMODULE: return "module failure";
	case TSEC_EKEY: return "invalid key";
	case TSEC_ETIMEDOUT: return "deadline passed";
	case TSEC_EINCOMPLETE: return "incomplete value";
	case TSEC_ESIGNATURE: return "bad or missing signature";
	case TSEC_EPROTO: return "malformed message";
	case TSEC_EBUDGET: return "performance budget exceeded";
	case TSEC_ENOTOWNER: return "lock held by another owner";
	case TSEC_ECERT: return "certificate does not parse";
	default: return "unknown error";
	}
}

int tsec__seterr(struct tsec_error *err, int code, const char *where,
		 const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	snprintf(err->where, sizeof(err->where), "%s", where ? where : "");
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	} else {
		snprintf(err->msg, sizeof(err->msg), "%s", tsec_strerror(code));
	}
	return code;
}
