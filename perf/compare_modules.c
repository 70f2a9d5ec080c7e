/*
 * compare_modules: two policy modules' answers on the same generated
 * requests, for a change to the decision path that must not change an
 * answer (the lean path of issue 12 was checked this way).
 *
 *   build/release/compare_modules OLD.so NEW.so POLICY N [SEED]
 *
 * N pairs of requests, each pair a Check of two and an Evaluate with
 * why-not of the first: principals, roles, actions and contexts from
 * small pools (valid and not), keys from certmagic's layout and from
 * random segments (dot segments, empty ones, bytes the key rules refuse),
 * so that allows, denies, floors, invalid requests and batches with more
 * deciding rules than a decision lists all occur.  Every field of the
 * decisions, of the reports (attributes, matched rules in order, errors)
 * and of the why-not lists is compared.  Prints the first differences and
 * a summary; exits 0 when nothing differs, 1 when something does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/bus.h"

#define NEL(a) (sizeof(a) / sizeof((a)[0]))

static unsigned long long rs = 88172645463325252ull;

static unsigned rnd(unsigned n)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (unsigned)(rs % n);
}

static const char *const segs[] = {
	"certificates", "acme", "locks", "ocsp", "archive", "frozen", "acme-v02",
	"example.com", "www.example.com", "wildcard_.example.com", "EXAMPLE.com",
	"x.key", "a.crt", "b.json", "users", "..", ".", "", "a b",
	"\xc3\xa9t\xc3\xa9", "x", "y", "z", "pre_1", "1_suf", "aXbYc",
	"certificates-and-a-rather-long-segment-name-here", "other.org",
	"Www.Example.Com", "wildcard_", "a:b", "a\\b", "c.crt.", "\x01",
};
static const char *const issuers[] = { "acme-v02", "x", "letsencrypt" };
static const char *const domains[] = {
	"example.com", "www.example.com", "wildcard_.example.com", "EXAMPLE.com",
	"other.org", "Www.Example.Com", "wildcard_",
};
static const char *const files[] = {
	"example.com.crt", "example.com.key", "example.com.json", "a.crt", "x.key",
	"b.json", "y", "frozen",
};
static const char *const principals[] = {
	"svc:a", "svc:b", "svc:c", "svc:web-1", "svc:acme-issuer", "svc:evil",
	"svc:backup", "svc:locker", "svc:wild", "x y", "",
	"svc:a-rather-long-principal-name-for-words",
};
static const char *const roles[] = {
	"role:r1", "r2", "role:web", "ops", "role:ops", "web", "role:", "a b",
};
static const char *const actions[] = {
	"storage.store", "storage.load", "storage.exists", "storage.delete",
	"storage.list", "storage.stat", "storage.move", "lock.acquire",
	"lock.renew", "lock.release", "storage.loa", "lock.*",
};

static void make_key(char *b, size_t cap)
{
	size_t o = 0;
	int n;

	switch (rnd(6)) {
	case 0:
		snprintf(b, cap, "certificates/%s/%s/%s", issuers[rnd(NEL(issuers))],
			 domains[rnd(NEL(domains))], files[rnd(NEL(files))]);
		return;
	case 1:
		snprintf(b, cap, "x/%s/y/%s", segs[rnd(NEL(segs))], files[rnd(NEL(files))]);
		return;
	case 2:
		snprintf(b, cap, "locks/%s", files[rnd(NEL(files))]);
		return;
	default:
		break;
	}
	b[0] = '\0';
	if (rnd(10) == 0)
		o += (size_t)snprintf(b + o, cap - o, "/");
	n = (int)rnd(7);
	for (int i = 0; i < n && o < cap; i++)
		o += (size_t)snprintf(b + o, cap - o, "%s%s", i ? (rnd(15) ? "/" : "//") : "",
				      segs[rnd(NEL(segs))]);
	if (rnd(20) == 0 && o < cap)
		snprintf(b + o, cap - o, "/");
}

static struct tsec_str str(const char *s)
{
	return (struct tsec_str){ s, strlen(s) };
}

static void make_request(struct tsec_request *r, struct tsec_str *rl, char *key, char *dest)
{
	static const char pem[] =
		"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n";
	const char *a = actions[rnd(NEL(actions))];

	memset(r, 0, sizeof(*r));
	make_key(key, 600);
	make_key(dest, 600);
	r->principal = str(principals[rnd(NEL(principals))]);
	r->nroles = rnd(3);
	for (unsigned i = 0; i < r->nroles; i++)
		rl[i] = str(roles[rnd(NEL(roles))]);
	r->roles = r->nroles ? rl : NULL;
	r->action = str(a);
	r->resource = str(key);
	if (!strcmp(a, "lock.acquire") || !strcmp(a, "lock.renew") || rnd(30) == 0) {
		r->ctx.has |= TSEC_CTX_TTL_MS;
		r->ctx.ttl_ms = rnd(3) ? 500 : 10000;
	}
	if (!strcmp(a, "storage.store") || rnd(30) == 0) {
		r->ctx.has |= TSEC_CTX_SIZE;
		r->ctx.size = rnd(2) ? 5 : 50000;
	}
	if ((!strcmp(a, "storage.list") || !strcmp(a, "storage.delete")) && rnd(2)) {
		r->ctx.has |= TSEC_CTX_RECURSIVE;
		r->ctx.recursive = rnd(2);
	}
	if (!strcmp(a, "storage.move") || rnd(30) == 0) {
		r->ctx.has |= TSEC_CTX_DEST;
		r->ctx.dest = str(dest);
	}
	if (!strcmp(a, "storage.store") && rnd(4) == 0) {
		r->ctx.has |= TSEC_CTX_CERT_PEM;
		r->ctx.cert_pem = str(pem);
	}
}

static int same_decision(const struct tsec_decision *a, const struct tsec_decision *b)
{
	if (a->allow != b->allow || a->status != b->status || a->nrules != b->nrules ||
	    a->flags != b->flags || strcmp(a->field, b->field) || strcmp(a->detail, b->detail))
		return 0;
	for (unsigned i = 0; i < a->nrules && i < TSEC_DECISION_RULES; i++)
		if (strcmp(a->rules[i], b->rules[i]))
			return 0;
	return 1;
}

static int same_report(const struct tsec_report *a, const struct tsec_report *b,
		       const struct tsec_explain *x, const struct tsec_explain *y)
{
	if (!same_decision(&a->decision, &b->decision) || a->action != b->action ||
	    a->kind != b->kind || strcmp(a->key, b->key) || strcmp(a->issuer, b->issuer) ||
	    strcmp(a->domain, b->domain) || a->nmatched != b->nmatched ||
	    a->nmatched_total != b->nmatched_total || a->nerrors != b->nerrors)
		return 0;
	for (unsigned i = 0; i < a->nmatched && i < TSEC_REPORT_MATCHES; i++)
		if (strcmp(a->matched[i].id, b->matched[i].id) ||
		    a->matched[i].effect != b->matched[i].effect)
			return 0;
	for (unsigned i = 0; i < a->nerrors && i < TSEC_REPORT_ERRORS; i++)
		if (strcmp(a->errors[i].rule, b->errors[i].rule) ||
		    strcmp(a->errors[i].msg, b->errors[i].msg))
			return 0;
	if (x->nnot_applied != y->nnot_applied || x->nnot_applied_total != y->nnot_applied_total ||
	    x->has_cert != y->has_cert || strcmp(x->cert, y->cert))
		return 0;
	for (unsigned i = 0; i < x->nnot_applied && i < TSEC_EXPLAIN_MAX; i++)
		if (strcmp(x->not_applied[i].rule, y->not_applied[i].rule) ||
		    strcmp(x->not_applied[i].why, y->not_applied[i].why) ||
		    x->not_applied[i].dest != y->not_applied[i].dest)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	static struct tsec_report ra, rb;
	static struct tsec_explain xa, xb;
	static char key[2][600], dest[2][600];
	struct tsec_bus *bus = NULL;
	struct tsec_error err;
	long n, diffs = 0, allows = 0, floors = 0, invalid = 0, more = 0;

	if (argc < 5 || (n = atol(argv[4])) <= 0) {
		fprintf(stderr, "usage: compare_modules OLD.so NEW.so POLICY N [SEED]\n");
		return 2;
	}
	if (argc > 5)
		rs ^= strtoull(argv[5], NULL, 10) * 0x9e3779b97f4a7c15ull;
	if (tsec_bus_new(&bus) || tsec_bus_load_file(bus, "old", argv[1], argv[3], &err) ||
	    tsec_bus_load_file(bus, "new", argv[2], argv[3], &err)) {
		fprintf(stderr, "compare_modules: %s\n", bus ? err.msg : "no memory");
		tsec_bus_free(&bus);
		return 2;
	}
	for (long t = 0; t < n; t++) {
		struct tsec_request q[2];
		struct tsec_str rl[2][3];
		struct tsec_decision da[2], db[2];

		for (int j = 0; j < 2; j++)
			make_request(&q[j], rl[j], key[j], dest[j]);
		if (tsec_bus_check(bus, "old", q, 2, da, &err) ||
		    tsec_bus_check(bus, "new", q, 2, db, &err)) {
			fprintf(stderr, "compare_modules: check: %s\n", err.msg);
			tsec_bus_free(&bus);
			return 2;
		}
		for (int j = 0; j < 2; j++) {
			allows += da[j].allow;
			floors += da[j].status == TSEC_STATUS_FLOOR;
			invalid += da[j].status == TSEC_STATUS_INVALID;
			more += (da[j].flags & TSEC_DECISION_MORE_RULES) != 0;
			if (!same_decision(&da[j], &db[j]) && diffs++ < 10)
				printf("check differs: %s %s %s: old %u %s, new %u %s\n",
				       q[j].principal.ptr, q[j].action.ptr, q[j].resource.ptr,
				       da[j].status, da[j].detail, db[j].status, db[j].detail);
		}
		if (tsec_bus_explain(bus, "old", &q[0], &ra, &xa, &err) ||
		    tsec_bus_explain(bus, "new", &q[0], &rb, &xb, &err)) {
			fprintf(stderr, "compare_modules: explain: %s\n", err.msg);
			tsec_bus_free(&bus);
			return 2;
		}
		if (!same_report(&ra, &rb, &xa, &xb) && diffs++ < 10)
			printf("evaluate differs: %s %s %s: old %u matched (%u), new %u (%u)\n",
			       q[0].principal.ptr, q[0].action.ptr, q[0].resource.ptr, ra.nmatched,
			       ra.nmatched_total, rb.nmatched, rb.nmatched_total);
	}
	printf("%s: %ld pairs; %ld differences; of the old answers %ld allow, %ld floor,"
	       " %ld invalid, %ld with more deciding rules than listed\n",
	       argv[3], n, diffs, allows, floors, invalid, more);
	tsec_bus_free(&bus);
	return diffs != 0;
}
