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
 * Idle connections cannot lock the probes out (issue 34, item 11: 16
 * idle connections filled the limit and /health failed for 10 s at a
 * time).  Each connection is stamped from one counter when it opens and
 * each time it asks something; past KEEP open connections, a new one
 * closes the one with the oldest stamp, so whoever holds sockets open
 * without asking loses them to whoever asks.  A connection whose answer
 * is on its way is never closed, nor one whose request waits unread
 * (issue 52, item 6: under churn of about 2,200 connections a second,
 * the rule stamped by the millisecond saw every connection as equally
 * idle and closed probes that had just asked, or were asking).  MHD's
 * own limit is above KEEP, for the moment before a closed socket is
 * reaped.  All of this runs in MHD's one thread: no lock.
 *
 * And a connection reaches MHD only once it has said something: the
 * listening socket is ours, with TCP_DEFER_ACCEPT, so the kernel holds
 * a silent connection (up to IDLE_S, then hands it over as any other).
 * Before, a probe taken before its request reached the kernel looked
 * exactly like a churning connection that never speaks, and 33 newer
 * arrivals made it the oldest (issue 52, item 6: 1 probe of 60 under
 * ASan; test_daemon_metrics_asks_late makes it certain).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "broker/daemon/daemon.h"

#define KEEP 32                  /* open connections kept before the idlest goes */
#define LIMIT 96                 /* MHD's own */
#define IDLE_S 5                 /* MHD closes a connection silent this long */

struct tsec__mconn {
	struct tsec__mconn *prev, *next;
	int fd;
	uint64_t stamp;          /* last request, or the connection's opening */
	bool closing;
	bool answering;          /* asked, and not yet answered in full */
};

/*
 * The closable connection with the oldest stamp above floor: not one
 * already closing, nor one being answered.
 */
static struct tsec__mconn *oldest_above(struct tsec__daemon *d, uint64_t floor)
{
	struct tsec__mconn *best = NULL;

	for (struct tsec__mconn *o = d->mconns; o; o = o->next)
		if (!o->closing && !o->answering && o->stamp > floor &&
		    (!best || o->stamp < best->stamp))
			best = o;
	return best;
}

/* Bytes wait in the kernel that MHD has not read yet: a request arriving. */
static bool sent_unread(int fd)
{
	int n = 0;

	return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/*
 * One over KEEP: close the oldest connection that is not asking.  One
 * whose request waits unread is spared (a probe accepted in the same
 * turn of MHD's loop as 33 others, slower under a sanitizer, was closed
 * before MHD read what it asked).  Each try costs one ioctl; nothing is
 * closed when everyone is asking, and MHD's LIMIT bounds the rest.
 */
static void evict(struct tsec__daemon *d)
{
	uint64_t floor = 0;
	struct tsec__mconn *o;

	while ((o = oldest_above(d, floor)) && sent_unread(o->fd))
		floor = o->stamp;
	if (!o)
		return;
	/* MHD sees the socket end at its next poll and closes it. */
	o->closing = true;
	shutdown(o->fd, SHUT_RDWR);
	atomic_fetch_add(&d->st.metrics_evicted, 1);
}

static void noted(void *cls, struct MHD_Connection *conn, void **ctx,
		  enum MHD_ConnectionNotificationCode toe)
{
	struct tsec__daemon *d = cls;
	struct tsec__mconn *m = *ctx;
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!m)
			return;
		if (m->prev)
			m->prev->next = m->next;
		else
			d->mconns = m->next;
		if (m->next)
			m->next->prev = m->prev;
		d->nmconns--;
		free(m);
		*ctx = NULL;
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || !(m = calloc(1, sizeof(*m))))
		return;                  /* not tracked: MHD's limit still holds */
	m->fd = ci->connect_fd;
	if (++d->nmconns > KEEP)
		evict(d);                /* before m joins: never the newcomer */
	m->stamp = ++d->mstamp;
	m->next = d->mconns;
	if (d->mconns)
		d->mconns->prev = m;
	d->mconns = m;
	*ctx = m;
}

static struct tsec__mconn *mconn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/* A request ended (answered, or its connection went): closable again. */
static void answered(void *cls, struct MHD_Connection *conn, void **con_cls,
		     enum MHD_RequestTerminationCode toe)
{
	struct tsec__mconn *m = mconn_of(conn);

	(void)cls;
	(void)con_cls;
	(void)toe;
	if (m)
		m->answering = false;
}

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

	struct tsec__mconn *m = mconn_of(conn);

	(void)version;
	(void)upload;
	(void)con_cls;
	if (m) {
		m->stamp = ++d->mstamp;
		m->answering = true;
	}
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

int tsec__http_listen(const struct sockaddr_in *a, int defer_s)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1, e;

	if (fd < 0)
		return -1;
	if (!setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) &&
	    !setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s)) &&
	    !bind(fd, (const struct sockaddr *)a, sizeof(*a)) && !listen(fd, SOMAXCONN))
		return fd;
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int tsec__metrics_start(struct tsec__daemon *d)
{
	const struct sockaddr_in *a = &d->cfg.metrics_addr;   /* checked at load */
	char host[INET_ADDRSTRLEN];
	int fd;

	if (!d->cfg.metrics_listen)
		return 0;
	inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
	if ((fd = tsec__http_listen(a, IDLE_S)) < 0) {
		tsec__say("metrics: cannot listen on %s:%u: %s", host, ntohs(a->sin_port),
			  strerror(errno));
		return -1;
	}
	/* MHD owns fd from here: it closes it at its stop, and at a failure
	 * once the options are read (these are fixed, so read).
	 * No MHD_USE_ERROR_LOG: its messages may quote what a client sent. */
	d->metrics = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer, d,
				      MHD_OPTION_LISTEN_SOCKET, fd,
				      MHD_OPTION_CONNECTION_LIMIT, (unsigned)LIMIT,
				      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
				      MHD_OPTION_NOTIFY_CONNECTION, noted, d,
				      MHD_OPTION_NOTIFY_COMPLETED, answered, d, MHD_OPTION_END);
	if (!d->metrics) {
		tsec__say("metrics: cannot serve on %s:%u", host, ntohs(a->sin_port));
		return -1;
	}
	tsec__say("metrics: http://%s:%u/metrics", host, ntohs(a->sin_port));
	return 0;
}

void tsec__metrics_stop(struct tsec__daemon *d)
{
	if (d->metrics)
		MHD_stop_daemon(d->metrics);
	d->metrics = NULL;
}
