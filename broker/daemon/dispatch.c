/*
 * tsec-broker: one call, from its text to its reply.  The caller is who
 * ZAP said (never anything in the payload); the method comes from the
 * table in methods.c.
 */
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/jsonw.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/wire.h"
#include "common/wire_fast.h"

json_t *tsec__fail(int code, const char *where, const char *msg)
{
	return tsec__error_json(code, where, msg);
}

json_t *tsec__err_json(const struct tsec_error *e)
{
	return tsec__error_json(e->code, e->where, e->msg);
}

const char *tsec__param_str(const struct tsec__call *c, const char *k)
{
	return json_string_value(json_object_get(c->params, k));
}

void tsec__frames_free(struct tsec__frames *out)
{
	if (!out)
		return;
	/* A value may be a private key: wiped before it is freed. */
	for (unsigned i = 0; i < out->n; i++) {
		sodium_memzero(out->ptr[i], out->len[i]);
		free(out->ptr[i]);
	}
	out->n = 0;
}

json_t *tsec__value_in(struct tsec__call *c, const json_t *o, const char *name,
		       const char *where, const char **v, size_t *n)
{
	char fk[48];
	const json_t *t = json_object_get(o, name), *f;
	json_int_t i;

	if (json_is_string(t)) {
		*v = json_string_value(t);
		*n = json_string_length(t);
		return NULL;
	}
	snprintf(fk, sizeof(fk), "%s_frame", name);
	if (!(f = json_object_get(o, fk)))
		return NULL;         /* neither: the caller says what else it takes */
	i = json_is_integer(f) ? json_integer_value(f) : 0;
	if (!c->in || i < 1 || i > (json_int_t)c->in->n)
		return tsec__fail(TSEC_EPROTO, where, c->in && c->in->n
				  ? "a \"_frame\" member names a frame the call does not have "
				    "(they count from 1)"
				  : "a \"_frame\" member, and the call came with no frames");
	if (c->in_used & (1u << (i - 1)))
		return tsec__fail(TSEC_EPROTO, where, "a frame named twice");
	c->in_used |= 1u << (i - 1);
	*v = c->in->ptr[i - 1];
	*n = c->in->len[i - 1];
	return NULL;
}

json_t *tsec__frames_all_named(const struct tsec__call *c)
{
	/* In a batch the batch has checked them all, before any call ran. */
	if (!c->in || c->batched || c->in_used == (1u << c->in->n) - 1)
		return NULL;
	return tsec__fail(TSEC_EPROTO, "", "the call came with a frame no \"_frame\" member names");
}

int tsec__value_out(struct tsec__call *c, json_t *r, const char *name, char **v, size_t n)
{
	char k[48];
	json_t *s;

	if (c->frames_out && c->out && c->out->n < TSEC_D_MAX_FRAMES) {
		c->out->ptr[c->out->n] = *v;
		c->out->len[c->out->n] = n;
		*v = NULL;
		snprintf(k, sizeof(k), "%s_frame", name);
		return json_object_set_new(r, k, json_integer(++c->out->n));
	}
	/*
	 * As JSON text, or base64 when not UTF-8 or holding a NUL: jansson
	 * writes a NUL as \u0000, which no reader that keeps NUL-terminated
	 * strings (the client library's among them) takes, so such a value
	 * could be stored and never read back (issue 35).
	 */
	if (!memchr(*v, 0, n) && (s = json_stringn(*v, n)))
		return json_object_set_new(r, name, s);
	{
		size_t bl = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
		char *b = malloc(bl);
		int rc;

		if (!b)
			return -1;
		sodium_bin2base64(b, bl, (const unsigned char *)*v, n,
				  sodium_base64_VARIANT_ORIGINAL);
		snprintf(k, sizeof(k), "%s_b64", name);
		rc = json_object_set_new(r, k, json_string(b));
		free(b);
		return rc;
	}
}

