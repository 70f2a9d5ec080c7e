/*
 * tsec: the policy author's tools that need neither a broker nor the
 * module: fmt (canonical form), inspect (what a policy or a fleet bundle
 * holds) and verify (a signature against a public key, as the broker
 * checks it).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>
#include <sodium.h>

#include "tinysecurity/types.h"
#include "broker/cli/cli.h"
#include "common/error.h"
#include "common/file.h"
#include "common/sign.h"

static const char *const top_order[] = {
	"version", "description", "revision", "fleet", "expires", "floor", "rules",
};
static const char *const rule_order[] = {
	"id", "effect", "principal", "except", "action", "resource", "domain", "when",
	"description",
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A copy of o with the members named in order first, the rest after. */
static json_t *ordered(json_t *o, const char *const *order, size_t n)
{
	json_t *out = json_object(), *v;
	const char *k;

	for (size_t i = 0; i < n; i++)
		if ((v = json_object_get(o, order[i])))
			json_object_set(out, order[i], v);
	json_object_foreach(o, k, v)
		if (!json_object_get(out, k))
			json_object_set(out, k, v);
	return out;
}

static int put(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = (*cap ? *cap * 2 : 4096) + n;
		char *b = realloc(*buf, nc);

		if (!b)
			return -1;
		*buf = b;
		*cap = nc;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

static int put_json(char **buf, size_t *len, size_t *cap, json_t *v)
{
	/* One line, ", " and ": " between members, as jansson writes without
	 * JSON_INDENT; the members' order as given. */
	char *t = json_dumps(v, JSON_ENCODE_ANY);
	int rc = t ? put(buf, len, cap, t, strlen(t)) : -1;

	free(t);
	return rc;
}

#define WIDTH 100

/*
 * One rule: its members in rule_order, filled into lines of at most WIDTH
 * columns (a member longer than that alone on its line), the lines after
 * the first indented to the brace's column plus one.
 */
/*
 * v at column *col: compact when it fits before WIDTH; an object or array
 * that does not is opened and its members (elements) filled after the
 * bracket, each line continuing at the column after it, and so on down
 * (issue 51, item 17: a rule's "when" ran to 140 columns).  A string is
 * never broken.
 */
static int put_filled(char **buf, size_t *len, size_t *cap, json_t *v, size_t *col)
{
	char *vt = json_dumps(v, JSON_ENCODE_ANY);
	size_t n = vt ? strlen(vt) : 0, indent, count, i;
	bool obj = json_is_object(v);
	void *it;
	int rc;

	if (!vt)
		return -1;
	count = obj ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
	if (*col + n + 2 <= WIDTH || !count) {
		rc = put(buf, len, cap, vt, n);
		*col += n;
		free(vt);
		return rc;
	}
	free(vt);
	rc = put(buf, len, cap, obj ? "{" : "[", 1);
	indent = ++*col;
	it = obj ? json_object_iter(v) : NULL;
	for (i = 0; i < count; i++) {
		json_t *x = obj ? json_object_iter_value(it) : json_array_get(v, i);
		json_t *key = obj ? json_string(json_object_iter_key(it)) : NULL;
		char *kt = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL, *et;
		size_t kn = kt ? strlen(kt) + 2 : 0, en;

		json_decref(key);
		et = json_dumps(x, JSON_ENCODE_ANY);
		en = et ? strlen(et) : 0;
		if (i && *col + 2 + kn + en + 2 > WIDTH) {
			rc |= put(buf, len, cap, ",\n", 2);
			for (size_t s = 0; s < indent; s++)
				rc |= put(buf, len, cap, " ", 1);
			*col = indent;
		} else if (i) {
			rc |= put(buf, len, cap, ", ", 2);
			*col += 2;
		}
		if (kt) {
			rc |= put(buf, len, cap, kt, kn - 2);
			rc |= put(buf, len, cap, ": ", 2);
			*col += kn;
		}
		rc |= put_filled(buf, len, cap, x, col);
		free(kt);
		free(et);
		if (obj)
			it = json_object_iter_next(v, it);
	}
	rc |= put(buf, len, cap, obj ? "}" : "]", 1);
	++*col;
	return rc;
}

static int put_rule(char **buf, size_t *len, size_t *cap, json_t *r)
{
	json_t *o, *v;
	const char *k;
	size_t col = 5, first = 1;
	int rc = 0;

	if (!json_is_object(r))
		return put_json(buf, len, cap, r);
	o = ordered(r, rule_order, COUNT(rule_order));
	rc |= put(buf, len, cap, "{", 1);
	json_object_foreach(o, k, v) {
		json_t *key = json_string(k);
		char *kt = json_dumps(key, JSON_ENCODE_ANY), *vt = json_dumps(v, JSON_ENCODE_ANY);
		size_t n = kt && vt ? strlen(kt) + 2 + strlen(vt) : 0;

		json_decref(key);
		if (!kt || !vt) {
			rc = -1;
		} else {
			if (!first && col + 2 + n + 1 > WIDTH) {
				rc |= put(buf, len, cap, ",\n     ", 7);
				col = 5;
			} else if (!first) {
				rc |= put(buf, len, cap, ", ", 2);
				col += 2;
			}
			rc |= put(buf, len, cap, kt, strlen(kt));
			rc |= put(buf, len, cap, ": ", 2);
			col += strlen(kt) + 2;
			rc |= put_filled(buf, len, cap, v, &col);
		}
		first = 0;
		free(kt);
		free(vt);
	}
	rc |= put(buf, len, cap, "}", 1);
	json_decref(o);
	return rc;
}

/* The canonical text of the policy root (new, NUL-terminated), or NULL. */
static char *canonical(json_t *root, size_t *outlen)
{
	json_t *top = ordered(root, top_order, COUNT(top_order)), *v;
	char *buf = NULL;
	size_t len = 0, cap = 0, i = 0, n = json_object_size(top);
	const char *k;
	int rc = put(&buf, &len, &cap, "{\n", 2);

	json_object_foreach(top, k, v) {
		json_t *key = json_string(k);

		rc |= put(&buf, &len, &cap, "  ", 2);
		rc |= put_json(&buf, &len, &cap, key);
		rc |= put(&buf, &len, &cap, ": ", 2);
		json_decref(key);
		if ((!strcmp(k, "floor") || !strcmp(k, "rules")) && json_is_array(v) &&
		    json_array_size(v)) {
			json_t *r;
			size_t j;

			rc |= put(&buf, &len, &cap, "[\n", 2);
			json_array_foreach(v, j, r) {
				rc |= put(&buf, &len, &cap, "    ", 4);
				rc |= put_rule(&buf, &len, &cap, r);
				rc |= put(&buf, &len, &cap, j + 1 < json_array_size(v) ? ",\n" : "\n",
					  j + 1 < json_array_size(v) ? 2 : 1);
			}
			rc |= put(&buf, &len, &cap, "  ]", 3);
		} else {
			rc |= put_json(&buf, &len, &cap, v);
		}
		i++;
		rc |= put(&buf, &len, &cap, i < n ? ",\n" : "\n", i < n ? 2 : 1);
	}
	rc |= put(&buf, &len, &cap, "}\n", 2);
	json_decref(top);
	if (rc) {
		free(buf);
		return NULL;
	}
	*outlen = len;
	return buf;
}

int cmd_fmt(struct opts *o)
{
	int rc = EXIT_ALLOW;

	if (o->nargs < 1)
		die_usage("fmt", "need a policy file");
	if (o->check && o->write)
		die_usage("fmt", "-w and --check: one or the other");
	if (o->force && !o->write)
		die_usage("fmt", "--force goes with -w");
	for (int i = 0; i < o->nargs; i++)
		if (o->write && !strcmp(o->args[i], "-"))
			die_usage("fmt", "-w rewrites files: stdin (-) has none");
	for (int i = 0; i < o->nargs; i++) {
		/* "-": stdin, printed or checked, never rewritten. */
		const char *path = strcmp(o->args[i], "-") ? o->args[i] : "/dev/stdin";
		struct tsec_error err;
		json_error_t je;
		json_t *root;
		char *text = NULL, *out;
		size_t len, olen;
		struct stat sb;

		if (tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, &err)) {
			fprintf(stderr, "tsec fmt: %s\n", err.msg);
			rc = EXIT_ERROR;
			continue;
		}
		root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		if (!json_is_object(root)) {
			cli_json_error("fmt", path, &je, root ? "a policy is a JSON object" : NULL);
			json_decref(root);
			free(text);
			rc = EXIT_ERROR;
			continue;
		}
		out = canonical(root, &olen);
		json_decref(root);
		if (!out) {
			fprintf(stderr, "tsec fmt: %s: out of memory\n", path);
			free(text);
			return EXIT_FAILED;
		}
		if (o->check || o->write) {
			bool same = olen == len && !memcmp(out, text, len);

			char sig[4200];

			snprintf(sig, sizeof(sig), "%s.sig", path);
			if (!same && o->check) {
				printf("%s\n", o->args[i]);
				if (rc == EXIT_ALLOW)
					rc = EXIT_DENY;
			} else if (!same && !o->force && !access(sig, F_OK)) {
				/* Issue 51, item 13: -w broke the signature silently. */
				fprintf(stderr, "tsec fmt: %s is signed (%s): new bytes would not match "
					"the signature; sign again after, or give --force\n", path, sig);
				rc = EXIT_ERROR;
			} else if (!same && (stat(path, &sb) ||
					     tsec__file_replace(path, out, olen, sb.st_mode & 07777))) {
				fprintf(stderr, "tsec fmt: cannot rewrite %s: %s\n", path, strerror(errno));
				rc = EXIT_FAILED;
			} else if (!same && !access(sig, F_OK)) {
				fprintf(stderr, "tsec fmt: %s no longer matches %s: sign it again\n",
					sig, path);
			}
		} else {
			fwrite(out, 1, olen, stdout);
		}
		free(out);
		free(text);
	}
	return rc;
}

