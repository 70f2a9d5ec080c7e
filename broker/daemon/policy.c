/* tsec-broker: loading and reloading the policy. */
#include <stdlib.h>

#include "broker/daemon/daemon.h"
#include "common/sign.h"

int tsec__policy_text(struct tsec__daemon *d, char **text, size_t *len,
		      struct tsec_error *err)
{
	return tsec__policy_read(d->cfg.policy, d->cfg.have_pk ? d->cfg.policy_pk : NULL,
				 text, len, err);
}

int tsec__policy_reload(struct tsec__daemon *d, struct tsec_error *err)
{
	char *text = NULL;
	size_t len;
	int rc;

	pthread_mutex_lock(&d->reload_lock);
	rc = tsec__policy_text(d, &text, &len, err);
	if (!rc)
		rc = tsec_bus_reload(d->bus, "policy", text, len, err);
	pthread_mutex_unlock(&d->reload_lock);
	free(text);
	if (rc) {
		atomic_fetch_add(&d->st.reload_failures, 1);
		tsec__say("reload refused, the old policy keeps serving: %s%s%s", err->where,
			  err->where[0] ? ": " : "", err->msg);
	} else {
		atomic_fetch_add(&d->st.reloads, 1);
		tsec__say("policy reloaded from %s", d->cfg.policy);
	}
	return rc;
}
