/*
 * tsec-broker: the "ask" listeners, Caddy's on-demand TLS question.
 * Caddy, before it obtains a certificate for a name a TLS client asked
 * for, sends GET <its ask URL>?domain=NAME and goes on only on a 2xx.
 * Each listener answers as one caller of the configuration
 *
 *   "ask": [{"listen": "127.0.0.1:7380", "principal": "svc:caddy",
 *            "roles": ["edge"]}]
 *
 * through tsec__obtain (obtain.c): the policy's cert.obtain and its rate,
 * counted with every other broker on the shared storage, each answer in
 * the decision log.  200 allows; 403 refuses with the reason; 400 is a
 * request without one well-formed name; 503 a decision that could not be
 * made (the count could not be read or written): a refusal too, so an
 * outage never lets names through.  Nothing but the path's query is read,
 * no body; the listener is loopback unless the configuration names an
 * address, as the metrics one.  libmicrohttpd runs it, a thread per
 * connection (a count waits on storage), at most CONNS at once; those
 * that do not ask cannot take them (httpkeep.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/httpkeep.h"
#include "broker/daemon/obtain.h"
#include "common/error.h"

#define KEEP 32                  /* open connections kept before the idlest goes */
/* MHD's own limit, threads: above KEEP by as many again and more, for
 * the connections closed for newcomers whose threads have not yet ended
 * (a machine slow to run them must not turn an ask away meanwhile). */
#define CONNS 96
#define IDLE_S 10

/* ---- configuration ---- */

static int ask_one(json_t *x, const char *place, struct tsec__ask_cfg *a,
		   struct tsec_error *err)
{
	const char *l = json_string_value(json_object_get(x, "listen"));

	if (!json_is_object(x))
		return tsec__seterr(err, TSEC_EINVAL, "", "config %s: must be an object", place);
	if (tsec__cfg_known_only(x, place, "ask", err))
		return err->code;
	if (!l || tsec__cfg_caller(x, &a->who))
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config %s: needs \"listen\" ([IPv4 ADDRESS:]PORT), a \"principal\" "
				    "and at most %d string \"roles\"", place, TSEC_D_MAX_ROLES);
	if (json_object_get(x, "admin"))
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config %s: an ask listener is never admin", place);
	a->who.uid = -1;
	if (!(a->listen = strdup(l)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	return tsec__cfg_listen(l, &a->addr, place, err);
}

int tsec__cfg_asks(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *v = json_object_get(root, "ask"), *x;
	char place[32];
	size_t i;

	if (!v)
		return 0;
	if (json_is_object(v)) {
		c->nasks = 1;
		return ask_one(v, "/ask", &c->asks[0], err);
	}
	if (!json_is_array(v) || json_array_size(v) > TSEC_D_MAX_ASK)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /ask: an object or an array of at most %d: {\"listen\", "
				    "\"principal\", \"roles\"}", TSEC_D_MAX_ASK);
	json_array_foreach(v, i, x) {
		snprintf(place, sizeof(place), "/ask/%zu", i);
		c->nasks = (int)i + 1;
		if (ask_one(x, place, &c->asks[i], err))
			return err->code;
		for (size_t j = 0; j < i; j++)
			if (c->asks[j].addr.sin_port == c->asks[i].addr.sin_port &&
			    c->asks[j].addr.sin_addr.s_addr == c->asks[i].addr.sin_addr.s_addr)
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s: the same address as /ask/%zu", place, j);
	}
	return 0;
}

void tsec__asks_free(struct tsec__config *c)
{
	for (int i = 0; i < TSEC_D_MAX_ASK; i++) {
		free(c->asks[i].listen);
		free(c->asks[i].who.roles_buf);
		free(c->asks[i].who.log_who);
	}
	c->nasks = 0;
}

int tsec__asks_differ(const struct tsec__config *a, const struct tsec__config *b)
{
	if (a->nasks != b->nasks)
		return 1;
	for (int i = 0; i < a->nasks; i++) {
		const struct tsec__ask_cfg *x = &a->asks[i], *y = &b->asks[i];

		if (strcmp(x->listen, y->listen) || strcmp(x->who.principal, y->who.principal) ||
		    x->who.log_who_len != y->who.log_who_len ||
		    memcmp(x->who.log_who, y->who.log_who, x->who.log_who_len))
			return 1;
	}
	return 0;
}

/* ---- the listener ---- */

struct ask {
	struct tsec__daemon *d;
	const struct tsec__ask_cfg *cfg;
	struct tsec__keeper keeper;  /* its connections (httpkeep.h) */
};

static struct ask asks[TSEC_D_MAX_ASK];

/* "<verdict>: <name>: <why>\n" (no name: "<verdict>: <why>\n"). */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *verdict,
			     const char *name, const char *why)
{
	char text[512];
	struct MHD_Response *r;
	enum MHD_Result rc;
	int n = snprintf(text, sizeof(text), "%s: %.256s%s%.200s\n", verdict, name ? name : "",
			 name ? ": " : "", why);

	if (n < 0)
		return MHD_NO;
	if ((size_t)n >= sizeof(text))
		n = (int)sizeof(text) - 1;
	r = MHD_create_response_from_buffer((size_t)n, text, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	rc = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct ask *a = cls;
	struct tsec__obtained o;
	struct tsec__call c;
	struct tsec_error err;
	const char *name;
	int rc;

	(void)url;
	(void)version;
	(void)upload;
	(void)con_cls;
	tsec__keeper_asking(&a->keeper, conn);
	if (*upload_size)
		return MHD_NO;           /* no bodies here */
	/* GET only: an answer counts the name, which HEAD must not do. */
	if (strcmp(method, "GET"))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "deny", NULL,
			     "only GET ?domain=NAME");
	name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "domain");
	if (!name || !*name)
		return reply(conn, MHD_HTTP_BAD_REQUEST, "deny", NULL, "no ?domain=NAME");
	/* As the listener's caller: the decision log names it, its call id
	 * null (no message carried one). */
	memset(&c, 0, sizeof(c));
	c.who = &a->cfg->who;
	c.index = -1;
	c.p.id = tsec_str_c(c.who->principal);
	c.p.roles = c.who->roles;
	c.p.nroles = c.who->nroles;
	c.p.call_ctx = &c;
	rc = tsec__obtain(a->d, &c, name, strlen(name), false, 0, &o, &err);
	if (c.id_text != c.id_small)
		free(c.id_text);
	if (rc)
		return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "deny", NULL, o.reason);
	if (o.dec.status == TSEC_STATUS_INVALID)
		return reply(conn, MHD_HTTP_BAD_REQUEST, "deny", NULL, o.reason);
	if (!o.dec.allow)
		return reply(conn, MHD_HTTP_FORBIDDEN, "deny", o.name, o.reason);
	return reply(conn, MHD_HTTP_OK, "allow", o.name, o.reason);
}

