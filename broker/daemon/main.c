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

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/clock.h"
#include "common/error.h"

void tsec__say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tsec-broker: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

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
		"  --check         load the configuration and the policy, then exit\n"
		"  -h, --help      this text\n");
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

/* Reads the configuration and brings up the bus, policy, store and log. */
static int start(struct tsec__daemon *d, const char *config)
{
	struct tsec_error err;
	char *text = NULL;
	size_t len;

	if (sodium_init() < 0 || tsec__config_load(config, &d->cfg))
		return -1;
	pthread_mutex_init(&d->reload_lock, NULL);
	tsec__held_init(&d->held);
	d->started_ms = tsec__wall_ms();
	d->st.by_method = calloc(tsec__nmethods, sizeof(*d->st.by_method));
	if (!d->st.by_method || tsec_bus_new(&d->bus))
		return -1;
	if (tsec__policy_text(d, &text, &len, &err) ||
	    tsec_bus_load(d->bus, "policy", d->cfg.module, text, len, &err)) {
		tsec__say("cannot load: %s%s%s", err.where, err.where[0] ? ": " : "", err.msg);
		free(text);
		return -1;
	}
	free(text);
	if (tsec_store_open(&d->store, d->cfg.storage, d->bus, "policy", &err)) {
		tsec__say("storage: %s", err.msg);
		return -1;
	}
	tsec_store_set_observer(d->store, tsec__observe, d);
	if (d->cfg.decision_log &&
	    tsec__declog_open(&d->log, d->cfg.decision_log, d->cfg.log_lines, &err)) {
		tsec__say("decision log: %s", err.msg);
		return -1;
	}
	return 0;
}

static void stop(struct tsec__daemon *d)
{
	tsec__held_release_all(d);
	tsec__declog_close(&d->log);
	tsec_store_close(&d->store);
	tsec_bus_free(&d->bus);
	free((void *)d->st.by_method);
	tsec__config_free(&d->cfg);
}

int main(int argc, char **argv)
{
	static struct tsec__daemon d;  /* large (the caller table): not on the stack */
	struct args a = { 0 };
	int rc = parse_args(argc, argv, &a);

	if (rc)
		return rc < 0 ? 0 : rc;
	if (start(&d, a.config)) {
		stop(&d);
		return 2;
	}
	if (a.check_only) {
		tsec__say("configuration and policy are good");
		rc = 0;
	} else {
		rc = tsec__serve(&d) ? 2 : 0;
	}
	stop(&d);
	tsec__say("stopped");
	return rc;
}
