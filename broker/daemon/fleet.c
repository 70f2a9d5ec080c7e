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
 *
 * A replayed or frozen record: whoever can write the backend can put an
 * older signed bundle back, or put the old one back at once after a
 * publish, so that brokers which did not look in between never see the
 * new one.  So each broker also writes the newest bundle it took as a
 * record of its own, "seen-<id>" (the id random, kept in state_dir), and
 * every few looks reads the others' and takes a newer verified one: a
 * broker that missed a revision learns it from any broker that saw it, a
 * new broker starts on it, and a broker whose fleet record is older than
 * what it runs says degraded until the record is put right.  What this
 * cannot see: a writer who removes every trace of a revision before any
 * broker but the publisher has read it, and also that broker's records;
 * a policy's "expires" bounds how long such a fleet runs on.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "broker/storage/store_above.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file.h"
#include "common/sign.h"

#define POLL_MS 1000
#define KEPT ".tsec-fleet-policy"
#define ME ".tsec-broker-id"
#define SEEN "seen-"
#define SEEN_EVERY 3             /* looks between readings of the others' records */
#define SEEN_MAX 64              /* brokers' records read per look: whoever can plant
				    more could as well delete them, so a bound
				    loses nothing and keeps a look's cost fixed */
#define NCHECKED (sizeof(((struct tsec__daemon *)0)->fleet_checked) / \
		  sizeof(((struct tsec__daemon *)0)->fleet_checked[0]))

static void sha_hex(const char *b, size_t len, char out[65])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, (const unsigned char *)b, len);
	sodium_bin2hex(out, 65, h, sizeof(h));
}

/* This broker's id, made once and kept in state_dir. */
static void me(struct tsec__daemon *d)
{
	struct tsec_error err;
	unsigned char r[16];
	char path[1100], *b = NULL;
	size_t len = 0;

	if (d->fleet_me[0])
		return;
	snprintf(path, sizeof(path), "%s/" ME, d->cfg.state_dir);
	if (tsec_read_file(path, 64, &b, &len, &err) == 0 && len >= 32 &&
	    strspn(b, "0123456789abcdef") >= 32) {
		memcpy(d->fleet_me, b, 32);
		d->fleet_me[32] = '\0';
		free(b);
		return;
	}
	free(b);
	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(d->fleet_me, sizeof(d->fleet_me), r, sizeof(r));
	if (tsec__file_replace(path, d->fleet_me, 32, 0600))
		tsec__say("could not keep this broker's id in %s: its record in the fleet is "
			  "a new one at each start", path);
}

static void newest(struct tsec__daemon *d, long long rev)
{
	long long was = atomic_load(&d->fleet_newest);

	while (rev > was && !atomic_compare_exchange_weak(&d->fleet_newest, &was, rev))
		;
}

/* Notes bundle b as the newest taken here (reload_lock held). */
static void took(struct tsec__daemon *d, const char *b, size_t len, long long rev)
{
	char *c = malloc(len ? len : 1);

	if (!c)
		return;              /* its record is written at a later look */
	memcpy(c, b, len);
	free(d->fleet_bundle);
	d->fleet_bundle = c;
	d->fleet_bundle_len = len;
	newest(d, rev);
}

/* Writes this broker's record: the newest bundle it took. */
static void put_seen(struct tsec__daemon *d)
{
	struct tsec_error err;
	char name[sizeof(SEEN) + 32], *b = NULL;
	size_t len = 0;

	pthread_mutex_lock(&d->reload_lock);
	if (d->fleet_bundle && (b = malloc(d->fleet_bundle_len ? d->fleet_bundle_len : 1))) {
		memcpy(b, d->fleet_bundle, d->fleet_bundle_len);
		len = d->fleet_bundle_len;
	}
	pthread_mutex_unlock(&d->reload_lock);
	snprintf(name, sizeof(name), SEEN "%s", d->fleet_me);
	if (b && d->fleet_me[0] && tsec__store_record_put(d->store, name, b, len, &err))
		tsec__say("could not write this broker's record %s in the fleet: %s", name,
			  err.msg);
	free(b);
}

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

int tsec__fleet_bundle_open(const unsigned char *pk, const char *b, size_t len, char **text,
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
	} else if (!pk) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, "bundle", "a fleet policy needs "
				  "\"policy_public_key\" in this broker's configuration");
	} else if (tsec__hex_decode(sig, s, sizeof(s)) ||
		   crypto_sign_verify_detached(s, (const unsigned char *)pol,
					       json_string_length(json_object_get(j, "policy")),
					       pk)) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, "bundle", "the policy bundle's signature "
				  "does not verify with this broker's key");
	} else if (!(*text = malloc((*tlen = json_string_length(json_object_get(j, "policy"))) +
				    1))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	} else {
		memcpy(*text, pol, *tlen + 1);   /* the length signed, not strlen */
	}
	json_decref(j);
	return rc;
}

