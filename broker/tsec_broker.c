/*
 * tsec-broker: serves the policy module, the gated store and locks over
 * ZeroMQ.
 *
 * Threads: the main thread owns the client sockets (one ROUTER for tcp
 * endpoints, with CURVE; one for ipc endpoints, with the peer's uid), a
 * ZAP thread authenticates every connection, and a pool of workers runs
 * the calls.  The main thread hands each request to the workers with the
 * caller's identity as ZAP gave it (never anything from the payload) and
 * routes the replies back.  Signals reach the main loop through a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tinysecurity/store.h"
#include "broker/declog.h"
#include "broker/sign.h"
#include "broker/wire.h"
#include "common/clock.h"
#include "common/error.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define WORK_ENDPOINT "inproc://tsec-work"
#define REPLY_ENDPOINT "inproc://tsec-replies"
#define IPC_DOMAIN "tsec-ipc"
#define TCP_DOMAIN "tsec-tcp"
#define MAX_ENDPOINTS 8
#define MAX_CALLERS 1024
#define MAX_WORKERS 32
#define MAX_BATCH 256
#define MAX_HELD_LOCKS 4096
#define LOCK_WAIT_MAX_MS 30000
#define DRAIN_LINGER_MS 300

struct caller {
	char principal[256];
	char *roles_buf;
	struct tsec_str roles[16];
	uint32_t nroles;
	int admin;
	uint8_t key[32];             /* CURVE public key (tcp callers) */
	long uid;                    /* peer uid (ipc callers), -1 if none */
};

struct held_lock {
	struct tsec_lock lk;
	int caller;
	int used;
};

struct config {
	char *module, *policy, *storage, *decision_log;
	char *endpoints[MAX_ENDPOINTS];
	int nendpoints;
	char server_secret[41];      /* Z85 */
	int have_secret;
	unsigned char policy_pk[32];
	int have_pk;
	int ipc_curve;               /* ipc callers use CURVE, not their uid */
	size_t max_message;
	int workers;
	size_t log_lines;
	struct caller callers[MAX_CALLERS];
	int ncallers;
};

struct stats {
	_Atomic uint64_t calls, errors, denied, malformed, oversized, mismatched;
	_Atomic uint64_t zap_ok, zap_refused, reloads, reload_failures;
	_Atomic uint64_t by_method[16];
};

