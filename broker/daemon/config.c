/*
 * tsec-broker: the JSON configuration (see examples/broker.json).
 *
 * Strict: every member must be a known setting, named by its JSON place
 * when it is not ("/clients/0/principl: unknown setting; did you mean
 * \"principal\"?"), so a misspelt security setting can never be skipped
 * silently.  Running with an unsigned policy needs its own explicit
 * setting.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "common/trust.h"
#include "broker/storage/backend.h"
#include "common/jsonw.h"
#include "common/opts.h"
#include "common/sign.h"
#include "common/suggest.h"
#include "common/where.h"

/*
 * Every setting, listed once (issue 34, item 13: reload compared a
 * hand-kept subset, and rotating tls_ca reloaded as "unchanged").  The
 * parser reads the S, B and I settings from this table, refuses names not
 * in it, frees and compares on reload through it, and `tsec-broker
 * --settings` prints it for the docs test.  OWN settings have a reader of
 * their own below (their compare is in tsec__config_reread).
 *
 * X(section, name, kind, field, lo, hi): section "" is the top level;
 * S a string (char *), B a boolean (int), I an integer from lo to hi in
 * an int, long long or size_t field.
 */
#define SETTINGS(X) \
	X("", "module", S, module, 0, 0) \
	X("", "policy", S, policy, 0, 0) \
	X("", "policy_public_key", OWN, policy_pk, 0, 0) \
	X("", "allow_unsigned_policy", B, allow_unsigned, 0, 0) \
	X("", "storage", OWN, storage, 0, 0) \
	X("", "state_dir", S, state_dir, 0, 0) \
	X("", "decision_log", S, decision_log, 0, 0) \
	X("", "decision_log_group", OWN, log_gid, 0, 0) \
	X("", "endpoints", OWN, endpoints, 0, 0) \
	X("", "server_secret_key", OWN, server_secret, 0, 0) \
	X("", "ipc_curve", B, ipc_curve, 0, 0) \
	X("", "ipc_group", OWN, ipc_gid, 0, 0) \
	X("", "clients", OWN, callers, 0, 0) \
	X("", "ipc_uids", OWN, callers, 0, 0) \
	X("", "max_message", I, max_message, 256, 64 << 20) \
	X("", "workers", I, workers, 1, TSEC_D_MAX_WORKERS) \
	X("", "log_buffer", I, log_lines, 1, 1000000) \
	X("", "allow_caller_clock", B, allow_caller_clock, 0, 0) \
	X("", "metrics_listen", S, metrics_listen, 0, 0) \
	X("", "max_locks_per_caller", I, max_locks_per_caller, 1, TSEC_D_MAX_HELD) \
	X("", "fleet_id", S, fleet_id, 0, 0) \
	X("", "remote", OWN, remote, 0, 0) \
	X("", "ask", OWN, asks, 0, 0) \
	X("storage", "backend", S, st.backend, 0, 0) \
	X("storage", "root", S, storage, 0, 0) \
	X("storage", "endpoints", OWN, st.endpoints, 0, 0) \
	X("storage", "prefix", S, st.prefix, 0, 0) \
	X("storage", "key_file", S, st.key_file, 0, 0) \
	X("storage", "timeout_ms", I, st.timeout_ms, 1, 600000) \
	X("storage", "request_max", I, st.request_max, 1024, 1LL << 30) \
	X("storage", "cache_bytes", I, st.cache_bytes, 0, 1LL << 40) \
	X("storage", "cache_live_ms", I, st.cache_live_ms, 30, 600000) \
	X("storage", "tls_ca", S, st.tls_ca, 0, 0) \
	X("storage", "tls_cert", S, st.tls_cert, 0, 0) \
	X("storage", "tls_key", S, st.tls_key, 0, 0) \
	X("storage", "username", S, st.username, 0, 0) \
	X("storage", "password_file", S, st.password_file, 0, 0) \
	X("storage", "watch_policy", B, st.watch_policy, 0, 0) \
	X("storage", "params", OWN, st.params, 0, 0) \
	X("remote", "blobs", S, remote.blobs, 0, 0) \
	X("remote", "key_file", S, remote.key_file, 0, 0) \
	X("remote", "plain_keys", B, remote.plain_keys, 0, 0) \
	X("remote", "s3_endpoint", S, remote.s3_endpoint, 0, 0) \
	X("remote", "s3_region", S, remote.s3_region, 0, 0) \
	X("remote", "s3_access_key", S, remote.s3_access_key, 0, 0) \
	X("remote", "s3_secret_file", S, remote.s3_secret_file, 0, 0) \
	X("remote", "s3_virtual_host", B, remote.s3_virtual_host, 0, 0) \
	X("remote", "s3_ca_file", S, remote.s3_ca_file, 0, 0) \
	X("remote", "blob_max", I, remote.blob_max, 1024, 64LL << 20) \
	X("remote", "txn_max", I, remote.txn_max, 4096, 1LL << 32) \
	X("remote", "timeout_ms", I, remote.timeout_ms, 1, 600000) \
	X("clients", "public_key", OWN, callers, 0, 0) \
	X("clients", "principal", OWN, callers, 0, 0) \
	X("clients", "roles", OWN, callers, 0, 0) \
	X("clients", "admin", OWN, callers, 0, 0) \
	X("ipc_uids", "uid", OWN, callers, 0, 0) \
	X("ipc_uids", "principal", OWN, callers, 0, 0) \
	X("ipc_uids", "roles", OWN, callers, 0, 0) \
	X("ipc_uids", "admin", OWN, callers, 0, 0) \
	X("ask", "listen", OWN, asks, 0, 0) \
	X("ask", "principal", OWN, asks, 0, 0) \
	X("ask", "roles", OWN, asks, 0, 0)

