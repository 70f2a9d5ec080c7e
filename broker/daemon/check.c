/*
 * tsec-broker --check: its report, and the endpoints, listeners and
 * ipc callers, checked as the start would find them (issue 51, item 2: --check passed a
 * socket in a 1777 folder that the start then refused).  Each problem
 * said on a line of its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/daemon/daemon.h"
#include "broker/storage/store_above.h"

static int tcp_ok(const char *ep)
{
	const char *colon = strrchr(ep + 6, ':');
	char *end;
	long port;

	if (!colon || colon == ep + 6)
		return 0;
	port = strtol(colon + 1, &end, 10);
	return *end == '\0' && port >= 1 && port <= 65535;
}

/* Whether the user of uid is a member of group gid (its primary group
 * or a supplementary one, as the system's group database says). */
static bool in_group(long uid, long gid)
{
	struct passwd *pw = getpwuid((uid_t)uid);
	gid_t small[64], *groups = small;
	int n = 64;
	bool in = false;

	if (!pw)
		return false;
	if ((long)pw->pw_gid == gid)
		return true;
	/* Too many for small: n says how many there are; asked again. */
	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0 &&
	    (!(groups = malloc((size_t)n * sizeof(*groups))) ||
	     getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0))
		n = 0;
	for (int i = 0; i < n && !in; i++)
		in = (long)groups[i] == gid;
	if (groups != small)
		free(groups);
	return in;
}

/* Whether a listener's address can be bound now (the start binds it). */
static int listen_free(const struct sockaddr_in *a, const char *what)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc = 0;
	char host[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (const struct sockaddr *)a, sizeof(*a)) < 0) {
		tsec__say("%s %s:%u: cannot listen there: %s", what, host, ntohs(a->sin_port),
			  strerror(errno));
		rc = 1;
	} else {
		tsec__say("%s %s:%u: free", what, host, ntohs(a->sin_port));
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

static int check_ipc(const struct tsec__config *c, const char *ep)
{
	int live = tsec__ipc_in_use(ep + 6);

	if (live < 0) {
		tsec__say("endpoint %s: unusable", ep);
		return 1;
	}
	if (tsec__ipc_check(ep)) {
		tsec__say("endpoint %s: the start would refuse it (above)", ep);
		return 1;
	}
	tsec__say("endpoint %s: %s%s", ep, c->ipc_curve ? "CURVE" : "callers by peer uid",
		  live ? " (a broker is listening there now)" : "");
	return 0;
}

/*
 * An ipc caller by uid must be able to connect: the broker makes its
 * socket 0600 (ipc.c), so only its own uid and root can, and with
 * ipc_group 0660, so the group's members too.  Another uid listed
 * would be refused at every connect, silently: said here.
 */
static int check_ipc_callers(const struct tsec__config *c, const char *ep)
{
	int bad = 0;

	for (int i = 0; i < c->ncallers; i++) {
		long uid = c->callers[i].uid;

		if (uid < 0 || uid == 0 || uid == (long)geteuid() ||
		    (c->ipc_gid >= 0 && in_group(uid, c->ipc_gid)))
			continue;
		if (c->ipc_gid >= 0)
			tsec__say("ipc_uids: uid %ld (%s) cannot reach %s: the socket is 0660 for "
				  "group %ld (ipc_group), and uid %ld is not a member", uid,
				  c->callers[i].principal, ep, c->ipc_gid, uid);
		else
			tsec__say("ipc_uids: uid %ld (%s) cannot reach %s: the broker makes its "
				  "socket 0600, so only its own uid (%ld) and root may connect (or "
				  "members of an ipc_group)", uid, c->callers[i].principal, ep,
				  (long)geteuid());
		bad = 1;
	}
	return bad;
}

int tsec__check_endpoints(struct tsec__daemon *d)
{
	const struct tsec__config *c = &d->cfg;
	int bad = 0;

	for (int e = 0; e < c->nendpoints; e++) {
		const char *ep = c->endpoints[e];

		if (strncmp(ep, "tcp://", 6)) {
			bad |= check_ipc(c, ep);
			if (!c->ipc_curve)
				bad |= check_ipc_callers(c, ep);
		} else if (!tcp_ok(ep)) {
			tsec__say("endpoint %s: not HOST:PORT", ep);
			bad = 1;
		} else {
			tsec__say("endpoint %s: CURVE, callers by public key", ep);
		}
	}
	if (c->metrics_listen)
		bad |= listen_free(&c->metrics_addr, "metrics_listen");
	for (int i = 0; i < c->nasks; i++)
		bad |= listen_free(&c->asks[i].addr, "ask");
	return bad;
}

/* --check's line on the storage: a shared backend must answer (the
 * fleet's record read, or its absence); 1 when it did not. */
static int report_storage(struct tsec__daemon *d)
{
	const struct tsec__config *c = &d->cfg;
	struct tsec_error err;
	char *b = NULL;
	size_t blen;
	int rc;

	if (!tsec__fleet_shared(d)) {
		tsec__say("storage %s: opened and recovered", c->storage);
		return 0;
	}
	rc = tsec__store_record_get(d->store, "policy", &b, &blen, &err);
	free(b);
	if (rc && rc != TSEC_ENOENT) {
		tsec__say("storage %s at %s: %s", c->st.backend, c->st.endpoints, err.msg);
		return 1;
	}
	tsec__say("storage %s at %s, prefix %s: reachable%s%s; %s", c->st.backend,
		  c->st.endpoints, c->st.prefix ? c->st.prefix : "tsec",
		  c->st.key_file ? ", values encrypted" : "",
		  c->st.cache_bytes ? ", LocalCache" : "",
		  rc ? "no fleet policy published yet" : "a fleet policy is published");
	return 0;
}

/* --check's line on the callers; 1 when there is none. */
static int report_callers(const struct tsec__config *c)
{
	int keys = 0, uids = 0, admins = 0;

	for (int i = 0; i < c->ncallers; i++) {
		keys += c->callers[i].uid < 0;
		uids += c->callers[i].uid >= 0;
		admins += c->callers[i].admin;
	}
	tsec__say("callers: %d by CURVE key, %d by uid, %d admin", keys, uids, admins);
	if (c->ncallers)
		return 0;
	tsec__say("callers: none configured: nobody could call this broker");
	return 1;
}

int tsec__check_report(struct tsec__daemon *d, const char *config)
{
	const struct tsec__config *c = &d->cfg;
	struct tsec_module_info info;
	int bad = 0;

	tsec__say("config %s: every setting known and valid", config);
	tsec_bus_info(d->bus, "policy", &info);
	tsec__say("module %s: %s %s, %s build, ABI %u.%u", c->module, info.name, info.version,
		  tsec_build_name(info.build), info.abi_major, info.abi_minor);
	tsec__say("policy %s: compiled; %s; revision %lld; sha256 %s", c->policy,
		  c->have_pk ? "signature verified (Ed25519)"
			     : "NOT SIGNED (allowed by \"allow_unsigned_policy\")",
		  d->policy.revision, d->policy.sha256);
	bad |= report_storage(d);
	if (access(c->state_dir, W_OK) != 0) {
		tsec__say("state_dir %s: not writable", c->state_dir);
		bad = 1;
	}
	bad |= tsec__check_endpoints(d);
	bad |= report_callers(c);
	tsec__say("decision log: %s", c->decision_log ? c->decision_log : "off");
	if (c->allow_caller_clock)
		tsec__say("allow_caller_clock: admin callers may set context.now (tests only)");
	tsec__say(bad ? "configuration has problems (above)" : "configuration and policy are good");
	return bad ? 2 : 0;
}
