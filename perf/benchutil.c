#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tinysecurity/client.h"
#include "tinysecurity/module.h"
#include "common/clock.h"
#include "perf/benchutil.h"

#define S(lit) { lit, sizeof(lit) - 1 }

static const struct tsec_str web_role[] = { S("role:web") };

const struct tsec_request bench_reqs[2] = {
	{ .principal = S("svc:web-1"), .roles = web_role, .nroles = 1,
	  .action = S("storage.load"),
	  .resource = S("certificates/acme-v02/example.com/example.com.crt") },
	{ .principal = S("svc:acme-issuer"), .action = S("storage.list"),
	  .resource = S("certificates/acme-v02/example.com/example.com.key") },
};

/*
 * Every benchmark's first line says where and how it ran: host, cores,
 * date, compiler and build mode, so a CSV kept under perf/results/
 * carries its own provenance (a "#" line; the CSV readers skip it).
 * Printed before main() runs, from this file every benchmark links, so
 * none can forget it.
 */
__attribute__((constructor)) static void bench_provenance(void)
{
	struct utsname u;
	char when[32] = "?";
	time_t now = time(NULL);
	struct tm tm;

	if (uname(&u))
		memset(&u, 0, sizeof(u));
	if (gmtime_r(&now, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("# host %s (%s %s %s, %ld cores); %s; cc %s; %s build\n", u.nodename,
	       u.sysname, u.release, u.machine, sysconf(_SC_NPROCESSORS_ONLN), when,
	       __VERSION__, tsec_build_name(TSEC_BUILD_THIS));
	fflush(stdout);
}

uint64_t bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t rank(const uint64_t *v, size_t n, double q)
{
	size_t r = (size_t)(q * (double)n + 0.999999);
	if (n == 0)
		return 0;
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	return v[r - 1];
}

uint64_t bench_quantile(uint64_t *v, size_t n, double q)
{
	qsort(v, n, sizeof(*v), cmp);
	return rank(v, n, q);
}

uint64_t bench_timer_overhead(void)
{
	enum { N = 10001 };
	static uint64_t v[N];
	for (int i = 0; i < N; i++) {
		uint64_t t0 = bench_now();
		v[i] = bench_now() - t0;
	}
	return bench_quantile(v, N, 0.5);
}

void bench_print_latency(const char *name, uint64_t first_ns, uint64_t *v,
			 size_t n)
{
	qsort(v, n, sizeof(*v), cmp);
	printf("%s,%zu,%llu,%llu,%llu,%llu,", name, n,
	       (unsigned long long)first_ns,
	       (unsigned long long)rank(v, n, 0.5),
	       (unsigned long long)rank(v, n, 0.9),
	       (unsigned long long)rank(v, n, 0.99));
	if (n >= 1000)
		printf("%llu", (unsigned long long)rank(v, n, 0.999));
	printf(",%llu\n", (unsigned long long)(n ? v[n - 1] : 0));
}

long bench_rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0) {
			kib = strtol(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kib;
}

/* name beside this program, into buf: build/release/NAME when the
 * program's own path cannot be read. */
static const char *beside(char *buf, size_t cap, const char *name)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	char *slash;

	buf[n > 0 ? n : 0] = '\0';
	if (n <= 0 || !(slash = strrchr(buf, '/')) ||
	    strlen(name) >= cap - (size_t)(slash + 1 - buf)) {
		snprintf(buf, cap, "build/release/%s", name);
		return buf;
	}
	snprintf(slash + 1, cap - (size_t)(slash + 1 - buf), "%s", name);
	return buf;
}

/* name in $TSEC_BENCH_DIR (the side perf/abba.sh runs), else beside
 * this program. */
static const char *of_side(char *buf, size_t cap, const char *name)
{
	const char *dir = getenv("TSEC_BENCH_DIR");

	if (!dir || !*dir)
		return beside(buf, cap, name);
	snprintf(buf, cap, "%s/%s", dir, name);
	return buf;
}

const char *bench_module(void)
{
	static char path[4096];
	const char *env = getenv("TSEC_BENCH_MODULE");

	if (env && *env)
		return env;
	return path[0] ? path : of_side(path, sizeof(path), "libtinysecurity_module.so");
}

const char *bench_broker(void)
{
	static char path[4096];

	return path[0] ? path : of_side(path, sizeof(path), "tsec-broker");
}

int bench_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &l)) {
		fprintf(stderr, "bench: no free loopback port\n");
		exit(2);
	}
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* How a child ended, in words, into buf. */
static const char *ended(int status, char *buf, size_t cap)
{
	if (WIFEXITED(status))
		snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, cap, "was killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, cap, "ended (status 0x%x)", status);
	return buf;
}

