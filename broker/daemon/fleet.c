/*
 * tsec-broker: one policy for the fleet.  On a shared backend the signed
 * policy bundle {"policy": TEXT, "signature": HEX} is kept as the
 * store's record "policy" (storage/records.c: the value under the
 * reserved key .tsec-fleet/policy).  `policy.publish` (admin) verifies
 * and writes it; every broker looks at it once a second and loads a bundle
 * whose SHA-256 differs from what it runs, after the same checks as a
 * reload from its file: the signature against its own configured key
 * (write access to etcd alone cannot change the policy), and a revision
 * above the one it accepted last (no rollback).  A bundle it refused is
 * said once, not every second.  The last bundle a broker accepted is kept
 * in its state_dir too, so that a broker restarting while the record in
 * the backend is missing or replaced by something unsigned still starts
 * on the newest policy it accepted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file.h"
#include "common/sign.h"

#define POLL_MS 1000
#define KEPT ".tsec-fleet-policy"

/* Keeps bundle b in state_dir (temporary file, fsync, rename). */
static void keep(struct tsec__daemon *d, const char *b, size_t len)
{
	char path[1100];

	snprintf(path, sizeof(path), "%s/" KEPT, d->cfg.state_dir);
	if (tsec__file_replace(path, b, len, 0600))
		tsec__say("could not keep the fleet policy in %s", path);
}

int tsec__fleet_shared(const struct tsec__daemon *d)
{
	return d->cfg.st.backend && strcmp(d->cfg.st.backend, "file");
}

/* Reads a bundle: the policy text (new) after its signature verifies. */
static int bundle_open(struct tsec__daemon *d, const char *b, size_t len, char **text,
		       size_t *tlen, struct tsec_error *err)
{
	json_t *j = json_loadb(b, len, 0, NULL);
	const char *pol = json_string_value(json_object_get(j, "policy"));
	const char *sig = json_string_value(json_object_get(j, "signature"));
	unsigned char s[crypto_sign_BYTES];
	int rc = 0;

	*text = NULL;
	if (!pol || !sig) {
		rc = tsec__seterr(err, TSEC_EPROTO, "bundle", "the policy bundle needs \"policy\" "
				  "and \"signature\"");
	} else if (!d->cfg.have_pk) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, "bundle", "a fleet policy needs "
				  "\"policy_public_key\" in this broker's configuration");
	} else if (tsec__hex_decode(sig, s, sizeof(s)) ||
		   crypto_sign_verify_detached(s, (const unsigned char *)pol,
					       json_string_length(json_object_get(j, "policy")),
					       d->cfg.policy_pk)) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, "bundle", "the policy bundle's signature "
				  "does not verify with this broker's key");
	} else if (!(*text = strdup(pol))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	} else {
		*tlen = json_string_length(json_object_get(j, "policy"));
	}
	json_decref(j);
	return rc;
}

/* Loads a verified policy text as the running one (reload_lock held). */
static int adopt(struct tsec__daemon *d, const char *text, size_t len,
		 struct tsec__policy_id *id, struct tsec_error *err)
{
	int rc;

	if ((rc = tsec__policy_admit(d, text, len, id, err)) ||
	    (rc = tsec_bus_reload(d->bus, "policy", text, len, err)))
		return rc;
	if (tsec__policy_commit(d, id, err))
		tsec__say("fleet policy loaded, but its revision was not kept (%s)", err->msg);
	return 0;
}

