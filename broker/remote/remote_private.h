/* Internal: what the tests reach inside a remote store. */
#ifndef TSEC_REMOTE_PRIVATE_H
#define TSEC_REMOTE_PRIVATE_H

#include "broker/remote/blobs.h"

/* Called by a publish after its blobs are written and before the
 * references switch (a test kills the process there).  NULL in programs. */
extern void (*tsec__remote_after_blobs_hook)(void);

/* The store's blob provider (to plant, alter and count blobs). */
struct tsec__blobs *tsec__remote_blobs(struct tsec_remote *r);

/*
 * For the fuzzer: 0 when every kind's fast reference reader that accepts
 * text reads what jansson reads from it; -1 when they differ.
 */
int tsec__remote_ref_agree(const char *text, size_t len);

#endif
