/*
 * tsec replay and tsec diff: what a new policy would decide differently.
 *
 * replay LOG --policy NEW re-decides every request of a decision log under
 * NEW, as of the time each was logged, and shows each decision that
 * changes.  A request that carried a certificate is decided with a
 * certificate made again from the attributes the log keeps (names,
 * notAfter, key type and size): the attributes when.cert conditions read.
 *
 * diff OLD NEW decides the same requests under both: one generated from
 * each rule of either policy (each principal, action and resource
 * pattern made concrete, with the domains the policies name), and with
 * --log, every logged request.
 */
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"
#include "broker/policytest/policytest.h"
#include "common/certinfo.h"
#include "common/wire.h"

/* Certificates made for replay, by their attributes' JSON text. */
struct made {
	json_t *by_attrs;                /* text -> PEM string */
};

static const char *pem_for(struct made *m, json_t *attrs)
{
	struct tsec__certinfo ci;
	char *key = json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS), *pem;
	json_t *v;

	if (!key)
		return NULL;
	if ((v = json_object_get(m->by_attrs, key))) {
		free(key);
		return json_string_value(v);
	}
	if (tsec__certinfo_from_json(attrs, &ci) || !(pem = tsec__certinfo_pem(&ci))) {
		free(key);
		return NULL;
	}
	json_object_set_new(m->by_attrs, key, json_string(pem));
	free(pem);
	v = json_object_get(m->by_attrs, key);
	free(key);
	return json_string_value(v);
}

/*
 * The request a log line records, as a request object for
 * tsec__ptest_request (new), or NULL with *why set.
 */
static json_t *logged_request(json_t *line, struct made *m, const char **why)
{
	json_t *ctx = json_object_get(line, "context"), *req, *c;
	const char *k;
	json_t *v;

	if (!json_is_string(json_object_get(line, "action")) ||
	    !json_is_string(json_object_get(line, "resource")) ||
	    !json_is_string(json_object_get(line, "principal"))) {
		*why = "not a decision line";
		return NULL;
	}
	if (json_is_true(json_object_get(line, "cut"))) {
		*why = "the line was cut to fit (a field is incomplete)";
		return NULL;
	}
	c = json_object();
	json_object_foreach(ctx, k, v) {
		if (!strcmp(k, "cert_pem_sha256"))
			continue;
		if (!strcmp(k, "cert")) {
			const char *pem = pem_for(m, v);

			if (!pem) {
				json_decref(c);
				*why = "its certificate's attributes cannot be made again";
				return NULL;
			}
			json_object_set_new(c, "cert_pem", json_string(pem));
			continue;
		}
		json_object_set(c, k, v);
	}
	if (json_object_get(ctx, "cert_pem_sha256") && !json_object_get(c, "cert_pem")) {
		json_decref(c);
		*why = "the log holds only its certificate's hash (logged before attributes were)";
		return NULL;
	}
	/* As of when it was logged: a certificate's remaining time. */
	if (!json_object_get(c, "now") && json_is_integer(json_object_get(line, "time_ms")))
		json_object_set_new(c, "now", json_integer(
			json_integer_value(json_object_get(line, "time_ms")) / 1000));
	req = json_pack("{s:O,s:O,s:O,s:O,s:o}", "principal", json_object_get(line, "principal"),
			"roles", json_is_array(json_object_get(line, "roles"))
			? json_object_get(line, "roles") : json_array(),
			"action", json_object_get(line, "action"),
			"resource", json_object_get(line, "resource"), "context", c);
	return req;
}

/* One decision of req under bus: 0, or -1 (said). */
static int decide(const char *cmd, struct tsec_bus *bus, json_t *req, json_t *keep,
		  struct tsec_decision *d)
{
	struct tsec_str roles[16];
	struct tsec_request r;
	struct tsec_error err;

	if (tsec__ptest_request(cmd, req, NULL, NULL, 0, &r, roles, 16, keep, stderr))
		return -1;
	if (tsec_bus_check(bus, "policy", &r, 1, d, &err)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		return -1;
	}
	tsec__decision_seal(d);
	return 0;
}

/*
 * A string read from a decision log, to the terminal: whoever wrote the
 * request chose its bytes, so controls (an escape sequence, a newline
 * forging a line) are shown as \xNN, never sent as they are.
 */
