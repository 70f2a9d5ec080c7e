/*
 * bench_zmq: Check through tsec-broker against a bare ZeroMQ echo of the
 * same bytes, in the same run, over ipc and over tcp.
 *
 *   build/release/bench_zmq [CALLS]      (default 20000 per case)
 *   BENCH_NO_LOG=1 build/release/bench_zmq   (the broker without its decision log)
 *
 * Starts build/release/tsec-broker on a temporary ipc socket and a tcp
 * port (CURVE), and in a process of its own an echo server (a ROUTER that
 * sends every message back) on ipc, on tcp with CURVE and on plain tcp,
 * so that each server's CPU time (its threads, ZeroMQ's I/O thread
 * included) can be read from /proc around the throughput runs.  Every
 * client is the client library sending the same Check message (a batch
 * of two requests) and waiting for the reply.
 *
 * Output (CSV):
 *   latency,case,samples,p50_ns,p90_ns,p99_ns,max_ns
 *   ratio,transport,broker_p50_over_echo_p50
 *   throughput,case,clients,calls,elapsed_ns,calls_per_s
 *   throughput_ratio,ipc,clients,broker_over_echo   (A-B-B-A in the same run)
 *   cpu_per_call,ipc,clients,broker_ns,echo_ns,broker_over_echo   (the
 *     servers' user and system time over the same A-B-B-A runs)
 *   connect,case,samples,p50_ns   (open + handshake + first reply)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "tinysecurity/client.h"
#include "tinysecurity/module.h"
#include "perf/benchutil.h"

static char dir[64], broker_ipc[128], broker_tcp[64], echo_ipc[128];
static char echo_tcp_curve[64], echo_tcp_plain[64];
static char srv_pub[41], srv_sec[41], cli_pub[41], cli_sec[41];
static void *echo_ctx;
static atomic_int echo_stop;
static pid_t broker, echo_pid;

/* A process's user + system CPU time so far, in nanoseconds (/proc). */
static uint64_t cpu_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* After the command's ")": state, then fields 4..13, then utime, stime. */
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (ut + st) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
}

static const char *msg =
	"{\"id\":1,\"method\":\"check\",\"params\":{\"requests\":["
	"{\"action\":\"storage.load\",\"resource\":\"certificates/acme-v02/example.com/example.com.crt\"},"
	"{\"action\":\"storage.list\",\"resource\":\"certificates/acme-v02/example.com/example.com.key\"}]}}";

/* One ROUTER per echo endpoint, all served by this thread. */
static void *echo_main(void *arg)
{
	void *s[3];
	const char *eps[3] = { echo_ipc, echo_tcp_curve, echo_tcp_plain };
	int one = 1, zero = 0;
	(void)arg;

	for (int i = 0; i < 3; i++) {
		s[i] = zmq_socket(echo_ctx, ZMQ_ROUTER);
		zmq_setsockopt(s[i], ZMQ_LINGER, &zero, sizeof(zero));
		if (i == 1) {
			zmq_setsockopt(s[i], ZMQ_CURVE_SERVER, &one, sizeof(one));
			zmq_setsockopt(s[i], ZMQ_CURVE_SECRETKEY, srv_sec, 40);
		}
		if (zmq_bind(s[i], eps[i]))
			exit(2);
	}
	while (!atomic_load(&echo_stop)) {
		zmq_pollitem_t it[3] = { { s[0], 0, ZMQ_POLLIN, 0 }, { s[1], 0, ZMQ_POLLIN, 0 },
					 { s[2], 0, ZMQ_POLLIN, 0 } };
		if (zmq_poll(it, 3, 100) <= 0)
			continue;
		for (int i = 0; i < 3; i++) {
			if (!(it[i].revents & ZMQ_POLLIN))
				continue;
			for (;;) {
				zmq_msg_t m;
				int more;
				size_t msz = sizeof(more);
				zmq_msg_init(&m);
				if (zmq_msg_recv(&m, s[i], ZMQ_DONTWAIT) < 0) {
					zmq_msg_close(&m);
					break;
				}
				zmq_getsockopt(s[i], ZMQ_RCVMORE, &more, &msz);
				zmq_msg_send(&m, s[i], more ? ZMQ_SNDMORE : 0);
				while (more) {
					zmq_msg_init(&m);
					zmq_msg_recv(&m, s[i], 0);
					zmq_getsockopt(s[i], ZMQ_RCVMORE, &more, &msz);
					zmq_msg_send(&m, s[i], more ? ZMQ_SNDMORE : 0);
				}
			}
		}
	}
	for (int i = 0; i < 3; i++)
		zmq_close(s[i]);
	return NULL;
}

