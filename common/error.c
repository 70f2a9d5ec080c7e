/*
 * Error names and the error-struct filler, compiled into both the broker
 * library and the module (each keeps its own hidden copy, so the module
 * links no broker symbol).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* The message and name tables, generated from TSEC_ERRNO_MAP. */
static const struct {
	int code;
	const char *name, *msg;
} errors[] = {
#define ERRNO_ROW(name, value, wire, msg) { value, wire, msg },
	TSEC_ERRNO_MAP(ERRNO_ROW)
#undef ERRNO_ROW
};
#define NERRORS (sizeof(errors) / sizeof(errors[0]))

/* The codes run 0, -1, -2, ... with no gap, so a code is its own index. */
static int row_of(int code)
{
	return code <= 0 && (size_t)-code < NERRORS ? -code : -1;
}

const char *tsec_strerror(int code)
{
	int r = row_of(code);

	return r >= 0 ? errors[r].msg : "unknown error";
}

const char *tsec_errname(int code)
{
	int r = row_of(code);

	return r >= 0 ? errors[r].name : "unknown";
}

int tsec_errcode(const char *name)
{
	for (size_t i = 0; name && i < NERRORS; i++)
		if (!strcmp(errors[i].name, name))
			return errors[i].code;
	return TSEC_EPROTO;
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
