/* The client library: one DEALER socket, JSON requests with ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <zmq.h>

#include "tinysecurity/client.h"
#include "common/wire.h"
#include "common/clock.h"
#include "common/error.h"

struct tsec_client {
	void *ctx;
	void *sock;
	int timeout_ms;
	long next_id;
};

int tsec_client_open(struct tsec_client **out,
		     const struct tsec_client_opts *o, struct tsec_error *err)
{
	struct tsec_client *c;
	int zero = 0;

	*out = NULL;
	if (!o || !o->endpoint)
		return tsec__seterr(err, TSEC_EINVAL, "endpoint", "no endpoint");
	if (!strncmp(o->endpoint, "tcp://", 6) &&
	    (!o->server_public_key || !o->public_key || !o->secret_key))
		return tsec__seterr(err, TSEC_EINVAL, "keys",
				    "tcp needs the server's public key and a client key pair");
	c = calloc(1, sizeof(*c));
	if (!c)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	c->ctx = zmq_ctx_new();
	c->sock = c->ctx ? zmq_socket(c->ctx, ZMQ_DEALER) : NULL;
	if (!c->sock) {
		if (c->ctx)
			zmq_ctx_term(c->ctx);
		free(c);
		return tsec__seterr(err, TSEC_ENOMEM, "", "cannot create a ZeroMQ socket");
	}
	zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (o->server_public_key &&
	    (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, o->server_public_key, 40) ||
	     zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, o->public_key, 40) ||
	     zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, o->secret_key, 40))) {
		tsec_client_close(&c);
		return tsec__seterr(err, TSEC_EINVAL, "keys", "keys must be 40 characters of Z85");
	}
	if (zmq_connect(c->sock, o->endpoint)) {
		int e = errno;
		tsec_client_close(&c);
		return tsec__seterr(err, TSEC_EINVAL, "endpoint", "%s: %s", o->endpoint,
				    zmq_strerror(e));
	}
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
	*out = c;
	return 0;
}

void tsec_client_close(struct tsec_client **pc)
{
	if (!pc || !*pc)
		return;
	zmq_close((*pc)->sock);
	zmq_ctx_term((*pc)->ctx);
	free(*pc);
	*pc = NULL;
}

/* Waits for one reply frame (after the delimiter) until deadline. */
static int recv_reply(struct tsec_client *c, int64_t deadline, char **out,
		      struct tsec_error *err)
{
	for (;;) {
		zmq_pollitem_t it = { c->sock, 0, ZMQ_POLLIN, 0 };
		int64_t left = deadline - tsec__mono_ms();
		zmq_msg_t m;
		int more = 1;
		size_t msz = sizeof(more);
		char *text = NULL;

		if (left <= 0)
			return tsec__seterr(err, TSEC_ETIMEDOUT, "", "no reply from the broker in time");
		if (zmq_poll(&it, 1, (long)left) <= 0)
			continue;
		while (more) {
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, c->sock, 0) < 0) {
				zmq_msg_close(&m);
				break;
			}
			if (zmq_msg_size(&m) > 0) {
				free(text);
				text = strndup(zmq_msg_data(&m), zmq_msg_size(&m));
			}
			zmq_msg_close(&m);
			zmq_getsockopt(c->sock, ZMQ_RCVMORE, &more, &msz);
		}
		if (text) {
			*out = text;
			return 0;
		}
	}
}

int tsec_client_raw(struct tsec_client *c, const void *frame, size_t len,
		    char **reply, struct tsec_error *err)
{
	int64_t deadline;

	*reply = NULL;
	if (!c || (!frame && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or no frame");
	deadline = tsec__mono_ms() + c->timeout_ms;
	if (zmq_send(c->sock, "", 0, ZMQ_SNDMORE) < 0 ||
	    zmq_send(c->sock, frame, len, 0) < 0)
		return tsec__seterr(err, TSEC_EIO, "", "send: %s", zmq_strerror(errno));
	return recv_reply(c, deadline, reply, err);
}

int tsec_client_call(struct tsec_client *c, const char *method,
		     const char *params, char **result, struct tsec_error *err)
{
	json_t *msg = NULL, *p = NULL, *rep = NULL, *e;
	json_error_t je;
	char *text = NULL, *r = NULL;
	int64_t deadline;
	long id;
	int rc;

	if (result)
		*result = NULL;
	if (!c || !method)
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or method");
	if (params && !(p = json_loads(params, 0, &je)))
		return tsec__seterr(err, TSEC_EINVAL, "params", "params: %s", je.text);
	id = ++c->next_id;
	msg = json_pack("{s:I,s:s,s:o}", "id", (json_int_t)id, "method", method,
			"params", p ? p : json_object());
	text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	deadline = tsec__mono_ms() + c->timeout_ms;
	if (zmq_send(c->sock, "", 0, ZMQ_SNDMORE) < 0 ||
	    zmq_send(c->sock, text, strlen(text), 0) < 0) {
		free(text);
		return tsec__seterr(err, TSEC_EIO, "", "send: %s", zmq_strerror(errno));
	}
	free(text);
	/* Skip late replies to earlier calls that timed out. */
	for (;;) {
		if ((rc = recv_reply(c, deadline, &r, err)))
			return rc;
		rep = json_loads(r, 0, &je);
		free(r);
		if (!rep || !json_is_object(rep)) {
			json_decref(rep);
			return tsec__seterr(err, TSEC_EPROTO, "", "malformed reply");
		}
		json_t *rid = json_object_get(rep, "id");
		if (json_is_integer(rid) && json_integer_value(rid) == id)
			break;
		if (json_is_null(rid) && json_object_get(rep, "error"))
			break; /* the broker could not read our id */
		json_decref(rep);
	}
	if ((e = json_object_get(rep, "error"))) {
		rc = tsec__error_from_json(e, err);
	} else {
		rc = 0;
		if (result)
			*result = json_dumps(json_object_get(rep, "result"), JSON_COMPACT);
	}
	json_decref(rep);
	return rc;
}

int tsec_client_check(struct tsec_client *c, const struct tsec_request *reqs,
		      size_t n, struct tsec_decision *out, struct tsec_error *err)
{
	json_t *arr = json_array(), *params, *res = NULL, *ds;
	char *text, *result = NULL;
	json_error_t je;
	int rc;

	for (size_t i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		json_array_append_new(arr, tsec__request_to_json(&reqs[i]));
	}
	params = json_pack("{s:o}", "requests", arr);
	text = json_dumps(params, JSON_COMPACT);
	json_decref(params);
	rc = tsec_client_call(c, "check", text, &result, err);
	free(text);
	if (rc)
		return rc;
	res = json_loads(result, 0, &je);
	free(result);
	ds = json_object_get(res, "decisions");
	if (!json_is_array(ds) || json_array_size(ds) != n) {
		json_decref(res);
		return tsec__seterr(err, TSEC_EPROTO, "", "reply has the wrong number of decisions");
	}
	for (size_t i = 0; i < n; i++)
		if (tsec__decision_from_json(json_array_get(ds, i), &out[i])) {
			for (size_t j = 0; j < n; j++)
				out[j].allow = 0;
			json_decref(res);
			return tsec__seterr(err, TSEC_EPROTO, "", "malformed decision");
		}
	json_decref(res);
	return 0;
}
