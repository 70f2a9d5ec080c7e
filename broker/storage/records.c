/*
 * The store's own records: values under the reserved folder ".tsec-fleet"
 * (no caller's key can name a ".tsec-" segment, and a listing of the root
 * leaves the folder out), written and read with the backend's ordinary
 * value operations.  A compare-and-swap is a read, then a write guarded
 * by what was read (struct tsec__guard, backend.h: the backend checks it
 * in the step that writes), so two writers cannot both succeed over the
 * same old record, on any backend that keeps the guard's promise (the
 * conformance suite's guard cases, every backend).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"

#define RECORDS TSEC__RESERVED "fleet"
#define RECORD_MAX (32u << 20)

static int record_key(const char *name, struct tsec__skey *sk, struct tsec_error *err)
{
	char key[TSEC_KEY_MAX + 1];

	if (!name || !*name || strchr(name, '/') ||
	    (size_t)snprintf(key, sizeof(key), RECORDS "/%s", name) >= sizeof(key))
		return tsec__seterr(err, TSEC_EINVAL, "", "a record's name is one key segment");
	return tsec__skey_parse_any(key, sk, err);
}

int tsec__store_record_get(struct tsec_store *s, const char *name, char **out, size_t *len,
			   struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = record_key(name, &sk, err)))
		return rc;
	rc = s->be->ops->get(s->be, &sk, RECORD_MAX, out, len, err);
	if (rc == TSEC_ENOENT)
		return tsec__seterr(err, TSEC_ENOENT, name, "no %s published", name);
	return rc;
}

int tsec__store_record_names(struct tsec_store *s, struct tsec_strlist *out,
			     struct tsec_error *err)
{
	struct tsec__skey dir;
	int rc;

	out->v = NULL;
	out->n = 0;
	if ((rc = tsec__skey_parse_any(RECORDS, &dir, err)))
		return rc;
	rc = s->be->ops->list(s->be, &dir, 0, out, err);
	if (rc == TSEC_ENOENT)
		return 0;
	if (rc)
		return rc;
	/* The backends list whole keys: keep the names. */
	for (size_t i = 0; i < out->n; i++) {
		char *leaf = strrchr(out->v[i], '/');

		if (leaf)
			memmove(out->v[i], leaf + 1, strlen(leaf + 1) + 1);
	}
	return 0;
}

int tsec__store_record_put(struct tsec_store *s, const char *name, const char *val,
			   size_t len, struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec__bput p;
	int rc;

	if ((rc = record_key(name, &sk, err)))
		return rc;
	p = (struct tsec__bput){ &sk, val, len };
	return s->be->ops->put_many(s->be, &p, 1, NULL, NULL, err);
}

int tsec__store_record_cas(struct tsec_store *s, const char *name, const char *old,
			   size_t oldlen, const char *val, size_t len, struct tsec_error *err)
{
	struct tsec__skey sk;
	char *cur = NULL;
	size_t clen = 0;
	int rc, got;

	if ((rc = record_key(name, &sk, err)))
		return rc;
	got = s->be->ops->get(s->be, &sk, RECORD_MAX, &cur, &clen, err);
	if (got && got != TSEC_ENOENT) {
		rc = got;
	} else if (!got && clen == len && !memcmp(cur, val, len)) {
		rc = 0;                  /* already so: a resend whose answer was lost */
	} else if (got == TSEC_ENOENT ? old != NULL
		   : !old || clen != oldlen || memcmp(cur, old, clen)) {
		rc = TSEC_ECHANGED;
	} else {
		/* The store's one compare-and-swap: the backend's guard, checked
		 * in the step that writes (issue 53, item 2: records took a
		 * reserved lock and a fenced write of their own beside it). */
		struct tsec__guarded g = { sk.text, val, len, old, oldlen };

		rc = tsec__store_put_checked(s, NULL, NULL, 0, &g, err);
	}
	free(cur);
	if (rc == TSEC_ECHANGED)
		rc = tsec__seterr(err, TSEC_EBUSY, name, "%s changed since it was read; read it "
				  "again", name);
	return rc;
}