/*
 * A policy's text and its signature in hex: from a fleet bundle
 * {"policy": TEXT, "signature": HEX}, or from the file and FILE.sig
 * (*sig NULL when there is none).  0, or EXIT_ERROR after saying why.
 */
static int read_signed(const char *cmd, const char *path, char **text, size_t *len,
		       char **sig, bool *bundle)
{
	struct tsec_error err;
	char sigpath[4200];
	size_t slen;
	json_t *root, *p, *s;

	*sig = NULL;
	*bundle = false;
	if (tsec_read_file(path, TSEC_POLICY_MAX, text, len, &err)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		return EXIT_ERROR;
	}
	root = json_loadb(*text, *len, JSON_REJECT_DUPLICATES, NULL);
	p = json_object_get(root, "policy");
	s = json_object_get(root, "signature");
	if (json_object_size(root) == 2 && json_is_string(p) && json_is_string(s)) {
		char *t = malloc(json_string_length(p) + 1);

		if (!t || !(*sig = strdup(json_string_value(s)))) {
			free(t);
			json_decref(root);
			fprintf(stderr, "tsec %s: out of memory\n", cmd);
			return EXIT_FAILED;
		}
		memcpy(t, json_string_value(p), json_string_length(p) + 1);
		free(*text);
		*text = t;
		*len = json_string_length(p);
		*bundle = true;
	} else {
		snprintf(sigpath, sizeof(sigpath), "%s.sig", path);
		if (tsec_read_file(sigpath, 1024, sig, &slen, &err))
			*sig = NULL;
	}
	json_decref(root);
	return 0;
}

