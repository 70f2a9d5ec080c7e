/*
 * tsec-broker: loading and reloading the policy.
 *
 * No rollback: a signed policy carries a "revision" (inside the signed
 * text, so it cannot be changed without the signing key).  The broker
 * refuses a signed policy whose revision is below the last one it
 * accepted, or equal to it with other content, and keeps that revision
 * and the policy's SHA-256 in STATE_DIR/.tsec-policy-revision across
 * restarts (written atomically, fsynced).  Replaying an older, correctly
 * signed policy with its signature is therefore refused.  A state file
 * that exists and does not read (empty, garbage) refuses every policy:
 * the revision it guarded is unknown, and starting would allow a
 * rollback.
 *
 * Binding and freshness, for fleets: a signed policy may name its
 * "fleet" (then a broker with "fleet_id" takes only its own fleet's, and
 * one fleet's bundle cannot be replayed in another signed by the same
 * key) and an "expires" time, past which it is refused at load, and
 * health turns "degraded" while it is still serving (a frozen update
 * shows).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/where.h"
#include "broker/daemon/obtain.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file.h"
#include "common/sign.h"

#define STATE_FILE ".tsec-policy-revision"

int tsec__policy_text(struct tsec__daemon *d, char **text, size_t *len,
		      struct tsec_error *err)
{
	return tsec__policy_read(d->cfg.policy, d->cfg.have_pk ? d->cfg.policy_pk : NULL,
				 text, len, err);
}

/* The policy's top-level "revision", or -1 when it has none. */
long long tsec__policy_revision_of(const char *text, size_t len)
{
	json_t *root = json_loadb(text, len, 0, NULL), *v;
	long long r = -1;

	if ((v = json_object_get(root, "revision")) && json_is_integer(v))
		r = json_integer_value(v);
	json_decref(root);
	return r;
}

static void state_path(const struct tsec__daemon *d, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", d->cfg.state_dir, STATE_FILE);
}

/* The last accepted revision and hash: 0, 1 when there is none yet
 * (no file), or an error when the file does not read. */
static int state_read(const struct tsec__daemon *d, long long *rev, char sha[65],
		      struct tsec_error *err)
{
	char path[1100], buf[256], tail;
	FILE *f;
	int got;

	state_path(d, path, sizeof(path));
	if (!(f = fopen(path, "re"))) {
		if (errno == ENOENT)
			return 1;
		return tsec__seterr(err, TSEC_EIO, path, "cannot read %s: %s", path,
				    strerror(errno));
	}
	got = fgets(buf, sizeof(buf), f) &&
	      sscanf(buf, "revision %lld sha256 %64[0-9a-f]%c", rev, sha, &tail) == 3 &&
	      tail == '\n' && *rev >= 0 && strlen(sha) == 64;
	fclose(f);
	if (!got)
		return tsec__seterr(err, TSEC_EIO, path, "%s is damaged (not \"revision N sha256 "
				    "HEX\"): the last accepted revision is unknown, so no policy "
				    "is loaded (that could be a rollback); restore the file, or "
				    "remove it knowing every signed revision will be accepted "
				    "once", path);
	return 0;
}

/* The policy's "fleet" into fleet (or ""), and "expires" (or 0). */
static void binding_of(const char *text, size_t len, char fleet[72], int64_t *expires)
{
	json_t *root = json_loadb(text, len, 0, NULL);
	const char *f = json_string_value(json_object_get(root, "fleet"));
	const char *e = json_string_value(json_object_get(root, "expires"));

	snprintf(fleet, 72, "%s", f ? f : "");
	*expires = e ? tsec__utc_parse(e) : 0;
	json_decref(root);
}

static int state_write(const struct tsec__daemon *d, long long rev, const char *sha,
		       struct tsec_error *err)
{
	char path[1100], line[128];
	int n;

	state_path(d, path, sizeof(path));
	if (mkdir(d->cfg.state_dir, 0700) < 0 && errno != EEXIST)
		return tsec__seterr(err, TSEC_EIO, d->cfg.state_dir, "cannot create %s: %s",
				    d->cfg.state_dir, strerror(errno));
	n = snprintf(line, sizeof(line), "revision %lld sha256 %s\n", rev, sha);
	if (tsec__file_replace(path, line, (size_t)n, 0600))
		return tsec__seterr(err, TSEC_EIO, path, "cannot keep the policy revision: %s",
				    strerror(errno));
	return 0;
}

int tsec__policy_bound(struct tsec__daemon *d, const char *text, size_t len,
		       struct tsec_error *err)
{
	char fleet[72];
	int64_t expires;

	binding_of(text, len, fleet, &expires);
	if (d->cfg.fleet_id && strcmp(fleet, d->cfg.fleet_id))
		return tsec__seterr(err, TSEC_ESIGNATURE, "/fleet", fleet[0]
				    ? "the policy is for fleet \"%s\", this broker is in \"%s\": "
				      "refused" : "the policy names no \"fleet\"%s; this broker takes "
				      "only fleet \"%s\"'s", fleet, d->cfg.fleet_id);
	if (expires && expires * 1000 <= tsec__wall_ms())
		return tsec__seterr(err, TSEC_ESIGNATURE, "/expires", "the policy expired (its "
				    "\"expires\" has passed): refused; sign a new revision");
	return 0;
}

