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

/* The codes run 0, -1, -2, ... with no gap, so a code is its own index.
 * Compared before negated: -INT_MIN is no int. */
static int row_of(int code)
{
	return code <= 0 && code > -(int)NERRORS ? -code : -1;
}

/*
 * What a message may carry to a terminal or a log: C0 controls, DEL and
 * the C1 controls (U+0080..U+009F, C2 80..C2 9F in UTF-8) become '?'.
 * Text from a peer (an etcd or redis error, a broker's reply) reaches
 * messages, and an escape sequence in it must not reach a terminal.
 */
static void tame(char *s)
{
	for (unsigned char *p = (unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			p[0] = '?', p[1] = '?';
	}
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
	tame(err->where);
	tame(err->msg);
	return code;
}
