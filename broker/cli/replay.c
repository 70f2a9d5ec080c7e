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
#include <time.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"
#include "broker/policytest/policytest.h"
#include "broker/policytest/diff.h"
#include "common/certinfo.h"
#include "common/wire.h"

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

/* What replaying one log line came to. */
enum replayed { R_SKIPPED, R_SAME, R_CHANGED };

/* Replays line number lineno (buf[0..n)) under bus, saying a changed
 * decision (and with -v why a line is not replayed); *logged counts the
 * lines that are logged decisions. */
static enum replayed replay_one(struct opts *o, struct tsec_bus *bus, struct tsec__made *m,
				const char *buf, size_t n, size_t lineno, size_t *logged)
{
	json_t *line = json_loadb(buf, n, 0, NULL), *req = NULL, *keep;
	const char *why = NULL, *was;
	struct tsec_decision d;
	enum replayed out = R_SKIPPED;

	if (json_is_object(line) && json_is_string(json_object_get(line, "decision")))
		++*logged;
	if (!json_is_object(line) ||
	    !(was = json_string_value(json_object_get(line, "decision"))) ||
	    tsec__rate_refusal(line, &why) || !(req = tsec__logged_request(line, m, &why))) {
		if (o->verbose)
			printf("line %zu: not replayed: %s\n", lineno,
			       why ? why : "not a decision line");
		json_decref(line);
		return R_SKIPPED;
	}
	keep = json_array();
	if (decide("replay", bus, req, keep, &d)) {
		if (o->verbose)
			printf("line %zu: not replayed: the request is invalid now\n", lineno);
	} else if (d.allow != !strcmp(was, "allow")) {
		out = R_CHANGED;
		say_text(json_string_value(json_object_get(line, "decision_id")));
		fputs(": ", stdout);
		say_request(req);
		fputs(": was ", stdout);
		say_text(was);
		printf(", now %s: ", d.allow ? "allow" : "deny");
		say_rules(&d);
		putchar('\n');
	} else {
		out = R_SAME;
	}
	json_decref(keep);
	json_decref(req);
	json_decref(line);
	return out;
}

int cmd_replay(struct opts *o)
{
	struct tsec__made m = { json_object() };
	size_t replayed = 0, changed = 0, skipped = 0, lineno = 0, cap = 0, logged = 0;
	struct tsec_bus *bus;
	char *buf = NULL;
	ssize_t n;
	FILE *f;

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
	while ((n = getline(&buf, &cap, f)) > 0)
		switch (replay_one(o, bus, &m, buf, (size_t)n, ++lineno, &logged)) {
		case R_SKIPPED: skipped++; break;
		case R_CHANGED: changed++; /* fall through */
		case R_SAME: replayed++; break;
		}
	free(buf);
	fclose(f);
	tsec_bus_free(&bus);
	json_decref(m.by_attrs);
	/* No logged decision: the wrong file, or an empty one; either way
	 * nothing was replayed, which is no "nothing changed" (issue 51,
	 * item 10: an empty log exited 0; tsec(1) says 2). */
	if (!logged) {
		if (lineno)
			fprintf(stderr, "tsec replay: %s is not a decision log: none of its %zu "
				"lines is a logged decision\n", o->args[0], lineno);
		else
			fprintf(stderr, "tsec replay: %s is empty: no decision to replay\n",
				o->args[0]);
		return EXIT_ERROR;
	}
	printf("%zu decisions replayed, %zu changed, %zu lines not replayed%s\n", replayed,
	       changed, skipped, skipped && !o->verbose ? " (-v says why)" : "");
	return changed ? EXIT_DENY : EXIT_ALLOW;
}

/* ---- diff ---- */

/*
 * What diff reports: the requests decided differently, grouped by the
 * pair of decisions (status and deciding rules, before and after), each
 * group with how many requests it holds and one of them, context and
 * all (issue 51, item 7: 2,105 lines, one printed 35 times over, its
 * context not shown); with -v every request too.
 */