static const char *const methods[] = {
	"evaluate", "check", "health", "stats", "reload",
	"store.put", "store.get", "store.exists", "store.delete", "store.list",
	"store.stat", "store.move", "lock.acquire", "lock.renew", "lock.release",
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

static struct {
	struct config cfg;
	struct tsec_bus *bus;
	struct tsec_store *store;
	struct tsec__declog *log;
	void *ctx;
	struct stats st;
	pthread_mutex_t reload_lock;
	pthread_mutex_t locks_lock;
	struct held_lock locks[MAX_HELD_LOCKS];
	int64_t started_ms;
	int sigpipe[2];
} B;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "tsec-broker: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- configuration ---- */

static int cfg_string(json_t *o, const char *k, char **out, int required)
{
	json_t *v = json_object_get(o, k);
	if (!v) {
		if (required)
			say("config: \"%s\" is required", k);
		return required ? -1 : 0;
	}
	if (!json_is_string(v)) {
		say("config: \"%s\" must be a string", k);
		return -1;
	}
	*out = strdup(json_string_value(v));
	return 0;
}

static int cfg_roles(json_t *roles, struct caller *c)
{
	size_t i, total = 0, o = 0;
	json_t *v;

	if (!roles)
		return 0;
	if (!json_is_array(roles) || json_array_size(roles) > 16)
		return -1;
	json_array_foreach(roles, i, v) {
		if (!json_is_string(v))
			return -1;
		total += json_string_length(v) + 1;
	}
	c->roles_buf = malloc(total + 1);
	if (!c->roles_buf)
		return -1;
	json_array_foreach(roles, i, v) {
		size_t n = json_string_length(v);
		memcpy(c->roles_buf + o, json_string_value(v), n + 1);
		c->roles[c->nroles].ptr = c->roles_buf + o;
		c->roles[c->nroles].len = n;
		c->nroles++;
		o += n + 1;
	}
	return 0;
}

/* What clients and ipc_uids entries share: principal, roles, admin. */
static int cfg_caller(json_t *x, struct caller *cl)
{
	const char *p = json_string_value(json_object_get(x, "principal"));

	if (!p || !*p || strlen(p) >= sizeof(cl->principal) ||
	    cfg_roles(json_object_get(x, "roles"), cl))
		return -1;
	snprintf(cl->principal, sizeof(cl->principal), "%s", p);
	cl->admin = json_is_true(json_object_get(x, "admin"));
	return 0;
}

static int load_config(const char *path, struct config *c)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *v, *x;
	size_t i;
	int rc = -1;

	if (!root) {
		say("config %s: line %d: %s", path, je.line, je.text);
		return -1;
	}
	memset(c, 0, sizeof(*c));
	c->max_message = 1 << 20;
	c->workers = 4;
	c->log_lines = 4096;
	if (cfg_string(root, "module", &c->module, 1) ||
	    cfg_string(root, "policy", &c->policy, 1) ||
	    cfg_string(root, "storage", &c->storage, 1) ||
	    cfg_string(root, "decision_log", &c->decision_log, 0))
		goto out;
	v = json_object_get(root, "endpoints");
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > MAX_ENDPOINTS) {
		say("config: \"endpoints\" must list 1-%d endpoints", MAX_ENDPOINTS);
		goto out;
	}
	json_array_foreach(v, i, x) {
		const char *e = json_string_value(x);
		if (!e || (strncmp(e, "tcp://", 6) && strncmp(e, "ipc://", 6))) {
			say("config: endpoint %zu must be a tcp:// or ipc:// string", i);
			goto out;
		}
		c->endpoints[c->nendpoints++] = strdup(e);
	}
	if ((v = json_object_get(root, "server_secret_key"))) {
		if (!json_is_string(v) || json_string_length(v) != 40) {
			say("config: \"server_secret_key\" must be 40 characters of Z85");
			goto out;
		}
		memcpy(c->server_secret, json_string_value(v), 41);
		c->have_secret = 1;
	}
	if ((v = json_object_get(root, "policy_public_key"))) {
		if (!json_is_string(v) || tsec__hex_decode(json_string_value(v), c->policy_pk, 32)) {
			say("config: \"policy_public_key\" must be 64 hex digits");
			goto out;
		}
		c->have_pk = 1;
	}
	if ((v = json_object_get(root, "ipc_curve"))) {
		if (!json_is_boolean(v)) {
			say("config: \"ipc_curve\" must be true or false");
			goto out;
		}
		c->ipc_curve = json_is_true(v);
	}
	if ((v = json_object_get(root, "max_message"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 256 ||
		    json_integer_value(v) > (64 << 20)) {
			say("config: \"max_message\" must be 256 bytes to 64 MiB");
			goto out;
		}
		c->max_message = (size_t)json_integer_value(v);
	}
	if ((v = json_object_get(root, "workers"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > MAX_WORKERS) {
			say("config: \"workers\" must be 1-%d", MAX_WORKERS);
			goto out;
		}
		c->workers = (int)json_integer_value(v);
	}
	if ((v = json_object_get(root, "log_buffer"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000) {
			say("config: \"log_buffer\" must be 1-1000000 lines");
			goto out;
		}
		c->log_lines = (size_t)json_integer_value(v);
	}
	v = json_object_get(root, "clients");
	json_array_foreach(v, i, x) {
		struct caller *cl = &c->callers[c->ncallers];
		const char *key = json_string_value(json_object_get(x, "public_key"));
		if (c->ncallers == MAX_CALLERS || !key || strlen(key) != 40 ||
		    !zmq_z85_decode(cl->key, key) || cfg_caller(x, cl)) {
			say("config: client %zu needs a 40-character Z85 \"public_key\", a \"principal\""
			    " and at most 16 string \"roles\"", i);
			goto out;
		}
		cl->uid = -1;
		c->ncallers++;
	}
	v = json_object_get(root, "ipc_uids");
	json_array_foreach(v, i, x) {
		struct caller *cl = &c->callers[c->ncallers];
		json_t *uid = json_object_get(x, "uid");
		if (c->ncallers == MAX_CALLERS || !json_is_integer(uid) ||
		    json_integer_value(uid) < 0 || cfg_caller(x, cl)) {
			say("config: ipc_uids %zu needs an integer \"uid\", a \"principal\""
			    " and at most 16 string \"roles\"", i);
			goto out;
		}
		cl->uid = (long)json_integer_value(uid);
		c->ncallers++;
	}
	for (int e = 0; e < c->nendpoints; e++)
		if ((!strncmp(c->endpoints[e], "tcp://", 6) || c->ipc_curve) && !c->have_secret) {
			say("config: tcp endpoints and ipc_curve need \"server_secret_key\" (CURVE)");
			goto out;
		}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* ---- policy ---- */

static int policy_text(char **text, size_t *len, struct tsec_error *err)
{
	return tsec__policy_read(B.cfg.policy, B.cfg.have_pk ? B.cfg.policy_pk : NULL,
				 text, len, err);
}

/* Reloads the policy file; on any failure the old policy keeps serving. */
static int reload_policy(struct tsec_error *err)
{
	char *text = NULL;
	size_t len;
	int rc;

	pthread_mutex_lock(&B.reload_lock);
	rc = policy_text(&text, &len, err);
	if (!rc)
		rc = tsec_bus_reload(B.bus, "policy", text, len, err);
	pthread_mutex_unlock(&B.reload_lock);
	free(text);
	if (rc) {
		atomic_fetch_add(&B.st.reload_failures, 1);
		say("reload refused, the old policy keeps serving: %s%s%s", err->where,
		    err->where[0] ? ": " : "", err->msg);
	} else {
		atomic_fetch_add(&B.st.reloads, 1);
		say("policy reloaded from %s", B.cfg.policy);
	}
	return rc;
}

/* ---- ZAP ---- */

static int zap_recv_str(void *s, char *buf, size_t n, size_t *len)
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

static void zap_reply(void *s, const char *reqid, size_t idlen, const char *code,
		      const char *text, const char *user)
{
	zmq_send(s, "1.0", 3, ZMQ_SNDMORE);
	zmq_send(s, reqid, idlen, ZMQ_SNDMORE);
	zmq_send(s, code, strlen(code), ZMQ_SNDMORE);
	zmq_send(s, text, strlen(text), ZMQ_SNDMORE);
	zmq_send(s, user, strlen(user), ZMQ_SNDMORE);
	zmq_send(s, "", 0, 0);
}

/* Decides one ZAP request: the caller index as user id, or refusal. */
static void zap_one(void *s)
{
	char version[16], reqid[256], domain[64], address[256], ident[256], mech[32];
	unsigned char cred[64];
	size_t idlen = 0;
	int more, found = -1, ncred = 0;
	size_t msz = sizeof(more);

	if (zap_recv_str(s, version, sizeof(version), NULL) ||
	    zap_recv_str(s, reqid, sizeof(reqid), &idlen) ||
	    zap_recv_str(s, domain, sizeof(domain), NULL) ||
	    zap_recv_str(s, address, sizeof(address), NULL) ||
	    zap_recv_str(s, ident, sizeof(ident), NULL) ||
	    zap_recv_str(s, mech, sizeof(mech), NULL))
		return;
	/* Credentials frames: CURVE sends the client's public key. */
	zmq_getsockopt(s, ZMQ_RCVMORE, &more, &msz);
	while (more) {
		int r = zmq_recv(s, cred, sizeof(cred), 0);
		if (r == 32)
			ncred = 32;
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &msz);
	}
	if (!strcmp(mech, "CURVE") && ncred == 32 && !strcmp(domain, TCP_DOMAIN)) {
		for (int i = 0; i < B.cfg.ncallers && found < 0; i++)
			if (B.cfg.callers[i].uid < 0 &&
			    sodium_memcmp(B.cfg.callers[i].key, cred, 32) == 0)
				found = i;
	} else if (!strcmp(mech, "NULL") && !strcmp(domain, IPC_DOMAIN)) {
		/* libzmq gives an ipc peer's address as ":uid:gid:pid". */
		long uid = -1;
		char *p = strchr(address, ':');
		if (p)
			uid = strtol(p + 1, NULL, 10);
		for (int i = 0; i < B.cfg.ncallers && found < 0 && uid >= 0; i++)
			if (B.cfg.callers[i].uid == uid)
				found = i;
	}
	if (found < 0) {
		atomic_fetch_add(&B.st.zap_refused, 1);
		zap_reply(s, reqid, idlen, "400", "unknown caller", "");
	} else {
		char user[16];
		snprintf(user, sizeof(user), "%d", found);
		atomic_fetch_add(&B.st.zap_ok, 1);
		zap_reply(s, reqid, idlen, "200", "OK", user);
	}
}

static void *zap_main(void *arg)
{
	void *s = arg;
	for (;;) {
		zmq_pollitem_t it = { s, 0, ZMQ_POLLIN, 0 };
		if (zmq_poll(&it, 1, -1) < 0) {
			if (errno == ETERM)
				break;
			continue;
		}
		zap_one(s);
	}
	zmq_close(s);
	return NULL;
}

/* ---- calls ---- */

struct call {
	const struct caller *who;
	int index;
	struct tsec_principal p;
	json_t *id;
	json_t *params;
};

/* The call this thread is running, for the store's observer. */
static _Thread_local const struct call *current;

static void log_decision(const struct call *c, const char *action,
			 const char *resource, int allow, const char *status,
			 json_t *rules, int floor, int64_t latency_ns)
{
	json_t *o = json_object();
	char *line;

	json_object_set_new(o, "time_ms", json_integer(tsec__wall_ms()));
	json_object_set(o, "id", c->id ? c->id : json_null());
	json_object_set_new(o, "principal", json_string(c->who->principal));
	json_object_set_new(o, "action", json_string(action ? action : ""));
	json_object_set_new(o, "resource", json_string(resource ? resource : ""));
	json_object_set_new(o, "decision", json_string(allow ? "allow" : "deny"));
	json_object_set_new(o, "status", json_string(status));
	json_object_set(o, "rules", rules ? rules : json_array());
	json_object_set_new(o, "floor", json_boolean(floor));
	json_object_set_new(o, "latency_ns", json_integer(latency_ns));
	line = json_dumps(o, JSON_COMPACT);
	if (line)
		tsec__declog_push(B.log, line, strlen(line));
	free(line);
	json_decref(o);
}

static json_t *fail(int code, const char *where, const char *msg)
{
	return tsec__error_json(code, where, msg);
}

static json_t *err_json(const struct tsec_error *e)
{
	return tsec__error_json(e->code, e->where, e->msg);
}

static const char *param_str(const struct call *c, const char *k)
{
	return json_string_value(json_object_get(c->params, k));
}

static json_t *do_check(struct call *c, json_t **result)
{
	json_t *reqs = json_object_get(c->params, "requests"), *out, *v;
	struct tsec_request r[MAX_BATCH];
	struct tsec_decision d[MAX_BATCH];
	struct tsec_error err;
	int64_t t0, lat;
	size_t i, n;

	if (!json_is_array(reqs) || (n = json_array_size(reqs)) == 0 || n > MAX_BATCH)
		return fail(TSEC_EPROTO, "params.requests", "need an array of 1-256 requests");
	json_array_foreach(reqs, i, v) {
		if (tsec__request_from_json(v, &r[i], &err))
			return err_json(&err);
		r[i].principal = c->p.id;
		r[i].roles = c->p.roles;
		r[i].nroles = c->p.nroles;
	}
	t0 = (int64_t)tsec__mono_ns();
	if (tsec_bus_check(B.bus, "policy", r, n, d, &err))
		return err_json(&err);
	lat = ((int64_t)tsec__mono_ns() - t0) / (int64_t)n;
	out = json_array();
	for (i = 0; i < n; i++) {
		json_t *dj = tsec__decision_to_json(&d[i]);
		char res[TSEC_KEY_MAX + 1];
		tsec__strlcpy(res, r[i].resource.ptr, r[i].resource.len, sizeof(res));
		log_decision(c, json_string_value(json_object_get(json_array_get(reqs, i), "action")),
			     res, d[i].allow, tsec__status_name(d[i].status),
			     json_object_get(dj, "rules"), d[i].status == TSEC_STATUS_FLOOR, lat);
		if (!d[i].allow)
			atomic_fetch_add(&B.st.denied, 1);
		json_array_append_new(out, dj);
	}
	*result = json_pack("{s:o}", "decisions", out);
	return NULL;
}

static json_t *do_evaluate(struct call *c, json_t **result)
{
	struct tsec_request r;
	struct tsec_report *rep;
	struct tsec_error err;
	json_t *e = NULL;

	if (tsec__request_from_json(json_object_get(c->params, "request"), &r, &err))
		return err_json(&err);
	r.principal = c->p.id;
	r.roles = c->p.roles;
	r.nroles = c->p.nroles;
	rep = malloc(sizeof(*rep));
	if (!rep)
		return fail(TSEC_ENOMEM, "", NULL);
	if (tsec_bus_evaluate(B.bus, "policy", &r, rep, &err))
		e = err_json(&err);
	else
		*result = tsec__report_to_json(rep);
	free(rep);
	return e;
}

/*
 * The store's observer: one log line per decision the store's own policy
 * checks made (storage and lock calls), with the deciding rules.
 */
static void observe(void *ctx, const struct tsec_request *reqs,
		    const struct tsec_decision *d, size_t n, uint64_t latency_ns)
{
	(void)ctx;
	if (!current)
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *dj = tsec__decision_to_json(&d[i]);
		char action[32], res[TSEC_KEY_MAX + 1];
		tsec__strlcpy(action, reqs[i].action.ptr, reqs[i].action.len, sizeof(action));
		tsec__strlcpy(res, reqs[i].resource.ptr, reqs[i].resource.len, sizeof(res));
		log_decision(current, action, res, d[i].allow, tsec__status_name(d[i].status),
			     json_object_get(dj, "rules"), d[i].status == TSEC_STATUS_FLOOR,
			     (int64_t)(latency_ns / n));
		if (!d[i].allow)
			atomic_fetch_add(&B.st.denied, 1);
		json_decref(dj);
	}
}

static json_t *value_json(const char *v, size_t n)
{
	json_t *s = json_stringn(v, n);
	if (s)
		return json_pack("{s:o}", "value", s);
	/* Not UTF-8: base64. */
	size_t bl = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *b = malloc(bl);
	sodium_bin2base64(b, bl, (const unsigned char *)v, n, sodium_base64_VARIANT_ORIGINAL);
	s = json_pack("{s:s}", "value_b64", b);
	free(b);
	return s;
}

static json_t *do_store(struct call *c, const char *m, json_t **result)
{
	const char *key = param_str(c, "key");
	struct tsec_error err;
	int rc = TSEC_EPROTO;

	memset(&err, 0, sizeof(err));
	if (!strcmp(m, "store.put")) {
		json_t *v = json_object_get(c->params, "value");
		json_t *b = json_object_get(c->params, "value_b64");
		if (json_is_string(v)) {
			rc = tsec_store_put(B.store, &c->p, key, json_string_value(v),
					    json_string_length(v), &err);
		} else if (json_is_string(b)) {
			size_t cap = json_string_length(b), n = 0;
			unsigned char *buf = malloc(cap + 1);
			if (!buf || sodium_base642bin(buf, cap, json_string_value(b), cap, NULL, &n,
						      NULL, sodium_base64_VARIANT_ORIGINAL)) {
				free(buf);
				return fail(TSEC_EPROTO, "params.value_b64", "not base64");
			}
			rc = tsec_store_put(B.store, &c->p, key, buf, n, &err);
			free(buf);
		} else {
			return fail(TSEC_EPROTO, "params.value", "need \"value\" or \"value_b64\"");
		}
		if (!rc)
			*result = json_object();
	} else if (!strcmp(m, "store.get")) {
		char *v;
		size_t n;
		rc = tsec_store_get(B.store, &c->p, key, &v, &n, &err);
		if (!rc) {
			*result = value_json(v, n);
			free(v);
		}
	} else if (!strcmp(m, "store.exists")) {
		int ex;
		rc = tsec_store_exists(B.store, &c->p, key, &ex, &err);
		if (!rc)
			*result = json_pack("{s:b}", "exists", ex);
	} else if (!strcmp(m, "store.delete")) {
		rc = tsec_store_delete(B.store, &c->p, key,
				       json_is_true(json_object_get(c->params, "recursive")), &err);
		if (!rc)
			*result = json_object();
	} else if (!strcmp(m, "store.list")) {
		struct tsec_strlist l;
		const char *prefix = param_str(c, "prefix");
		key = prefix ? prefix : "";
		rc = tsec_store_list(B.store, &c->p, key,
				     json_is_true(json_object_get(c->params, "recursive")), &l, &err);
		if (!rc) {
			json_t *a = json_array();
			for (size_t i = 0; i < l.n; i++)
				json_array_append_new(a, json_string(l.v[i]));
			tsec_strlist_free(&l);
			*result = json_pack("{s:o}", "keys", a);
		}
	} else if (!strcmp(m, "store.stat")) {
		struct tsec_stat st;
		rc = tsec_store_stat(B.store, &c->p, key, &st, &err);
		if (!rc)
			*result = json_pack("{s:I,s:I,s:b}", "size", (json_int_t)st.size,
					    "mtime_ns", (json_int_t)st.mtime_ns, "is_file", st.is_file);
	} else if (!strcmp(m, "store.move")) {
		key = param_str(c, "src");
		rc = tsec_store_move(B.store, &c->p, key, param_str(c, "dst"), &err);
		if (!rc)
			*result = json_object();
	}
	return rc ? err_json(&err) : NULL;
}

/* The held-locks table: locks taken through the broker, released at exit. */
static void held_put(const struct tsec_lock *lk, int caller)
{
	pthread_mutex_lock(&B.locks_lock);
	for (int i = 0; i < MAX_HELD_LOCKS; i++)
		if (!B.locks[i].used) {
			B.locks[i].lk = *lk;
			B.locks[i].caller = caller;
			B.locks[i].used = 1;
			break;
		}
	pthread_mutex_unlock(&B.locks_lock);
}

static void held_drop(const struct tsec_lock *lk)
{
	pthread_mutex_lock(&B.locks_lock);
	for (int i = 0; i < MAX_HELD_LOCKS; i++)
		if (B.locks[i].used && !strcmp(B.locks[i].lk.name, lk->name) &&
		    !sodium_memcmp(B.locks[i].lk.token, lk->token, 16))
			B.locks[i].used = 0;
	pthread_mutex_unlock(&B.locks_lock);
}

static json_t *do_lock(struct call *c, const char *m, json_t **result)
{
	const char *name = param_str(c, "name"), *tok = param_str(c, "token");
	json_t *ttl = json_object_get(c->params, "ttl_ms");
	json_t *tmo = json_object_get(c->params, "timeout_ms");
	struct tsec_lock lk;
	struct tsec_error err;
	char hex[33];
	int rc;

	memset(&lk, 0, sizeof(lk));
	memset(&err, 0, sizeof(err));
	if (strcmp(m, "lock.release") &&
	    (!json_is_integer(ttl) || json_integer_value(ttl) <= 0))
		return fail(TSEC_EPROTO, "params.ttl_ms", "need a positive integer");
	if (!strcmp(m, "lock.acquire")) {
		uint64_t wait = 0;
		if (tmo && (!json_is_integer(tmo) || json_integer_value(tmo) < 0))
			return fail(TSEC_EPROTO, "params.timeout_ms", "need a non-negative integer");
		if (tmo)
			wait = (uint64_t)json_integer_value(tmo);
		/* A worker waits at most this long; longer waits retry. */
		if (wait > LOCK_WAIT_MAX_MS)
			wait = LOCK_WAIT_MAX_MS;
		rc = wait ? tsec_lock_acquire(B.store, &c->p, name, (uint64_t)json_integer_value(ttl),
					      wait, &lk, &err)
			  : tsec_lock_try_acquire(B.store, &c->p, name,
						  (uint64_t)json_integer_value(ttl), &lk, &err);
		if (!rc) {
			held_put(&lk, c->index);
			sodium_bin2hex(hex, sizeof(hex), lk.token, 16);
			*result = json_pack("{s:s,s:s,s:I}", "name", lk.name, "token", hex,
					    "expires_ms", (json_int_t)lk.expires_ms);
		}
		return rc ? err_json(&err) : NULL;
	}
	if (!name || !tok || tsec__hex_decode(tok, lk.token, 16) ||
	    strlen(name) > TSEC_LOCK_NAME_MAX)
		return fail(TSEC_EPROTO, "params", "need \"name\" and a 32-digit hex \"token\"");
	snprintf(lk.name, sizeof(lk.name), "%s", name);
	if (!strcmp(m, "lock.renew")) {
		rc = tsec_lock_renew(B.store, &c->p, &lk, (uint64_t)json_integer_value(ttl), &err);
		if (!rc)
			*result = json_pack("{s:I}", "expires_ms", (json_int_t)lk.expires_ms);
	} else {
		rc = tsec_lock_release(B.store, &c->p, &lk, &err);
		if (!rc) {
			held_drop(&lk);
			*result = json_object();
		}
	}
	return rc ? err_json(&err) : NULL;
}

static json_t *do_stats(json_t **result)
{
	json_t *bym = json_object();
	for (size_t i = 0; i < NMETHODS; i++)
		json_object_set_new(bym, methods[i], json_integer((json_int_t)atomic_load(&B.st.by_method[i])));
	*result = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}",
		"uptime_ms", (json_int_t)(tsec__wall_ms() - B.started_ms),
		"calls", (json_int_t)atomic_load(&B.st.calls),
		"errors", (json_int_t)atomic_load(&B.st.errors),
		"denied", (json_int_t)atomic_load(&B.st.denied),
		"malformed", (json_int_t)atomic_load(&B.st.malformed),
		"oversized", (json_int_t)atomic_load(&B.st.oversized),
		"principal_mismatch", (json_int_t)atomic_load(&B.st.mismatched),
		"zap_accepted", (json_int_t)atomic_load(&B.st.zap_ok),
		"zap_refused", (json_int_t)atomic_load(&B.st.zap_refused),
		"reloads", (json_int_t)atomic_load(&B.st.reloads),
		"reload_failures", (json_int_t)atomic_load(&B.st.reload_failures),
		"log_written", (json_int_t)tsec__declog_written(B.log),
		"log_dropped", (json_int_t)tsec__declog_dropped(B.log),
		"by_method", bym);
	return NULL;
}

