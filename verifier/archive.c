/*
 * verify_module --archive: fetch a release archive (libcurl), check its
 * SHA-256 against the published digest (OpenSSL), unpack it into a
 * private folder (libarchive) refusing anything that would land outside,
 * then time the module it holds like any other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "tinysecurity/bus.h"
#include "common/clock.h"
#include "common/http.h"
#include "verifier/verify.h"

#define ARCHIVE_MAX (256u << 20)
#define MODULE_FILE "libtinysecurity_module.so"

static int fetch(const char *url, struct tsec__http_body *b, FILE *errf)
{
	char ebuf[CURL_ERROR_SIZE] = "";
	CURL *c = curl_easy_init();
	CURLcode rc;

	if (!c)
		return -1;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, tsec__http_on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
	rc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	if (b->over) {
		fprintf(errf, "verify_module: %s: larger than %u MiB\n", url, ARCHIVE_MAX >> 20);
		return -1;
	}
	if (rc != CURLE_OK) {
		fprintf(errf, "verify_module: cannot fetch %s: %s\n", url,
			*ebuf ? ebuf : curl_easy_strerror(rc));
		return -1;
	}
	return 0;
}

static int check_digest(const struct tsec__http_body *b, const char *want, FILE *errf)
{
	unsigned char md[32];
	unsigned int len = 0;
	char hex[65];

	if (strlen(want) != 64) {
		fprintf(errf, "verify_module: the digest must be 64 hex digits of SHA-256\n");
		return -1;
	}
	if (!EVP_Digest((const unsigned char *)b->p, b->n, md, &len, EVP_sha256(), NULL) || len != 32)
		return -1;
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (strcasecmp(hex, want) != 0) {
		fprintf(errf, "verify_module: SHA-256 mismatch: the archive is %s, the published digest %s;"
			" refusing it\n", hex, want);
		return -1;
	}
	return 0;
}

/* Whether a path stays inside the folder: relative, no ".." segment. */
static int path_inside(const char *p)
{
	const char *s = p;

	if (!p || !*p || *p == '/')
		return 0;
	while (*s) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return 0;
		s += n;
		while (*s == '/')
			s++;
	}
	return 1;
}

/*
 * A symbolic link's target, resolved against the link's folder, must
 * stay inside too: count the depth as the target's segments go.
 */
static int link_inside(const char *path, const char *target)
{
	int depth = 0;
	const char *s;

	if (!target || *target == '/')
		return 0;
	for (s = path; *s; s++)
		if (*s == '/')
			depth++;
	for (s = target; *s;) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			if (--depth < 0)
				return 0;
		} else if (n > 0 && !(n == 1 && s[0] == '.')) {
			depth++;
		}
		s += n;
		while (*s == '/')
			s++;
	}
	return 1;
}

/*
 * The symbolic links met so far, by path: a hard link to one of them
 * makes another symbolic link with the same target at a new place, so it
 * must be checked as a link at that place ("chained" links).
 */
struct links {
	char (*path)[1024];
	char (*target)[1024];
	size_t n, cap;
};

static const char *symlink_target(const struct links *l, const char *path)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->path[i], path))
			return l->target[i];
	return NULL;
}

static int remember_link(struct links *l, const char *path, const char *target)
{
	if (strlen(path) >= sizeof(l->path[0]) || strlen(target) >= sizeof(l->target[0]))
		return -1;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 16;
		void *p = realloc(l->path, nc * sizeof(*l->path));
		void *t = p ? realloc(l->target, nc * sizeof(*l->target)) : NULL;
		if (p)
			l->path = p;
		if (!t)
			return -1;
		l->target = t;
		l->cap = nc;
	}
	snprintf(l->path[l->n], sizeof(l->path[0]), "%s", path);
	snprintf(l->target[l->n], sizeof(l->target[0]), "%s", target);
	l->n++;
	return 0;
}