/*
 * A client: the client library, except for plain tcp (which the library
 * refuses, as the broker does), where a bare DEALER does the same framing.
 */
struct bclient {
	struct tsec_client *c;
	void *ctx, *s;
};

static struct bclient *open_client(const char *ep, int curve)
{
	struct tsec_client_opts o = { .endpoint = ep,
				      .server_public_key = curve ? srv_pub : NULL,
				      .public_key = curve ? cli_pub : NULL,
				      .secret_key = curve ? cli_sec : NULL, .timeout_ms = 10000 };
	struct bclient *b = calloc(1, sizeof(*b));
	struct tsec_error err;
	int zero = 0;

	if (!strncmp(ep, "tcp://", 6) && !curve) {
		b->ctx = zmq_ctx_new();
		b->s = zmq_socket(b->ctx, ZMQ_DEALER);
		zmq_setsockopt(b->s, ZMQ_LINGER, &zero, sizeof(zero));
		if (zmq_connect(b->s, ep))
			exit(2);
		return b;
	}
	if (tsec_client_open(&b->c, &o, &err)) {
		fprintf(stderr, "bench_zmq: %s\n", err.msg);
		exit(2);
	}
	return b;
}

static void close_client(struct bclient *b)
{
	if (b->c)
		tsec_client_close(&b->c);
	if (b->s) {
		zmq_close(b->s);
		zmq_ctx_term(b->ctx);
	}
	free(b);
}

static void one(struct bclient *b, int check_reply)
{
	struct tsec_error err;
	char *reply;

	if (b->s) {
		char buf[4096];
		int n;
		zmq_send(b->s, "", 0, ZMQ_SNDMORE);
		zmq_send(b->s, msg, strlen(msg), 0);
		do
			n = zmq_recv(b->s, buf, sizeof(buf), 0);
		while (n == 0);
		if (n < 0)
			exit(2);
		return;
	}
	if (tsec_client_raw(b->c, msg, strlen(msg), &reply, &err)) {
		fprintf(stderr, "bench_zmq: %s\n", err.msg);
		exit(2);
	}
	if (check_reply && !strstr(reply, "\"floor\""))
		exit(3); /* the broker must really decide */
	free(reply);
}

/*
 * Latency of the broker and of the echo on one transport, measured in
 * alternating blocks (echo, broker, broker, echo, ...) so that drift on
 * this shared machine falls on both alike.  Prints both rows and returns
 * the ratio of the p50s.
 */
static double latency_pair(const char *tname, const char *echo_ep,
			   const char *broker_ep, int curve, size_t calls)
{
	enum { BLOCK = 500 };
	struct bclient *e = open_client(echo_ep, curve), *b = open_client(broker_ep, curve);
	uint64_t *ve = malloc(calls * sizeof(*ve)), *vb = malloc(calls * sizeof(*vb));
	size_t ne = 0, nb = 0;
	uint64_t pe, pb;

	for (int i = 0; i < 2000; i++) {
		one(e, 0);
		one(b, 1);
	}
	for (int round = 0; ne < calls || nb < calls; round++) {
		int order[4] = { 0, 1, 1, 0 };
		for (int k = 0; k < 4; k++) {
			struct bclient *c = order[k] ? b : e;
			uint64_t *v = order[k] ? vb : ve;
			size_t *n = order[k] ? &nb : &ne;
			for (int j = 0; j < BLOCK && *n < calls; j++) {
				uint64_t t0 = bench_now();
				one(c, 0);
				v[(*n)++] = bench_now() - t0;
			}
		}
	}
	close_client(e);
	close_client(b);
	pe = bench_quantile(ve, calls, 0.5);
	pb = bench_quantile(vb, calls, 0.5);
	printf("latency,echo_%s,%zu,%llu,%llu,%llu,%llu\n", tname, calls, (unsigned long long)pe,
	       (unsigned long long)bench_quantile(ve, calls, 0.9),
	       (unsigned long long)bench_quantile(ve, calls, 0.99), (unsigned long long)ve[calls - 1]);
	printf("latency,broker_%s,%zu,%llu,%llu,%llu,%llu\n", tname, calls, (unsigned long long)pb,
	       (unsigned long long)bench_quantile(vb, calls, 0.9),
	       (unsigned long long)bench_quantile(vb, calls, 0.99), (unsigned long long)vb[calls - 1]);
	free(ve);
	free(vb);
	return (double)pb / (double)pe;
}

