/*
 * tsec: what needs no broker: lint (through the module's lint entry),
 * keygen (CURVE and signing keys, never overwritten) and sign (a policy
 * that compiles).
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tinysecurity/bus.h"
#include "broker/cli/cli.h"
#include "common/sign.h"
#include "common/where.h"

/* The module beside this program, or installed beside its bin/, else the build's. */
const char *cli_default_module(void)
{
	static char path[4096];
	char *copy = strdup(tsec_cli_argv0);
	const char *dir = dirname(copy);

	snprintf(path, sizeof(path), "%s/libtinysecurity_module.so", dir);
	if (access(path, R_OK) != 0)
		snprintf(path, sizeof(path), "%s/../lib/tinysecurity/libtinysecurity_module.so", dir);
	if (access(path, R_OK) != 0)
		snprintf(path, sizeof(path), "build/release/libtinysecurity_module.so");
	free(copy);
	return path;
}

/* Lints the policy at path, naming it name in what it prints. */
/*
 * --strict: the names the schema (--schema, or schema.json beside the
 * policy) does not know are errors, and so are the warnings: appended to
 * errs[0..64) (*n counts them all); *warns emptied when there are any.
 * 0, or EXIT_ERROR when the schema cannot be read (said).
 */
static int strict_errors(struct opts *o, const char *name, const char *path,
			 struct tsec_error errs[64], size_t *n, json_t **warns)
{
	char schema[4200], why[600];
	json_t *se;
	size_t i;

	if (o->schema) {
		snprintf(schema, sizeof(schema), "%s", o->schema);
	} else {
		char *copy = strdup(path);

		if (path != name)
			die_usage("lint", "--strict on stdin needs --schema FILE");
		snprintf(schema, sizeof(schema), "%s/schema.json", copy ? dirname(copy) : ".");
		free(copy);
		if (access(schema, R_OK))
			die_usage("lint", "--strict needs a schema: --schema FILE, or "
				  "schema.json beside the policy");
	}
	if (!(se = cli_schema_errors(path, schema, why, sizeof(why)))) {
		fprintf(stderr, "tsec lint: %s\n", why);
		return EXIT_ERROR;
	}
	*n = json_array_size(se) + json_array_size(*warns);
	for (i = 0; i < json_array_size(se) && i < 64; i++) {
		json_t *v = json_array_get(se, i);

		snprintf(errs[i].where, sizeof(errs[i].where), "%s",
			 json_string_value(json_object_get(v, "where")));
		snprintf(errs[i].msg, sizeof(errs[i].msg), "%s",
			 json_string_value(json_object_get(v, "message")));
	}
	for (size_t j = 0; j < json_array_size(*warns) && i < 64; j++, i++) {
		json_t *v = json_array_get(*warns, j);

		snprintf(errs[i].where, sizeof(errs[i].where), "%s",
			 json_string_value(json_object_get(v, "where")));
		snprintf(errs[i].msg, sizeof(errs[i].msg), "%s (an error with --strict)",
			 json_string_value(json_object_get(v, "message")));
	}
	json_decref(se);
	if (*n) {
		json_decref(*warns);
		*warns = json_array();
	}
	return 0;
}

/* One finding of lint, as JSON: where, its line and column, message. */
static json_t *finding_json(const char *text, size_t len, const char *where, const char *msg)
{
	const char *rest;
	int line, col;

	tsec__error_pos(text, len, where, msg, &line, &col, &rest);
	return json_pack("{s:s,s:i,s:i,s:s}", "where", where, "line", line, "column", col,
			 "message", rest);
}

