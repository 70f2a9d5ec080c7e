/*
 * Internal: the JSON of the wire, shared by tsec-broker, the client
 * library and the tsec CLI.
 *
 * A request message:  {"id": ID, "method": "check", "params": {...}}
 * A reply:            {"id": ID, "result": {...}}
 *                  or {"id": ID, "error": {"code": "denied", "errno": -11,
 *                                          "message": "...", "where": "..."}}
 * A policy request:   {"action": "storage.load", "resource": "...",
 *                      "context": {"ttl_ms": 1, "size": 1, "recursive": true,
 *                                  "dest": "...", "cert_pem": "...", "now": 1}}
 */
#ifndef TSEC_WIRE_H
#define TSEC_WIRE_H

#include <stdbool.h>

#include <jansson.h>

#include "tinysecurity/types.h"

/*
 * Decodes a policy request; strings are borrowed from o, which must
 * outlive r.  Principal and roles are left empty: they come from the
 * caller's authentication, never from the payload.  context.now is
 * refused (TSEC_EDENIED) unless allow_now.  Returns 0 or TSEC_EPROTO with
 * the offending field in err->where.
 */
int tsec__request_from_json(json_t *o, struct tsec_request *r, bool allow_now,
			    struct tsec_error *err);

/* Encodes a request's action, resource and context (not the principal). */
json_t *tsec__request_to_json(const struct tsec_request *r);

json_t *tsec__decision_to_json(const struct tsec_decision *d);

/*
 * Holds what a module wrote to the ABI, for hosts that go on to read the
 * strings as C strings (the CLI tools): counts within their arrays, each
 * string ended inside its array.  The writers above read no further than
 * the arrays and need no seal; the gated store bounds its own reads.
 */
void tsec__decision_seal(struct tsec_decision *d);
void tsec__explain_seal(struct tsec_explain *ex);

/* Decodes a decision; anything malformed becomes a deny.  Returns 0 or
 * TSEC_EPROTO. */
int tsec__decision_from_json(json_t *o, struct tsec_decision *d);

/* The JSON text of tsec__decision_to_json, written into w. */
struct tsec__jw;
void tsec__decision_write(struct tsec__jw *w, const struct tsec_decision *d);
/* The same without the closing brace, for members the caller adds. */
void tsec__decision_write_open(struct tsec__jw *w, const struct tsec_decision *d);
/* Its "rules" array alone. */
void tsec__decision_rules_write(struct tsec__jw *w, const struct tsec_decision *d);

json_t *tsec__report_to_json(const struct tsec_report *r);
/*
 * Adds to a report's JSON the caller (principal, roles), a move's
 * destination, the rules that did not apply and why, and what the
 * certificate says (ex NULL or not explained: the caller only).
 */
void tsec__explain_to_json(json_t *report, const struct tsec_explain *ex,
			   const struct tsec_request *req);

/* Short wire names of decision statuses: "allowed", "floor", ... */
const char *tsec__status_name(unsigned status);

/* A reply's error object: {"code": tsec_errname(code), "errno", "message",
 * "where"}. */
json_t *tsec__error_json(int code, const char *where, const char *message);

/*
 * Reads a reply's error object back into err and returns its code (never
 * 0: an unknown or missing code is TSEC_EPROTO).  The name decides; the
 * number is read only when no name came.
 */
int tsec__error_from_json(json_t *e, struct tsec_error *err);

#endif