/* Runs one call; returns the reply text (new). */
static char *handle(int caller, const char *payload, size_t len)
{
	struct call c;
	json_error_t je;
	json_t *msg = NULL, *result = NULL, *error = NULL, *reply, *claim;
	const char *m;
	size_t mi = NMETHODS;
	char *text;

	memset(&c, 0, sizeof(c));
	atomic_fetch_add(&B.st.calls, 1);
	if (caller < 0 || caller >= B.cfg.ncallers) {
		error = fail(TSEC_EDENIED, "", "unauthenticated caller");
		goto reply;
	}
	c.who = &B.cfg.callers[caller];
	c.index = caller;
	current = &c;
	c.p.id = tsec_str_c(c.who->principal);
	c.p.roles = c.who->roles;
	c.p.nroles = c.who->nroles;
	msg = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &je);
	if (!msg || !json_is_object(msg)) {
		atomic_fetch_add(&B.st.malformed, 1);
		error = fail(TSEC_EPROTO, "", msg ? "message must be a JSON object" : je.text);
		goto reply;
	}
	c.id = json_object_get(msg, "id");
	m = json_string_value(json_object_get(msg, "method"));
	c.params = json_object_get(msg, "params");
	if (c.params && !json_is_object(c.params)) {
		atomic_fetch_add(&B.st.malformed, 1);
		error = fail(TSEC_EPROTO, "params", "params must be an object");
		goto reply;
	}
	/* The principal is the authenticated one; a payload may not name another. */
	claim = json_object_get(msg, "principal");
	if (!claim && c.params)
		claim = json_object_get(c.params, "principal");
	if (claim && !(json_is_string(claim) && !strcmp(json_string_value(claim), c.who->principal))) {
		atomic_fetch_add(&B.st.mismatched, 1);
		say("refused: caller %s sent a request naming principal %s", c.who->principal,
		    json_is_string(claim) ? json_string_value(claim) : "(not a string)");
		error = fail(TSEC_EDENIED, "principal",
			     "the request names another principal than the authenticated caller");
		goto reply;
	}
	if (!c.params) {
		json_object_set_new(msg, "params", json_object());
		c.params = json_object_get(msg, "params");
	}
	for (mi = 0; m && mi < NMETHODS; mi++)
		if (!strcmp(m, methods[mi]))
			break;
	if (!m || mi == NMETHODS) {
		atomic_fetch_add(&B.st.malformed, 1);
		error = fail(TSEC_EPROTO, "method", m ? "unknown method" : "need a \"method\" string");
		goto reply;
	}
	atomic_fetch_add(&B.st.by_method[mi], 1);
	if (!strcmp(m, "check"))
		error = do_check(&c, &result);
	else if (!strcmp(m, "evaluate"))
		error = do_evaluate(&c, &result);
	else if (!strcmp(m, "health")) {
		struct tsec_module_info info;
		tsec_bus_info(B.bus, "policy", &info);
		result = json_pack("{s:s,s:s,s:s,s:s}", "status", "ok", "module", info.name,
				   "version", info.version, "build", tsec_build_name(info.build));
	} else if (!strcmp(m, "stats"))
		error = do_stats(&result);
	else if (!strcmp(m, "reload")) {
		struct tsec_error err;
		if (!c.who->admin)
			error = fail(TSEC_EDENIED, "method", "reload needs an admin caller");
		else if (reload_policy(&err))
			error = err_json(&err);
		else
			result = json_object();
	} else if (!strncmp(m, "store.", 6))
		error = do_store(&c, m, &result);
	else
		error = do_lock(&c, m, &result);