/*
 * An entry p (a symbolic link to sym, a hard link to hard, or neither)
 * that could reach outside the folder: refused, said.  A symbolic link
 * is remembered, so a hard link to it is judged by where it leads.
 */
static int entry_refused(struct links *links, const char *p, const char *sym,
			 const char *hard, FILE *errf)
{
	if (!path_inside(p)) {
		fprintf(errf, "verify_module: refusing archive entry '%s': absolute or with '..'\n", p);
		return -1;
	}
	if (hard && symlink_target(links, hard))
		sym = symlink_target(links, hard); /* a hard link to a symbolic link */
	if ((sym && !link_inside(p, sym)) || (hard && !path_inside(hard))) {
		fprintf(errf, "verify_module: refusing archive entry '%s': a link leaving the folder\n", p);
		return -1;
	}
	if (sym && remember_link(links, p, sym)) {
		fprintf(errf, "verify_module: refusing archive entry '%s': link too long\n", p);
		return -1;
	}
	return 0;
}

/*
 * The current entry's data from a to w, counted: past max_one bytes in
 * the entry or max_all in the archive (*total so far) it stops, refused.
 */
static int copy_data(struct archive *a, struct archive *w, const char *p, uint64_t *total,
		     uint64_t max_one, uint64_t max_all, FILE *errf)
{
	const void *blk;
	size_t sz;
	la_int64_t off;
	int r;

	while ((r = archive_read_data_block(a, &blk, &sz, &off)) == ARCHIVE_OK) {
		*total += sz;
		if (off < 0 || (uint64_t)off + sz > max_one || *total > max_all) {
			fprintf(errf, "verify_module: refusing the archive: entry '%s' unpacks past "
				"%s (%llu MiB)\n", p,
				*total > max_all ? "the archive's bound" : "an entry's bound",
				(unsigned long long)((*total > max_all ? max_all : max_one) >> 20));
			return -1;
		}
		if (archive_write_data_block(w, blk, sz, off) != ARCHIVE_OK)
			break;
	}
	if (r != ARCHIVE_EOF) {
		fprintf(errf, "verify_module: archive entry '%s' is cut short: %s\n", p,
			archive_error_string(a));
		return -1;
	}
	return 0;
}

/*
 * Unpacks under dir, counting as it goes: at most max_entries entries,
 * max_entry bytes in one and max_unpacked in all, whatever the headers
 * claim (a decompression bomb is stopped at the bound, not after).
 */
