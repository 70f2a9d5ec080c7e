/*
 * tsec-broker's remote store methods for admins: a sweep of unreferenced
 * blobs, and accepting a restored coordinator for one certificate.
 */
#include <inttypes.h>

#include <jansson.h>

#include "broker/daemon/daemon.h"
#include "tinysecurity/remote.h"

/* {"grace_ms"}: one sweep of unreferenced blobs (admin). */
json_t *tsec__m_remote_sweep(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *g = json_object_get(c->params, "grace_ms");
	struct tsec_remote_sweep sw;
	struct tsec_error err;
	int rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if (!json_is_integer(g) || json_integer_value(g) < 0)
		return tsec__fail(TSEC_EPROTO, "params.grace_ms", "need an integer >= 0");
	rc = tsec_remote_sweep(d->remote, (uint64_t)json_integer_value(g), &sw, &err);
	if (!rc)
		*result = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "blobs", (json_int_t)sw.blobs,
				    "referenced", (json_int_t)sw.referenced, "waiting",
				    (json_int_t)sw.waiting, "removed", (json_int_t)sw.removed,
				    "failed", (json_int_t)sw.failed, "litter",
				    (json_int_t)sw.litter);
	return tsec__m_done(rc, &err, result);
}

/*
 * {"issuer", "domain"}: the restored generation record of one
 * certificate accepted (tsec_remote_recover); said in the broker's log
 * with who asked, as every admin act is.  {"was", "now"}: its sequence.
 */
json_t *tsec__m_remote_recover(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *issuer = tsec__param_str(c, "issuer"), *domain = tsec__param_str(c, "domain");
	struct tsec_error err;
	uint64_t was, now;
	int rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if (!issuer || !domain)
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\" and \"domain\"");
	rc = tsec_remote_recover(d->remote, issuer, domain, &was, &now, &err);
	if (rc) {
		tsec__say("cert recover %s/%s by %s: refused: %s", issuer, domain,
			  c->who ? c->who->principal : "?", err.msg);
		return tsec__err_json(&err);
	}
	tsec__say("cert recover %s/%s by %s: the restored generation record accepted; its "
		  "sequence %" PRIu64 " moved to %" PRIu64, issuer, domain,
		  c->who ? c->who->principal : "?", was, now);
	*result = json_pack("{s:I,s:I}", "was", (json_int_t)was, "now", (json_int_t)now);
	return tsec__m_done(0, &err, result);
}
