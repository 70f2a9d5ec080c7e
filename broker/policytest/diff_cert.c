/*
 * The certificates of the exact policy comparison (diff.c): for the cert
 * conditions that apply to a class of keys, one certificate of each
 * class of certificates they tell apart.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/policytest/diff_private.h"
#include "common/certinfo.h"
#include "common/key.h"

/*
 * The certificates a class's cert conditions tell apart, as PEM
 * (borrowed from d->certs; their count into out): one that does not
 * parse; and self-signed ones, for what the rules on the class ask:
 * naming the key's domain or not (san_covers_domain; "*" labels as many
 * as the domain has, so one certificate serves every domain of that
 * shape), with notAfter either side of each min_remaining_s bound, of
 * each key type the module knows (key_types) or RSA either side of each
 * min_rsa_bits bound and one other type.  Made once each per run.
 */
static const char *cert_made(json_t *cache, const char *name, int64_t not_after,
			     const char *type, unsigned bits)
{
	char k[320];
	json_t *v;
	struct tsec__certinfo ci;
	char *pem;

	snprintf(k, sizeof(k), "%s|%lld|%s|%u", name, (long long)not_after, type, bits);
	if ((v = json_object_get(cache, k)))
		return json_string_value(v);
	memset(&ci, 0, sizeof(ci));
	ci.nnames = 1;
	snprintf(ci.names[0], sizeof(ci.names[0]), "%s", name);
	ci.not_after = not_after;
	snprintf(ci.key, sizeof(ci.key), "%s", type);
	ci.bits = bits;
	snprintf(ci.issuer, sizeof(ci.issuer), "tsec diff");
	if (!(pem = tsec__certinfo_pem(&ci)))
		return NULL;
	json_object_set_new(cache, k, json_string(pem));
	free(pem);
	return json_string_value(json_object_get(cache, k));
}

size_t tsec__dn_certs(json_t *cache, int64_t now, const char *key, json_t *conds,
		      const char **out, size_t max)
{
	static const struct { const char *type; unsigned bits; } KEYS[] = {
		{ "ec-p256", 256 }, { "rsa", 2048 }, { "ec-p384", 384 }, { "ed25519", 256 },
	};
	struct tsec__key k;
	char why[64], dom[254] = "", any[254] = "";
	int64_t times[34];
	unsigned rsa[18], nt = 0, nr = 0, nkeys = 1;
	bool san = false;
	size_t n = 0;

	if (!tsec__key_parse(key, strlen(key), false, &k, why, sizeof(why)))
		tsec__key_domain(&k, dom, sizeof(dom));
	/* "*" for each label of the domain: covers it and every other of
	 * its shape. */
	for (size_t i = 0, o = 0; dom[i] && o + 3 < sizeof(any); i++)
		if (i == 0 || dom[i] == '.')
			o += (size_t)snprintf(any + o, sizeof(any) - o, "%s*", o ? "." : "");
	/* (A label that is empty only its own name covers.) */
	if (*dom && (dom[0] == '.' || dom[strlen(dom) - 1] == '.' || strstr(dom, "..")))
		snprintf(any, sizeof(any), "%s", dom);
	times[nt++] = now + 400 * 86400;
	for (size_t i = 0; i < json_array_size(conds); i++) {
		json_t *c = json_array_get(conds, i), *v;

		san |= json_object_get(c, "san_covers_domain") != NULL;
		if (json_object_get(c, "key_types"))
			nkeys = 4;
		if ((v = json_object_get(c, "min_remaining_s")) && json_is_integer(v) && nt + 2 <= 34) {
			times[nt++] = now + json_integer_value(v) - 600;
			times[nt++] = now + json_integer_value(v) + 600;
		}
		if ((v = json_object_get(c, "min_rsa_bits")) && json_is_integer(v) && nr + 2 <= 18) {
			json_int_t bv = json_integer_value(v);
			if (bv - 8 >= 512 && bv - 8 <= 8192)
				rsa[nr++] = (unsigned)(bv - 8);
			if (bv >= 512 && bv <= 8192)
				rsa[nr++] = (unsigned)bv;
		}
	}
	out[n++] = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
	for (int named = 0; named < (san && *any ? 2 : 1); named++)
		for (unsigned t = 0; t < nt; t++)
			for (unsigned x = 0; x < nkeys + nr && n < max; x++) {
				const char *pem = cert_made(cache, named ? any : "tsec-diff.invalid",
							    times[t], x < nkeys ? KEYS[x].type : "rsa",
							    x < nkeys ? KEYS[x].bits : rsa[x - nkeys]);
				if (pem)
					out[n++] = pem;
			}
	return n;
}