/* What lint found in text, as JSON or as text lines (common/where.h). */
static void lint_report(const struct opts *o, const char *name, const char *text, size_t len,
			int rc, const struct tsec_error errs[64], size_t n, json_t *warns)
{
	char line[TSEC_ERR_WHERE + TSEC_ERR_MSG + 4200];
	json_t *v;
	size_t i;

	if (o->json) {
		json_t *a = json_array(), *w = json_array(), *r;

		for (i = 0; i < n && i < 64; i++)
			json_array_append_new(a, finding_json(text, len, errs[i].where, errs[i].msg));
		json_array_foreach(warns, i, v)
			json_array_append_new(w, finding_json(text, len,
				json_string_value(json_object_get(v, "where")) ?: "",
				json_string_value(json_object_get(v, "message")) ?: ""));
		r = json_pack("{s:b,s:o,s:o}", "ok", rc == 0, "errors", a, "warnings", w);
		json_dumpf(r, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(r);
	} else if (rc == 0) {
		json_array_foreach(warns, i, v) {
			char msg[TSEC_ERR_MSG + 16];

			snprintf(msg, sizeof(msg), "warning: %s",
				 json_string_value(json_object_get(v, "message")) ?: "");
			tsec__error_say(line, sizeof(line), name, text, len,
					json_string_value(json_object_get(v, "where")) ?: "", msg);
			puts(line);
		}
		if (json_array_size(warns))
			printf("%s: ok, %zu warning%s\n", name, json_array_size(warns),
			       json_array_size(warns) == 1 ? "" : "s");
		else
			printf("%s: ok\n", name);
	} else {
		for (i = 0; i < n && i < 64; i++) {
			tsec__error_say(line, sizeof(line), name, text, len, errs[i].where,
					errs[i].msg);
			puts(line);
		}
		if (n > 64)
			printf("%s: ... %zu errors in all\n", name, n);
	}
}

static int lint_file(struct opts *o, const char *name, const char *path)
{
	struct tsec_error errs[64], err;
	struct tsec_bus *bus = NULL;
	const char *minimal = "{\"version\": 1}";
	char *text;
	size_t len, n = 0;
	json_t *warns;
	int rc;

	if (tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, &err)) {
		fprintf(stderr, "tsec lint: %s\n", err.msg);
		return EXIT_ERROR;
	}
	tsec_bus_new(&bus);
	tsec_bus_set_log(bus, NULL, NULL);
	if (tsec_bus_load(bus, "lint", o->module ? o->module : cli_default_module(), minimal,
			  strlen(minimal), &err)) {
		fprintf(stderr, "tsec lint: %s\n", err.msg);
		free(text);
		tsec_bus_free(&bus);
		return EXIT_ERROR;
	}
	rc = tsec_bus_lint(bus, "lint", text, len, errs, 64, &n);
	tsec_bus_free(&bus);
	if (rc == TSEC_EMODULE) {
		fprintf(stderr, "tsec lint: the module cannot lint (ABI 1.0)\n");
		free(text);
		return EXIT_ERROR;
	}
	/* A policy that compiles may still hold rules that decide nothing. */
	warns = rc == 0 ? cli_policy_warnings(path) : json_array();
	if (o->schema && !o->strict && rc == 0) {
		/* --schema alone: names no caller has are warnings (issue 51, 3). */
		char why[600];
		json_t *se = cli_schema_errors(path, o->schema, why, sizeof(why));

		if (!se) {
			fprintf(stderr, "tsec lint: %s\n", why);
			json_decref(warns);
			free(text);
			return EXIT_ERROR;
		}
		json_array_extend(warns, se);
		json_decref(se);
	}
	if (o->strict && rc == 0) {
		if (strict_errors(o, name, path, errs, &n, &warns)) {
			json_decref(warns);
			free(text);
			return EXIT_ERROR;
		}
		if (n)
			rc = TSEC_EPOLICY;
	}
	lint_report(o, name, text, len, rc, errs, n, warns);
	json_decref(warns);
	free(text);
	return rc == 0 ? EXIT_ALLOW : EXIT_ERROR;
}

/*
 * tsec lint POLICY, or - for stdin: spooled to a private temporary file,
 * since the warnings and the schema read the policy again.
 */
/* stdin, kept in a temporary file while it is linted. */
static int lint_stdin(struct opts *o)
{
	char spool[4200], *text = NULL;
	struct tsec_error err;
	size_t len;
	int fd, rc;
	const char *tmp = getenv("TMPDIR");

	if (tsec_read_file("/dev/stdin", TSEC_POLICY_MAX, &text, &len, &err)) {
		fprintf(stderr, "tsec lint: stdin: %s\n", err.msg);
		return EXIT_ERROR;
	}
	snprintf(spool, sizeof(spool), "%s/tsec-lint-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if ((fd = mkstemp(spool)) < 0 || write(fd, text, len) != (ssize_t)len) {
		fprintf(stderr, "tsec lint: cannot keep stdin in %s: %s\n", spool, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(spool);
		}
		free(text);
		return EXIT_ERROR;
	}
	close(fd);
	free(text);
	rc = lint_file(o, "-", spool);
	unlink(spool);
	return rc;
}

/* Whether path holds a policy: a JSON object with "rules" or "floor". */
static bool looks_like_policy(const char *path)
{
	json_t *j = json_load_file(path, 0, NULL);
	bool yes = json_is_object(j) && (json_object_get(j, "rules") || json_object_get(j, "floor"));

	json_decref(j);
	return yes;
}

/* A folder: every policy in it (*.json holding "rules" or "floor"; test
 * files, schemas and configurations are left alone), by name. */