struct group {
	char key[2 * TSEC_DECISION_RULES * TSEC_ID_MAX + 16];
	size_t n;
	json_t *req;                 /* the first request of the group */
	struct tsec_decision da, db;
};

struct shown {
	size_t n;
	bool all;
	struct group *g;
	size_t ng, capg;
};

static void group_key(char *k, size_t cap, const struct tsec_decision *da,
		      const struct tsec_decision *db)
{
	size_t o = 0;

	for (int side = 0; side < 2; side++) {
		const struct tsec_decision *d = side ? db : da;

		o += (size_t)snprintf(k + o, cap - o, "%s%u", side ? "|" : "", d->status);
		for (unsigned i = 0; i < d->nrules && i < TSEC_DECISION_RULES && o < cap; i++)
			o += (size_t)snprintf(k + o, cap - o, ",%.*s", TSEC_ID_MAX, d->rules[i]);
		if (o >= cap)
			break;
	}
}

static void say_differ(json_t *req, const struct tsec_decision *da, const struct tsec_decision *db)
{
	json_t *roles = json_object_get(req, "roles"), *ctx = json_object_get(req, "context"), *v;
	const char *k;
	size_t i;

	say_request(req);
	json_array_foreach(roles, i, v) {
		fputs(i ? ", " : " (roles ", stdout);
		say_text(json_string_value(v));
		if (i + 1 == json_array_size(roles))
			putchar(')');
	}
	json_object_foreach(ctx, k, v) {
		if (!strcmp(k, "cert_pem") && json_is_string(v)) {
			struct tsec__certinfo ci;

			if (tsec__certinfo_of(json_string_value(v), json_string_length(v), &ci)) {
				fputs(" cert=(does not parse)", stdout);
				continue;
			}
			/* Every name: two requests that differ only in a second
			 * SAN were printed alike (issue 51, item 7). */
			fputs(" cert=(", stdout);
			for (unsigned n = 0; n < ci.nnames; n++)
				printf("%s%s", n ? "|" : "", ci.names[n]);
			printf(", %s %u bits, %+lld s left)", ci.key, ci.bits,
			       (long long)(ci.not_after - (int64_t)time(NULL)));
			continue;
		}
		printf(" %s=", k);
		if (json_is_string(v))
			say_text(json_string_value(v));
		else if (json_is_integer(v))
			printf("%lld", (long long)json_integer_value(v));
		else
			fputs(json_is_true(v) ? "true" : "false", stdout);
	}
	printf(": %s: ", da->allow ? "allow" : "deny");
	say_rules(da);
	printf("; %s: ", db->allow ? "allow" : "deny");
	say_rules(db);
	putchar('\n');
}

static void on_differ(void *ctx, json_t *req, const struct tsec_decision *da,
		      const struct tsec_decision *db)
{
	struct shown *s = ctx;
	char key[sizeof(s->g[0].key)];
	size_t i;

	if (s->all)
		say_differ(req, da, db);
	s->n++;
	group_key(key, sizeof(key), da, db);
	for (i = 0; i < s->ng && strcmp(s->g[i].key, key); i++)
		;
	if (i == s->ng) {
		if (s->ng == s->capg) {
			size_t cap = s->capg ? 2 * s->capg : 16;
			struct group *g = realloc(s->g, cap * sizeof(*g));

			if (!g)
				return;      /* counted, not grouped */
			s->g = g;
			s->capg = cap;
		}
		memcpy(s->g[i].key, key, sizeof(key));
		s->g[i].n = 0;
		s->g[i].req = json_incref(req);
		s->g[i].da = *da;
		s->g[i].db = *db;
		s->ng++;
	}
	s->g[i].n++;
}

static int by_count(const void *a, const void *b)
{
	const struct group *x = a, *y = b;

	return x->n < y->n ? 1 : x->n > y->n ? -1 : 0;
}