static void say_text(const char *s)
{
	if (!s)
		s = "?";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

static void say_rules(const struct tsec_decision *d)
{
	printf("%s", tsec_status_reason(d->status));
	for (unsigned k = 0; k < d->nrules && k < TSEC_DECISION_RULES; k++)
		printf("%s%s", k ? ", " : " (", d->rules[k]);
	printf("%s", d->nrules ? ")" : "");
}

static void say_request(json_t *req)
{
	say_text(json_string_value(json_object_get(req, "action")));
	putchar(' ');
	say_text(json_string_value(json_object_get(req, "resource")));
	fputs(" by ", stdout);
	say_text(json_string_value(json_object_get(req, "principal")));
}

int cmd_replay(struct opts *o)
{
	struct made m = { json_object() };
	size_t replayed = 0, changed = 0, skipped = 0, lineno = 0, cap = 0, logged = 0;
	struct tsec_bus *bus;
	char *buf = NULL;
	ssize_t n;
	FILE *f;
	int rc = EXIT_ALLOW;

	if (o->nargs != 1 || !o->policy)
		die_usage("replay", "need a decision log and --policy NEW");
	if (!(f = fopen(o->args[0], "r"))) {
		perror(o->args[0]);
		json_decref(m.by_attrs);
		return EXIT_ERROR;
	}
	if (!(bus = cli_bus_on("replay", o, o->policy))) {
		fclose(f);
		json_decref(m.by_attrs);
		return EXIT_ERROR;
	}
	while ((n = getline(&buf, &cap, f)) > 0) {
		json_t *line = json_loadb(buf, (size_t)n, 0, NULL), *req, *keep;
		const char *why = NULL, *was;
		struct tsec_decision d;

		lineno++;
		if (json_is_object(line) && json_is_string(json_object_get(line, "decision")))
			logged++;
		if (!json_is_object(line) ||
		    !(was = json_string_value(json_object_get(line, "decision"))) ||
		    !(req = logged_request(line, &m, &why))) {
			if (!why)
				why = "not a decision line";
			if (o->verbose)
				printf("line %zu: not replayed: %s\n", lineno, why);
			skipped++;
			json_decref(line);
			continue;
		}
		keep = json_array();
		if (decide("replay", bus, req, keep, &d)) {
			if (o->verbose)
				printf("line %zu: not replayed: the request is invalid now\n", lineno);
			skipped++;
		} else {
			replayed++;
			if (d.allow != !strcmp(was, "allow")) {
				changed++;
				say_text(json_string_value(json_object_get(line, "decision_id")));
				fputs(": ", stdout);
				say_request(req);
				fputs(": was ", stdout);
				say_text(was);
				printf(", now %s: ", d.allow ? "allow" : "deny");
				say_rules(&d);
				putchar('\n');
			}
		}
		json_decref(keep);
		json_decref(req);
		json_decref(line);
	}
	free(buf);
	fclose(f);
	tsec_bus_free(&bus);
	json_decref(m.by_attrs);
	/* Lines, none of them a logged decision: the wrong file, not a log
	 * whose decisions all stand (an empty log is one). */
	if (lineno && !logged) {
		fprintf(stderr, "tsec replay: %s is not a decision log: none of its %zu lines is "
			"a logged decision\n", o->args[0], lineno);
		return EXIT_ERROR;
	}
	printf("%zu decisions replayed, %zu changed, %zu lines not replayed%s\n", replayed,
	       changed, skipped, skipped && !o->verbose ? " (-v says why)" : "");
	if (changed)
		rc = EXIT_DENY;
	return rc;
}

/* ---- diff ---- */

/*
 * What diff asks, and why it is sound for the key shapes the policies'
 * own patterns can match: a decision changes only where a changed rule
 * (in OLD or NEW) matches, and every key a pattern matches has the same
 * decisions as one of the pattern's samples, provided each '**' is tried
 * at every depth a rule's literals can tell apart and each glob with and
 * without text where '*' stands.  So each resource pattern is expanded:
 * '**' as 0, 1, 2 and 3 segments ("x"), each segment holding '*' with
 * '*' as "x" and, where the segment keeps other characters, as nothing
 * (the boundary of "*.key" is ".key").  Conditions are sampled at each
 * bound either policy names (size_max V: sizes V and V+1; ttl_ms_max:
 * the same), recursive deletes and listings both ways, and a move's
 * destination at every expansion of the policies' patterns.
 */
#define DEPTHS 4                     /* '**' as 0..3 segments */
#define EXPANSIONS_MAX 256           /* per pattern */
#define DESTS_MAX 64

struct sample {
	json_t *reqs, *seen;
	json_t *domains, *prins;
	json_t *sizes, *ttls;            /* integers */
	json_t *dests;                   /* strings */
	size_t capped;                   /* expansions cut at EXPANSIONS_MAX */
};

/* Appends to out each key pattern pat expands to (see above). */
static void expand(const char *pat, json_t *out, size_t *capped)
{
	char segs[64][256];
	unsigned choice[64] = { 0 }, nchoice[64];
	size_t nseg = 0, made = 0;
	const char *p = pat;

	while (*p && nseg < 64) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n && n < sizeof(segs[0])) {
			memcpy(segs[nseg], p, n);
			segs[nseg++][n] = '\0';
		}
		if (!e)
			break;
		p = e + 1;
	}
	for (size_t i = 0; i < nseg; i++)
		nchoice[i] = !strcmp(segs[i], "**") ? DEPTHS
			     : strchr(segs[i], '*') && strcmp(segs[i], "*") ? 2 : 1;
	/* Every combination of the segments' choices (an odometer). */
	for (;;) {
		char key[2048];
		size_t o = 0, i;

		key[0] = '\0';
		for (i = 0; i < nseg && o + 300 < sizeof(key); i++) {
			const char *sg = segs[i];
			if (!strcmp(sg, "**")) {
				for (unsigned d = 0; d < choice[i]; d++)
					o += (size_t)snprintf(key + o, sizeof(key) - o, "%sx",
							      o ? "/" : "");
				continue;
			}
			if (o)
				key[o++] = '/';
			for (; *sg; sg++) {
				if (*sg == '*') {
					while (sg[1] == '*')
						sg++;
					if (choice[i] == 0)
						key[o++] = 'x';
				} else {
					key[o++] = *sg;
				}
			}
			key[o] = '\0';
		}
		key[o] = '\0';
		if (made++ < EXPANSIONS_MAX)
			json_array_append_new(out, json_string(key));
		else
			++*capped;
		for (i = 0; i < nseg && ++choice[i] == nchoice[i]; i++)
			choice[i] = 0;
		if (i == nseg)
			break;
	}
}