/* 1 verifies, 0 does not, -1 malformed signature. */
static int verifies(const char *text, size_t len, const char *sighex, const unsigned char *pk)
{
	unsigned char sig[TSEC_SIG_BYTES];

	if (tsec__hex_decode(sighex, sig, sizeof(sig)))
		return -1;
	return crypto_sign_verify_detached(sig, (const unsigned char *)text, len, pk) == 0;
}

int cmd_verify(struct opts *o)
{
	unsigned char pk[TSEC_SIGN_PK_BYTES];
	struct tsec_error err;
	char *text = NULL, *sig = NULL;
	size_t len;
	bool bundle;
	int rc, ok;

	if (!o->key_prefix || o->nargs != 1)
		die_usage("verify", "need --key PREFIX.sign.pub and one policy or bundle");
	if (tsec__key_file_read(o->key_prefix, pk, sizeof(pk), &err)) {
		fprintf(stderr, "tsec verify: %s\n", err.msg);
		return EXIT_ERROR;
	}
	if ((rc = read_signed("verify", o->args[0], &text, &len, &sig, &bundle)))
		return rc;
	if (!sig) {
		printf("%s: not signed (no %s.sig)\n", o->args[0], o->args[0]);
		free(text);
		return EXIT_DENY;
	}
	ok = verifies(text, len, sig, pk);
	if (ok > 0)
		printf("%s: signature verifies with %s\n", o->args[0], o->key_prefix);
	else
		printf("%s: %s\n", o->args[0], ok < 0 ? "the signature is not 128 hex digits"
		       : "the signature does not verify with this key");
	free(text);
	free(sig);
	return ok > 0 ? EXIT_ALLOW : EXIT_DENY;
}