/*
 * json_dumps, with DEL written \u007F as the tree-less writer (jsonw)
 * writes it, so that both ways of answering give the same bytes.  A raw
 * 0x7f can stand only inside a string of JSON text, so each one becomes
 * the escape there.
 */
char *tsec__json_text(const json_t *j, size_t flags)
{
	char *t = json_dumps(j, flags), *out, *o;
	size_t dels = 0, n;

	if (!t)
		return NULL;
	for (n = 0; t[n]; n++)
		dels += t[n] == 0x7f;
	if (!dels)
		return t;
	if (!(out = malloc(n + dels * 5 + 1))) {
		free(t);
		return NULL;
	}
	o = out;
	for (const char *p = t; *p; p++) {
		if (*p == 0x7f) {
			memcpy(o, "\\u007F", 6);
			o += 6;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	free(t);
	return out;
}

char *tsec__error_reply_to(const char *payload, size_t len, int code, const char *msg)
{
	json_t *m = json_loadb(payload, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *id = json_object_get(m, "id");
	json_t *r = json_pack("{s:O,s:o}", "id", id ? id : json_null(), "error",
			      tsec__fail(code, "", msg));
	char *t = tsec__json_text(r, JSON_COMPACT);

	json_decref(r);
	json_decref(m);
	return t;
}

char *tsec__error_reply(int code, const char *msg)
{
	json_t *r = json_pack("{s:n,s:o}", "id", "error", tsec__fail(code, "", msg));
	char *t = tsec__json_text(r, JSON_COMPACT);

	json_decref(r);
	return t;
}

/*
 * Whether a call is quick enough to run in the main thread: a method the
 * table marks inline, without a certificate to parse.  Policy work takes
 * microseconds, while handing a call to a worker and back costs two
 * thread wake-ups; slow calls (disk, lock waits, certificates) go to the
 * workers so the main thread never waits on them.  The method is sniffed
 * from the text; a wrong guess only changes which thread runs the call.
 */
/* Whether "cert_pem" is in p[0..n): a look at each '_' (memchr runs
 * sixteen bytes a step; a Check without a certificate has none or few). */
static bool has_cert_pem(const char *p, size_t n)
{
	const char *u = p, *end = p + n;

	while ((u = memchr(u, '_', (size_t)(end - u)))) {
		if (u - p >= 4 && end - u >= 4 && !memcmp(u - 4, "cert_pem", 8))
			return true;
		u++;
	}
	return false;
}

/* The method the payload names, from a quick look (NULL if none is
 * seen); the call is read properly when it runs. */
const struct tsec__method *tsec__method_of(const char *p, size_t n)
{
	const char *m = memmem(p, n, "\"method\"", 8), *end = p + n, *v;

	if (!m)
		return NULL;
	for (m += 8; m < end && (*m == ' ' || *m == ':' || *m == '\t' || *m == '\n'); m++)
		;
	if (m >= end || *m++ != '"')
		return NULL;
	for (v = m; v < end && *v != '"' && *v != '\\'; v++)
		;
	if (v >= end || *v != '"')
		return NULL;
	return tsec__method_find(m, (size_t)(v - m));
}

int tsec__is_inline(const char *p, size_t n)
{
	const struct tsec__method *meth = tsec__method_of(p, n);

	/* A certificate to parse is a worker's job. */
	return meth && (meth->flags & TSEC_M_INLINE) && !has_cert_pem(p, n);
}

/*
 * Reads the message into c: its id and params, refusing a payload that
 * names another principal.  Returns NULL or the error for the reply.
 */
static json_t *read_call(struct tsec__daemon *d, json_t *msg, struct tsec__call *c,
			 const struct tsec__method **meth)
{
	json_t *claim, *mv = json_object_get(msg, "method");

	c->id = json_object_get(msg, "id");
	c->params = json_object_get(msg, "params");
	if (c->params && !json_is_object(c->params)) {
		atomic_fetch_add(&d->st.malformed, 1);
		return tsec__fail(TSEC_EPROTO, "params", "params must be an object");
	}
	/* The principal is the authenticated one; a payload may not name another. */
	claim = json_object_get(msg, "principal");
	if (!claim && c->params)
		claim = json_object_get(c->params, "principal");
	if (claim && !(json_is_string(claim) &&
		       !strcmp(json_string_value(claim), c->who->principal))) {
		atomic_fetch_add(&d->st.principal_mismatch, 1);
		tsec__say("refused: caller %s sent a request naming principal %s",
			  c->who->principal,
			  json_is_string(claim) ? json_string_value(claim) : "(not a string)");
		return tsec__fail(TSEC_EDENIED, "principal",
				  "the request names another principal than the authenticated caller");
	}
	if (!c->params) {
		json_object_set_new(msg, "params", json_object());
		c->params = json_object_get(msg, "params");
	}
	if (!json_is_string(mv) ||
	    !(*meth = tsec__method_find(json_string_value(mv), json_string_length(mv)))) {
		atomic_fetch_add(&d->st.malformed, 1);
		return tsec__fail(TSEC_EPROTO, "method",
				  json_is_string(mv) ? "unknown method" : "need a \"method\" string");
	}
	if (c->in && c->in->n && !((*meth)->flags & TSEC_M_FRAMES)) {
		atomic_fetch_add(&d->st.malformed, 1);
		return tsec__fail(TSEC_EPROTO, "method", "this method takes no frames beside its JSON");
	}
	c->frames_out = json_is_true(json_object_get(msg, "frames"));
	return NULL;
}

/* A refusal's reply says which rule refused it, as check answers it (the
 * log has the same); none for "nothing allowed it". */
static void deny_why(const struct tsec__call *c, json_t *error)
{
	json_t *rules;

	if (!error || !c->deny.set ||
	    json_integer_value(json_object_get(error, "errno")) != TSEC_EDENIED)
		return;
	rules = json_array();
	for (unsigned j = 0; j < c->deny.nrules; j++)
		json_array_append_new(rules, json_string(c->deny.rules[j]));
	json_object_set_new(error, "rules", rules);
	json_object_set_new(error, "reason", json_string(tsec_status_reason(c->deny.status)));
}

/* The latency histogram: two vDSO clock reads and two relaxed adds per
 * call (tens of ns against a ~100 us round trip), for the per-method
 * p50/p99 that /metrics promises. */
static void timed(struct tsec__daemon *d, const struct tsec__method *meth, uint64_t t0)
{
	uint64_t dt = tsec__mono_ns() - t0;
	struct tsec__hist *h = &d->st.hist[meth - tsec__methods];
	unsigned b = 0;

	while (b < TSEC_LAT_BUCKETS && dt > (uint64_t)tsec__lat_bounds_us[b] * 1000)
		b++;
	atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, dt, memory_order_relaxed);
}

/* The call's fields for a known caller. */
static void call_begin(struct tsec__daemon *d, struct tsec__call *c, int caller)
{
	memset(c, 0, sizeof(*c));
	c->who = &d->cfg.callers[caller];
	c->index = caller;
	c->p.id = tsec_str_c(c->who->principal);
	c->p.roles = c->who->roles;
	c->p.nroles = c->who->nroles;
	c->p.call_ctx = c;
}

/*
 * The fast-read id as text in c, as tsec__call_id makes it from
 * jansson's: in c->id_small when it fits (an integer, null, a short
 * string), else on the heap (c->id_text then differs from c->id_small
 * and is freed with the call).  False without memory.
 */
static bool fast_id(struct tsec__call *c, const struct tsec__fast_check *fc)
{
	struct tsec__jw w;

	tsec__jw_init_on(&w, c->id_small, sizeof(c->id_small));
	if (fc->id_kind == TSEC__FAST_ID_STRING)
		tsec__jw_str(&w, fc->id_str.ptr, fc->id_str.len);
	else if (fc->id_kind == TSEC__FAST_ID_INT)
		tsec__jw_int(&w, fc->id_int);
	else
		TSEC__JW_LIT(&w, "null");
	if (w.failed) {
		tsec__jw_free(&w);
		return false;
	}
	c->id_text = w.buf;
	c->id_len = w.len;
	return true;
}

int tsec__dispatch_fast(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			struct tsec__jw *w)
{
	const struct tsec__method *meth = tsec__method_check;
	struct tsec_request r[TSEC_D_MAX_BATCH];
	struct tsec__fast_check fc;
	struct tsec__call c;
	json_t *error;
	uint64_t t0;

	if (caller < 0 || caller >= d->cfg.ncallers ||
	    !tsec__fast_check_read(payload, len, &fc, r, TSEC_D_MAX_BATCH))
		return 0;
	call_begin(d, &c, caller);
	if (!fast_id(&c, &fc))
		return 0;
	for (size_t i = 0; i < fc.n; i++) {
		r[i].principal = c.p.id;
		r[i].roles = c.p.roles;
		r[i].nroles = c.p.nroles;
	}
	atomic_fetch_add(&d->st.calls, 1);
	atomic_fetch_add(&d->st.by_method[meth - tsec__methods], 1);
	tsec__jw_reset(w);
	TSEC__JW_LIT(w, "{\"id\":");
	tsec__jw_raw(w, c.id_text, c.id_len);
	TSEC__JW_LIT(w, ",\"result\":");
	t0 = tsec__mono_ns();
	error = tsec__check_requests_into(d, &c, r, fc.n, w);
	timed(d, meth, t0);
	if (error) {
		char *e = tsec__json_text(error, JSON_COMPACT);

		atomic_fetch_add(&d->st.errors, 1);
		tsec__jw_reset(w);
		TSEC__JW_LIT(w, "{\"id\":");
		tsec__jw_raw(w, c.id_text, c.id_len);
		TSEC__JW_LIT(w, ",\"error\":");
		if (e)
			tsec__jw_raw(w, e, strlen(e));
		else
			w->failed = true;
		free(e);
		json_decref(error);
	}
	TSEC__JW_LIT(w, "}");
	if (w->failed)
		tsec__jw_reset(w);       /* no memory: an empty reply, as tsec__dispatch's */
	if (c.id_text != c.id_small)
		free(c.id_text);
	return 1;
}

char *tsec__dispatch(struct tsec__daemon *d, int caller, const char *payload, size_t len)
{
	struct tsec__jw w;

	tsec__jw_init(&w);
	if (tsec__dispatch_fast(d, caller, payload, len, &w))
		return tsec__jw_take(&w, NULL);
	tsec__jw_free(&w);
	return tsec__dispatch_tree(d, caller, payload, len);
}

char *tsec__dispatch_tree(struct tsec__daemon *d, int caller, const char *payload, size_t len)
{
	return tsec__dispatch_step(d, caller, payload, len, NULL, NULL, NULL);
}

/* The reads the loop answers from the LocalCache when it can. */
static bool cache_read(const struct tsec__method *meth)
{
	return meth && (meth->fn == tsec__m_store_get || meth->fn == tsec__m_store_exists);
}

enum ran { RAN, DEFERRED, PARKED };

/*
 * Runs the call's method (an admin's only for an admin caller): RAN with
 * *result or *error; DEFERRED when the LocalCache could not answer a
 * hit_only read (uncounted: the worker's, whole); PARKED when a lock
 * wait goes back to the loop, with no reply yet.
 */
static enum ran run_method(struct tsec__daemon *d, struct tsec__call *c,
			   const struct tsec__method *meth, bool hit_only, struct tsec__frames *out,
			   json_t **result, json_t **error)
{
	uint64_t t0;

	if ((meth->flags & TSEC_M_ADMIN) && !c->who->admin) {
		char why[96];
		snprintf(why, sizeof(why), "%s needs an admin caller", meth->name);
		*error = tsec__fail(TSEC_EDENIED, "method", why);
		return RAN;
	}
	t0 = tsec__mono_ns();
	*error = meth->fn(d, c, result);
	if (c->deferred || (c->run && c->run->parked)) {
		tsec__frames_free(out);
		json_decref(*error);
		json_decref(*result);
		*error = *result = NULL;
	}
	if (c->deferred) {
		/* Not in the cache: the worker's, counted there. */
		atomic_fetch_sub(&d->st.calls, 1);
		atomic_fetch_sub(&d->st.by_method[meth - tsec__methods], 1);
		return DEFERRED;
	}
	if (hit_only)
		atomic_fetch_add(&d->st.cache_answered, 1);
	if (c->run && c->run->parked) {
		/* No reply yet: the loop steps the wait again. */
		if (!c->run->wait_in)
			atomic_fetch_add(&d->lock_waits, 1);
		return PARKED;
	}
	timed(d, meth, t0);
	return RAN;
}

/*
 * A success's reply, {"id":ID,"result":R}, written around the result's
 * text: a method's own text (result_text), or only the result through
 * jansson's writer, and an empty one not at all (a put's, a save's, a
 * release's).  NULL without memory.
 */
static char *result_reply(struct tsec__call *c, json_t *result)
{
	struct tsec__jw w;
	size_t idn;
	const char *id = tsec__call_id(c, &idn);
	char *rt = NULL, *text;
	bool empty = !c->result_text &&
		     (!result || (json_is_object(result) && !json_object_size(result)));

	if (!c->result_text && !empty && !(rt = tsec__json_text(result, JSON_COMPACT)))
		return NULL;
	tsec__jw_init(&w);
	TSEC__JW_LIT(&w, "{\"id\":");
	tsec__jw_raw(&w, id, idn);
	TSEC__JW_LIT(&w, ",\"result\":");
	if (c->result_text)
		tsec__jw_raw(&w, c->result_text, c->result_len);
	else if (empty)
		TSEC__JW_LIT(&w, "{}");
	else
		tsec__jw_raw(&w, rt, strlen(rt));
	TSEC__JW_LIT(&w, "}");
	text = tsec__jw_take(&w, NULL);
	free(rt);
	return text;
}

/*
 * One call.  hit_only (the loop's look at a store.get or store.exists):
 * a read the LocalCache cannot answer returns NULL with *deferred set,
 * nothing counted, checked or logged, for a worker to run the call
 * whole; a message that is no call at all is answered here.
 */
/*
 * The reply to c as text, taking result and error: the result as
 * result_reply writes it, or the error (counted; the values the call
 * made are dropped: an error carries none).
 */
static char *reply_text(struct tsec__daemon *d, struct tsec__call *c, json_t *result,
			json_t *error, struct tsec__frames *out)
{
	json_t *reply;
	char *text;

	deny_why(c, error);
	if (!error) {
		text = result_reply(c, result);
		json_decref(result);
		return text;
	}
	atomic_fetch_add(&d->st.errors, 1);
	json_decref(result);
	tsec__frames_free(out);
	reply = json_object();
	json_object_set(reply, "id", c->id ? c->id : json_null());
	json_object_set_new(reply, "error", error);
	text = tsec__json_text(reply, JSON_COMPACT);
	json_decref(reply);
	return text;
}

/* What a call held while it ran: its message, its id's text, its
 * result's text. */
static void call_end(struct tsec__call *c, json_t *msg)
{
	json_decref(msg);
	if (c->id_text != c->id_small)
		free(c->id_text);
	free(c->result_text);
}

static char *dispatch_call(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			   const struct tsec__frames *in, struct tsec__run *run, bool hit_only,
			   bool *deferred, struct tsec__frames *out)
{
	const struct tsec_lock_wait *wait_in = run ? run->wait_in : NULL;
	const struct tsec__method *meth = NULL;
	json_t *msg = NULL, *result = NULL, *error = NULL;
	struct tsec__call c;
	json_error_t je;
	char *text = NULL;

	if (run) {
		run->parked = false;
		run->grants.n = 0;
	}
	if (hit_only && (caller < 0 || caller >= d->cfg.ncallers)) {
		*deferred = true;
		return NULL;
	}
	/* A parked call's next attempt is the same call, counted once. */
	if (!wait_in)
		atomic_fetch_add(&d->st.calls, 1);
	if (caller < 0 || caller >= d->cfg.ncallers) {
		memset(&c, 0, sizeof(c));
		error = tsec__fail(TSEC_EDENIED, "", "unauthenticated caller");
		goto reply;
	}
	call_begin(d, &c, caller);
	c.in = in && in->n ? in : NULL;
	c.out = out;
	c.run = run;
	c.hit_only = hit_only;
	/* Plain JSON without jansson's reader; the rest with it. */
	if (!(msg = tsec__fast_tree(payload, len)))
		msg = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &je);
	/* A message that is not a call is answered here, hit_only or not:
	 * its error is the whole answer, counted and said once. */
	if (!msg || !json_is_object(msg)) {
		atomic_fetch_add(&d->st.malformed, 1);
		error = tsec__fail(TSEC_EPROTO, "", msg ? "message must be a JSON object" : je.text);
		goto reply;
	}
	if ((error = read_call(d, msg, &c, &meth)))
		goto reply;
	if (hit_only && (!cache_read(meth) || (meth->flags & TSEC_M_ADMIN))) {
		/* Not a read the cache can answer: a worker's, whole. */
		atomic_fetch_sub(&d->st.calls, 1);
		goto defer;
	}
	if (!wait_in)
		atomic_fetch_add(&d->st.by_method[meth - tsec__methods], 1);
	switch (run_method(d, &c, meth, hit_only, out, &result, &error)) {
	case RAN:
		break;
	case DEFERRED:
		goto defer;
	case PARKED:
		goto out;
	}
reply:
	text = reply_text(d, &c, result, error, out);
out:
	call_end(&c, msg);
	/* A parked wait's attempt that did not park again: the wait ended. */
	if (wait_in && !run->parked)
		atomic_fetch_sub(&d->lock_waits, 1);
	return text;
defer:
	*deferred = true;
	call_end(&c, msg);
	return NULL;
}

char *tsec__dispatch_step(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			  const struct tsec__frames *in, struct tsec__run *run,
			  struct tsec__frames *out)
{
	if (out)
		out->n = 0;
	return dispatch_call(d, caller, payload, len, in, run, false, NULL, out);
}

char *tsec__dispatch_hit(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			 struct tsec__frames *out)
{
	bool deferred = false;
	char *text;

	if (out)
		out->n = 0;
	text = dispatch_call(d, caller, payload, len, NULL, NULL, true, &deferred, out);

	if (deferred) {
		free(text);
		return NULL;
	}
	return text;
}

int tsec__is_cache_read(const char *p, size_t n)
{
	return cache_read(tsec__method_of(p, n));
}

/* ---- batch: several storage calls in one message ---- */

/*
 * The frames o's members "<name>_frame" name (and those of the objects
 * in its "puts"), marked in *named; NULL, or the error when one names a
 * frame the message lacks or one another call named already.
 */
static json_t *frames_named(const json_t *o, unsigned n, unsigned *named)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)o, k, v) {
		size_t kl = strlen(k);

		if (kl > 6 && !strcmp(k + kl - 6, "_frame") && json_is_integer(v)) {
			json_int_t i = json_integer_value(v);

			if (i < 1 || i > (json_int_t)n || (*named & (1u << (i - 1))))
				return tsec__fail(TSEC_EPROTO, "params.calls", i >= 1 && i <= (json_int_t)n
						  ? "a frame named twice"
						  : "a \"_frame\" member names a frame the message "
						    "does not have");
			*named |= 1u << (i - 1);
		}
	}
	if (json_is_array(json_object_get(o, "puts"))) {
		size_t i;
		json_t *e;

		json_array_foreach(json_object_get(o, "puts"), i, e) {
			json_t *err = json_is_object(e) ? frames_named(e, n, named) : NULL;

			if (err)
				return err;
		}
	}
	return NULL;
}

