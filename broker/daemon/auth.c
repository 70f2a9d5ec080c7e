/*
 * tsec-broker: ZAP, the ZeroMQ authentication protocol.  Every connection
 * is decided here before any message of it is read: a tcp (or ipc_curve)
 * peer by its CURVE public key, an ipc peer by its uid.  The answer's user
 * id is the caller's place in the configuration, which the main loop
 * reads back from each message's "User-Id" property.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"

static int recv_str(void *s, char *buf, size_t n, size_t *len)
{
	int r = zmq_recv(s, buf, n - 1, 0);
	if (r < 0)
		return -1;
	if ((size_t)r > n - 1)
		r = (int)(n - 1);
	buf[r] = '\0';
	if (len)
		*len = (size_t)r;
	return 0;
}

static void reply(void *s, const char *reqid, size_t idlen, const char *code,
		  const char *text, const char *user)
{
	zmq_send(s, "1.0", 3, ZMQ_SNDMORE);
	zmq_send(s, reqid, idlen, ZMQ_SNDMORE);
	zmq_send(s, code, strlen(code), ZMQ_SNDMORE);
	zmq_send(s, text, strlen(text), ZMQ_SNDMORE);
	zmq_send(s, user, strlen(user), ZMQ_SNDMORE);
	zmq_send(s, "", 0, 0);
}

/* The caller a CURVE key or an ipc peer address names, or -1. */
static int find_caller(const struct tsec__config *cfg, const char *mech,
		       const char *domain, const char *address,
		       const unsigned char *cred, int ncred)
{
	if (!strcmp(mech, "CURVE") && ncred == 32 && !strcmp(domain, TSEC_D_TCP_DOMAIN)) {
		for (int i = 0; i < cfg->ncallers; i++)
			if (cfg->callers[i].uid < 0 &&
			    sodium_memcmp(cfg->callers[i].key, cred, 32) == 0)
				return i;
	} else if (!strcmp(mech, "NULL") && !strcmp(domain, TSEC_D_IPC_DOMAIN)) {
		/* libzmq gives an ipc peer's address as ":uid:gid:pid". */
		const char *p = strchr(address, ':');
		long uid = p ? strtol(p + 1, NULL, 10) : -1;
		for (int i = 0; i < cfg->ncallers && uid >= 0; i++)
			if (cfg->callers[i].uid == uid)
				return i;
	}
	return -1;
}

/* Decides one ZAP request: the caller index as user id, or refusal. */
static void zap_one(struct tsec__daemon *d, void *s)
{
	char version[16], reqid[256], domain[64], address[256], ident[256], mech[32];
	unsigned char cred[64];
	size_t idlen = 0, msz;
	int more, found, ncred = 0;

	if (recv_str(s, version, sizeof(version), NULL) ||
	    recv_str(s, reqid, sizeof(reqid), &idlen) ||
	    recv_str(s, domain, sizeof(domain), NULL) ||
	    recv_str(s, address, sizeof(address), NULL) ||
	    recv_str(s, ident, sizeof(ident), NULL) ||
	    recv_str(s, mech, sizeof(mech), NULL))
		return;
	/* Credentials frames: CURVE sends the client's public key. */
	msz = sizeof(more);
	zmq_getsockopt(s, ZMQ_RCVMORE, &more, &msz);
	while (more) {
		if (zmq_recv(s, cred, sizeof(cred), 0) == 32)
			ncred = 32;
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &msz);
	}
	found = find_caller(&d->cfg, mech, domain, address, cred, ncred);
	if (found < 0) {
		atomic_fetch_add(&d->st.zap_refused, 1);
		reply(s, reqid, idlen, "400", "unknown caller", "");
	} else {
		char user[16];
		snprintf(user, sizeof(user), "%d", found);
		atomic_fetch_add(&d->st.zap_accepted, 1);
		reply(s, reqid, idlen, "200", "OK", user);
	}
}

struct zap_args {
	struct tsec__daemon *d;
	void *sock;
};

static void *zap_main(void *arg)
{
	struct zap_args a = *(struct zap_args *)arg;

	free(arg);
	pthread_setname_np(pthread_self(), "tsec-zap");
	tsec__block_signals();
	for (;;) {
		zmq_pollitem_t it = { a.sock, 0, ZMQ_POLLIN, 0 };
		if (zmq_poll(&it, 1, -1) < 0) {
			if (errno == ETERM)
				break;
			continue;
		}
		zap_one(a.d, a.sock);
	}
	zmq_close(a.sock);
	return NULL;
}

int tsec__auth_start(struct tsec__daemon *d, pthread_t *thread)
{
	struct zap_args *a = malloc(sizeof(*a));
	void *s = zmq_socket(d->zmq, ZMQ_REP);

	if (!a || !s || zmq_bind(s, TSEC_D_ZAP_ENDPOINT)) {
		tsec__say("ZAP: %s", zmq_strerror(errno));
		free(a);
		if (s)
			zmq_close(s);
		return -1;
	}
	a->d = d;
	a->sock = s;
	if (pthread_create(thread, NULL, zap_main, a)) {
		free(a);
		zmq_close(s);
		return -1;
	}
	return 0;
}