/* A domain pattern made concrete: '*' as "x". */
static void concrete(const char *pat, char *out, size_t n)
{
	size_t o = 0;

	for (const char *p = pat; *p && o + 2 < n; p++)
		out[o++] = *p == '*' ? 'x' : *p;
	out[o] = '\0';
}

/* certificates/I/D/D.ext with the domain dom in both places. */
static bool with_domain(const char *res, const char *dom, char *out, size_t n)
{
	char iss[256], ext[16];
	const char *a, *b, *dot;

	if (strncmp(res, "certificates/", 13) || !(a = strchr(res + 13, '/')) ||
	    !(b = strchr(a + 1, '/')) || !(dot = strrchr(b + 1, '.')) || strlen(dot) >= sizeof(ext) ||
	    (size_t)(a - res - 13) >= sizeof(iss))
		return false;
	snprintf(iss, sizeof(iss), "%.*s", (int)(a - res - 13), res + 13);
	snprintf(ext, sizeof(ext), "%s", dot);
	return (size_t)snprintf(out, n, "certificates/%s/%s/%s%s", iss, dom, dom, ext) < n;
}

static void add_request(struct sample *s, const char *prin, const char *role,
			const char *action, const char *res, json_t *ctx)
{
	json_t *req;
	char *key;

	req = json_pack("{s:s,s:[],s:s,s:s,s:O}", "principal", prin, "roles", "action", action,
			"resource", res, "context", ctx);
	if (role)
		json_array_append_new(json_object_get(req, "roles"), json_string(role));
	key = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
	if (key && !json_object_get(s->seen, key)) {
		json_object_set_new(s->seen, key, json_true());
		json_array_append(s->reqs, req);
	}
	free(key);
	json_decref(req);
}

/* One action on one key, in every context the policies' bounds tell
 * apart; with the domains the policies name in place of a certificate's. */
