/*
 * tsec-broker's messages on its sockets: a client's message read whole
 * (identity, delimiter, payload, binary frames) and replies sent without
 * a copy, each frame that may hold a private key wiped when ZeroMQ is
 * done with it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/frames.h"

/* The routers are ZMQ_ROUTER_MANDATORY: a client that is not there (its
 * connection closed, its queue full) fails the identity frame, and then
 * nothing more of the message may be sent (it would start another). */
int tsec__send_client(void *router, zmq_msg_t *ident, const char *text, size_t n)
{
	if (zmq_msg_send(ident, router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return -1;
	zmq_send(router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(router, text, n, ZMQ_DONTWAIT);
	return 0;
}

static void free_reply(void *data, void *hint)
{
	(void)hint;
	free(data);
}

/* A reply's frame, freed by ZeroMQ once sent or dropped: wiped first (it
 * may be a private key; hint is its length). */
static void free_wiped(void *data, void *hint)
{
	sodium_memzero(data, (size_t)(uintptr_t)hint);
	free(data);
}

/*
 * Sends a reply the caller gives away: its text (malloc'd; NULL: an empty
 * reply, as when there was no memory), then out's frames (each given
 * away too; out is emptied), on s with flags' ZMQ_DONTWAIT (or not) on
 * every part.  No copy of any of it.  What cannot be sent is freed.
 */
void tsec__send_reply_on(void *s, char *reply, struct tsec__frames *out, int flags)
{
	unsigned nf = out ? out->n : 0;
	zmq_msg_t m;

	if (!reply || zmq_msg_init_data(&m, reply, strlen(reply), free_reply, NULL) != 0) {
		free(reply);
		zmq_msg_init(&m);
		nf = 0;
	}
	if (zmq_msg_send(&m, s, flags | (nf ? ZMQ_SNDMORE : 0)) < 0) {
		zmq_msg_close(&m);
		nf = 0;
	}
	for (unsigned i = 0; out && i < out->n; i++) {
		bool last = i + 1 == nf;

		if (i < nf && zmq_msg_init_data(&m, out->ptr[i], out->len[i], free_wiped,
						(void *)(uintptr_t)out->len[i]) == 0) {
			if (zmq_msg_send(&m, s, flags | (last ? 0 : ZMQ_SNDMORE)) < 0)
				zmq_msg_close(&m);
			continue;
		}
		/* Not sent: an empty part keeps the message whole, or none. */
		if (i < nf)
			zmq_send(s, "", 0, flags | (last ? 0 : ZMQ_SNDMORE));
		sodium_memzero(out->ptr[i], out->len[i]);
		free(out->ptr[i]);
	}
	if (out)
		out->n = 0;
}

/* The same to a client, after its identity and the delimiter. */
void tsec__send_client_owned(void *router, zmq_msg_t *ident, char *reply,
			      struct tsec__frames *out)
{
	if (zmq_msg_send(ident, router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
		/* Not there: what would have gone is freed (wiped). */
		free(reply);
		tsec__frames_free(out);
		return;
	}
	zmq_send(router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	tsec__send_reply_on(router, reply, out, ZMQ_DONTWAIT);
}

/*
 * Reads one message (identity, empty delimiter, one payload frame, up to
 * TSEC_D_MAX_FRAMES binary frames) into *payload and data[0..*ndata).
 * Returns -1 when nothing is waiting, else 0, with *bad set when the
 * framing is wrong.
 */
int tsec__recv_client(void *router, zmq_msg_t *ident, zmq_msg_t *payload, zmq_msg_t *data,
		       unsigned *ndata, int *bad)
{
	int more = 0, nframes = 0;

	*bad = 0;
	*ndata = 0;
	zmq_msg_init(ident);
	zmq_msg_init(payload);
	if (zmq_msg_recv(ident, router, ZMQ_DONTWAIT) < 0)
		return -1;
	more = zmq_msg_more(ident);
	while (more) {
		zmq_msg_t f;
		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, router, 0) < 0) {
			zmq_msg_close(&f);
			break;
		}
		more = zmq_msg_more(&f);
		nframes++;
		if (nframes == 1 && zmq_msg_size(&f) != 0)
			*bad = 1;
		if (nframes == 2)
			zmq_msg_move(payload, &f);
		if (nframes > 2 && *ndata < TSEC_D_MAX_FRAMES) {
			zmq_msg_init(&data[*ndata]);
			zmq_msg_move(&data[(*ndata)++], &f);
		}
		zmq_msg_close(&f);
	}
	if (nframes < 2 || nframes > 2 + TSEC_D_MAX_FRAMES)
		*bad = 1;
	return 0;
}