static int unpack(const struct tsec_verify_opts *o, const struct tsec__http_body *b, const char *dir,
		  char *module, size_t modlen, char *policy, size_t pollen, FILE *errf)
{
	struct archive *a = archive_read_new();
	struct archive *w = archive_write_disk_new();
	struct archive_entry *e;
	struct links links = { 0 };
	uint64_t total = 0, max_all = o->max_unpacked ? o->max_unpacked : TSEC_VERIFY_MAX_UNPACKED;
	uint64_t max_one = o->max_entry ? o->max_entry : TSEC_VERIFY_MAX_ENTRY;
	unsigned entries = 0, max_n = o->max_entries ? o->max_entries : TSEC_VERIFY_MAX_ENTRIES;
	int rc = -1, r;

	archive_read_support_filter_all(a);
	archive_read_support_format_all(a);
	/*
	 * Entries are checked here first (relative, no "..", links that stay
	 * inside) and then written under the private folder by absolute
	 * path, so libarchive's own guards against ".." and symbolic links
	 * stay on as a second line; its guard against absolute paths cannot.
	 */
	archive_write_disk_set_options(w, ARCHIVE_EXTRACT_SECURE_NODOTDOT |
				       ARCHIVE_EXTRACT_SECURE_SYMLINKS |
				       ARCHIVE_EXTRACT_NO_OVERWRITE);
	if (archive_read_open_memory(a, b->p, b->n) != ARCHIVE_OK) {
		fprintf(errf, "verify_module: not an archive: %s\n", archive_error_string(a));
		goto out;
	}
	*module = '\0';
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *sym = archive_entry_symlink(e), *hard = archive_entry_hardlink(e);
		char dest[8192], p[4096];
		size_t pl;

		if (!archive_entry_pathname(e)) {
			fprintf(errf, "verify_module: refusing an archive entry without a name\n");
			goto out;
		}
		if (++entries > max_n) {
			fprintf(errf, "verify_module: refusing the archive: more than %u entries\n", max_n);
			goto out;
		}
		snprintf(p, sizeof(p), "%s", archive_entry_pathname(e));
		if (entry_refused(&links, p, sym, hard, errf))
			goto out;
		snprintf(dest, sizeof(dest), "%s/%s", dir, p);
		archive_entry_set_pathname(e, dest);
		if (hard) {
			char hd[8192];
			snprintf(hd, sizeof(hd), "%s/%s", dir, hard);
			archive_entry_set_hardlink(e, hd);
		}
		if (archive_write_header(w, e) != ARCHIVE_OK) {
			fprintf(errf, "verify_module: cannot unpack '%s': %s\n", p, archive_error_string(w));
			goto out;
		}
		if (archive_entry_size(e) > 0 &&
		    copy_data(a, w, p, &total, max_one, max_all, errf))
			goto out;
		archive_write_finish_entry(w);
		pl = strlen(p);
		if (archive_entry_filetype(e) == AE_IFREG && pl >= strlen(MODULE_FILE) &&
		    !strcmp(p + pl - strlen(MODULE_FILE), MODULE_FILE) &&
		    (pl == strlen(MODULE_FILE) || p[pl - strlen(MODULE_FILE) - 1] == '/'))
			snprintf(module, modlen, "%s", dest);
		if (archive_entry_filetype(e) == AE_IFREG && pl >= 11 &&
		    !strcmp(p + pl - 11, "policy.json") && !*policy)
			snprintf(policy, pollen, "%s", dest);
	}
	if (r != ARCHIVE_EOF) {
		fprintf(errf, "verify_module: the archive is damaged or cut short: %s\n",
			archive_error_string(a));
		goto out;
	}
	if (!*module) {
		fprintf(errf, "verify_module: the archive holds no %s\n", MODULE_FILE);
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	archive_write_free(w);
	free(links.path);
	free(links.target);
	return rc;
}

/*
 * Loads the unpacked module on policy and makes its first call: at[0]
 * when the load ended, at[1] when the call did.  A debug module cannot
 * pass the budget: refused before any call is timed.
 */
static int load_and_call(const struct tsec_verify_opts *o, const char *name, const char *module,
			 const char *policy, uint64_t at[2], FILE *errf)
{
	struct tsec_request r = {
		.principal = tsec_str_c("svc:web-1"),
		.action = tsec_str_c("storage.load"),
		.resource = tsec_str_c("certificates/acme-v02/example.com/example.com.crt"),
	};
	struct tsec_report *rep = NULL;
	struct tsec_bus *bus = NULL;
	struct tsec_module_info info;
	struct tsec_error err;
	int rc = -1;

	if (tsec_bus_new(&bus) || tsec_bus_load_file(bus, "policy", module, policy, &err)) {
		fprintf(errf, "verify_module: cannot load %s: %s\n", module, bus ? err.msg : "no memory");
		goto out;
	}
	tsec_bus_info(bus, "policy", &info);
	if (o->budget && info.build != TSEC_BUILD_RELEASE) {
		fprintf(errf, "verify_module: refusing to time the %s build of the module in %s "
			"with TINYSECURITY_PERF_BUDGET set\n", tsec_build_name(info.build), name);
		goto out;
	}
	at[0] = tsec__mono_ns();
	if (!(rep = malloc(sizeof(*rep))) || tsec_bus_evaluate(bus, "policy", &r, rep, &err)) {
		fprintf(errf, "verify_module: the first call failed\n");
		goto out;
	}
	at[1] = tsec__mono_ns();
	rc = 0;
out:
	tsec_bus_free(&bus);
	free(rep);
	return rc;
}

