/* tsec-broker: its one way to stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "broker/daemon/daemon.h"

int tsec__say_fd = STDERR_FILENO;

/*
 * One line on stderr.  Messages carry caller-supplied bytes (principals,
 * keys, lock names), so the whole line is escaped: a control character,
 * a backslash or any byte outside printable ASCII is written \xNN, and
 * nothing a caller sends can end the line or forge another.  One write
 * per line, so lines from threads never interleave.
 */
void tsec__say(const char *fmt, ...)
{
	char msg[2048], line[sizeof(msg) * 4 + 32];
	size_t o;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	o = (size_t)snprintf(line, sizeof(line), "tsec-broker: ");
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '\\')
			line[o++] = (char)*p;
		else
			o += (size_t)snprintf(line + o, sizeof(line) - o, "\\x%02x", *p);
	}
	if ((size_t)n >= sizeof(msg))
		o += (size_t)snprintf(line + o, sizeof(line) - o, "...");
	line[o++] = '\n';
	if (write(tsec__say_fd, line, o) < 0)
		return;
}