static int lint_folder(struct opts *o, const char *dir)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort), rc = EXIT_ALLOW, seen = 0;

	if (n < 0) {
		fprintf(stderr, "tsec lint: %s: %s\n", dir, strerror(errno));
		return EXIT_ERROR;
	}
	for (int i = 0; i < n; i++) {
		char path[4200];
		size_t l = strlen(ents[i]->d_name);

		if (l > 5 && !strcmp(ents[i]->d_name + l - 5, ".json") &&
		    (l < 10 || strcmp(ents[i]->d_name + l - 10, ".test.json")) &&
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name) <
			    sizeof(path) && looks_like_policy(path)) {
			int r = lint_file(o, path, path);

			seen++;
			if (r > rc)
				rc = r;
		}
		free(ents[i]);
	}
	free(ents);
	if (!seen) {
		fprintf(stderr, "tsec lint: %s holds no policy (*.json with \"rules\" or "
			"\"floor\")\n", dir);
		return EXIT_ERROR;
	}
	return rc;
}

int cmd_lint(struct opts *o)
{
	int rc = EXIT_ALLOW, stdin_seen = 0;

	if (o->nargs < 1)
		die_usage("lint", "need policy files or folders (or - for stdin)");
	/* Several files and folders, each linted whole; the worst status. */
	for (int i = 0; i < o->nargs; i++) {
		const char *a = o->args[i];
		struct stat sb;
		int r;

		if (!strcmp(a, "-")) {
			if (stdin_seen++)
				die_usage("lint", "stdin (-) once");
			r = lint_stdin(o);
		} else if (!stat(a, &sb) && S_ISDIR(sb.st_mode)) {
			r = lint_folder(o, a);
		} else {
			r = lint_file(o, a, a);
		}
		if (r > rc)
			rc = r;
	}
	return rc;
}

/* Creates a new secret file (never over an existing one), 0600. */
static int write_secret(const char *path, const char *text)
{
	FILE *f;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fprintf(f, "%s\n", text);
	return fclose(f);
}

static int write_public(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fprintf(f, "%s\n", text);
	return fclose(f);
}

/*
 * keygen never overwrites a key: an existing file is an error, unless
 * --force, which first keeps the old file as FILE.old-<unix time>.
 */
static int make_room(const char *path, int force)
{
	char old[4200];

	if (access(path, F_OK) != 0)
		return 0;
	if (!force) {
		fprintf(stderr, "tsec keygen: %s exists; keygen never overwrites a key "
			"(--force keeps the old one as %s.old-TIME)\n", path, path);
		return -1;
	}
	snprintf(old, sizeof(old), "%s.old-%lld", path, (long long)time(NULL));
	if (rename(path, old)) {
		fprintf(stderr, "tsec keygen: cannot keep %s as %s: %s\n", path, old,
			strerror(errno));
		return -1;
	}
	fprintf(stderr, "tsec keygen: kept the old %s as %s\n", path, old);
	return 0;
}

int cmd_keygen(int argc, char **argv)
{
	char path[4096], pub[41], sec[41], a[4200], b[4200];
	int force = 0;

	if (argc == 3 && !strcmp(argv[2], "--force")) {
		force = 1;
		argc = 2;
	} else if (argc == 3 && !strcmp(argv[0], "--force")) {
		force = 1;
		argc = 2;
		argv++;
	}
	if (argc != 2 || (strcmp(argv[0], "--curve") && strcmp(argv[0], "--sign")))
		die_usage("keygen", "need --curve PREFIX or --sign PREFIX [--force]");
	snprintf(a, sizeof(a), "%s%s.key", argv[1], strcmp(argv[0], "--sign") ? "" : ".sign");
	snprintf(b, sizeof(b), "%s%s.pub", argv[1], strcmp(argv[0], "--sign") ? "" : ".sign");
	/* Both files are checked before either is touched. */
	if (!force && (access(a, F_OK) == 0 || access(b, F_OK) == 0)) {
		make_room(access(a, F_OK) == 0 ? a : b, 0);
		return EXIT_ERROR;
	}
	if (make_room(a, force) || make_room(b, force))
		return EXIT_ERROR;
	if (!strcmp(argv[0], "--curve")) {
		if (zmq_curve_keypair(pub, sec)) {
			fprintf(stderr, "tsec keygen: this libzmq has no CURVE\n");
			return EXIT_ERROR;
		}
		snprintf(path, sizeof(path), "%s.key", argv[1]);
		if (write_secret(path, sec))
			goto fail;
		snprintf(path, sizeof(path), "%s.pub", argv[1]);
		if (write_public(path, pub))
			goto fail;
		printf("CURVE key pair: %s.pub (public, Z85: %s) and %s.key (secret, 0600)\n",
		       argv[1], pub, argv[1]);
	} else {
		unsigned char pk[32], sk[64];
		char hpk[65], hsk[129];
		crypto_sign_keypair(pk, sk);
		sodium_bin2hex(hpk, sizeof(hpk), pk, sizeof(pk));
		sodium_bin2hex(hsk, sizeof(hsk), sk, sizeof(sk));
		snprintf(path, sizeof(path), "%s.sign.key", argv[1]);
		if (write_secret(path, hsk))
			goto fail;
		snprintf(path, sizeof(path), "%s.sign.pub", argv[1]);
		if (write_public(path, hpk))
			goto fail;
		sodium_memzero(sk, sizeof(sk));
		sodium_memzero(hsk, sizeof(hsk));
		printf("Ed25519 signing key pair: %s.sign.pub (%s) and %s.sign.key (secret, 0600)\n",
		       argv[1], hpk, argv[1]);
	}
	return EXIT_ALLOW;
fail:
	fprintf(stderr, "tsec keygen: cannot write %s: %s\n", path, strerror(errno));
	return EXIT_ERROR;
}