static int bundle_open(struct tsec__daemon *d, const char *b, size_t len, char **text,
		       size_t *tlen, struct tsec_error *err)
{
	return tsec__fleet_bundle_open(d->cfg.have_pk ? d->cfg.policy_pk : NULL, b, len, text,
				       tlen, err);
}

/* Loads a verified policy text as the running one (reload_lock held). */
static int adopt(struct tsec__daemon *d, const char *text, size_t len,
		 struct tsec__policy_id *id, struct tsec_error *err)
{
	int rc;

	if ((rc = tsec__policy_admit(d, text, len, id, err)) ||
	    (rc = tsec_bus_reload(d->bus, "policy", text, len, err)))
		return rc;
	if (tsec__policy_commit(d, id, text, len, err))
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
		took(d, bundle, strlen(bundle), id->revision);
	}
	pthread_mutex_unlock(&d->reload_lock);
	if (!rc)
		put_seen(d);
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
	long long rev;

	if (bundle_open(d, b, blen, &fleet, &flen, &err) ||
	    tsec__policy_bound(d, fleet, flen, &err)) {
		tsec__say("%s ignored at start: %s", what, err.msg);
		free(fleet);
		return;
	}
	rev = tsec__policy_revision_of(fleet, flen);
	newest(d, rev);
	if (rev > tsec__policy_revision_of(*text, *len)) {
		tsec__say("starting on %s (revision %lld; the file has %lld)", what, rev,
			  tsec__policy_revision_of(*text, *len));
		free(*text);
		*text = fleet;
		*len = flen;
		took(d, b, blen, rev);
		return;
	}
	free(fleet);
}

int tsec__fleet_prefer(struct tsec__daemon *d, char **text, size_t *len)
{
	struct tsec_strlist names;
	struct tsec_error err;
	char path[1100], *b = NULL;
	size_t blen;

	atomic_store(&d->fleet_record_rev, -1);
	atomic_store(&d->fleet_newest, -1);
	me(d);
	snprintf(path, sizeof(path), "%s/" KEPT, d->cfg.state_dir);
	if (tsec_read_file(path, 32u << 20, &b, &blen, &err) == 0)
		prefer_one(d, "the fleet policy kept in state_dir", b, blen, text, len);
	free(b);
	b = NULL;
	if (tsec__store_record_get(d->store, "policy", &b, &blen, &err) == 0)
		prefer_one(d, "the fleet's policy", b, blen, text, len);
	free(b);
	/* What the other brokers took: a replayed record does not decide. */
	if (tsec__store_record_names(d->store, &names, &err) == 0) {
		for (size_t i = 0, read = 0; i < names.n && read < SEEN_MAX; i++) {
			char what[100];

			b = NULL;
			if (strncmp(names.v[i], SEEN, strlen(SEEN)))
				continue;
			read++;
			if (tsec__store_record_get(d->store, names.v[i], &b, &blen, &err))
				continue;
			snprintf(what, sizeof(what), "the policy broker %.16s took",
				 names.v[i] + strlen(SEEN));
			prefer_one(d, what, b, blen, text, len);
			free(b);
		}
		tsec_strlist_free(&names);
	}
	return 0;
}

/* One look at the fleet's bundle. */
static void look_record(struct tsec__daemon *d)
{
	struct tsec__policy_id id;
	struct tsec_error err;
	char sha[65], *b = NULL, *text = NULL;
	size_t len, tlen;
	int rc;

	rc = tsec__store_record_get(d->store, "policy", &b, &len, &err);
	/* The backend answered (even "none published yet"): fresh. */
	if (!rc || rc == TSEC_ENOENT)
		atomic_store(&d->fleet_read_ms, tsec__wall_ms());
	if (rc == TSEC_ENOENT) {
		atomic_store(&d->fleet_record_rev, -2);
		d->fleet_raw[0] = '\0';
	}
	if (rc)
		return;                  /* none yet, or the backend is away */
	/* The same bytes as last time: nothing to parse or verify again. */
	sha_hex(b, len, sha);
	if (!strcmp(sha, d->fleet_raw)) {
		free(b);
		return;
	}
	pthread_mutex_lock(&d->reload_lock);
	snprintf(d->fleet_raw, sizeof(d->fleet_raw), "%s", sha);
	if ((rc = bundle_open(d, b, len, &text, &tlen, &err)) == 0) {
		long long rev = tsec__policy_revision_of(text, tlen);

		atomic_store(&d->fleet_record_rev, rev);
		if (!tsec__policy_bound(d, text, tlen, &err))
			newest(d, rev);
		sha_hex(text, tlen, sha);
	} else {
		atomic_store(&d->fleet_record_rev, -1);
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
		took(d, b, len, id.revision);
		atomic_fetch_add(&d->st.reloads, 1);
		tsec__say("fleet policy loaded (revision %lld, sha256 %.16s...)", id.revision,
			  id.sha256);
	}
out:
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	free(b);
	if (!rc)
		put_seen(d);
}