int tsec__policy_admit(struct tsec__daemon *d, const char *text, size_t len,
		       struct tsec__policy_id *id, struct tsec_error *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	long long last = -1;
	char last_sha[65] = "", fleet[72];
	int st;

	crypto_hash_sha256(h, (const unsigned char *)text, len);
	sodium_bin2hex(id->sha256, sizeof(id->sha256), h, sizeof(h));
	id->revision = tsec__policy_revision_of(text, len);
	binding_of(text, len, fleet, &id->expires_s);
	id->loaded_ms = tsec__wall_ms();
	if (!d->cfg.have_pk)
		return 0; /* unsigned: whoever can write the file decides anyway */
	if (id->revision < 0)
		return tsec__seterr(err, TSEC_EPOLICY, "/revision",
				    "a signed policy needs a \"revision\" (a non-negative integer "
				    "raised with every change)");
	if ((st = tsec__policy_bound(d, text, len, err)))
		return st;
	if ((st = state_read(d, &last, last_sha, err)) < 0)
		return st;
	if (st == 0 &&
	    (id->revision < last || (id->revision == last && strcmp(id->sha256, last_sha))))
		return tsec__seterr(err, TSEC_EROLLBACK, "/revision",
				    "revision %lld is not above the running %lld: refused "
				    "(no rollback)", id->revision, last);
	return 0;
}

int tsec__policy_commit(struct tsec__daemon *d, const struct tsec__policy_id *id,
			const char *text, size_t len, struct tsec_error *err)
{
	struct tsec__policy_text *t = malloc(sizeof(*t) + 128);

	/* Its cert.obtain rates: none readable is none counted, so a
	 * policy whose rates cannot be read here is said loudly. */
	{
		struct tsec__obtain_limits *l = tsec__obtain_limits_of(text, len);

		if (!l)
			tsec__say("policy: out of memory reading its cert.obtain rates: "
				  "cert.obtain is refused until the next reload");
		tsec__obtain_limits_set(d, l);
	}
	{
		json_t *j = json_loadb(text, len, 0, NULL), *old;

		pthread_mutex_lock(&d->policy_lock);
		old = d->policy_json;
		d->policy_json = j;
		pthread_mutex_unlock(&d->policy_lock);
		json_decref(old);
	}

	pthread_mutex_lock(&d->policy_lock);
	d->policy = *id;
	if (t) {
		t->len = (size_t)snprintf(t->text, 128, ",\"policy_sha256\":\"%s\",\"policy_revision\":%lld",
					  id->sha256, id->revision);
		t->older = d->policy_texts;
		d->policy_texts = t;
		atomic_store_explicit(&d->policy_text, t, memory_order_release);
	}
	pthread_mutex_unlock(&d->policy_lock);
	return d->cfg.have_pk ? state_write(d, id->revision, id->sha256, err) : 0;
}

void tsec__policy_locate(const struct tsec__daemon *d, const char *text, size_t len,
			 struct tsec_error *e)
{
	char line[TSEC_ERR_WHERE + TSEC_ERR_MSG + 4200];

	if (e->code != TSEC_EPOLICY || !text ||
	    (!e->where[0] && strncmp(e->msg, "JSON error at line ", 19)))
		return;
	tsec__error_say(line, sizeof(line), d->cfg.policy, text, len, e->where, e->msg);
	snprintf(e->msg, sizeof(e->msg), "%.255s", line);
	e->where[0] = '\0';
}

int tsec__policy_reload(struct tsec__daemon *d, struct tsec_error *err)
{
	struct tsec__policy_id id;
	char *text = NULL;
	size_t len;
	int rc;

	pthread_mutex_lock(&d->reload_lock);
	if (d->config_path)
		tsec__config_reread(d->config_path, &d->cfg);
	rc = tsec__policy_text(d, &text, &len, err);
	if (!rc)
		rc = tsec__policy_admit(d, text, len, &id, err);
	if (!rc && (rc = tsec_bus_reload(d->bus, "policy", text, len, err)))
		tsec__policy_locate(d, text, len, err);
	if (!rc && tsec__policy_commit(d, &id, text, len, err))
		/* It serves already; say loudly that a restart could roll back. */
		tsec__say("policy reloaded, but its revision was not kept (%s): until it is, a "
			  "restart would accept an older signed policy", err->msg);
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	if (rc) {
		atomic_fetch_add(&d->st.reload_failures, 1);
		tsec__say("reload refused, the old policy keeps serving: %s%s%s", err->where,
			  err->where[0] ? ": " : "", err->msg);
	} else {
		atomic_fetch_add(&d->st.reloads, 1);
		tsec__say("policy reloaded from %s (revision %lld, sha256 %.16s...)", d->cfg.policy,
			  id.revision, id.sha256);
	}
	return rc;
}
