/* tsec-broker: the JSON configuration (see examples/broker.json). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "common/sign.h"

static int cfg_string(json_t *o, const char *k, char **out, int required)
{
	json_t *v = json_object_get(o, k);
	if (!v) {
		if (required)
			tsec__say("config: \"%s\" is required", k);
		return required ? -1 : 0;
	}
	if (!json_is_string(v)) {
		tsec__say("config: \"%s\" must be a string", k);
		return -1;
	}
	*out = strdup(json_string_value(v));
	return 0;
}

static int cfg_roles(json_t *roles, struct tsec__caller *c)
{
	size_t i, total = 0, o = 0;
	json_t *v;

	if (!roles)
		return 0;
	if (!json_is_array(roles) || json_array_size(roles) > TSEC_D_MAX_ROLES)
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
static int cfg_caller(json_t *x, struct tsec__caller *cl)
{
	const char *p = json_string_value(json_object_get(x, "principal"));

	if (!p || !*p || strlen(p) >= sizeof(cl->principal) ||
	    cfg_roles(json_object_get(x, "roles"), cl))
		return -1;
	snprintf(cl->principal, sizeof(cl->principal), "%s", p);
	cl->admin = json_is_true(json_object_get(x, "admin"));
	return 0;
}

int tsec__config_load(const char *path, struct tsec__config *c)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *v, *x;
	size_t i;
	int rc = -1;

	memset(c, 0, sizeof(*c));
	if (!root) {
		tsec__say("config %s: line %d: %s", path, je.line, je.text);
		return -1;
	}
	c->max_message = 1 << 20;
	c->workers = 4;
	c->log_lines = 4096;
	if (cfg_string(root, "module", &c->module, 1) ||
	    cfg_string(root, "policy", &c->policy, 1) ||
	    cfg_string(root, "storage", &c->storage, 1) ||
	    cfg_string(root, "decision_log", &c->decision_log, 0))
		goto out;
	v = json_object_get(root, "endpoints");
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > TSEC_D_MAX_ENDPOINTS) {
		tsec__say("config: \"endpoints\" must list 1-%d endpoints", TSEC_D_MAX_ENDPOINTS);
		goto out;
	}
	json_array_foreach(v, i, x) {
		const char *e = json_string_value(x);
		if (!e || (strncmp(e, "tcp://", 6) && strncmp(e, "ipc://", 6))) {
			tsec__say("config: endpoint %zu must be a tcp:// or ipc:// string", i);
			goto out;
		}
		c->endpoints[c->nendpoints++] = strdup(e);
	}
	if ((v = json_object_get(root, "server_secret_key"))) {
		if (!json_is_string(v) || json_string_length(v) != 40) {
			tsec__say("config: \"server_secret_key\" must be 40 characters of Z85");
			goto out;
		}
		memcpy(c->server_secret, json_string_value(v), 41);
		c->have_secret = 1;
	}
	if ((v = json_object_get(root, "policy_public_key"))) {
		if (!json_is_string(v) || tsec__hex_decode(json_string_value(v), c->policy_pk, 32)) {
			tsec__say("config: \"policy_public_key\" must be 64 hex digits");
			goto out;
		}
		c->have_pk = 1;
	}
	if ((v = json_object_get(root, "ipc_curve"))) {
		if (!json_is_boolean(v)) {
			tsec__say("config: \"ipc_curve\" must be true or false");
			goto out;
		}
		c->ipc_curve = json_is_true(v);
	}
	if ((v = json_object_get(root, "max_message"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 256 ||
		    json_integer_value(v) > (64 << 20)) {
			tsec__say("config: \"max_message\" must be 256 bytes to 64 MiB");
			goto out;
		}
		c->max_message = (size_t)json_integer_value(v);
	}
	if ((v = json_object_get(root, "workers"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > TSEC_D_MAX_WORKERS) {
			tsec__say("config: \"workers\" must be 1-%d", TSEC_D_MAX_WORKERS);
			goto out;
		}
		c->workers = (int)json_integer_value(v);
	}
	if ((v = json_object_get(root, "log_buffer"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000) {
			tsec__say("config: \"log_buffer\" must be 1-1000000 lines");
			goto out;
		}
		c->log_lines = (size_t)json_integer_value(v);
	}
	v = json_object_get(root, "clients");
	json_array_foreach(v, i, x) {
		struct tsec__caller *cl = &c->callers[c->ncallers];
		const char *key = json_string_value(json_object_get(x, "public_key"));
		if (c->ncallers == TSEC_D_MAX_CALLERS || !key || strlen(key) != 40 ||
		    !zmq_z85_decode(cl->key, key) || cfg_caller(x, cl)) {
			tsec__say("config: client %zu needs a 40-character Z85 \"public_key\", a \"principal\""
			    " and at most 16 string \"roles\"", i);
			goto out;
		}
		cl->uid = -1;
		c->ncallers++;
	}
	v = json_object_get(root, "ipc_uids");
	json_array_foreach(v, i, x) {
		struct tsec__caller *cl = &c->callers[c->ncallers];
		json_t *uid = json_object_get(x, "uid");
		if (c->ncallers == TSEC_D_MAX_CALLERS || !json_is_integer(uid) ||
		    json_integer_value(uid) < 0 || cfg_caller(x, cl)) {
			tsec__say("config: ipc_uids %zu needs an integer \"uid\", a \"principal\""
			    " and at most 16 string \"roles\"", i);
			goto out;
		}
		cl->uid = (long)json_integer_value(uid);
		c->ncallers++;
	}
	for (int e = 0; e < c->nendpoints; e++)
		if ((!strncmp(c->endpoints[e], "tcp://", 6) || c->ipc_curve) && !c->have_secret) {
			tsec__say("config: tcp endpoints and ipc_curve need \"server_secret_key\" (CURVE)");
			goto out;
		}
	rc = 0;
out:
	json_decref(root);
	if (rc)
		tsec__config_free(c);
	return rc;
}

void tsec__config_free(struct tsec__config *c)
{
	free(c->module);
	free(c->policy);
	free(c->storage);
	free(c->decision_log);
	for (int i = 0; i < c->nendpoints; i++)
		free(c->endpoints[i]);
	/* Every slot: a caller refused half-read may hold roles too. */
	for (int i = 0; i < TSEC_D_MAX_CALLERS; i++)
		free(c->callers[i].roles_buf);
	memset(c, 0, sizeof(*c));
}
