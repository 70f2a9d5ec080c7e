/*
 * tsec-broker: the optional Prometheus listener ("metrics_listen").
 * libmicrohttpd serves from its own thread GET /metrics: the broker's
 * counters, latency histograms and what runs (build, module, policy
 * revision and SHA-256), rendered by the same code as `tsec stats
 * --prometheus` (common/prom.c); GET /health: the health answer as JSON,
 * 200 while the broker serves (status "ok" or "degraded"); GET /ready:
 * 200 when it is "ok", 503 with the reasons when degraded, for a load
 * balancer or an orchestrator's readiness probe.  It binds to loopback unless the
 * configuration names another address; it reads counters only and takes
 * no request body, so a caller can learn nothing but the numbers.
 *
 * Connections held open without asking cannot lock the probes out
 * (issue 34, item 11; issue 52, item 6): the listener keeps KEEP of them
 * as httpkeep.h says, MHD's own LIMIT above it for the moment before a
 * closed socket is reaped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "broker/daemon/daemon.h"
#include "common/error.h"
#include "broker/daemon/httpkeep.h"

#define KEEP 32                  /* open connections kept before the idlest goes */
#define LIMIT 96                 /* MHD's own */
#define IDLE_S 5                 /* MHD closes a connection silent this long */

static struct tsec__keeper keeper;   /* its connections (httpkeep.h) */

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct tsec__daemon *d = cls;
	struct MHD_Response *r;
	enum MHD_Result rc;
	unsigned status = MHD_HTTP_OK;
	bool json = false;
	char *text = NULL;
	json_t *st;

	(void)version;
	(void)upload;
	(void)con_cls;
	tsec__keeper_asking(&keeper, conn);
	if (*upload_size)
		return MHD_NO;           /* no bodies here */
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		status = MHD_HTTP_METHOD_NOT_ALLOWED;
		text = strdup("only GET /metrics, /health, /ready\n");
	} else if (!strcmp(url, "/health") || !strcmp(url, "/ready")) {
		json_t *h = tsec__health_json(d);
		const char *hs = json_string_value(json_object_get(h, "status"));

		if (url[1] == 'r' && (!hs || strcmp(hs, "ok")))
			status = MHD_HTTP_SERVICE_UNAVAILABLE;
		if (h && (text = json_dumps(h, JSON_COMPACT))) {
			size_t n = strlen(text);
			char *t = realloc(text, n + 2);

			if (t) {
				t[n] = '\n';
				t[n + 1] = '\0';
				text = t;
			}
		}
		json_decref(h);
		json = true;
	} else if (strcmp(url, "/metrics")) {
		status = MHD_HTTP_NOT_FOUND;
		text = strdup("see /metrics, /health, /ready\n");
	} else {
		st = tsec__stats_json(d);
		text = tsec__prometheus(st);
		json_decref(st);
	}
	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", json ? "application/json"
				: status == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
				: "text/plain");
	rc = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return rc;
}

int tsec__metrics_start(struct tsec__daemon *d, struct tsec_error *err)
{
	const struct sockaddr_in *a = &d->cfg.metrics_addr;   /* checked at load */
	char host[INET_ADDRSTRLEN];
	int fd;

	if (!d->cfg.metrics_listen)
		return 0;
	inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
	if (tsec__keeper_init(&keeper, KEEP, &d->st.metrics_evicted))
		return tsec__seterr(err, TSEC_ENOMEM, "metrics_listen", "metrics: cannot start: "
				    "out of resources");
	if ((fd = tsec__http_listen(a, IDLE_S)) < 0) {
		tsec__seterr(err, TSEC_EIO, "metrics_listen", "metrics: cannot listen on %s:%u: %s",
			     host, ntohs(a->sin_port), strerror(errno));
		tsec__keeper_fini(&keeper);
		return err->code;
	}
	/* MHD owns fd from here: it closes it at its stop, and at a failure
	 * once the options are read (these are fixed, so read).
	 * No MHD_USE_ERROR_LOG: its messages may quote what a client sent. */
	d->metrics = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer, d,
				      MHD_OPTION_LISTEN_SOCKET, fd,
				      MHD_OPTION_CONNECTION_LIMIT, (unsigned)LIMIT,
				      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
				      MHD_OPTION_NOTIFY_CONNECTION, tsec__keeper_noted, &keeper,
				      MHD_OPTION_NOTIFY_COMPLETED, tsec__keeper_answered, &keeper,
				      MHD_OPTION_END);
	if (!d->metrics) {
		tsec__keeper_fini(&keeper);
		return tsec__seterr(err, TSEC_EIO, "metrics_listen", "metrics: cannot serve on %s:%u",
				    host, ntohs(a->sin_port));
	}
	tsec__say("metrics: http://%s:%u/metrics", host, ntohs(a->sin_port));
	return 0;
}

void tsec__metrics_stop(struct tsec__daemon *d)
{
	if (!d->metrics)
		return;
	MHD_stop_daemon(d->metrics);
	tsec__keeper_fini(&keeper);
	d->metrics = NULL;
}