static uint64_t latency(const char *name, const char *ep, int curve, size_t calls)
{
	struct bclient *c = open_client(ep, curve);
	uint64_t *v = malloc(calls * sizeof(*v)), p50;

	for (int i = 0; i < 2000; i++)
		one(c, 0);
	for (size_t i = 0; i < calls; i++) {
		uint64_t t0 = bench_now();
		one(c, 0);
		v[i] = bench_now() - t0;
	}
	close_client(c);
	p50 = bench_quantile(v, calls, 0.5);
	printf("latency,%s,%zu,%llu,%llu,%llu,%llu\n", name, calls, (unsigned long long)p50,
	       (unsigned long long)bench_quantile(v, calls, 0.9),
	       (unsigned long long)bench_quantile(v, calls, 0.99),
	       (unsigned long long)v[calls - 1]);
	free(v);
	return p50;
}

struct tp {
	const char *ep;
	int curve;
	size_t calls;
	pthread_barrier_t *bar;
};

static void *tp_main(void *arg)
{
	struct tp *t = arg;
	struct bclient *c = open_client(t->ep, t->curve);

	one(c, 0);
	pthread_barrier_wait(t->bar);
	for (size_t i = 0; i < t->calls; i++)
		one(c, 0);
	close_client(c);
	return NULL;
}

static double throughput(const char *name, const char *ep, int curve, int clients,
			 size_t per_client)
{
	pthread_t th[16];
	struct tp t = { ep, curve, per_client, NULL };
	pthread_barrier_t bar;
	uint64_t t0, el;

	pthread_barrier_init(&bar, NULL, (unsigned)clients + 1);
	t.bar = &bar;
	for (int i = 0; i < clients; i++)
		pthread_create(&th[i], NULL, tp_main, &t);
	pthread_barrier_wait(&bar);
	t0 = bench_now();
	for (int i = 0; i < clients; i++)
		pthread_join(th[i], NULL);
	el = bench_now() - t0;
	pthread_barrier_destroy(&bar);
	printf("throughput,%s,%d,%zu,%llu,%.0f\n", name, clients, per_client * (size_t)clients,
	       (unsigned long long)el, (double)(per_client * (size_t)clients) * 1e9 / (double)el);
	return (double)(per_client * (size_t)clients) * 1e9 / (double)el;
}

/* Open, handshake and first reply, on a new connection each time. */
static void connect_cost(const char *name, const char *ep, int curve)
{
	enum { N = 200 };
	uint64_t v[N];

	for (int i = 0; i < N; i++) {
		uint64_t t0 = bench_now();
		struct bclient *c = open_client(ep, curve);
		one(c, 0);
		v[i] = bench_now() - t0;
		close_client(c);
	}
	printf("connect,%s,%d,%llu\n", name, N, (unsigned long long)bench_quantile(v, N, 0.5));
}

static void stop_echo(void)
{
	if (echo_pid > 0) {
		kill(echo_pid, SIGTERM);
		waitpid(echo_pid, NULL, 0);
		echo_pid = 0;
	}
}

/* Never leave a broker behind, whatever way this program ends; 0 when
 * it stopped cleanly (or was not running). */
static int stop_broker(void)
{
	pid_t p = broker;

	broker = 0;
	return bench_broker_stop(p);
}

static void stop_broker_at_exit(void)
{
	stop_broker();
}