reply:
	if (error)
		atomic_fetch_add(&B.st.errors, 1);
	reply = json_object();
	json_object_set(reply, "id", c.id ? c.id : json_null());
	if (error)
		json_object_set_new(reply, "error", error);
	else
		json_object_set_new(reply, "result", result ? result : json_object());
	text = json_dumps(reply, JSON_COMPACT);
	json_decref(reply);
	json_decref(msg);
	current = NULL;
	return text;
}

static char *error_reply(int code, const char *msg)
{
	json_t *r = json_pack("{s:n,s:o}", "id", "error", fail(code, "", msg));
	char *t = json_dumps(r, JSON_COMPACT);
	json_decref(r);
	return t;
}

/* ---- workers ---- */

static void *worker_main(void *arg)
{
	void *in = zmq_socket(B.ctx, ZMQ_PULL), *out = zmq_socket(B.ctx, ZMQ_PUSH);
	int zero = 0;
	(void)arg;

	zmq_setsockopt(in, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(out, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(in, WORK_ENDPOINT) || zmq_connect(out, REPLY_ENDPOINT))
		goto out;
	for (;;) {
		zmq_msg_t f[4];
		int n = 0, more = 1;
		size_t msz = sizeof(more);
		while (more && n < 4) {
			zmq_msg_init(&f[n]);
			if (zmq_msg_recv(&f[n], in, 0) < 0) {
				zmq_msg_close(&f[n]);
				for (int i = 0; i < n; i++)
					zmq_msg_close(&f[i]);
				goto out; /* context terminated */
			}
			n++;
			zmq_getsockopt(in, ZMQ_RCVMORE, &more, &msz);
		}
		if (n == 4) {
			char who[16];
			size_t wl = zmq_msg_size(&f[2]) < 15 ? zmq_msg_size(&f[2]) : 15;
			char *reply;
			memcpy(who, zmq_msg_data(&f[2]), wl);
			who[wl] = '\0';
			reply = handle(wl ? atoi(who) : -1, zmq_msg_data(&f[3]), zmq_msg_size(&f[3]));
			zmq_msg_send(&f[0], out, ZMQ_SNDMORE);
			zmq_msg_send(&f[1], out, ZMQ_SNDMORE);
			zmq_send(out, reply ? reply : "", reply ? strlen(reply) : 0, 0);
			free(reply);
			zmq_msg_close(&f[2]);
			zmq_msg_close(&f[3]);
		} else {
			for (int i = 0; i < n; i++)
				zmq_msg_close(&f[i]);
		}
	}
out:
	zmq_close(in);
	zmq_close(out);
	return NULL;
}

/* ---- the main loop ---- */

static void on_signal(int sig)
{
	char c = sig == SIGHUP ? 'H' : 'T';
	ssize_t r = write(B.sigpipe[1], &c, 1);
	(void)r;
}

static void *make_router(int curve)
{
	void *s = zmq_socket(B.ctx, ZMQ_ROUTER);
	int one = 1, zero = 0;
	int64_t max = (int64_t)B.cfg.max_message * 2 + 4096;

	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	/* Past twice the configured maximum a peer is cut off; between the
	 * two, it gets an error reply. */
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max));
	if (curve) {
		zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one));
		zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, B.cfg.server_secret, 40);
		zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, TCP_DOMAIN, strlen(TCP_DOMAIN));
	} else {
		zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, IPC_DOMAIN, strlen(IPC_DOMAIN));
	}
	return s;
}

