/*
 * tsec-broker: serves the policy module, the gated store and locks over
 * ZeroMQ.  main reads as the daemon's life: parse the command line,
 * start (configuration, policy, store, log), serve, stop.  daemon.h maps
 * the other files.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include <libpsl.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/obtain.h"
#include "common/trust.h"
#include "common/clock.h"
#include "common/error.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tsec-broker --config FILE\n"
		"\n"
		"Serves the tinysecurity policy module, gated storage and locks over ZeroMQ.\n"
		"SIGHUP reloads the policy and reopens the decision log; SIGTERM stops\n"
		"after answering every call in flight and releasing the locks it holds.\n"
		"\n"
		"  --config FILE   JSON configuration (see examples/broker.json)\n"
		"  --check         load the configuration and the policy, say what was\n"
		"                  checked, then exit (2 on any problem)\n"
		"  --settings      every configuration setting, its kind and range\n"
		"  --methods       every method a caller may call, and how it runs\n"
		"  --version       the version and build type\n"
		"  -h, --help      this text\n");
}

/* The method table (common/methods.h), a line each: name, then flags. */
static void methods(FILE *f)
{
	static const struct { unsigned bit; const char *word; } names[] = {
		{ TSEC_M_READ, "read-only" }, { TSEC_M_RESEND, "resendable" },
		{ TSEC_M_ADMIN, "admin" }, { TSEC_M_INLINE, "inline" },
		{ TSEC_M_STORAGE, "worker" }, { TSEC_M_FRAMES, "frames" },
	};

	for (size_t i = 0; i < tsec__nmethods; i++) {
		fprintf(f, "%-21s", tsec__methods[i].name);
		for (size_t b = 0; b < sizeof(names) / sizeof(names[0]); b++)
			if (tsec__methods[i].flags & names[b].bit)
				fprintf(f, " %s", names[b].word);
		fputc('\n', f);
	}
}

struct args {
	const char *config;
	int check_only;
};

/* 0 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct args *a)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc) {
			a->config = argv[++i];
		} else if (!strcmp(argv[i], "--check")) {
			a->check_only = 1;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return -1;
		} else if (!strcmp(argv[i], "--settings")) {
			tsec__config_settings(stdout);
			return -1;
		} else if (!strcmp(argv[i], "--methods")) {
			methods(stdout);
			return -1;
		} else if (!strcmp(argv[i], "--version")) {
			printf("tsec-broker %s (%s build)\n", TSEC_VERSION,
			       tsec_build_name(TSEC_BUILD_THIS));
			return -1;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!a->config) {
		usage(stderr);
		return 2;
	}
	return 0;
}

/* The stores: storage, the remote certificate store when configured, and
 * the check that no secret sits where a caller could read it back.  0 or
 * the error. */
static int start_stores(struct tsec__daemon *d, const char *config, struct tsec_error *err)
{
	struct tsec_store_opts so;
	struct tsec_store_info in;
	struct tsec_error e;

	tsec__store_opts_of(&d->cfg, &so);
	if (tsec_store_open_opts(&d->store, &so, d->bus, "policy", &e))
		return tsec__seterr(err, e.code, e.where, "storage (%s): %s", so.backend, e.msg);
	if (d->cfg.remote.on) {
		struct tsec_remote_opts ro;

		tsec__remote_opts_of(&d->cfg, &ro);
		if (tsec_remote_open(&d->remote, d->store, &ro, &e))
			return tsec__seterr(err, e.code, e.where, "remote (%s): %s", ro.blobs, e.msg);
		tsec__say("remote certificate store: blobs in %s", ro.blobs);
	}
	/*
	 * Secrets read before the stores were open, now that their roots
	 * are known: none may sit where a caller could read it back
	 * (common/trust.c; the key and password files are checked so when
	 * read).
	 */
	if ((d->cfg.have_secret &&
	     tsec__trusted_outside(config, TSEC__TRUST_FILE, "the configuration (it holds "
				   "server_secret_key)", err)) ||
	    (d->cfg.st.tls_key &&
	     tsec__trusted_outside(d->cfg.st.tls_key, TSEC__TRUST_SECRET, "storage's tls_key",
				   err)))
		return err->code;
	tsec_store_info(d->store, &in);
	if (in.note[0])
		tsec__say("WARNING: storage (%s): %s", in.backend, in.note);
	return 0;
}

/* The policy: its file (or, on shared storage, the fleet's when newer),
 * admitted (signature, revision), loaded and committed.  0 or the error. */