static void sample_key(struct sample *s, const char *who, const char *role, const char *action,
		       const char *key)
{
	unsigned af = cli_action_flags(action);
	json_t *ctxs = json_array(), *c, *v;
	size_t i, j;

	if (af & TSEC_AF_TTL) {
		json_array_foreach(s->ttls, i, v)
			json_array_append_new(ctxs, json_pack("{s:O}", "ttl_ms", v));
	} else if (af & TSEC_AF_SIZE) {
		json_array_foreach(s->sizes, i, v)
			json_array_append_new(ctxs, json_pack("{s:O}", "size", v));
	} else if (af & TSEC_AF_DEST) {
		json_array_foreach(s->dests, i, v)
			if (i < DESTS_MAX)
				json_array_append_new(ctxs, json_pack("{s:O}", "dest", v));
	} else {
		json_array_append_new(ctxs, json_object());
		if (af & TSEC_AF_RECURSIVE)
			json_array_append_new(ctxs, json_pack("{s:b}", "recursive", 1));
	}
	json_array_foreach(ctxs, i, c) {
		char rd[1100];
		json_t *dom;

		add_request(s, who, role, action, key, c);
		json_array_foreach(s->domains, j, dom) {
			char d[260];
			concrete(json_string_value(dom), d, sizeof(d));
			if (d[0] == 'x' && d[1] == '.')
				d[0] = 'w';
			if (with_domain(key, d, rd, sizeof(rd)))
				add_request(s, who, role, action, rd, c);
		}
	}
	json_decref(ctxs);
}

/* Every principal either policy names: {"p": id, "role": name or null}. */
static void principals_of(json_t *out, json_t *seen, json_t *pol)
{
	static const char *const sections[] = { "floor", "rules" };
	json_t *r;
	size_t i, j;

	for (int s = 0; s < 2; s++)
		json_array_foreach(json_object_get(pol, sections[s]), i, r) {
			json_t *prins = json_object_get(r, "principal");

			for (j = 0; j < (prins ? json_array_size(prins) : 1); j++) {
				const char *ps = prins ? json_string_value(json_array_get(prins, j))
					       : "*";
				json_t *e;

				if (!ps || json_object_get(seen, ps))
					continue;
				json_object_set_new(seen, ps, json_true());
				e = !strncmp(ps, "role:", 5)
					? json_pack("{s:s,s:s}", "p", "svc:diff", "role", ps + 5)
					: json_pack("{s:s,s:n}", "p", strcmp(ps, "*") ? ps : "svc:anyone",
						    "role");
				json_array_append_new(out, e);
			}
		}
}

/*
 * Every action any rule names, on every key any pattern expands to, by
 * every principal either policy names (a floor removed changes what an
 * allow elsewhere lets through; a rule on "**" changes what a key only
 * another rule's pattern shapes meets).
 */
static void all_requests(struct sample *s, json_t *actions)
{
	json_t *pe, *k, *a;
	size_t i, n, j;

	json_array_foreach(actions, j, a)
		json_array_foreach(s->dests, n, k)
			json_array_foreach(s->prins, i, pe)
				sample_key(s, json_string_value(json_object_get(pe, "p")),
					   json_string_value(json_object_get(pe, "role")),
					   json_string_value(a), json_string_value(k));
}

/* The actions a rule names, added once each to out. */
static void actions_of(json_t *out, json_t *seen, json_t *r)
{
	json_t *a;
	size_t j;

	json_array_foreach(json_object_get(r, "action"), j, a) {
		const char *an = json_string_value(a);

		for (unsigned x = 0; an && x < TSEC_ACTION__COUNT; x++) {
			const char *name = tsec_action_name(x);

			if (fnmatch(an, name, 0) || json_object_get(seen, name))
				continue;
			json_object_set_new(seen, name, json_true());
			json_array_append_new(out, json_string(name));
		}
	}
}

/* A condition's bound in a rule: V and V+1 into out. */
static void bounds_of(json_t *out, json_t *r, const char *name)
{
	json_t *v = json_object_get(json_object_get(r, "when"), name);

	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		json_array_append_new(out, json_integer(json_integer_value(v)));
		json_array_append_new(out, json_integer(json_integer_value(v) + 1));
	}
}

