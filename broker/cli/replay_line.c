/*
 * Reading a decision log for tsec replay and tsec diff --log
 * (cli.h): a line back into the request it records.  Every byte of a
 * log was chosen by whoever sent the request, so nothing read here is
 * trusted: fields are taken only with the types a decision line has,
 * and a certificate is made again from its attributes, never read.
 * Apart from replay.c so any bytes can be fed to it (fuzz_replay).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/cli/cli.h"
#include "common/certinfo.h"

/* A certificate made from attrs (its PEM, kept in m), once per distinct
 * attributes; NULL when they cannot be made. */
static const char *pem_for(struct tsec__made *m, json_t *attrs)
{
	struct tsec__certinfo ci;
	char *key = json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS), *pem;
	json_t *v;

	if (!key)
		return NULL;
	if ((v = json_object_get(m->by_attrs, key))) {
		free(key);
		return json_string_value(v);
	}
	if (tsec__certinfo_from_json(attrs, &ci) || !(pem = tsec__certinfo_pem(&ci))) {
		free(key);
		return NULL;
	}
	json_object_set_new(m->by_attrs, key, json_string(pem));
	free(pem);
	v = json_object_get(m->by_attrs, key);
	free(key);
	return json_string_value(v);
}

/*
 * The request a log line records, as a request object for
 * tsec__ptest_request (new), or NULL with *why set.
 */
json_t *tsec__logged_request(json_t *line, struct tsec__made *m, const char **why)
{
	json_t *ctx = json_object_get(line, "context"), *req, *c, *roles;
	const char *k;
	json_t *v;

	if (!json_is_string(json_object_get(line, "action")) ||
	    !json_is_string(json_object_get(line, "resource")) ||
	    !json_is_string(json_object_get(line, "principal"))) {
		*why = "not a decision line";
		return NULL;
	}
	if (json_is_true(json_object_get(line, "cut"))) {
		*why = "the line was cut to fit (a field is incomplete)";
		return NULL;
	}
	c = json_object();
	json_object_foreach(ctx, k, v) {
		if (!strcmp(k, "cert_pem_sha256"))
			continue;
		if (!strcmp(k, "cert")) {
			const char *pem = pem_for(m, v);

			if (!pem) {
				json_decref(c);
				*why = "its certificate's attributes cannot be made again";
				return NULL;
			}
			json_object_set_new(c, "cert_pem", json_string(pem));
			continue;
		}
		json_object_set(c, k, v);
	}
	if (json_object_get(ctx, "cert_pem_sha256") && !json_object_get(c, "cert_pem")) {
		json_decref(c);
		*why = "the log holds only its certificate's hash (logged before attributes were)";
		return NULL;
	}
	/* As of when it was logged: a certificate's remaining time. */
	if (!json_object_get(c, "now") && json_is_integer(json_object_get(line, "time_ms")))
		json_object_set_new(c, "now", json_integer(
			json_integer_value(json_object_get(line, "time_ms")) / 1000));
	/* Roles taken with a reference of their own ("o"): a new empty
	 * array given to "O" leaked once per line without roles (found by
	 * fuzz_replay). */
	roles = json_object_get(line, "roles");
	roles = json_is_array(roles) ? json_incref(roles) : json_array();
	req = json_pack("{s:O,s:o,s:O,s:O,s:o}", "principal", json_object_get(line, "principal"),
			"roles", roles, "action", json_object_get(line, "action"),
			"resource", json_object_get(line, "resource"), "context", c);
	return req;
}

/*
 * A cert.obtain the broker refused by its rate (the log's why_not says
 * "rate: ..."): the count was the broker's, on its storage, and no log
 * replays it; the policy alone would allow it.
 */
bool tsec__rate_refusal(json_t *line, const char **why)
{
	json_t *w = json_array_get(json_object_get(line, "why_not"), 0);
	const char *a = json_string_value(json_object_get(line, "action"));
	const char *t = json_string_value(json_object_get(w, "why"));

	if (!a || strcmp(a, "cert.obtain") || !t || strncmp(t, "rate: ", 6))
		return false;
	*why = "cert.obtain refused by its rate: the count was the broker's, not the log's";
	return true;
}