/* The last lines of a broker's log, to stderr (its own text, as written). */
static void show_tail(const char *log)
{
	char buf[2048];
	size_t n;
	FILE *f;

	if (!log || !(f = fopen(log, "r")))
		return;
	if (fseek(f, -(long)(sizeof(buf) - 1), SEEK_END) < 0)
		rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	fprintf(stderr, "bench: the end of %s:\n%s\n", log, buf);
}

/*
 * The brokers started and not yet stopped, with their logs: a benchmark
 * that exits on an error (die, exit(2)) stops them at exit, and shows the
 * end of each one's log (why a call went unanswered), so that no broker
 * outlives its benchmark.
 */
#define BROKERS_MAX 8
static struct {
	pid_t pid;
	char log[512];
} brokers[BROKERS_MAX];
static pid_t brokers_owner;          /* (a forked child's exit stops none) */

static void brokers_at_exit(void)
{
	if (getpid() != brokers_owner)
		return;
	for (int i = 0; i < BROKERS_MAX; i++)
		if (brokers[i].pid > 0) {
			pid_t pid = brokers[i].pid;

			brokers[i].pid = 0;
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			fprintf(stderr, "bench: tsec-broker (pid %d) still running at exit: stopped\n",
				(int)pid);
			if (brokers[i].log[0])
				show_tail(brokers[i].log);
		}
}

static void brokers_note(pid_t pid, const char *log)
{
	static bool registered;

	if (!registered) {
		brokers_owner = getpid();
		registered = atexit(brokers_at_exit) == 0;
	}
	for (int i = 0; i < BROKERS_MAX; i++)
		if (brokers[i].pid <= 0) {
			brokers[i].pid = pid;
			snprintf(brokers[i].log, sizeof(brokers[i].log), "%s", log ? log : "");
			return;
		}
}

pid_t bench_broker_start(const char *config, const char *endpoint, const char *log)
{
	uint64_t deadline = bench_now() + BENCH_BROKER_WAIT_S * 1000000000ull;
	char why[64];
	int status;
	pid_t pid = fork();

	if (pid < 0) {
		perror("bench: fork");
		exit(2);
	}
	if (pid == 0) {
		if (!freopen(log ? log : "/dev/null", "w", stderr))
			_exit(126);
		/* BENCH_BROKER_CALLGRIND=FILE: the broker under callgrind,
		 * its counts into FILE (perf/turn_instructions.sh). */
		if (getenv("BENCH_BROKER_CALLGRIND")) {
			char out[4200];

			snprintf(out, sizeof(out), "--callgrind-out-file=%s",
				 getenv("BENCH_BROKER_CALLGRIND"));
			execlp("valgrind", "valgrind", "--tool=callgrind", out, bench_broker(),
			       "--config", config, (char *)NULL);
			_exit(127);
		}
		execl(bench_broker(), "tsec-broker", "--config", config, (char *)NULL);
		_exit(127);
	}
	brokers_note(pid, log);
	for (;;) {
		/* Short calls: a broker that died after binding its ipc socket
		 * leaves a file nobody answers, and a long call would wait out
		 * its whole timeout on it. */
		struct tsec_client_opts o = { .endpoint = endpoint, .timeout_ms = 200 };
		struct tsec_client *c;
		struct tsec_error err;
		int rc = -1;

		if (tsec_client_open(&c, &o, &err) == 0) {
			rc = tsec_client_call(c, "health", NULL, NULL, &err);
			tsec_client_close(&c);
		}
		if (rc == 0)
			return pid;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "bench: tsec-broker %s before it answered\n",
				ended(status, why, sizeof(why)));
			show_tail(log);
			exit(2);
		}
		if (bench_now() >= deadline) {
			bench_broker_stop(pid);
			fprintf(stderr, "bench: tsec-broker did not answer at %s within %d s\n",
				endpoint, BENCH_BROKER_WAIT_S);
			show_tail(log);
			exit(2);
		}
		tsec__nap_ms(20);
	}
}

int bench_broker_stop(pid_t pid)
{
	uint64_t deadline = bench_now() + BENCH_BROKER_WAIT_S * 1000000000ull;
	char why[64];
	int status;

	if (pid <= 0)
		return 0;
	for (int i = 0; i < BROKERS_MAX; i++)
		if (brokers[i].pid == pid)
			brokers[i].pid = 0;
	kill(pid, SIGTERM);
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (bench_now() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "bench: tsec-broker did not stop within %d s of SIGTERM\n",
				BENCH_BROKER_WAIT_S);
			return -1;
		}
		tsec__nap_ms(10);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "bench: tsec-broker %s on SIGTERM\n", ended(status, why, sizeof(why)));
		return -1;
	}
	return 0;
}

/* Every benchmark's rows reach a file or pipe line by line, so what a
 * killed or hung run printed is still there to read. */
__attribute__((constructor)) static void rows_line_buffered(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}
