/*
 * Certificates in the store, in certmagic's layout:
 * certificates/<issuer>/<domain>/<domain>.{crt,key,json}, saved as one
 * transaction and loaded as complete, absent or incomplete.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"

void tsec_cert_files_free(struct tsec_cert_files *f)
{
	if (!f)
		return;
	free(f->cert);
	free(f->key);
	free(f->meta);
	memset(f, 0, sizeof(*f));
}

/* certmagic's safe form of a name: lower case, "*" as "wildcard_". */
static int safe_name(const char *in, char *out, size_t n)
{
	size_t o = 0;

	if (!in || !*in)
		return -1;
	for (; *in; in++) {
		char c = *in;

		if (c == '*') {
			if (o + 9 >= n)
				return -1;
			memcpy(out + o, "wildcard_", 9);
			o += 9;
			continue;
		}
		if (c == '/' || c == '\\' || c == ':' || o + 1 >= n)
			return -1;
		out[o++] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
	}
	out[o] = '\0';
	return 0;
}

/* "." would vanish from the key and ".." climb out of it. */
static bool dots(const char *s)
{
	return s[0] == '.' && (s[1] == '\0' || (s[1] == '.' && s[2] == '\0'));
}

int tsec__cert_names(const char *issuer, const char *domain, char *crt,
		     char *key, char *meta, size_t n)
{
	char iss[256], dom[300];

	if (safe_name(issuer, iss, sizeof(iss)) || safe_name(domain, dom, sizeof(dom)) ||
	    dots(iss) || dots(dom))
		return TSEC_EKEY;
	/* Built with copies, not snprintf (issue 21: three snprintf calls
	 * were a fifth of a gated renewal turn): the folder once, then each
	 * name's extension. */
	{
		size_t il = strlen(iss), dl = strlen(dom), base = 13 + il + 1 + dl + 1 + dl;
		char *outs[3] = { crt, key, meta };
		static const char *const ext[3] = { ".crt", ".key", ".json" };

		if (base + 6 > n)
			return TSEC_EKEY;
		memcpy(crt, "certificates/", 13);
		memcpy(crt + 13, iss, il);
		crt[13 + il] = '/';
		memcpy(crt + 14 + il, dom, dl);
		crt[14 + il + dl] = '/';
		memcpy(crt + 15 + il + dl, dom, dl);
		for (int i = 0; i < 3; i++) {
			if (i)
				memcpy(outs[i], crt, base);
			memcpy(outs[i] + base, ext[i], strlen(ext[i]) + 1);
		}
	}
	return 0;
}

int tsec_cert_keys(const char *issuer, const char *domain, char *crt,
		   char *key, char *meta, size_t n)
{
	struct tsec__key k;
	char why[96];

	if (tsec__cert_names(issuer, domain, crt, key, meta, n) ||
	    tsec__key_split(crt, strlen(crt), false, &k, why, sizeof(why)) || k.nseg != 4)
		return TSEC_EKEY;
	return 0;
}

int tsec_store_save_cert(struct tsec_store *s, const struct tsec_principal *who,
			 const char *issuer, const char *domain,
			 const struct tsec_cert_files *f, struct tsec_error *err)
{
	return tsec_store_save_cert_fenced(s, who, NULL, issuer, domain, f, err);
}

int tsec_store_save_cert_fenced(struct tsec_store *s, const struct tsec_principal *who,
				const struct tsec_lock *lk, const char *issuer,
				const char *domain, const struct tsec_cert_files *f,
				struct tsec_error *err)
{
	char crt[TSEC_KEY_MAX], key[TSEC_KEY_MAX], meta[TSEC_KEY_MAX];
	struct tsec_put puts[3];

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	/* Each name is read by the key rules once, where it is written. */
	if (tsec__cert_names(issuer, domain, crt, key, meta, sizeof(crt)))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	if (!f || !f->cert || !f->key || !f->meta)
		return tsec__seterr(err, TSEC_EINVAL, "", "a certificate needs its cert, key and metadata");
	puts[0] = (struct tsec_put){ crt, f->cert, f->cert_len };
	puts[1] = (struct tsec_put){ key, f->key, f->key_len };
	puts[2] = (struct tsec_put){ meta, f->meta, f->meta_len };
	return lk ? tsec_store_put_fenced(s, who, lk, puts, 3, err)
		  : tsec_store_put_many(s, who, puts, 3, err);
}

int tsec_store_load_cert(struct tsec_store *s, const struct tsec_principal *who,
			 const char *issuer, const char *domain,
			 struct tsec_cert_files *f, struct tsec_error *err)
{
	char keys[3][TSEC_KEY_MAX];
	struct tsec__skey sk[3];
	struct tsec_request r[3];
	char **bufs[3] = { &f->cert, &f->key, &f->meta };
	size_t *lens[3] = { &f->cert_len, &f->key_len, &f->meta_len };
	int present = 0, rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	memset(f, 0, sizeof(*f));
	if (tsec__cert_names(issuer, domain, keys[0], keys[1], keys[2], sizeof(keys[0])))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	for (int i = 0; i < 3; i++) {
		if ((rc = tsec__skey_parse(keys[i], false, &sk[i], err)))
			return rc;
		tsec__req_for(&r[i], "storage.load", &sk[i]);
	}
	if ((rc = tsec__store_check(s, who, r, 3, err)))
		return rc;
	/* The three as of one moment: never the certificate of one save and
	 * the key of another. */
	{
		char *v[3];
		size_t n[3];

		if ((rc = s->be->ops->get_many(s->be, sk, 3, s->value_max, v, n, err)))
			return rc;
		for (int i = 0; i < 3; i++) {
			*bufs[i] = v[i];
			*lens[i] = n[i];
			present += v[i] != NULL;
		}
	}
	if (present == 3)
		return 0;
	tsec_cert_files_free(f);
	if (present == 0)
		return tsec__seterr(err, TSEC_ENOENT, keys[0], "no certificate for %s", domain);
	return tsec__seterr(err, TSEC_EINCOMPLETE, keys[0],
			    "only %d of the certificate's 3 files exist", present);
}