enum kind { S, B, I, OWN };

struct setting {
	const char *section, *name;
	enum kind kind;
	size_t off, size;
	long long lo, hi;
};

#define ROW(sec, nm, k, field, l, h) \
	{ sec, nm, k, offsetof(struct tsec__config, field), \
	  sizeof(((struct tsec__config *)0)->field), l, h },
static const struct setting settings[] = { SETTINGS(ROW) };
#undef ROW
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* The names of section's settings, for known_only and its suggestions. */
static size_t names_of(const char *section, const char **out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < NSETTINGS && n < cap; i++)
		if (!strcmp(settings[i].section, section))
			out[n++] = settings[i].name;
	return n;
}

void tsec__config_settings(FILE *f)
{
	static const char *const kinds[] = { "string", "boolean", "integer", "structured" };

	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *t = &settings[i];

		fprintf(f, "%s%s%s %s", t->section, t->section[0] ? "/" : "", t->name, kinds[t->kind]);
		if (t->kind == I)
			fprintf(f, " %lld-%lld", t->lo, t->hi);
		fputc('\n', f);
	}
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Settings that were once: refused, each saying why it went. */
static const struct {
	const char *section, *name, *why;
} retired[] = {
	{ "storage", "clock_skew_ms", "an etcd lock ends by etcd's lease of the lock itself, "
	  "and no broker's clock decides (issue 48)" },
};

/* Refuses any member of o not a setting of section; place is o's JSON
 * pointer. */
int tsec__cfg_known_only(json_t *o, const char *place, const char *section,
			 struct tsec_error *err)
{
	const char *names[NSETTINGS];
	size_t n = names_of(section, names, NSETTINGS);
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v) {
		const char *near;
		size_t i;
		for (i = 0; i < n && strcmp(k, names[i]); i++)
			;
		if (i < n)
			continue;
		for (i = 0; i < COUNT(retired); i++)
			if (!strcmp(section, retired[i].section) && !strcmp(k, retired[i].name))
				break;
		if (i < COUNT(retired))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config %s/%s: retired: %s; remove it", place, k, retired[i].why);
		near = tsec__nearest(k, names, n);
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config %s/%s: unknown setting%s%s%s", place, k,
				    near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
	}
	return 0;
}

/* Reads o's S, B and I settings of section (place: o's JSON pointer). */
static int read_simple(json_t *o, const char *section, const char *place,
		       struct tsec__config *c, struct tsec_error *err)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *t = &settings[i];
		char *field = (char *)c + t->off;
		json_t *v;

		if (strcmp(t->section, section) || t->kind == OWN ||
		    !(v = json_object_get(o, t->name)))
			continue;
		if (t->kind == S) {
			if (!json_is_string(v) || !json_string_length(v))
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s/%s: must be a non-empty string", place, t->name);
			free(*(char **)field);
			if (!(*(char **)field = strdup(json_string_value(v))))
				return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		} else if (t->kind == B) {
			if (!json_is_boolean(v))
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s/%s: must be true or false", place, t->name);
			*(int *)field = json_is_true(v);
		} else {
			json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;

			if (!json_is_integer(v) || x < t->lo || x > t->hi)
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s/%s: must be an integer from %lld to %lld", place,
						    t->name, t->lo, t->hi);
			if (t->size == sizeof(int))
				*(int *)field = (int)x;
			else
				*(long long *)field = (long long)x;  /* or size_t: the same size */
		}
	}
	return 0;
}