/* The revision of another broker's record b (raw: SHA-256 of its bytes)
 * when it verifies and is bound to this fleet, else -1; remembered, so
 * a record that does not change is verified once. */
static long long checked(struct tsec__daemon *d, const char *raw, const char *b, size_t len)
{
	struct tsec__fleet_checked *c = &d->fleet_checked[(unsigned char)raw[0] % NCHECKED];
	struct tsec_error err;
	char *text = NULL;
	size_t tlen;

	if (!strcmp(c->raw, raw))
		return c->revision;
	snprintf(c->raw, sizeof(c->raw), "%s", raw);
	c->revision = -1;
	if (!bundle_open(d, b, len, &text, &tlen, &err) &&
	    !tsec__policy_bound(d, text, tlen, &err))
		c->revision = tsec__policy_revision_of(text, tlen);
	free(text);
	return c->revision;
}

/* Takes another broker's newer bundle b; -1 when refused. */
static int take(struct tsec__daemon *d, const char *name, const char *b, size_t len)
{
	struct tsec__policy_id id;
	struct tsec_error err;
	char *text = NULL;
	size_t tlen;
	int rc;

	pthread_mutex_lock(&d->reload_lock);
	rc = bundle_open(d, b, len, &text, &tlen, &err);
	if (!rc)
		rc = adopt(d, text, tlen, &id, &err);
	if (!rc) {
		keep(d, b, len);
		took(d, b, len, id.revision);
	}
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	if (rc) {
		atomic_fetch_add(&d->st.reload_failures, 1);
		tsec__say("the policy broker %.16s took was refused: %s", name + strlen(SEEN),
			  err.msg);
		return -1;
	}
	atomic_fetch_add(&d->st.reloads, 1);
	tsec__say("fleet policy loaded from what broker %.16s took (revision %lld, sha256 "
		  "%.16s...): the fleet's own record is older or missing", name + strlen(SEEN),
		  id.revision, id.sha256);
	put_seen(d);
	return 0;
}

/* A look at what the other brokers took: a newer verified bundle is
 * taken; this broker's own record is written again if it is missing or
 * not what it took. */
static void look_others(struct tsec__daemon *d)
{
	struct tsec_strlist names;
	struct tsec_error err;
	char raw[65], mine[65] = "", best_raw[65] = "", *best = NULL;
	size_t best_len = 0;
	long long best_rev;
	bool mine_ok = false;
	size_t at = 0;

	if (tsec__store_record_names(d->store, &names, &err))
		return;
	pthread_mutex_lock(&d->reload_lock);
	if (d->fleet_bundle)
		sha_hex(d->fleet_bundle, d->fleet_bundle_len, mine);
	pthread_mutex_unlock(&d->reload_lock);
	pthread_mutex_lock(&d->policy_lock);
	best_rev = d->policy.revision;
	pthread_mutex_unlock(&d->policy_lock);
	for (size_t i = 0, read = 0; i < names.n && read < SEEN_MAX; i++) {
		const char *n = names.v[i];
		char *b = NULL;
		size_t len;
		long long rev;

		if (strncmp(n, SEEN, strlen(SEEN)))
			continue;
		read++;
		if (tsec__store_record_get(d->store, n, &b, &len, &err))
			continue;
		sha_hex(b, len, raw);
		if (!strcmp(n + strlen(SEEN), d->fleet_me)) {
			mine_ok = !strcmp(raw, mine);
		} else if (strcmp(raw, mine) && (rev = checked(d, raw, b, len)) >= 0) {
			newest(d, rev);
			if (rev > best_rev) {
				free(best);
				best = b;
				best_len = len;
				best_rev = rev;
				at = i;
				snprintf(best_raw, sizeof(best_raw), "%s", raw);
				b = NULL;
			}
		}
		free(b);
	}
	if (best && take(d, names.v[at], best, best_len))
		d->fleet_checked[(unsigned char)best_raw[0] % NCHECKED].revision = -1;
	else if (!best && !mine_ok && mine[0])
		put_seen(d);
	free(best);
	tsec_strlist_free(&names);
}

static void look(struct tsec__daemon *d)
{
	look_record(d);
	if (d->fleet_polls++ % SEEN_EVERY == 0)
		look_others(d);
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

int tsec__fleet_start(struct tsec__daemon *d, struct tsec_error *err)
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
		return tsec__seterr(err, TSEC_ENOMEM, "watch_policy", "cannot start the fleet policy "
				    "watch");
	}
	d->fleet_started = 1;
	return 0;
}

void tsec__fleet_stop(struct tsec__daemon *d)
{
	free(d->fleet_bundle);
	d->fleet_bundle = NULL;
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