int tsec__ask_start(struct tsec__daemon *d, struct tsec_error *err)
{
	for (int i = 0; i < d->cfg.nasks; i++) {
		const struct sockaddr_in *sa = &d->cfg.asks[i].addr;
		char host[INET_ADDRSTRLEN];
		int fd;

		asks[i].d = d;
		asks[i].cfg = &d->cfg.asks[i];
		inet_ntop(AF_INET, &sa->sin_addr, host, sizeof(host));
		/* Nor can connections that do not ask take its threads. */
		if (tsec__keeper_init(&asks[i].keeper, KEEP, &d->st.ask_evicted))
			return tsec__seterr(err, TSEC_ENOMEM, "ask", "ask: cannot start: out of "
					    "resources");
		if ((fd = tsec__http_listen(sa, IDLE_S)) < 0) {
			tsec__seterr(err, TSEC_EIO, "ask", "ask: cannot listen on %s:%u: %s", host,
				     ntohs(sa->sin_port), strerror(errno));
			tsec__keeper_fini(&asks[i].keeper);
			return err->code;
		}
		/* MHD owns fd from here.  No MHD_USE_ERROR_LOG: its messages
		 * may quote what a client sent. */
		d->ask[i] = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION |
					     MHD_USE_INTERNAL_POLLING_THREAD, 0,
					     NULL, NULL, answer, &asks[i],
					     MHD_OPTION_LISTEN_SOCKET, fd,
					     MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNS,
					     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
					     MHD_OPTION_NOTIFY_CONNECTION, tsec__keeper_noted,
					     &asks[i].keeper,
					     MHD_OPTION_NOTIFY_COMPLETED, tsec__keeper_answered,
					     &asks[i].keeper, MHD_OPTION_END);
		if (!d->ask[i]) {
			tsec__keeper_fini(&asks[i].keeper);
			return tsec__seterr(err, TSEC_EIO, "ask", "ask: cannot serve on %s:%u", host,
					    ntohs(sa->sin_port));
		}
		tsec__say("ask: http://%s:%u/?domain=NAME answers cert.obtain as %s", host,
			  ntohs(sa->sin_port), d->cfg.asks[i].who.principal);
	}
	return 0;
}

void tsec__ask_stop(struct tsec__daemon *d)
{
	for (int i = 0; i < TSEC_D_MAX_ASK; i++) {
		if (!d->ask[i])
			continue;
		MHD_stop_daemon(d->ask[i]);
		tsec__keeper_fini(&asks[i].keeper);
		d->ask[i] = NULL;
	}
}