static void start_broker(void)
{
	char cfg[4096], path[128], log[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/broker.json", dir);
	snprintf(log, sizeof(log), "%s/broker.log", dir);
	snprintf(cfg, sizeof(cfg),
		 "{\"module\": \"%s\","
		 " \"policy\": \"examples/policy.json\", \"allow_unsigned_policy\": true,"
		 " \"storage\": \"%s/store\","
		 " %s%s%s \"endpoints\": [\"%s\", \"%s\"],"
		 " \"server_secret_key\": \"%s\", \"workers\": 4,"
		 " \"clients\": [{\"public_key\": \"%s\", \"principal\": \"svc:web-1\", \"roles\": [\"web\"]}],"
		 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:web-1\", \"roles\": [\"web\"]}]}",
		 bench_module(), dir, getenv("BENCH_NO_LOG") ? "" : "\"decision_log\": \"",
		 getenv("BENCH_NO_LOG") ? "" : dir,
		 getenv("BENCH_NO_LOG") ? "" : "/decisions.log\",",
		 broker_ipc, broker_tcp, srv_sec, cli_pub, (int)getuid());
	if (!(f = fopen(path, "w")) || fchmod(fileno(f), 0600) || fputs(cfg, f) < 0 || fclose(f)) {
		fprintf(stderr, "bench_zmq: cannot write %s\n", path);
		exit(2);
	}
	broker = bench_broker_start(path, broker_ipc, log);
	atexit(stop_broker_at_exit);
}

int main(int argc, char **argv)
{
	size_t calls = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
	uint64_t e_tcp, e_plain;
	double r_ipc, r_tcp;
	char cmd[128];
	int bad;

	snprintf(dir, sizeof(dir), "/tmp/tsec-bench-zmq-XXXXXX");
	if (!calls || !mkdtemp(dir))
		return 2;
	snprintf(broker_ipc, sizeof(broker_ipc), "ipc://%s/run/broker.sock", dir);
	snprintf(echo_ipc, sizeof(echo_ipc), "ipc://%s/echo.sock", dir);
	snprintf(broker_tcp, sizeof(broker_tcp), "tcp://127.0.0.1:%d", bench_free_port());
	snprintf(echo_tcp_curve, sizeof(echo_tcp_curve), "tcp://127.0.0.1:%d", bench_free_port());
	snprintf(echo_tcp_plain, sizeof(echo_tcp_plain), "tcp://127.0.0.1:%d", bench_free_port());
	zmq_curve_keypair(srv_pub, srv_sec);
	zmq_curve_keypair(cli_pub, cli_sec);
	/* The echo in a process of its own, made before this one has any
	 * ZeroMQ context. */
	if ((echo_pid = fork()) < 0)
		return 2;
	if (echo_pid == 0) {
		echo_ctx = zmq_ctx_new();
		echo_main(NULL);
		_exit(0);
	}
	atexit(stop_echo);
	start_broker();

	printf("# bench_zmq: %s build, %zu calls per latency case; one message = Check of 2 (%zu bytes)\n",
	       tsec_build_name(TSEC_BUILD_THIS), calls, strlen(msg));
	printf("# latency,case,samples,p50_ns,p90_ns,p99_ns,max_ns\n");
	r_ipc = latency_pair("ipc", echo_ipc, broker_ipc, 0, calls);
	r_tcp = latency_pair("tcp_curve", echo_tcp_curve, broker_tcp, 1, calls);
	e_plain = latency("echo_tcp_plain", echo_tcp_plain, 0, calls);
	e_tcp = latency("echo_tcp_curve_again", echo_tcp_curve, 1, calls);
	printf("ratio,ipc,%.3f\n", r_ipc);
	printf("ratio,tcp,%.3f\n", r_tcp);
	printf("curve_per_call,tcp,%lld\n", (long long)e_tcp - (long long)e_plain);
	printf("# throughput,case,clients,calls,elapsed_ns,calls_per_s\n");
	printf("# throughput_ratio,transport,clients,broker_over_echo (A-B-B-A: broker, echo,"
	       " echo, broker; each side the mean of its two runs)\n");
	for (int n = 1; n <= 16; n *= 4) {
		size_t half = calls / 2 / (size_t)n;
		uint64_t bc = cpu_ns(broker), ec, bcpu, ecpu;
		double b = throughput("broker_ipc", broker_ipc, 0, n, half);

		bcpu = cpu_ns(broker) - bc;
		ec = cpu_ns(echo_pid);
		double e = throughput("echo_ipc", echo_ipc, 0, n, half);
		e += throughput("echo_ipc", echo_ipc, 0, n, half);
		ecpu = cpu_ns(echo_pid) - ec;
		bc = cpu_ns(broker);
		b += throughput("broker_ipc", broker_ipc, 0, n, half);
		bcpu += cpu_ns(broker) - bc;
		printf("throughput_ratio,ipc,%d,%.3f\n", n, b / e);
		/* Each side served 2 x half x n calls. */
		printf("cpu_per_call,ipc,%d,%.0f,%.0f,%.3f\n", n,
		       (double)bcpu / (2.0 * (double)half * n), (double)ecpu / (2.0 * (double)half * n),
		       ecpu ? (double)bcpu / (double)ecpu : 0.0);
	}
	for (int n = 1; n <= 16; n *= 4)
		throughput("broker_tcp_curve", broker_tcp, 1, n, calls / (size_t)n);
	printf("# connect,case,samples,p50_ns (new connection, handshake, first reply)\n");
	connect_cost("echo_tcp_plain", echo_tcp_plain, 0);
	connect_cost("echo_tcp_curve", echo_tcp_curve, 1);
	connect_cost("broker_tcp_curve_zap", broker_tcp, 1);
	connect_cost("broker_ipc_zap", broker_ipc, 0);

	bad = stop_broker();
	stop_echo();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 && !bad ? 0 : 1;
}