static int start_policy(struct tsec__daemon *d, struct tsec_error *out)
{
	struct tsec__policy_id id;
	struct tsec_error err;
	char *text = NULL;
	size_t len;
	bool bad;

	if (tsec__fleet_shared(d) && d->cfg.have_pk && !d->cfg.fleet_id)
		tsec__say("note: no \"fleet_id\": a policy bundle signed with this key for "
			  "another fleet would be accepted here; set it, and \"fleet\" in the "
			  "policy");
	bad = tsec__policy_text(d, &text, &len, &err) ||
	      /* On shared storage, the fleet's policy when it is newer. */
	      (tsec__fleet_shared(d) && tsec__fleet_prefer(d, &text, &len)) ||
	      tsec__policy_admit(d, text, len, &id, &err);
	if (!bad && tsec_bus_load(d->bus, "policy", d->cfg.module, text, len, &err)) {
		tsec__policy_locate(d, text, len, &err);
		bad = true;
	}
	if (bad || tsec__policy_commit(d, &id, text, len, &err)) {
		free(text);
		return tsec__seterr(out, err.code, err.where, "cannot load: %s%s%s", err.where,
				    err.where[0] ? ": " : "", err.msg);
	}
	free(text);
	if (!d->cfg.have_pk)
		tsec__say("WARNING: the policy %s is NOT SIGNED (\"allow_unsigned_policy\"): "
			  "whoever can write that file decides what is allowed", d->cfg.policy);
	return 0;
}

/* Reads the configuration and brings up the bus, stores, policy and log:
 * 0 or the error (said by the caller). */
static int start(struct tsec__daemon *d, const char *config, struct tsec_error *err)
{
	struct tsec_error e;

	if (sodium_init() < 0)
		return tsec__seterr(err, TSEC_EIO, "", "libsodium failed to initialise");
	if (tsec__config_load(config, &d->cfg, err))
		return err->code;
	d->config_path = config;
	{
		unsigned char rnd[8];
		randombytes_buf(rnd, sizeof(rnd));
		sodium_bin2hex(d->broker_id, sizeof(d->broker_id), rnd, sizeof(rnd));
	}
	pthread_mutex_init(&d->reload_lock, NULL);
	pthread_mutex_init(&d->policy_lock, NULL);
	/* cert.obtain counts per registrable domain: the system's list
	 * (Debian's publicsuffix), else the one libpsl was built with. */
	if (!(d->psl = psl_latest(NULL)))
		tsec__say("WARNING: no public suffix list: cert.obtain counts a name under its "
			  "last two labels");
	d->started_ms = tsec__wall_ms();
	d->st.by_method = calloc(tsec__nmethods, sizeof(*d->st.by_method));
	d->st.hist = calloc(tsec__nmethods, sizeof(*d->st.hist));
	if (tsec__held_init(&d->held, d->cfg.ncallers) || !d->st.by_method || !d->st.hist ||
	    tsec_bus_new(&d->bus))
		return tsec__seterr(err, TSEC_ENOMEM, "", "out of memory at start");
	if (start_stores(d, config, err) || start_policy(d, err))
		return err->code;
	tsec_store_set_observer(d->store, tsec__observe, d);
	if (d->cfg.decision_log &&
	    tsec__declog_open(&d->log, d->cfg.decision_log, d->cfg.log_lines,
				   d->cfg.log_gid, &e))
		return tsec__seterr(err, e.code, e.where, "decision log: %s", e.msg);
	return 0;
}

static void stop(struct tsec__daemon *d)
{
	tsec__ask_stop(d);
	tsec__metrics_stop(d);
	tsec__fleet_stop(d);
	tsec__probe_stop(d);
	/* A lock belongs to its caller, not to this broker (issue 48: the
	 * file store's were released at a stop, and a restart handed a held
	 * lock to another caller): each is left to its holder, who renews
	 * and releases it through this broker started again or another, or
	 * to its lease. */
	tsec__say("%zu lock(s) handed out here are left to their holders and leases",
		  tsec__held_count(&d->held));
	tsec__held_free(&d->held);
	tsec__declog_close(&d->log);
	while (d->policy_texts) {
		struct tsec__policy_text *t = d->policy_texts;

		d->policy_texts = t->older;
		free(t);
	}
	tsec_remote_close(&d->remote);
	tsec_store_close(&d->store);
	tsec_bus_free(&d->bus);
	tsec__obtain_limits_set(d, NULL);
	json_decref(d->policy_json);
	d->policy_json = NULL;
	if (d->psl)
		psl_free(d->psl);
	d->psl = NULL;
	free((void *)d->st.by_method);
	free(d->st.hist);
	tsec__config_free(&d->cfg);
}

int main(int argc, char **argv)
{
	static struct tsec__daemon d;  /* large (the caller table): not on the stack */
	struct args a = { 0 };
	struct tsec_error err = { 0 };
	int rc = parse_args(argc, argv, &a);

	if (rc)
		return rc < 0 ? 0 : rc;
	/* Each part that refuses says why in err; said here, once. */
	if (start(&d, a.config, &err)) {
		tsec__say("%s", err.msg);
		stop(&d);
		return 2;
	}
	if (a.check_only) {
		rc = tsec__check_report(&d, a.config);
	} else if (tsec__fleet_start(&d, &err) || tsec__probe_start(&d, &err) ||
		   tsec__metrics_start(&d, &err) || tsec__ask_start(&d, &err)) {
		tsec__say("%s", err.msg);
		rc = 2;
	} else {
		rc = tsec__serve(&d) ? 2 : 0;
	}
	stop(&d);
	tsec__say("stopped");
	return rc;
}