static void policy_requests(struct sample *s, const char *a, const char *b)
{
	static const char *const sections[] = { "floor", "rules" };
	json_t *pa = json_load_file(a, 0, NULL), *pb = json_load_file(b, 0, NULL);
	json_t *pseen = json_object(), *aseen = json_object(), *actions = json_array(), *r, *d;
	json_t *pols[2] = { pa, pb };
	size_t i, j;

	s->domains = json_array();
	s->prins = json_array();
	s->sizes = json_pack("[i]", 1024);
	s->ttls = json_pack("[i]", 60000);
	s->dests = json_array();
	for (int p = 0; p < 2; p++) {
		principals_of(s->prins, pseen, pols[p]);
		for (int t = 0; t < 2; t++)
			json_array_foreach(json_object_get(pols[p], sections[t]), i, r) {
				json_array_foreach(json_object_get(r, "domain"), j, d)
					if (json_is_string(d))
						json_array_append(s->domains, d);
				json_array_foreach(json_object_get(r, "resource"), j, d)
					if (json_is_string(d))
						expand(json_string_value(d), s->dests, &s->capped);
				bounds_of(s->sizes, r, "size_max");
				bounds_of(s->ttls, r, "ttl_ms_max");
				actions_of(actions, aseen, r);
			}
	}
	all_requests(s, actions);
	json_decref(actions);
	json_decref(aseen);
	json_decref(pseen);
	json_decref(pa);
	json_decref(pb);
}

int cmd_diff(struct opts *o)
{
	struct made m = { json_object() };
	struct tsec_bus *a = NULL, *b = NULL;
	struct sample smp = { .reqs = json_array(), .seen = json_object() };
	json_t *reqs = smp.reqs, *req;
	size_t i, differ = 0, asked = 0;
	int rc = EXIT_ALLOW;

	if (o->nargs != 2)
		die_usage("diff", "need two policies: OLD NEW");
	if (!(a = cli_bus_on("diff", o, o->args[0])) || !(b = cli_bus_on("diff", o, o->args[1]))) {
		rc = EXIT_ERROR;
		goto out;
	}
	policy_requests(&smp, o->args[0], o->args[1]);
	if (o->log) {
		FILE *f = fopen(o->log, "r");
		char *buf = NULL;
		size_t cap = 0;
		ssize_t n;

		if (!f) {
			perror(o->log);
			rc = EXIT_ERROR;
			goto out;
		}
		while ((n = getline(&buf, &cap, f)) > 0) {
			json_t *line = json_loadb(buf, (size_t)n, 0, NULL);
			const char *why;

			if (json_is_object(line) && (req = logged_request(line, &m, &why))) {
				json_array_append_new(reqs, req);
			}
			json_decref(line);
		}
		free(buf);
		fclose(f);
	}
	json_array_foreach(reqs, i, req) {
		struct tsec_decision da, db;
		json_t *keep = json_array();

		if (!decide("diff", a, req, keep, &da) && !decide("diff", b, req, keep, &db)) {
			asked++;
			if (da.allow != db.allow) {
				differ++;
				say_request(req);
				if (json_array_size(json_object_get(req, "roles"))) {
					fputs(" (role ", stdout);
					say_text(json_string_value(json_array_get(
						json_object_get(req, "roles"), 0)));
					putchar(')');
				}
				printf(": %s: ", da.allow ? "allow" : "deny");
				say_rules(&da);
				printf("; %s: ", db.allow ? "allow" : "deny");
				say_rules(&db);
				putchar('\n');
			}
		}
		json_decref(keep);
	}
	printf("%zu requests decided under both, %zu differ\n", asked, differ);
	/* What the sample leaves out, said every time. */
	printf("covered: every action the rules name on every key their patterns shape, "
	       "'**' as 0 to 3 segments, each glob empty and not, the principals and roles the policies name and one "
	       "other, the domains they name, sizes and TTLs at each bound they set%s\n",
	       o->log ? ", the logged requests" : "");
	printf("not covered: keys deeper than a pattern's '**' at 3 segments, literals the "
	       "policies do not name in a glob's place, conditions on the certificate itself "
	       "(SANs, expiry, key type and size)%s%s\n", smp.capped ? ", patterns with more "
	       "than 256 expansions (cut)" : "", o->log ? "" : ", requests from a decision log "
	       "(--log LOG)");
	if (differ)
		rc = EXIT_DENY;
out:
	tsec_bus_free(&a);
	tsec_bus_free(&b);
	json_decref(reqs);
	json_decref(smp.seen);
	json_decref(smp.domains);
	json_decref(smp.prins);
	json_decref(smp.sizes);
	json_decref(smp.ttls);
	json_decref(smp.dests);
	json_decref(m.by_attrs);
	return rc;
}