/* Adds each string of arr (or "*" when absent) to the set names. */
static void collect(json_t *names, json_t *arr, const char *absent)
{
	json_t *v;
	size_t i;

	if (!arr && absent)
		json_object_set_new(names, absent, json_true());
	json_array_foreach(arr, i, v)
		if (json_is_string(v))
			json_object_set_new(names, json_string_value(v), json_true());
}

/* The issuer segment of certificates/ISSUER/... patterns. */
static void issuers(json_t *names, json_t *res)
{
	json_t *v;
	size_t i;

	json_array_foreach(res, i, v) {
		const char *s = json_string_value(v), *e;

		if (s && !strncmp(s, "certificates/", 13) && (e = strchr(s + 13, '/')) &&
		    e > s + 13 && !memchr(s + 13, '*', (size_t)(e - s - 13))) {
			char iss[256];

			snprintf(iss, sizeof(iss), "%.*s", (int)(e - s - 13), s + 13);
			json_object_set_new(names, iss, json_true());
		}
	}
}

static json_t *keys_of(json_t *set)
{
	json_t *a = json_array(), *v;
	const char *k;

	json_object_foreach(set, k, v)
		json_array_append_new(a, json_string(k));
	return a;
}

static void print_list(const char *label, json_t *a)
{
	json_t *v;
	size_t i;

	printf("%-12s", label);
	json_array_foreach(a, i, v)
		printf("%s%s", i ? ", " : "", json_string_value(v));
	printf("%s\n", json_array_size(a) ? "" : "(none)");
}

/* What inspect found, as JSON or as aligned text; what the policy does
 * not say (null) left out. */
static void inspect_print(json_t *out, int json)
{
	const char *k;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(out, tmp, k, v)
		if (json_is_null(v))
			json_object_del(out, k);
	if (json) {
		json_dumpf(out, stdout, JSON_COMPACT);
		putchar('\n');
		return;
	}
	json_object_foreach(out, k, v) {
		if (json_is_array(v)) {
			print_list(k, v);
		} else {
			char *t = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);

			printf("%-12s%s\n", k, t ? t : json_string_value(v));
			free(t);
		}
	}
	if (!json_object_get(out, "revision"))
		printf("%-12s%s\n", "note", "no revision: a broker refuses it signed, and "
		       "tsec sign refuses to sign it");
	if (json_is_true(json_object_get(out, "expired")))
		printf("%-12s%s\n", "note", "EXPIRED: its \"expires\" has passed; a broker "
		       "refuses it");
}

