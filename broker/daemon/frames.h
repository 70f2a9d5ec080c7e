/*
 * Internal: tsec-broker's messages on its sockets (frames.c), for the
 * loop and its workers (serve.c).
 */
#ifndef TSEC_DAEMON_FRAMES_H
#define TSEC_DAEMON_FRAMES_H

#include <stddef.h>

#include <sodium.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"

/*
 * Closes a received frame that may hold a private key (a call's binary
 * frames), its bytes zeroed first.  Only ZeroMQ's own receive buffers
 * (and the kernel's) may still have held them.
 */
static inline void tsec__msg_close_wiped(zmq_msg_t *m)
{
	if (zmq_msg_size(m))
		sodium_memzero(zmq_msg_data(m), zmq_msg_size(m));
	zmq_msg_close(m);
}

/* A short reply (text[0..n), copied) to the client ident: 0, or -1 when
 * the client is not there to take it. */
int tsec__send_client(void *router, zmq_msg_t *ident, const char *text, size_t n);
/*
 * Sends a reply the caller gives away: its text (malloc'd; NULL: an empty
 * reply, as when there was no memory), then out's frames (each given
 * away too, wiped when sent or dropped; out is emptied), on s with
 * flags' ZMQ_DONTWAIT (or not) on every part.  No copy of any of it.
 */
void tsec__send_reply_on(void *s, char *reply, struct tsec__frames *out, int flags);
/* The same to a client, after its identity and the delimiter. */
void tsec__send_client_owned(void *router, zmq_msg_t *ident, char *reply,
			     struct tsec__frames *out);
/*
 * Reads one message (identity, empty delimiter, one payload frame, up to
 * TSEC_D_MAX_FRAMES binary frames) into *payload and data[0..*ndata).
 * -1 when nothing is waiting, else 0, with *bad set when the framing is
 * wrong.
 */
int tsec__recv_client(void *router, zmq_msg_t *ident, zmq_msg_t *payload, zmq_msg_t *data,
		      unsigned *ndata, int *bad);

#endif