/*
 * {"calls": [{"method", "params"}, ...]}: 1 to TSEC_D_MAX_BATCH_CALLS
 * storage and lock calls, run in order by one worker, each checked,
 * counted, timed and logged as if it came alone (its decision-log lines
 * carry the batch's id).  The answer: {"results": [{"result": ...} |
 * {"error": ...}, ...]}, one per call that ran; the first that fails is
 * the last to run.  A renewal turn is two of them (acquire, exists,
 * load; save, release) instead of five round trips (issue 36).  Every
 * call is read, and every frame of the message named exactly once,
 * before any runs; a batch inside a batch, or a call that is not a
 * storage or lock call, is refused whole.
 */
json_t *tsec__m_batch(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *calls = json_object_get(c->params, "calls"), *results, *e = NULL;
	const struct tsec__method *meth[TSEC_D_MAX_BATCH_CALLS];
	size_t n = json_array_size(calls), i;
	unsigned named = 0;

	if (!json_is_array(calls) || n < 1 || n > TSEC_D_MAX_BATCH_CALLS)
		return tsec__fail(TSEC_EPROTO, "params.calls", "need 1 to 8 calls "
				  "{\"method\", \"params\"}");
	for (i = 0; i < n; i++) {
		const json_t *o = json_array_get(calls, i), *m = json_object_get(o, "method");
		const json_t *p = json_object_get(o, "params");

		if (!json_is_string(m) ||
		    !(meth[i] = tsec__method_find(json_string_value(m), json_string_length(m))) ||
		    !(meth[i]->flags & TSEC_M_STORAGE) || meth[i]->fn == tsec__m_batch ||
		    (p && !json_is_object(p)))
			return tsec__fail(TSEC_EPROTO, "params.calls", "each call needs a \"method\" "
					  "of storage or locks (not a batch) and \"params\" an object");
		if (p && (e = frames_named(p, c->in ? c->in->n : 0, &named)))
			return e;
	}
	if (c->in && named != (1u << c->in->n) - 1)
		return tsec__fail(TSEC_EPROTO, "", "the message came with a frame no \"_frame\" "
				  "member names");
	if (!(results = json_array()))
		return tsec__fail(TSEC_ENOMEM, "", NULL);
	for (i = 0; i < n; i++) {
		const json_t *o = json_array_get(calls, i);
		json_t *p = json_object_get(o, "params"), *empty = NULL, *r = NULL, *err;
		struct tsec__call sub;
		uint64_t t0;

		call_begin(d, &sub, c->index);
		sub.id = c->id;
		sub.params = p ? p : (empty = json_object());
		sub.in = c->in;
		sub.batched = true;
		sub.run = c->run;        /* its grants are the batch's */
		sub.frames_out = c->frames_out;
		sub.out = c->out;
		atomic_fetch_add(&d->st.calls, 1);
		atomic_fetch_add(&d->st.by_method[meth[i] - tsec__methods], 1);
		if ((meth[i]->flags & TSEC_M_ADMIN) && !c->who->admin) {
			err = tsec__fail(TSEC_EDENIED, "method", "an admin caller's method");
		} else {
			t0 = tsec__mono_ns();
			err = meth[i]->fn(d, &sub, &r);
			timed(d, meth[i], t0);
		}
		deny_why(&sub, err);
		if (err)
			atomic_fetch_add(&d->st.errors, 1);
		json_array_append_new(results, err ? json_pack("{s:o}", "error", err)
					       : json_pack("{s:o}", "result", r ? r : json_object()));
		if (sub.id_text != sub.id_small)
			free(sub.id_text);
		free(sub.result_text);
		json_decref(empty);
		if (err)
			break;
	}
	*result = json_pack("{s:o}", "results", results);
	return *result ? NULL : tsec__fail(TSEC_ENOMEM, "", NULL);
}
