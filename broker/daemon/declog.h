/*
 * Internal: the decision log.  Callers push one line each; a background
 * thread writes them, so a call never waits on the disk.  When the buffer
 * is full or the disk refuses, lines are dropped, counted, and reported
 * on stderr at most once a second with the count.
 */
#ifndef TSEC_DECLOG_H
#define TSEC_DECLOG_H

#include <stddef.h>
#include <stdint.h>

#include "tinysecurity/types.h"

struct tsec__declog;

/* The longest line the log keeps, and what a caller's field is cut to. */
#define TSEC_DECLOG_LINE_MAX 4096
#define TSEC_DECLOG_FIELD_MAX 1024

/*
 * Opens (appends to) path with room for `lines` pending lines.  A new
 * file is created 0600, or 0640 owned by group `gid` when gid >= 0.
 */
int tsec__declog_open(struct tsec__declog **out, const char *path,
		      size_t lines, long gid, struct tsec_error *err);

/* Queues a line (a newline is added).  Never blocks on I/O.  Thread-safe. */
void tsec__declog_push(struct tsec__declog *l, const char *line, size_t len);

/* Asks the writer to reopen the file (log rotation). */
void tsec__declog_reopen(struct tsec__declog *l);

uint64_t tsec__declog_dropped(struct tsec__declog *l);
uint64_t tsec__declog_written(struct tsec__declog *l);

/* Writes what is queued, stops the writer, closes; *l = NULL. */
void tsec__declog_close(struct tsec__declog **l);

#endif