/* The groups, the largest first; each one's request, the witness. */
static void say_groups(struct shown *s)
{
	if (s->ng)                        /* (no groups: no array to sort) */
		qsort(s->g, s->ng, sizeof(*s->g), by_count);
	if (s->ng)
		printf("%zu request(s) decided differently, in %zu group(s) by the decisions before "
		       "and after (a group's count, then one of its requests):\n", s->n, s->ng);
	for (size_t i = 0; i < s->ng; i++) {
		printf("%6zu  ", s->g[i].n);
		say_differ(s->g[i].req, &s->g[i].da, &s->g[i].db);
		json_decref(s->g[i].req);
	}
	free(s->g);
	s->g = NULL;
	s->ng = 0;
}

/*
 * diff OLD NEW: every class of requests the two policies decide
 * differently, exactly (broker/policytest/diff.h), each shown by its
 * shortest request; with --log, every logged request as well.
 */
int cmd_diff(struct opts *o)
{
	struct tsec__made m = { json_object() };
	struct tsec_bus *a = NULL, *b = NULL;
	struct tsec__diff_stats st = { 0 };
	struct shown shown = { 0, o->verbose != 0, NULL, 0, 0 };
	struct tsec_error err;
	json_t *pa = NULL, *pb = NULL;
	size_t logged = 0, logged_differ = 0;
	int rc = EXIT_ALLOW;

	if (o->nargs != 2)
		die_usage("diff", "need two policies: OLD NEW");
	if (!(a = cli_bus_on("diff", o, o->args[0])) || !(b = cli_bus_on("diff", o, o->args[1])) ||
	    !(pa = json_load_file(o->args[0], 0, NULL)) ||
	    !(pb = json_load_file(o->args[1], 0, NULL))) {
		rc = EXIT_ERROR;
		goto out;
	}
	if (tsec__policy_diff(a, b, pa, pb, 0, on_differ, &shown, &st, &err)) {
		fprintf(stderr, "tsec diff: %s\n", err.msg);
		rc = EXIT_FAILED;
		goto out;
	}
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
			json_t *line = json_loadb(buf, (size_t)n, 0, NULL), *req, *keep = json_array();
			struct tsec_decision da, db;
			const char *why;

			if (json_is_object(line) && (req = tsec__logged_request(line, &m, &why))) {
				if (!decide("diff", a, req, keep, &da) &&
				    !decide("diff", b, req, keep, &db)) {
					logged++;
					if (da.allow != db.allow) {
						logged_differ++;
						on_differ(&shown, req, &da, &db);
					}
				}
				json_decref(req);
			}
			json_decref(keep);
			json_decref(line);
		}
		free(buf);
		fclose(f);
	}
	say_groups(&shown);
	printf("%zu requests decided under both, %zu differ (%zu key classes from %zu automaton "
	       "states%s)\n", st.asked + logged, st.differ + logged_differ, st.key_classes,
	       st.states, o->log ? ", and the logged requests" : "");
	printf("compared: every key the patterns tell apart (each class by its shortest key), "
	       "every action, the principals and roles the rules on those keys name and one "
	       "other, ttl and size at each bound, recursive or not, moves between classes\n");
	if (st.cert_rules)
		printf("certificates (%zu rule(s) of the two have a cert condition): one that does "
		       "not parse, and ones naming the key's domain or not, expiring either side of "
		       "each min_remaining_s, of each key type, RSA either side of each "
		       "min_rsa_bits\n", st.cert_rules);
	if (!st.exact)
		printf("not exact: more than 4,000,000 automaton states, or more than %d roles "
		       "on one key class (each role alone and all together were tried)\n", 6);
	if (st.differ + logged_differ)
		rc = EXIT_DENY;
out:
	tsec_bus_free(&a);
	tsec_bus_free(&b);
	json_decref(pa);
	json_decref(pb);
	json_decref(m.by_attrs);
	return rc;
}