int cmd_inspect(struct opts *o)
{
	unsigned char h[crypto_hash_sha256_BYTES], pk[TSEC_SIGN_PK_BYTES];
	char sha[65], *text = NULL, *sig = NULL;
	json_t *root, *r, *prin = json_object(), *acts = json_object(), *iss = json_object();
	json_t *doms = json_object(), *out;
	size_t len, i, nfloor, nallow = 0, ndeny = 0;
	const char *signature;
	struct tsec_error err;
	json_error_t je;
	bool bundle;
	int rc, ok = 0;

	if (o->nargs != 1)
		die_usage("inspect", "need one policy or bundle");
	if ((rc = read_signed("inspect", o->args[0], &text, &len, &sig, &bundle)))
		goto done;
	/* (json_is_object reads its argument twice: never a call in it.) */
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		cli_json_error("inspect", o->args[0], &je, root ? "a policy is a JSON object" : NULL);
		json_decref(root);
		rc = EXIT_ERROR;
		goto done;
	}
	/* The SHA-256 of the policy's text, as the broker's health shows it. */
	crypto_hash_sha256(h, (const unsigned char *)text, len);
	sodium_bin2hex(sha, sizeof(sha), h, sizeof(h));
	nfloor = json_array_size(json_object_get(root, "floor"));
	json_array_foreach(json_object_get(root, "floor"), i, r) {
		collect(prin, json_object_get(r, "principal"), "*");
		collect(acts, json_object_get(r, "action"), NULL);
		issuers(iss, json_object_get(r, "resource"));
	}
	json_array_foreach(json_object_get(root, "rules"), i, r) {
		const char *e = json_string_value(json_object_get(r, "effect"));

		nallow += e && !strcmp(e, "allow");
		ndeny += e && !strcmp(e, "deny");
		collect(prin, json_object_get(r, "principal"), "*");
		collect(acts, json_object_get(r, "action"), NULL);
		collect(doms, json_object_get(r, "domain"), NULL);
		issuers(iss, json_object_get(r, "resource"));
	}
	if (sig && o->key_prefix) {
		if (tsec__key_file_read(o->key_prefix, pk, sizeof(pk), &err)) {
			fprintf(stderr, "tsec inspect: %s\n", err.msg);
			json_decref(root);
			rc = EXIT_ERROR;
			goto done;
		}
		ok = verifies(text, len, sig, pk);
	}
	signature = !sig ? "none" : !o->key_prefix ? "present, not checked (give --key)"
		    : ok > 0 ? "verifies with the key" : "DOES NOT VERIFY with the key";
	out = json_pack("{s:s,s:s,s:s,s:O?,s:O?,s:O?,s:O?,s:O?,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:s}",
			"file", cli_shown(o->args[0]), "form", bundle ? "bundle" : "policy", "sha256", sha,
			"version", json_object_get(root, "version"),
			"revision", json_object_get(root, "revision"),
			"fleet", json_object_get(root, "fleet"),
			"expires", json_object_get(root, "expires"),
			"description", json_object_get(root, "description"),
			"floor", (json_int_t)nfloor, "allow", (json_int_t)nallow,
			"deny", (json_int_t)ndeny, "principals", keys_of(prin),
			"actions", keys_of(acts), "issuers", keys_of(iss), "domains", keys_of(doms),
			"signature", signature);
	if (json_object_get(root, "expires"))
		json_object_set_new(out, "expired", json_boolean(cli_expired(root)));
	json_decref(root);
	inspect_print(out, o->json);
	json_decref(out);
	/* With --key, a signature checked as verify checks it: none, or one
	 * that does not verify, is 1 (issue 51, item 10: an unsigned file
	 * was 0 here and 1 for verify). */
	rc = o->key_prefix && (!sig || ok <= 0) ? EXIT_DENY : EXIT_ALLOW;
done:
	json_decref(prin);
	json_decref(acts);
	json_decref(iss);
	json_decref(doms);
	free(text);
	free(sig);
	return rc;
}