int tsec__fleet_publish(struct tsec__daemon *d, const char *policy, size_t plen,
			const char *sig_hex, struct tsec__policy_id *id, struct tsec_error *err)
{
	json_t *b = json_pack("{s:s%,s:s}", "policy", policy, plen, "signature", sig_hex);
	char *bundle = b ? json_dumps(b, JSON_COMPACT) : NULL, *text = NULL, *cur = NULL;
	char *ctext = NULL;
	size_t tlen, clen = 0, ctlen;
	struct tsec_error ignored;
	int rc;

	json_decref(b);
	if (!bundle)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	if (!tsec__fleet_shared(d)) {
		free(bundle);
		return tsec__seterr(err, TSEC_EINVAL, "storage", "this broker's storage is not "
				    "shared (etcd or redis): there is no fleet to publish to");
	}
	pthread_mutex_lock(&d->reload_lock);
	/* The same checks every broker makes, before anything is written;
	 * then not below the fleet's own bundle (which this broker may not
	 * have seen yet); then written only over the bundle read here
	 * (compare-and-swap: two publishes at once cannot undo each other). */
	rc = bundle_open(d, bundle, strlen(bundle), &text, &tlen, err);
	if (!rc) {
		int got = tsec__store_record_get(d->store, "policy", &cur, &clen, err);

		if (got && got != TSEC_ENOENT)
			rc = got;
		else if (!got && !bundle_open(d, cur, clen, &ctext, &ctlen, &ignored) &&
			 tsec__policy_revision_of(ctext, ctlen) >
			 tsec__policy_revision_of(text, tlen))
			rc = tsec__seterr(err, TSEC_EROLLBACK, "/revision", "the fleet already "
					  "has revision %lld: refused (no rollback)",
					  tsec__policy_revision_of(ctext, ctlen));
	}
	if (!rc)
		rc = adopt(d, text, tlen, id, err);
	if (!rc && (rc = tsec__store_record_cas(d->store, "policy", cur, cur ? clen : 0, bundle,
					      strlen(bundle), err)))
		tsec__say("fleet policy loaded here, but not published: %s", err->msg);
	if (!rc) {
		snprintf(d->fleet_seen, sizeof(d->fleet_seen), "%s", id->sha256);
		keep(d, bundle, strlen(bundle));
	}
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	free(ctext);
	free(cur);
	free(bundle);
	if (!rc) {
		atomic_fetch_add(&d->st.reloads, 1);
		tsec__say("fleet policy published (revision %lld, sha256 %.16s...)", id->revision,
			  id->sha256);
	}
	return rc;
}

/* Takes the bundle b if it verifies and is newer than *text. */
static void prefer_one(struct tsec__daemon *d, const char *what, const char *b, size_t blen,
		       char **text, size_t *len)
{
	struct tsec_error err;
	char *fleet = NULL;
	size_t flen;

	if (bundle_open(d, b, blen, &fleet, &flen, &err) ||
	    tsec__policy_bound(d, fleet, flen, &err)) {
		tsec__say("%s ignored at start: %s", what, err.msg);
		free(fleet);
		return;
	}
	if (tsec__policy_revision_of(fleet, flen) > tsec__policy_revision_of(*text, *len)) {
		tsec__say("starting on %s (revision %lld; the file has %lld)", what,
			  tsec__policy_revision_of(fleet, flen), tsec__policy_revision_of(*text, *len));
		free(*text);
		*text = fleet;
		*len = flen;
		return;
	}
	free(fleet);
}

int tsec__fleet_prefer(struct tsec__daemon *d, char **text, size_t *len)
{
	struct tsec_error err;
	char path[1100], *b = NULL;
	size_t blen;

	snprintf(path, sizeof(path), "%s/" KEPT, d->cfg.state_dir);
	if (tsec_read_file(path, 32u << 20, &b, &blen, &err) == 0)
		prefer_one(d, "the fleet policy kept in state_dir", b, blen, text, len);
	free(b);
	b = NULL;
	if (tsec__store_record_get(d->store, "policy", &b, &blen, &err) == 0)
		prefer_one(d, "the fleet's policy", b, blen, text, len);
	free(b);
	return 0;
}