static void rm_rf(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "verify_module: could not remove %s\n", dir);
}

int tsec_verify_archive(const struct tsec_verify_opts *o, const char *url,
			const char *name, const char *digest, FILE *out,
			FILE *errf)
{
	char full[4096], dir[] = "/tmp/tsec-archive-XXXXXX";
	char module[8192] = "", policy[8192] = "";
	struct tsec_verify_opts run = *o;
	struct tsec__http_body b = { .max = ARCHIVE_MAX };
	uint64_t t[6];
	char *archive_json = NULL;
	int rc = TSEC_VERIFY_EXIT_REFUSED, made = 0;

	if (!url || !name || !digest || strchr(name, '/')) {
		fprintf(errf, "verify_module: --archive needs URL NAME DIGEST (NAME without '/')\n");
		return rc;
	}
	/* A debug verifier cannot pass the budget: say so before fetching
	 * anything (tsec_verify_run would, after the work). */
	if (o->budget && o->verifier_build != TSEC_BUILD_RELEASE) {
		fprintf(errf, "verify_module: refusing to time a %s build of verify_module "
			"with TINYSECURITY_PERF_BUDGET set; build with MODE=release\n",
			tsec_build_name(o->verifier_build));
		return rc;
	}
	if (!*url) {
		fprintf(errf, "verify_module: --archive needs a URL\n");
		return rc;
	}
	snprintf(full, sizeof(full), "%s%s%s", url,
		 url[strlen(url) - 1] == '/' ? "" : "/", name);
	{
		struct tsec_error err;

		if (tsec__http_global(&err)) {
			fprintf(errf, "verify_module: %s\n", err.msg);
			return rc;
		}
	}
	t[0] = tsec__mono_ns();
	if (fetch(full, &b, errf))
		goto out;
	t[1] = tsec__mono_ns();
	if (check_digest(&b, digest, errf))
		goto out;
	t[2] = tsec__mono_ns();
	if (!mkdtemp(dir)) {
		fprintf(errf, "verify_module: mkdtemp: %s\n", strerror(errno));
		goto out;
	}
	made = 1;
	if (unpack(o, &b, dir, module, sizeof(module), policy, sizeof(policy), errf))
		goto out;
	t[3] = tsec__mono_ns();
	if (!o->policy_given && *policy)
		run.policy = policy;
	if (load_and_call(o, name, module, run.policy, &t[4], errf))
		goto out;
	if (!o->json) {
		fprintf(out, "archive  %s (%zu bytes, SHA-256 verified)\n", full, b.n);
		fprintf(out, "steps    fetch %.2f ms, verify %.2f ms, unpack %.2f ms, load %.2f ms, first call %.1f us\n\n",
			(t[1] - t[0]) / 1e6, (t[2] - t[1]) / 1e6, (t[3] - t[2]) / 1e6,
			(t[4] - t[3]) / 1e6, (t[5] - t[4]) / 1e3);
	} else {
		/* One object in all: the run's, with this as its "archive"
		 * member; jansson escapes the URL. */
		json_t *a = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "url", full,
				      "bytes", (json_int_t)b.n,
				      "fetch_ns", (json_int_t)(t[1] - t[0]),
				      "verify_ns", (json_int_t)(t[2] - t[1]),
				      "unpack_ns", (json_int_t)(t[3] - t[2]),
				      "load_ns", (json_int_t)(t[4] - t[3]),
				      "first_call_ns", (json_int_t)(t[5] - t[4]));

		if (!a || !(archive_json = json_dumps(a, JSON_COMPACT))) {
			json_decref(a);
			fprintf(errf, "verify_module: out of memory\n");
			goto out;
		}
		json_decref(a);
		run.archive_json = archive_json;
	}
	run.module = module;
	rc = tsec_verify_run(&run, out, errf);
out:
	free(b.p);
	free(archive_json);
	if (made)
		rm_rf(dir);
	return rc;
}
