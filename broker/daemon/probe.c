/*
 * tsec-broker's look at its remote store's blob store: a thread that
 * asks it (tsec_remote_probe, one small request) at start and every
 * TSEC_D_PROBE_MS, so health says "degraded" when it does not answer or
 * refuses this broker's credentials, before a publish fails on it.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "broker/daemon/daemon.h"
#include "common/error.h"
#include "common/clock.h"

static void *probe_main(void *arg)
{
	struct tsec__daemon *d = arg;

	pthread_mutex_lock(&d->probe_mu);
	while (d->probe_on) {
		struct tsec_error err;
		struct timespec ts;
		int rc;

		pthread_mutex_unlock(&d->probe_mu);
		rc = tsec_remote_probe(d->remote, &err);
		pthread_mutex_lock(&d->probe_mu);
		d->probe_rc = rc;
		d->probe_ms = tsec__wall_ms();
		snprintf(d->probe_why, sizeof(d->probe_why), "%s", rc ? err.msg : "");
		if (rc && rc != d->probe_said)
			tsec__say("remote: the blob store: %s", err.msg);
		d->probe_said = rc;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += TSEC_D_PROBE_MS / 1000;
		while (d->probe_on &&
		       pthread_cond_timedwait(&d->probe_cv, &d->probe_mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&d->probe_mu);
	return NULL;
}

int tsec__probe_start(struct tsec__daemon *d, struct tsec_error *err)
{
	pthread_condattr_t ca;

	if (!d->remote)
		return 0;
	pthread_mutex_init(&d->probe_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->probe_cv, &ca);
	pthread_condattr_destroy(&ca);
	d->probe_on = 1;
	if (pthread_create(&d->probe_thread, NULL, probe_main, d)) {
		d->probe_on = 0;
		return tsec__seterr(err, TSEC_ENOMEM, "remote", "cannot start the blob store's "
				    "probe");
	}
	d->probe_started = 1;
	return 0;
}

void tsec__probe_stop(struct tsec__daemon *d)
{
	if (!d->probe_started)
		return;
	pthread_mutex_lock(&d->probe_mu);
	d->probe_on = 0;
	pthread_cond_signal(&d->probe_cv);
	pthread_mutex_unlock(&d->probe_mu);
	pthread_join(d->probe_thread, NULL);
	pthread_cond_destroy(&d->probe_cv);
	pthread_mutex_destroy(&d->probe_mu);
	d->probe_started = 0;
}

json_t *tsec__probe_json(struct tsec__daemon *d, json_t *degraded)
{
	json_t *o;

	if (!d->probe_started)
		return json_object();
	pthread_mutex_lock(&d->probe_mu);
	if (!d->probe_ms) {
		o = json_pack("{s:b}", "checked", 0);
	} else {
		o = json_pack("{s:b,s:b,s:I}", "checked", 1, "ok", d->probe_rc == 0,
			      "checked_ms_ago", (json_int_t)(tsec__wall_ms() - d->probe_ms));
		if (d->probe_rc) {
			char why[sizeof(d->probe_why) + 64];
			json_object_set_new(o, "error", json_string(d->probe_why));
			snprintf(why, sizeof(why), "the remote store's blob store: %s", d->probe_why);
			json_array_append_new(degraded, json_string(why));
		}
	}
	pthread_mutex_unlock(&d->probe_mu);
	return o;
}