/* One look at the fleet's bundle. */
static void look(struct tsec__daemon *d)
{
	struct tsec__policy_id id;
	struct tsec_error err;
	unsigned char h[crypto_hash_sha256_BYTES];
	char sha[65], *b = NULL, *text = NULL;
	size_t len, tlen;
	int rc;

	rc = tsec__store_record_get(d->store, "policy", &b, &len, &err);
	/* The backend answered (even "none published yet"): fresh. */
	if (!rc || rc == TSEC_ENOENT)
		atomic_store(&d->fleet_read_ms, tsec__wall_ms());
	if (rc)
		return;                  /* none yet, or the backend is away */
	/* The same bytes as last time: nothing to parse or verify again. */
	crypto_hash_sha256(h, (const unsigned char *)b, len);
	sodium_bin2hex(sha, sizeof(sha), h, sizeof(h));
	if (!strcmp(sha, d->fleet_raw)) {
		free(b);
		return;
	}
	pthread_mutex_lock(&d->reload_lock);
	snprintf(d->fleet_raw, sizeof(d->fleet_raw), "%s", sha);
	if ((rc = bundle_open(d, b, len, &text, &tlen, &err)) == 0) {
		crypto_hash_sha256(h, (const unsigned char *)text, tlen);
		sodium_bin2hex(sha, sizeof(sha), h, sizeof(h));
	} else {
		crypto_hash_sha256(h, (const unsigned char *)b, len);
		sodium_bin2hex(sha, sizeof(sha), h, sizeof(h));
	}
	pthread_mutex_lock(&d->policy_lock);
	if (!strcmp(sha, d->policy.sha256) || !strcmp(sha, d->fleet_seen)) {
		if (!strcmp(sha, d->policy.sha256))
			atomic_store(&d->fleet_refused, 0);
		pthread_mutex_unlock(&d->policy_lock);
		goto out;                /* running it, or refused it already */
	}
	pthread_mutex_unlock(&d->policy_lock);
	snprintf(d->fleet_seen, sizeof(d->fleet_seen), "%s", sha);
	if (!rc)
		rc = adopt(d, text, tlen, &id, &err);
	atomic_store(&d->fleet_refused, rc != 0);
	if (rc) {
		atomic_fetch_add(&d->st.reload_failures, 1);
		tsec__say("fleet policy %.16s... refused, the running policy keeps serving: %s", sha,
			  err.msg);
	} else {
		keep(d, b, len);
		atomic_fetch_add(&d->st.reloads, 1);
		tsec__say("fleet policy loaded (revision %lld, sha256 %.16s...)", id.revision,
			  id.sha256);
	}
out:
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	free(b);
}

static void *watch(void *arg)
{
	struct tsec__daemon *d = arg;

	pthread_mutex_lock(&d->fleet_mu);
	while (d->fleet_on) {
		struct timespec ts;

		pthread_mutex_unlock(&d->fleet_mu);
		look(d);
		pthread_mutex_lock(&d->fleet_mu);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += POLL_MS / 1000;
		while (d->fleet_on &&
		       pthread_cond_timedwait(&d->fleet_cv, &d->fleet_mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&d->fleet_mu);
	return NULL;
}

int tsec__fleet_start(struct tsec__daemon *d)
{
	pthread_condattr_t ca;

	if (!tsec__fleet_shared(d) || !d->cfg.st.watch_policy)
		return 0;
	pthread_mutex_init(&d->fleet_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->fleet_cv, &ca);
	pthread_condattr_destroy(&ca);
	d->fleet_on = 1;
	if (pthread_create(&d->fleet_thread, NULL, watch, d)) {
		d->fleet_on = 0;
		tsec__say("cannot start the fleet policy watch");
		return -1;
	}
	d->fleet_started = 1;
	return 0;
}

void tsec__fleet_stop(struct tsec__daemon *d)
{
	if (!d->fleet_started)
		return;
	pthread_mutex_lock(&d->fleet_mu);
	d->fleet_on = 0;
	pthread_cond_signal(&d->fleet_cv);
	pthread_mutex_unlock(&d->fleet_mu);
	pthread_join(d->fleet_thread, NULL);
	pthread_cond_destroy(&d->fleet_cv);
	pthread_mutex_destroy(&d->fleet_mu);
	d->fleet_started = 0;
}