/*
 * Compiles the policy at path through the module without loading it:
 * 0 when it is good, else the first error said on stderr (and how many).
 */
static int policy_compiles(const char *cmd, const struct opts *o, const char *path)
{
	struct tsec_error errs[8], err;
	struct tsec_bus *bus = NULL;
	const char *minimal = "{\"version\": 1}";
	char *text = NULL;
	size_t len, n = 0;
	int rc;

	if (tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, &err) || tsec_bus_new(&bus)) {
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
		free(text);
		return -1;
	}
	tsec_bus_set_log(bus, NULL, NULL);
	rc = tsec_bus_load(bus, "lint", o->module ? o->module : cli_default_module(), minimal,
			   strlen(minimal), &err);
	if (rc)
		fprintf(stderr, "tsec %s: %s\n", cmd, err.msg);
	else if ((rc = tsec_bus_lint(bus, "lint", text, len, errs, 8, &n))) {
		char line[TSEC_ERR_WHERE + TSEC_ERR_MSG + 4200];

		tsec__error_say(line, sizeof(line), cli_shown(path), text, len, errs[0].where,
				errs[0].msg);
		fprintf(stderr, "tsec %s: %s (%zu error%s in all; see tsec lint)\n", cmd, line, n,
			n == 1 ? "" : "s");
	}
	free(text);
	tsec_bus_free(&bus);
	return rc ? -1 : 0;
}

/*
 * A broker refuses a signed policy without a "revision" (it could not
 * tell it from an older one): refused here, before anything is signed.
 */
static int has_revision(const char *cmd, const char *path)
{
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
	json_t *r = json_object_get(root, "revision");
	int ok = json_is_integer(r) && json_integer_value(r) >= 0;

	json_decref(root);
	if (!ok)
		fprintf(stderr, "tsec %s: %s has no \"revision\" (a non-negative integer raised "
			"with every change): a broker refuses a signed policy without one\n",
			cmd, path);
	return ok ? 0 : -1;
}

/* A policy past its "expires" is refused by every broker: not signed. */
static int expired(const char *cmd, const char *path)
{
	json_t *p = json_load_file(path, 0, NULL);
	int rc = 0;

	if (cli_expired(p)) {
		fprintf(stderr, "tsec %s: %s expired at %s (its \"expires\" has passed): a broker "
			"refuses it; give a later \"expires\" and a new revision\n", cmd, path,
			json_string_value(json_object_get(p, "expires")));
		rc = -1;
	}
	json_decref(p);
	return rc;
}

int cmd_sign(struct opts *o, const char *keyfile)
{
	unsigned char sk[64];
	struct tsec_error err;

	if (!keyfile || o->nargs != 1)
		die_usage("sign", "need --key PREFIX.sign.key and one policy file");
	/* A signature vouches for a policy: never for one that cannot load. */
	if (policy_compiles("sign", o, o->args[0]) || has_revision("sign", o->args[0]) ||
	    expired("sign", o->args[0]))
		return EXIT_ERROR;
	if (tsec__key_file_read(keyfile, sk, sizeof(sk), &err) ||
	    tsec__policy_sign(o->args[0], sk, &err)) {
		sodium_memzero(sk, sizeof(sk));
		fprintf(stderr, "tsec sign: %s\n", err.msg);
		return EXIT_ERROR;
	}
	sodium_memzero(sk, sizeof(sk));
	printf("signed %s: %s.sig\n", o->args[0], o->args[0]);
	return EXIT_ALLOW;
}
