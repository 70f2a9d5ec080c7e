/*
 * tsec-broker's configuration: the callers ("clients" by CURVE key,
 * "ipc_uids" by peer uid), each with its principal, roles and admin
 * flag (config.c reads the rest).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "common/error.h"
#include "common/jsonw.h"

static int cfg_roles(json_t *roles, struct tsec__caller *c)
{
	size_t i, total = 0, o = 0;
	json_t *v;

	if (!roles)
		return 0;
	if (!json_is_array(roles) || json_array_size(roles) > TSEC_D_MAX_ROLES)
		return TSEC_EINVAL;
	json_array_foreach(roles, i, v) {
		if (!json_is_string(v))
			return TSEC_EINVAL;
		total += json_string_length(v) + 1;
	}
	c->roles_buf = malloc(total + 1);
	if (!c->roles_buf)
		return TSEC_ENOMEM;
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

/*
 * The caller's members of a decision-log line, ","principal":...,
 * "roles":[...]", escaped once here rather than on every line.
 */
static int log_who(struct tsec__caller *cl)
{
	struct tsec__jw w;

	tsec__jw_init(&w);
	TSEC__JW_LIT(&w, ",\"principal\":");
	tsec__jw_cstr(&w, cl->principal);
	TSEC__JW_LIT(&w, ",\"roles\":[");
	for (uint32_t i = 0; i < cl->nroles; i++) {
		if (i)
			TSEC__JW_LIT(&w, ",");
		tsec__jw_str(&w, cl->roles[i].ptr, cl->roles[i].len);
	}
	TSEC__JW_LIT(&w, "]");
	cl->log_who = tsec__jw_take(&w, &cl->log_who_len);
	return cl->log_who ? 0 : TSEC_ENOMEM;
}

/* What clients and ipc_uids entries share: principal, roles, admin. */
int tsec__cfg_caller(json_t *x, struct tsec__caller *cl)
{
	const char *p = json_string_value(json_object_get(x, "principal"));
	json_t *admin = json_object_get(x, "admin");

	if (!p || !*p || strlen(p) >= sizeof(cl->principal) ||
	    (admin && !json_is_boolean(admin)) || cfg_roles(json_object_get(x, "roles"), cl))
		return TSEC_EINVAL;
	snprintf(cl->principal, sizeof(cl->principal), "%s", p);
	cl->admin = json_is_true(admin);
	return log_who(cl);
}

int tsec__cfg_callers(json_t *root, struct tsec__config *c, struct tsec_error *err)
{
	json_t *v, *x;
	size_t i;
	int first_uid;
	char place[64];

	v = json_object_get(root, "clients");
	if (v && !json_is_array(v))
		return tsec__seterr(err, TSEC_EINVAL, "", "config /clients: must be an array");
	json_array_foreach(v, i, x) {
		struct tsec__caller *cl = &c->callers[c->ncallers];
		const char *key = json_string_value(json_object_get(x, "public_key"));
		snprintf(place, sizeof(place), "/clients/%zu", i);
		if (!json_is_object(x))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config %s: must be an object", place);
		if (tsec__cfg_known_only(x, place, "clients", err))
			return err->code;
		if (c->ncallers == TSEC_D_MAX_CALLERS || !key || strlen(key) != 40 ||
		    !zmq_z85_decode(cl->key, key) || tsec__cfg_caller(x, cl))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config %s: needs a 40-character Z85 \"public_key\", a \"principal\","
					    " at most %d string \"roles\" and a boolean \"admin\"", place,
					    TSEC_D_MAX_ROLES);
		cl->uid = -1;
		for (int j = 0; j < c->ncallers; j++)
			if (!memcmp(c->callers[j].key, cl->key, sizeof(cl->key)))
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s: the same \"public_key\" as /clients/%zu: a key "
						    "names one caller (the first entry would win silently)",
						    place, (size_t)j);
		c->ncallers++;
	}
	first_uid = c->ncallers;
	v = json_object_get(root, "ipc_uids");
	if (v && !json_is_array(v))
		return tsec__seterr(err, TSEC_EINVAL, "", "config /ipc_uids: must be an array");
	json_array_foreach(v, i, x) {
		struct tsec__caller *cl = &c->callers[c->ncallers];
		json_t *uid = json_object_get(x, "uid");
		snprintf(place, sizeof(place), "/ipc_uids/%zu", i);
		if (!json_is_object(x))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config %s: must be an object", place);
		if (tsec__cfg_known_only(x, place, "ipc_uids", err))
			return err->code;
		if (c->ncallers == TSEC_D_MAX_CALLERS || !json_is_integer(uid) ||
		    json_integer_value(uid) < 0 || tsec__cfg_caller(x, cl))
			return tsec__seterr(err, TSEC_EINVAL, "",
					    "config %s: needs an integer \"uid\", a \"principal\","
					    " at most %d string \"roles\" and a boolean \"admin\"", place,
					    TSEC_D_MAX_ROLES);
		cl->uid = (long)json_integer_value(uid);
		for (int j = first_uid; j < c->ncallers; j++)
			if (c->callers[j].uid == cl->uid)
				return tsec__seterr(err, TSEC_EINVAL, "",
						    "config %s: uid %ld again (first at /ipc_uids/%zu): a uid "
						    "names one caller (the first entry would win silently)",
						    place, cl->uid, (size_t)(j - first_uid));
		c->ncallers++;
	}
	return 0;
}