/* Binds an ipc endpoint with its socket file 0600 in a 0700 folder. */
static int bind_ipc(void *s, const char *ep)
{
	char path[1024], *slash;
	mode_t old;
	int rc;

	snprintf(path, sizeof(path), "%s", ep + 6);
	slash = strrchr(path, '/');
	if (slash) {
		*slash = '\0';
		if (*path && mkdir(path, 0700) < 0 && errno != EEXIST)
			return -1;
		if (*path)
			chmod(path, 0700);
		*slash = '/';
	}
	old = umask(077);
	rc = zmq_bind(s, ep);
	umask(old);
	if (rc == 0)
		chmod(path, 0600);
	return rc;
}

static void send_client(void *router, zmq_msg_t *ident, const char *text, size_t n)
{
	zmq_msg_send(ident, router, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(router, text, n, ZMQ_DONTWAIT);
}

/*
 * Whether a call is quick enough to run in the main thread: check,
 * evaluate, health and stats without a certificate to parse.  Policy work
 * takes microseconds, while handing a call to a worker and back costs two
 * thread wake-ups; slow calls (disk, lock waits, certificates) go to the
 * workers so the main thread never waits on them.  The method is sniffed
 * from the text; a wrong guess only changes which thread runs the call.
 */
static int quick_call(const char *p, size_t n)
{
	static const char *const quick[] = { "check", "evaluate", "health", "stats" };
	const char *m = memmem(p, n, "\"method\"", 8), *end = p + n, *v;

	if (!m || memmem(p, n, "cert_pem", 8))
		return 0;
	for (m += 8; m < end && (*m == ' ' || *m == ':' || *m == '\t' || *m == '\n'); m++)
		;
	if (m >= end || *m++ != '"')
		return 0;
	for (v = m; v < end && *v != '"' && *v != '\\'; v++)
		;
	if (v >= end || *v != '"')
		return 0;
	for (size_t i = 0; i < sizeof(quick) / sizeof(quick[0]); i++)
		if ((size_t)(v - m) == strlen(quick[i]) && !memcmp(m, quick[i], (size_t)(v - m)))
			return 1;
	return 0;
}

/* Reads one client message from a ROUTER and dispatches it. */
static int from_client(void *router, int idx, void *work, int draining,
		       long *inflight)
{
	zmq_msg_t ident, f;
	int more = 0, nframes = 0, bad = 0;
	size_t msz = sizeof(more);
	zmq_msg_t payload;

	zmq_msg_init(&ident);
	if (zmq_msg_recv(&ident, router, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&ident);
		return 0;
	}
	zmq_msg_init(&payload);
	zmq_getsockopt(router, ZMQ_RCVMORE, &more, &msz);
	/* Expect an empty delimiter, then exactly one payload frame. */
	while (more) {
		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, router, 0) < 0) {
			zmq_msg_close(&f);
			break;
		}
		zmq_getsockopt(router, ZMQ_RCVMORE, &more, &msz);
		nframes++;
		if (nframes == 1 && zmq_msg_size(&f) != 0)
			bad = 1;
		if (nframes == 2)
			zmq_msg_move(&payload, &f);
		zmq_msg_close(&f);
	}
	if (nframes != 2)
		bad = 1;
	if (bad || draining || zmq_msg_size(&payload) > B.cfg.max_message) {
		char *r;
		if (draining) {
			r = error_reply(TSEC_EBUSY, "shutting down");
		} else if (bad) {
			atomic_fetch_add(&B.st.malformed, 1);
			r = error_reply(TSEC_EPROTO, "expected an empty delimiter frame and one JSON frame");
		} else {
			atomic_fetch_add(&B.st.oversized, 1);
			r = error_reply(TSEC_ETOOBIG, "message larger than the configured max_message");
		}
		send_client(router, &ident, r, strlen(r));
		free(r);
	} else if (quick_call(zmq_msg_data(&payload), zmq_msg_size(&payload))) {
		const char *user = zmq_msg_gets(&payload, "User-Id");
		char *r = handle(user && *user ? atoi(user) : -1, zmq_msg_data(&payload),
				 zmq_msg_size(&payload));
		send_client(router, &ident, r ? r : "", r ? strlen(r) : 0);
		free(r);
	} else {
		const char *user = zmq_msg_gets(&payload, "User-Id");
		char who[16] = "";
		unsigned char ix = (unsigned char)idx;
		if (user)
			snprintf(who, sizeof(who), "%s", user);
		zmq_msg_send(&ident, work, ZMQ_SNDMORE);
		zmq_send(work, &ix, 1, ZMQ_SNDMORE);
		zmq_send(work, who, strlen(who), ZMQ_SNDMORE);
		zmq_msg_send(&payload, work, 0);
		(*inflight)++;
	}
	zmq_msg_close(&payload);
	zmq_msg_close(&ident);
	return 1;
}