static int cfg_string(json_t *o, const char *k, char **out, int required,
		      struct tsec_error *err)
{
	json_t *v = json_object_get(o, k);

	if (!v)
		return required ? tsec__seterr(err, TSEC_EINVAL, "", "config /%s: required", k) : 0;
	if (!json_is_string(v) || !json_string_length(v))
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /%s: must be a non-empty string", k);
	*out = strdup(json_string_value(v));
	return *out ? 0 : tsec__seterr(err, TSEC_ENOMEM, "", NULL);
}

static int cfg_endpoints(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *v = json_object_get(root, "endpoints"), *x;
	size_t i;

	if (!json_is_array(v) || json_array_size(v) == 0 ||
	    json_array_size(v) > TSEC_D_MAX_ENDPOINTS)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /endpoints: must list 1-%d endpoints", TSEC_D_MAX_ENDPOINTS);
	json_array_foreach(v, i, x) {
		const char *e = json_string_value(x);
		if (!e || (strncmp(e, "tcp://", 6) && strncmp(e, "ipc://", 6)) || strlen(e) < 7 ||
		    strlen(e) > 512)
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config /endpoints/%zu: must be a tcp:// or ipc:// address", i);
		if (!(c->endpoints[c->nendpoints++] = strdup(e)))
			return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	return 0;
}

/* The policy's trust: a key to verify it with, or an explicit "no". */
static int cfg_trust(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *v = json_object_get(root, "policy_public_key");

	if (v) {
		if (!json_is_string(v) || tsec__hex_decode(json_string_value(v), c->policy_pk, 32))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config /policy_public_key: must be 64 hex digits");
		c->have_pk = 1;
	}
	if (c->have_pk && c->allow_unsigned)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config: \"policy_public_key\" and \"allow_unsigned_policy\" contradict "
				    "each other; keep one");
	if (!c->have_pk && !c->allow_unsigned)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config: no \"policy_public_key\": the policy would load unsigned; set "
				    "\"allow_unsigned_policy\": true to run so, or sign it (tsec sign)");
	return 0;
}

/* A group's name in setting `key`, as its gid into *gid (-1: none). */
static int cfg_group(json_t *root, const char *key, long *gid, struct tsec_error *err)
{
	char *name = NULL;
	struct group *g;

	*gid = -1;
	if (cfg_string(root, key, &name, 0, err))
		return err->code;
	if (!name)
		return 0;
	g = getgrnam(name);
	if (!g) {
		tsec__seterr(err, TSEC_EINVAL, "", "config /%s: no group \"%s\"", key, name);
		free(name);
		return err->code;
	}
	*gid = (long)g->gr_gid;
	free(name);
	return 0;
}

/* Appends sep (if not 0), then v[0..n) to the query in *q (*len bytes
 * long), escaping '&', '=', '%' and what is not printable ASCII: 0, or -1
 * out of memory. */
static int query_add(char **q, size_t *len, char sep, const char *v, size_t n)
{
	char *t = realloc(*q, *len + 1 + 3 * n + 1);

	if (!t)
		return -1;
	*q = t;
	if (sep)
		t[(*len)++] = sep;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];

		if (ch == '&' || ch == '=' || ch == '%' || ch <= ' ' || ch >= 0x7f)
			*len += (size_t)sprintf(t + *len, "%%%02X", ch);
		else
			t[(*len)++] = (char)ch;
	}
	t[*len] = 0;
	return 0;
}

/*
 * "storage": {"params": {"db": 2}}: the backend's own options (strings,
 * integers, booleans), as the store takes them ("db=2", common/opts.h),
 * checked here against what the backend reads, so that --check says a
 * misspelt one.
 */