static void release_held_locks(void)
{
	for (int i = 0; i < MAX_HELD_LOCKS; i++) {
		struct tsec_error err;
		struct tsec_principal p;
		const struct caller *c;
		if (!B.locks[i].used)
			continue;
		c = &B.cfg.callers[B.locks[i].caller];
		p.id = tsec_str_c(c->principal);
		p.roles = c->roles;
		p.nroles = c->nroles;
		if (tsec_lock_release(B.store, &p, &B.locks[i].lk, &err) == 0)
			say("released lock %s held by %s", B.locks[i].lk.name, c->principal);
		B.locks[i].used = 0;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tsec-broker --config FILE\n"
		"\n"
		"Serves the tinysecurity policy module, gated storage and locks over ZeroMQ.\n"
		"SIGHUP reloads the policy and reopens the decision log; SIGTERM stops\n"
		"after answering every call in flight and releasing the locks it holds.\n"
		"\n"
		"  --config FILE   JSON configuration (see examples/broker.json)\n"
		"  --check         load the configuration and the policy, then exit\n"
		"  -h, --help      this text\n");
}

int main(int argc, char **argv)
{
	const char *config = NULL;
	void *routers[2] = { NULL, NULL }, *work, *replies, *zap;
	pthread_t workers[MAX_WORKERS], zapt;
	struct tsec_error err;
	struct sigaction sa;
	char *text = NULL;
	size_t len;
	int check_only = 0, draining = 0, rc = 1;
	long inflight = 0;
	int64_t drain_until = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config = argv[++i];
		else if (!strcmp(argv[i], "--check"))
			check_only = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!config) {
		usage(stderr);
		return 2;
	}
	if (sodium_init() < 0 || load_config(config, &B.cfg))
		return 2;
	pthread_mutex_init(&B.reload_lock, NULL);
	pthread_mutex_init(&B.locks_lock, NULL);
	B.started_ms = tsec__wall_ms();
	if (tsec_bus_new(&B.bus))
		return 2;
	if (policy_text(&text, &len, &err) ||
	    tsec_bus_load(B.bus, "policy", B.cfg.module, text, len, &err)) {
		say("cannot load: %s%s%s", err.where, err.where[0] ? ": " : "", err.msg);
		free(text);
		return 2;
	}
	free(text);
	if (tsec_store_open(&B.store, B.cfg.storage, B.bus, "policy", &err)) {
		say("storage: %s", err.msg);
		return 2;
	}
	tsec_store_set_observer(B.store, observe, NULL);
	if (B.cfg.decision_log &&
	    tsec__declog_open(&B.log, B.cfg.decision_log, B.cfg.log_lines, &err)) {
		say("decision log: %s", err.msg);
		return 2;
	}
	if (check_only) {
		say("configuration and policy are good");
		rc = 0;
		goto done;
	}

	if (pipe2(B.sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return 2;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	B.ctx = zmq_ctx_new();
	zap = zmq_socket(B.ctx, ZMQ_REP);
	if (zmq_bind(zap, ZAP_ENDPOINT)) {
		say("ZAP: %s", zmq_strerror(errno));
		return 2;
	}
	pthread_create(&zapt, NULL, zap_main, zap);
	work = zmq_socket(B.ctx, ZMQ_PUSH);
	replies = zmq_socket(B.ctx, ZMQ_PULL);
	{
		int zero = 0;
		zmq_setsockopt(work, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_setsockopt(replies, ZMQ_LINGER, &zero, sizeof(zero));
	}
	zmq_bind(work, WORK_ENDPOINT);
	zmq_bind(replies, REPLY_ENDPOINT);
	for (int i = 0; i < B.cfg.workers; i++)
		pthread_create(&workers[i], NULL, worker_main, NULL);
	for (int e = 0; e < B.cfg.nendpoints; e++) {
		const char *ep = B.cfg.endpoints[e];
		int tcp = !strncmp(ep, "tcp://", 6);
		int curve = tcp || B.cfg.ipc_curve;
		void **r = &routers[curve ? 0 : 1];
		if (!*r)
			*r = make_router(curve);
		if ((tcp ? zmq_bind(*r, ep) : bind_ipc(*r, ep)) != 0) {
			say("cannot bind %s: %s", ep, zmq_strerror(errno));
			goto stop;
		}
		say("listening on %s (%s)", ep, curve ? "CURVE" : "peer uid");
	}
	say("serving policy %s with module %s", B.cfg.policy, B.cfg.module);

	for (;;) {
		zmq_pollitem_t it[4];
		int n = 0, ri[2] = { -1, -1 };
		for (int r = 0; r < 2; r++)
			if (routers[r]) {
				ri[r] = n;
				it[n++] = (zmq_pollitem_t){ routers[r], 0, ZMQ_POLLIN, 0 };
			}
		int rep = n;
		it[n++] = (zmq_pollitem_t){ replies, 0, ZMQ_POLLIN, 0 };
		int sig = n;
		it[n++] = (zmq_pollitem_t){ NULL, B.sigpipe[0], ZMQ_POLLIN, 0 };
		if (zmq_poll(it, n, draining ? 50 : -1) < 0 && errno != EINTR)
			break;
		if (it[sig].revents & ZMQ_POLLIN) {
			char c;
			while (read(B.sigpipe[0], &c, 1) == 1) {
				if (c == 'H') {
					reload_policy(&err);
					tsec__declog_reopen(B.log);
				} else if (!draining) {
					say("stopping: answering %ld calls in flight", inflight);
					draining = 1;
					drain_until = tsec__mono_ms() + DRAIN_LINGER_MS;
				}
			}
		}
		for (int r = 0; r < 2; r++)
			if (ri[r] >= 0 && (it[ri[r]].revents & ZMQ_POLLIN))
				for (int k = 0; k < 64; k++)
					if (!from_client(routers[r], r, work, draining, &inflight))
						break;
		if (it[rep].revents & ZMQ_POLLIN) {
			for (;;) {
				zmq_msg_t ident, ix, body;
				zmq_msg_init(&ident);
				if (zmq_msg_recv(&ident, replies, ZMQ_DONTWAIT) < 0) {
					zmq_msg_close(&ident);
					break;
				}
				zmq_msg_init(&ix);
				zmq_msg_init(&body);
				zmq_msg_recv(&ix, replies, 0);
				zmq_msg_recv(&body, replies, 0);
				int r = zmq_msg_size(&ix) == 1 ? *(unsigned char *)zmq_msg_data(&ix) : 0;
				if (r >= 0 && r < 2 && routers[r])
					send_client(routers[r], &ident, zmq_msg_data(&body), zmq_msg_size(&body));
				zmq_msg_close(&ident);
				zmq_msg_close(&ix);
				zmq_msg_close(&body);
				inflight--;
			}
		}
		if (draining && inflight == 0 && tsec__mono_ms() >= drain_until)
			break;
	}
	rc = 0;
stop:
	for (int r = 0; r < 2; r++)
		if (routers[r])
			zmq_close(routers[r]);
	zmq_close(work);
	zmq_close(replies);
	zmq_ctx_shutdown(B.ctx);
	for (int i = 0; i < B.cfg.workers; i++)
		pthread_join(workers[i], NULL);
	pthread_join(zapt, NULL);
	zmq_ctx_term(B.ctx);
	release_held_locks();
done:
	tsec__declog_close(&B.log);
	tsec_store_close(&B.store);
	tsec_bus_free(&B.bus);
	say("stopped");
	return rc;
}