static int cfg_params(json_t *o, const struct tsec__backend_kind *bk,
		      struct tsec__storage_cfg *st, struct tsec_error *err)
{
	json_t *ps = json_object_get(o, "params"), *v;
	const char *k;
	char who[64];
	size_t len = 0;

	if (!ps)
		return 0;
	if (!json_is_object(ps))
		return tsec__seterr(err, TSEC_EINVAL, "", "config /storage/params: must be an object "
				    "of the backend's options");
	json_object_foreach(ps, k, v) {
		char num[32];
		const char *s = num;
		size_t n;

		if (json_is_string(v)) {
			s = json_string_value(v);
			n = json_string_length(v);
		} else if (json_is_integer(v)) {
			n = (size_t)snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
					     json_integer_value(v));
		} else if (json_is_boolean(v)) {
			n = (size_t)snprintf(num, sizeof(num), "%s", json_is_true(v) ? "true" : "false");
		} else {
			return tsec__seterr(err, TSEC_EINVAL, "", "config /storage/params/%.64s: must "
					    "be a string, an integer or a boolean", k);
		}
		if (query_add(&st->params, &len, len ? '&' : 0, k, strlen(k)) ||
		    query_add(&st->params, &len, '=', s, n))
			return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	snprintf(who, sizeof(who), "the %s backend", st->backend);
	if (tsec__params_check(st->params, bk->params, who, err)) {
		char why[sizeof(err->msg)];

		snprintf(why, sizeof(why), "%s", err->msg);
		return tsec__seterr(err, TSEC_EINVAL, "", "config /storage/params: %s", why);
	}
	return 0;
}

/*
 * "storage": "/var/lib/tinysecurity" (files), or {"backend": "etcd",
 * "endpoints": ["http://10.0.0.1:2379", ...], "prefix": "tsec", ...}.
 */
static int cfg_storage(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *o = json_object_get(root, "storage"), *ep;
	struct tsec__storage_cfg *st = &c->st;
	const struct tsec__backend_kind *bk;

	st->watch_policy = 1;            /* on a shared backend, by default */
	if (json_is_string(o))
		return cfg_string(root, "storage", &c->storage, 1, err);
	if (!json_is_object(o))
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /storage: %s", o ? "must be a folder or an object"
				    : "required (a folder, or {\"backend\": ...})");
	if (tsec__cfg_known_only(o, "/storage", "storage", err) ||
	    read_simple(o, "storage", "/storage", c, err))
		return err->code;
	if (!st->backend)
		return tsec__seterr(err, TSEC_EINVAL, "", "config /storage/backend: required");
	/* The backends a broker may serve from (broker/storage/registry.c). */
	bk = tsec__backend_find(st->backend);
	if (!bk || !(bk->caps & TSEC__CAP_SERVED)) {
		const char *known[16], *near;
		size_t nk = tsec__backend_names(TSEC__CAP_SERVED, known, 16);
		char list[128] = "";

		for (size_t i = 0; i < nk; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i ? (i + 1 == nk ? " or " : ", ") : "", known[i]);
		near = tsec__nearest(st->backend, known, nk);
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /storage/backend: \"%s\" is not %s%s%s%s", st->backend, list,
				    near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
	}
	if ((bk->caps & TSEC__CAP_ROOT) && !c->storage)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /storage/root: the %s backend needs its folder", st->backend);
	if ((ep = json_object_get(o, "endpoints"))) {
		size_t i, len = 0;
		json_t *v;

		if (json_is_string(ep)) {
			st->endpoints = strdup(json_string_value(ep));
		} else if (json_is_array(ep) && json_array_size(ep)) {
			json_array_foreach(ep, i, v) {
				if (!json_is_string(v) || !json_string_length(v) ||
				    strchr(json_string_value(v), ','))
					return tsec__seterr(err, TSEC_EINVAL, "",
							    "config /storage/endpoints/%zu: must be a URL", i);
				len += json_string_length(v) + 1;
			}
			if (!(st->endpoints = calloc(1, len)))
				return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
			json_array_foreach(ep, i, v) {
				if (i)
					strcat(st->endpoints, ",");
				strcat(st->endpoints, json_string_value(v));
			}
		} else
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config /storage/endpoints: must be a list of URLs");
	} else if (bk->caps & TSEC__CAP_NETWORK)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /storage/endpoints: %s needs its endpoints", st->backend);
	return cfg_params(o, bk, st, err);
}

/*
 * "remote": the remote certificate store (include/tinysecurity/remote.h):
 * {"blobs": "file:/path" or "s3://bucket/prefix", "key_file": ..., and
 * for S3 "s3_endpoint", "s3_region", "s3_access_key", "s3_secret_file",
 * "s3_virtual_host", "s3_ca_file"}.  Absent: no remote.* methods.
 */
static int cfg_remote(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *o = json_object_get(root, "remote");
	struct tsec__remote_cfg *r = &c->remote;

	if (!o)
		return 0;
	if (!json_is_object(o))
		return tsec__seterr(err, TSEC_EINVAL, "", "config /remote: must be an object");
	r->on = 1;
	if (tsec__cfg_known_only(o, "/remote", "remote", err) ||
	    read_simple(o, "remote", "/remote", c, err))
		return err->code;
	if (!r->blobs || !r->key_file)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /remote: needs \"blobs\" and \"key_file\"");
	return 0;
}

void tsec__remote_opts_of(const struct tsec__config *c, struct tsec_remote_opts *o)
{
	const struct tsec__remote_cfg *r = &c->remote;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->blobs = r->blobs;
	o->key_file = r->key_file;
	o->plain_keys = r->plain_keys;
	o->s3_endpoint = r->s3_endpoint;
	o->s3_region = r->s3_region;
	o->s3_access_key = r->s3_access_key;
	o->s3_secret_file = r->s3_secret_file;
	o->s3_virtual_host = r->s3_virtual_host;
	o->s3_ca_file = r->s3_ca_file;
	o->blob_max = (size_t)r->blob_max;
	o->txn_max = (size_t)r->txn_max;
	o->timeout_ms = (uint32_t)r->timeout_ms;
}

void tsec__store_opts_of(const struct tsec__config *c, struct tsec_store_opts *o)
{
	const struct tsec__storage_cfg *st = &c->st;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->backend = st->backend ? st->backend : "file";
	o->root = c->storage;
	o->endpoints = st->endpoints;
	o->prefix = st->prefix;
	o->key_file = st->key_file;
	o->timeout_ms = (uint32_t)st->timeout_ms;
	o->request_max = (size_t)st->request_max;
	o->cache_bytes = (size_t)st->cache_bytes;
	o->cache_live_ms = (uint32_t)st->cache_live_ms;
	o->tls_ca = st->tls_ca;
	o->tls_cert = st->tls_cert;
	o->tls_key = st->tls_key;
	o->username = st->username;
	o->password_file = st->password_file;
	o->params = st->params;
}

/* "metrics_listen": [IPv4 ADDRESS:]PORT, loopback when no address. */
static int cfg_metrics(struct tsec__config *c, struct tsec_error *err)
{
	return c->metrics_listen ? tsec__cfg_listen(c->metrics_listen, &c->metrics_addr,
						     "/metrics_listen", err) : 0;
}

int tsec__cfg_listen(const char *l, struct sockaddr_in *out, const char *place,
		     struct tsec_error *err)
{
	const char *colon, *p;
	char host[INET_ADDRSTRLEN] = "127.0.0.1";
	char *end;
	long port;

	colon = strrchr(l, ':');
	if (colon) {
		if ((size_t)(colon - l) >= sizeof(host))
			goto bad;
		memcpy(host, l, (size_t)(colon - l));
		host[colon - l] = '\0';
	}
	p = colon ? colon + 1 : l;
	port = strtol(p, &end, 10);
	if (!*p || *end || port < 1 || port > 65535)
		goto bad;
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	out->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
		goto bad;
	return 0;
bad:
	return tsec__seterr(err, TSEC_EINVAL, "",
			    "config %s: \"%s\" is not [IPv4 ADDRESS:]PORT", place, l);
}

/* "server_secret_key": the broker's CURVE secret, inline, so the file is
 * a key file: it must be this user's (or root's) and readable by nobody
 * else (sb: the file as opened). */
static int cfg_secret(json_t *root, struct tsec__config *c, const char *path,
		      const struct stat *sb, struct tsec_error *err)
{
	json_t *v = json_object_get(root, "server_secret_key");

	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) != 40)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /server_secret_key: must be 40 characters of Z85");
	if ((sb->st_mode & 077) || (sb->st_uid != geteuid() && sb->st_uid != 0))
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config %s holds server_secret_key, but %s: chmod 600 it (and "
				    "chown it to this broker's user)", path,
				    (sb->st_mode & 077) ? "group or others may read it"
							: "another user owns it");
	memcpy(c->server_secret, json_string_value(v), 41);
	c->have_secret = 1;
	return 0;
}

/*
 * The configuration's JSON object, read from the descriptor whose mode
 * *sb holds (cfg_secret checks it), reached as written through folders
 * nobody else may write (common/trust.c): 0, or the error with nothing
 * held.
 */
static int read_root(const char *path, struct stat *sb, json_t **root, struct tsec_error *err)
{
	struct tsec__trusted t;
	struct tsec_error why;
	json_error_t je;
	int rc;

	*root = NULL;
	if (tsec__trusted_open(path, TSEC__TRUST_FILE, false, "the configuration", &t, &why))
		return tsec__seterr(err, why.code, "", "config %s: %s", path, why.msg);
	if (fstat(t.fd, sb) < 0) {
		rc = tsec__seterr(err, TSEC_EIO, "", "config %s: %s", path, strerror(errno));
		close(t.fd);
		return rc;
	}
	*root = json_loadfd(t.fd, JSON_REJECT_DUPLICATES, &je);
	close(t.fd);
	if (!*root) {
		char line[4300];

		tsec__json_error_say(line, sizeof(line), path, &je);
		return tsec__seterr(err, TSEC_EINVAL, "", "config %s", line);
	}
	if (!json_is_object(*root)) {
		json_decref(*root);
		*root = NULL;
		return tsec__seterr(err, TSEC_EINVAL, "", "config %s: must be a JSON object", path);
	}
	return 0;
}

/* What holds between settings: CURVE's key where CURVE is asked, a
 * state_dir (the storage folder's, by default). */
static int cross_checks(struct tsec__config *c, struct tsec_error *err)
{
	for (int e = 0; e < c->nendpoints; e++)
		if ((!strncmp(c->endpoints[e], "tcp://", 6) || c->ipc_curve) && !c->have_secret)
			return tsec__seterr(err, TSEC_EINVAL, "", "config: tcp endpoints and "
					    "ipc_curve need \"server_secret_key\" (CURVE)");
	if (!c->state_dir && !c->storage)
		return tsec__seterr(err, TSEC_EINVAL, "",
				    "config /state_dir: required with a shared storage backend "
				    "(this broker's own folder, for the policy revision it accepted)");
	if (!c->state_dir && !(c->state_dir = strdup(c->storage)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	return 0;
}

int tsec__config_load(const char *path, struct tsec__config *c, struct tsec_error *err)
{
	json_t *root = NULL;
	struct stat sb;
	int rc;

	memset(c, 0, sizeof(*c));
	memset(err, 0, sizeof(*err));
	c->log_gid = c->ipc_gid = -1;
	if ((rc = read_root(path, &sb, &root, err)))
		return rc;
	c->max_message = TSEC_D_MAX_MESSAGE;
	c->workers = 4;
	c->max_locks_per_caller = TSEC_D_LOCKS_PER_CALLER;
	c->log_lines = 4096;
	if (tsec__cfg_known_only(root, "", "", err) || read_simple(root, "", "", c, err))
		goto failed;
	if (!c->module || !c->policy) {
		rc = tsec__seterr(err, TSEC_EINVAL, "",
				  "config /%s: required", c->module ? "policy" : "module");
		goto out;
	}
	if (cfg_storage(root, c, err) || cfg_remote(root, c, err) || cfg_metrics(c, err) ||
	    cfg_group(root, "decision_log_group", &c->log_gid, err) ||
	    cfg_group(root, "ipc_group", &c->ipc_gid, err) || cfg_endpoints(root, c, err) ||
	    cfg_trust(root, c, err) || cfg_secret(root, c, path, &sb, err) ||
	    tsec__cfg_callers(root, c, err) || tsec__cfg_asks(root, c, err) ||
	    cross_checks(c, err) || tsec__cfg_paths(c, err))
		goto failed;
	rc = 0;
	goto out;
failed:
	/* Set by the part that refused; a part that forgot still fails. */
	rc = err->code ? err->code : tsec__seterr(err, TSEC_EINVAL, "", "config %s: refused",
						  path);
out:
	json_decref(root);
	if (rc)
		tsec__config_free(c);
	return rc;
}

void tsec__config_free(struct tsec__config *c)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (settings[i].kind == S) {
			char **f = (char **)((char *)c + settings[i].off);

			free(*f);
			*f = NULL;       /* "storage" and "storage/root" share one */
		}
	free(c->storage);
	free(c->st.endpoints);
	free(c->st.params);
	for (int i = 0; i < c->nendpoints; i++)
		free(c->endpoints[i]);
	/* Every slot: a caller refused half-read may hold roles too. */
	for (int i = 0; i < TSEC_D_MAX_CALLERS; i++) {
		free(c->callers[i].roles_buf);
		free(c->callers[i].log_who);
	}
	tsec__asks_free(c);
	sodium_memzero(c, sizeof(*c));   /* it holds the server's secret key */
}

static int str_differs(const char *a, const char *b)
{
	return (a == NULL) != (b == NULL) || (a && strcmp(a, b));
}

static int callers_differ(const struct tsec__config *a, const struct tsec__config *b)
{
	if (a->ncallers != b->ncallers)
		return 1;
	for (int i = 0; i < a->ncallers; i++) {
		const struct tsec__caller *x = &a->callers[i], *y = &b->callers[i];
		if (strcmp(x->principal, y->principal) || x->admin != y->admin || x->uid != y->uid ||
		    memcmp(x->key, y->key, sizeof(x->key)) || x->nroles != y->nroles)
			return 1;
		for (uint32_t r = 0; r < x->nroles; r++)
			if (x->roles[r].len != y->roles[r].len ||
			    memcmp(x->roles[r].ptr, y->roles[r].ptr, x->roles[r].len))
				return 1;
	}
	return 0;
}

void tsec__config_reread(const char *path, const struct tsec__config *running)
{
	struct tsec__config *c = calloc(1, sizeof(*c));
	struct tsec_error err;
	int changed = 0, ep;

	if (!c)
		return;
	if (tsec__config_load(path, c, &err)) {
		tsec__say("%s", err.msg);
		tsec__say("config %s no longer loads (above); the running settings stay", path);
		free(c);
		return;
	}
	ep = c->nendpoints != running->nendpoints;
	for (int i = 0; !ep && i < c->nendpoints; i++)
		ep = strcmp(c->endpoints[i], running->endpoints[i]) != 0;
#define CHANGED(cond, name)                                                         \
	do {                                                                          \
		if (cond) {                                                           \
			tsec__say("config: \"%s\" changed; it takes effect after a restart", \
				  name);                                              \
			changed = 1;                                                  \
		}                                                                     \
	} while (0)
	/* The S, B and I settings, from the table. */
	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *t = &settings[i];
		const char *a = (const char *)c + t->off, *b = (const char *)running + t->off;
		char name[64];

		if (t->kind == OWN)
			continue;
		snprintf(name, sizeof(name), "%s%s%s", t->section, t->section[0] ? "/" : "",
			 t->name);
		CHANGED(t->kind == S ? str_differs(*(char *const *)a, *(char *const *)b)
				     : memcmp(a, b, t->size) != 0, name);
	}
	/* The structured ones. */
	CHANGED(str_differs(c->storage, running->storage) && !c->st.backend, "storage");
	CHANGED(str_differs(c->st.endpoints, running->st.endpoints), "storage/endpoints");
	CHANGED(str_differs(c->st.params, running->st.params), "storage/params");
	CHANGED(c->remote.on != running->remote.on, "remote");
	CHANGED(c->log_gid != running->log_gid, "decision_log_group");
	CHANGED(c->ipc_gid != running->ipc_gid, "ipc_group");
	CHANGED(ep, "endpoints");
	CHANGED(c->have_secret != running->have_secret ||
		memcmp(c->server_secret, running->server_secret, sizeof(c->server_secret)),
		"server_secret_key");
	CHANGED(c->have_pk != running->have_pk ||
		memcmp(c->policy_pk, running->policy_pk, sizeof(c->policy_pk)), "policy_public_key");
	CHANGED(callers_differ(c, running), "clients/ipc_uids");
	CHANGED(tsec__asks_differ(c, running), "ask");
#undef CHANGED
	if (!changed)
		tsec__say("config %s: unchanged", path);
	tsec__config_free(c);
	free(c);
}
