/* Real servers for the tests (servers.h). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "tests/servers.h"

bool tu_have(const char *program)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", program);
	return system(cmd) == 0;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &al) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void tu_child_dies_with(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
}

/* Runs argv with output to log, dying with the test process. */
static pid_t spawn(char *const argv[], const char *log)
{
	pid_t parent = getpid(), pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		tu_child_dies_with(parent);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		setpgid(0, 0);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static size_t sink(char *d, size_t sz, size_t n, void *ud)
{
	(void)d;
	(void)ud;
	return sz * n;
}

static const char *tls_dir;

static bool etcd_answers(const char *url)
{
	CURL *h = curl_easy_init();
	char u[128], f[3][128];
	long status = 0;
	CURLcode cc;

	if (tls_dir) {
		snprintf(f[0], sizeof(f[0]), "%s/ca.pem", tls_dir);
		snprintf(f[1], sizeof(f[1]), "%s/client.pem", tls_dir);
		snprintf(f[2], sizeof(f[2]), "%s/client-key.pem", tls_dir);
		curl_easy_setopt(h, CURLOPT_CAINFO, f[0]);
		curl_easy_setopt(h, CURLOPT_SSLCERT, f[1]);
		curl_easy_setopt(h, CURLOPT_SSLKEY, f[2]);
	}
	snprintf(u, sizeof(u), "%s/v3/kv/range", url);
	curl_easy_setopt(h, CURLOPT_URL, u);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"key\":\"AA==\"}");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	return cc == CURLE_OK && status == 200;
}

static pid_t etcd_member(struct tu_server *s, int i, bool existing)
{
	char name[16], data[96], curl_[64], purl[64], cluster[256] = "", log[96];
	size_t o = 0;

	snprintf(name, sizeof(name), "m%d", i);
	snprintf(data, sizeof(data), "%s/%s", s->dir, name);
	snprintf(curl_, sizeof(curl_), "%s://127.0.0.1:%d", s->tls[0] ? "https" : "http",
		 s->client_port[i]);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", s->peer_port[i]);
	snprintf(log, sizeof(log), "%s/%s.log", s->dir, name);
	for (int j = 0; j < s->n; j++)
		o += (size_t)snprintf(cluster + o, sizeof(cluster) - o, "%sm%d=http://127.0.0.1:%d",
				      j ? "," : "", j, s->peer_port[j]);
	{
		char *argv[] = {
			"etcd", "--name", name, "--data-dir", data,
			"--listen-client-urls", curl_, "--advertise-client-urls", curl_,
			"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			"--initial-cluster", cluster,
			"--initial-cluster-state", existing ? "existing" : "new",
			"--initial-cluster-token", s->dir,
			/* Fast elections, so a test sees a failover quickly. */
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--log-level", "warn", "--logger", "zap", NULL, NULL, NULL, NULL, NULL,
			NULL, NULL, NULL,
		};
		char cert[96], key[96], ca[96];
		size_t a = sizeof(argv) / sizeof(argv[0]) - 8;

		if (s->tls[0]) {
			snprintf(cert, sizeof(cert), "--cert-file=%s/server.pem", s->tls);
			snprintf(key, sizeof(key), "--key-file=%s/server-key.pem", s->tls);
			snprintf(ca, sizeof(ca), "--trusted-ca-file=%s/ca.pem", s->tls);
			argv[a++] = cert;
			argv[a++] = key;
			argv[a++] = ca;
			argv[a++] = "--client-cert-auth";
		}
		return spawn(argv, log);
	}
}

static void show_log(const char *dir, const char *name)
{
	char cmd[192];

	snprintf(cmd, sizeof(cmd), "tail -5 '%s/%s' >&2", dir, name);
	if (system(cmd))
		fprintf(stderr, "(no log)\n");
}

static int wait_etcd(struct tu_server *s, int i)
{
	tls_dir = s->tls[0] ? s->tls : NULL;
	for (int t = 0; t < 300; t++) {
		if (etcd_answers(s->url[i]))
			return 0;
		nap_ms(50);
	}
	fprintf(stderr, "etcd member %d did not come up; its log ends:\n", i);
	{
		char name[16];
		snprintf(name, sizeof(name), "m%d.log", i);
		show_log(s->dir, name);
	}
	return -1;
}

/* A free port not among the server's others (a port just freed may be
 * handed out twice). */
static int fresh_port(const struct tu_server *s, int upto)
{
	for (;;) {
		int p = free_port(), dup = 0;

		for (int i = 0; i < upto; i++)
			dup |= s->client_port[i] == p || s->peer_port[i] == p;
		if (!dup && p > 0)
			return p;
	}
}

static int etcd_start_once(struct tu_server *s, int n);
static int tu_etcd_start_keep(struct tu_server *s, int n);

int tu_etcd_start(struct tu_server *s, int n)
{
	s->tls[0] = '\0';
	return tu_etcd_start_keep(s, n);
}

/* A CA, a server certificate for 127.0.0.1 and a client certificate,
 * in a new folder s->tls. */
static int make_certs(struct tu_server *s)
{
	char cmd[2048];

	s->tls[0] = '\0';
	snprintf(s->tls, sizeof(s->tls), "/tmp/tsec-tls-XXXXXX");
	if (!mkdtemp(s->tls) || !tu_have("openssl"))
		return -1;
	/* A CA, a server certificate for 127.0.0.1, a client certificate. */
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && exec >/dev/null 2>&1 && "
		 "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca "
		 "  -keyout ca-key.pem -out ca.pem && "
		 "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server-key.pem "
		 "  -out server.csr && "
		 "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext && "
		 "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
		 "  -days 2 -extfile ext -out server.pem && "
		 "openssl req -newkey rsa:2048 -nodes -subj /CN=tsec -keyout client-key.pem "
		 "  -out client.csr && "
		 "printf 'extendedKeyUsage=clientAuth\\n' > cext && "
		 "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
		 "  -days 2 -extfile cext -out client.pem && chmod 600 *-key.pem", s->tls);
	return system(cmd) ? -1 : 0;
}

int tu_etcd_start_tls(struct tu_server *s)
{
	char cmd[256];
	int rc;

	if (make_certs(s))
		return -1;
	rc = tu_etcd_start_keep(s, 1);
	if (rc) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->tls);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", s->tls);
	}
	return rc;
}

static int tu_etcd_start_keep(struct tu_server *s, int n)
{
	/* A port taken by someone else between our look and etcd's bind
	 * fails a start: try again with new ports. */
	for (int tries = 0; tries < 3; tries++)
		if (etcd_start_once(s, n) == 0)
			return 0;
	return -1;
}

static int etcd_start_once(struct tu_server *s, int n)
{
	char tls[sizeof(s->tls)];
	size_t o = 0;

	memcpy(tls, s->tls, sizeof(tls));
	memset(s, 0, sizeof(*s));
	memcpy(s->tls, tls, sizeof(tls));
	if (n < 1 || n > TU_MEMBERS_MAX || !tu_have("etcd"))
		return -1;
	snprintf(s->dir, sizeof(s->dir), "/tmp/tsec-etcd-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	s->n = n;
	for (int i = 0; i < n; i++) {
		s->client_port[i] = fresh_port(s, i);
		s->peer_port[i] = fresh_port(s, i + 1);
		snprintf(s->url[i], sizeof(s->url[i]), "%s://127.0.0.1:%d",
			 s->tls[0] ? "https" : "http", s->client_port[i]);
		o += (size_t)snprintf(s->endpoints + o, sizeof(s->endpoints) - o, "%s%s",
				      i ? "," : "", s->url[i]);
	}
	for (int i = 0; i < n; i++)
		s->pid[i] = etcd_member(s, i, false);
	for (int i = 0; i < n; i++)
		if (wait_etcd(s, i)) {
			tu_server_stop(s);
			return -1;
		}
	return 0;
}

/* Starts redis-server on s's port and folder; waits until it answers. */
static int redis_spawn(struct tu_server *s)
{
	char port[16], log[96];

	snprintf(port, sizeof(port), "%d", s->client_port[0]);
	snprintf(log, sizeof(log), "%s/redis.log", s->dir);
	if (s->tls[0]) {
		/* TLS only, clients showing a certificate of the CA. */
		char cert[96], key[96], ca[96];
		char *argv[] = { "redis-server", "--port", "0", "--tls-port", port,
				 "--tls-cert-file", cert, "--tls-key-file", key,
				 "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes",
				 "--bind", "127.0.0.1", "--dir", s->dir, "--save", "",
				 "--appendonly", "yes", "--appendfsync", "always",
				 "--daemonize", "no", NULL };

		snprintf(cert, sizeof(cert), "%s/server.pem", s->tls);
		snprintf(key, sizeof(key), "%s/server-key.pem", s->tls);
		snprintf(ca, sizeof(ca), "%s/ca.pem", s->tls);
		s->pid[0] = spawn(argv, log);
	} else {
		char *argv[] = { "redis-server", "--port", port, "--bind", "127.0.0.1",
				 "--dir", s->dir, "--save", "", "--appendonly", "yes",
				 "--appendfsync", "always", "--daemonize", "no", NULL };
		s->pid[0] = spawn(argv, log);
	}
	for (int t = 0; t < 300; t++) {
		struct timeval tv = { 1, 0 };
		redisContext *c = redisConnectWithTimeout("127.0.0.1", s->client_port[0], tv);
		redisReply *r = c && !c->err && !s->tls[0] ? redisCommand(c, "PING") : NULL;
		/* With TLS, accepting is as far as a plain client can see. */
		bool up = s->tls[0] ? c && !c->err : r && r->type == REDIS_REPLY_STATUS;

		freeReplyObject(r);
		redisFree(c);
		if (up)
			return 0;
		if (waitpid(s->pid[0], NULL, WNOHANG) == s->pid[0]) {
			s->pid[0] = 0;   /* it exited: its port was taken, say */
			break;
		}
		nap_ms(50);
	}
	fprintf(stderr, "redis-server did not come up (see %s)\n", log);
	return -1;
}

static int redis_start_once(struct tu_server *s)
{
	char tls[sizeof(s->tls)];

	memcpy(tls, s->tls, sizeof(tls));    /* the certificates stay */
	memset(s, 0, sizeof(*s));
	memcpy(s->tls, tls, sizeof(tls));
	snprintf(s->dir, sizeof(s->dir), "/tmp/tsec-redis-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	s->n = 1;
	s->client_port[0] = free_port();
	snprintf(s->endpoints, sizeof(s->endpoints), "127.0.0.1:%d", s->client_port[0]);
	if (redis_spawn(s) == 0)
		return 0;
	s->tls[0] = '\0';
	tu_server_stop(s);
	memcpy(s->tls, tls, sizeof(tls));
	return -1;
}

int tu_redis_restart(struct tu_server *s, bool keep_data)
{
	char cmd[512];

	tu_member_kill(s, 0);
	if (!keep_data) {
		/* What a restart without persistence keeps: nothing. */
		snprintf(cmd, sizeof(cmd), "rm -rf '%s/appendonlydir' '%s'/*.aof '%s'/*.rdb",
			 s->dir, s->dir, s->dir);
		if (system(cmd) != 0)
			return -1;
	}
	return redis_spawn(s);
}

int tu_redis_start_tls(struct tu_server *s)
{
	memset(s, 0, sizeof(*s));
	if (!tu_have("redis-server") || make_certs(s))
		return -1;
	for (int tries = 0; tries < 3; tries++)
		if (redis_start_once(s) == 0)
			return 0;
	tu_server_stop(s);
	return -1;
}

int tu_redis_start(struct tu_server *s)
{
	memset(s, 0, sizeof(*s));
	if (!tu_have("redis-server"))
		return -1;
	/* As for etcd: a port taken between our look and redis's bind fails
	 * a start; try again with a new one. */
	for (int tries = 0; tries < 3; tries++)
		if (redis_start_once(s) == 0)
			return 0;
	return -1;
}

void tu_member_kill(struct tu_server *s, int i)
{
	if (s->pid[i] > 0) {
		kill(s->pid[i], SIGKILL);
		waitpid(s->pid[i], NULL, 0);
		s->pid[i] = 0;
	}
}

int tu_member_restart(struct tu_server *s, int i)
{
	s->pid[i] = etcd_member(s, i, true);
	return wait_etcd(s, i);
}

struct body {
	char *p;
	size_t n, cap;
};

static size_t keep(char *d, size_t sz, size_t n, void *ud)
{
	struct body *b = ud;
	size_t add = sz * n;

	if (b->cap && b->n + add < b->cap) {
		memcpy(b->p + b->n, d, add);
		b->n += add;
		b->p[b->n] = '\0';
	}
	return sz * n;
}

long tu_http(const char *url, const char *post, char *out, size_t cap, long timeout_ms)
{
	struct body b = { out, 0, out ? cap : 0 };
	CURL *h = curl_easy_init();
	long status = 0;
	CURLcode cc;

	if (out && cap)
		out[0] = '\0';
	if (!h)
		return -1;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (post)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, post);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	return cc == CURLE_OK ? status : -1;
}

int tu_etcd_leader(struct tu_server *s)
{
	for (int i = 0; i < s->n; i++) {
		char body[4096], u[128], *l, *m;

		if (s->pid[i] <= 0)
			continue;
		snprintf(u, sizeof(u), "%s/v3/maintenance/status", s->url[i]);
		if (tu_http(u, "{}", body, sizeof(body), 1000) != 200)
			continue;
		/* {"header":{...,"member_id":"X",...},...,"leader":"Y",...} */
		if ((m = strstr(body, "\"member_id\":\"")) && (l = strstr(body, "\"leader\":\"")) &&
		    !strncmp(m + 13, l + 10, strcspn(l + 10, "\"")) &&
		    strcspn(l + 10, "\"") == strcspn(m + 13, "\""))
			return i;
	}
	return -1;
}

void tu_server_stop(struct tu_server *s)
{
	char cmd[128];

	if (s->sigv4) {
		tu_sigv4_proxy_stop(s->sigv4);
		free(s->sigv4);
		s->sigv4 = NULL;
	}
	for (int i = 0; i < s->n; i++)
		if (s->pid[i] > 0) {
			kill(s->pid[i], SIGTERM);
			for (int t = 0; t < 100 && waitpid(s->pid[i], NULL, WNOHANG) == 0; t++)
				nap_ms(20);
			kill(s->pid[i], SIGKILL);
			waitpid(s->pid[i], NULL, 0);
			s->pid[i] = 0;
		}
	if (s->tls[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->tls);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", s->tls);
		s->tls[0] = '\0';
	}
	if (s->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", s->dir);
		s->dir[0] = '\0';
	}
}

/* POSTs body to url; 0 when HTTP 200. */
/* POSTs body to url; 0 when HTTP 200. */
static int post(const char *url, const char *body)
{
	return tu_http(url, body, NULL, 0, 5000) == 200 ? 0 : -1;
}

int tu_etcd_enable_auth(struct tu_server *s, const char *user, const char *password)
{
	char u[160], body[256];

	/* root (etcd wants it before auth is on), then the user, then on. */
	snprintf(u, sizeof(u), "%s/v3/auth/user/add", s->url[0]);
	snprintf(body, sizeof(body), "{\"name\": \"root\", \"password\": \"%s\"}", password);
	if (post(u, body))
		return -1;
	snprintf(u, sizeof(u), "%s/v3/auth/user/grant", s->url[0]);
	if (post(u, "{\"user\": \"root\", \"role\": \"root\"}"))
		return -1;
	if (strcmp(user, "root")) {
		snprintf(u, sizeof(u), "%s/v3/auth/user/add", s->url[0]);
		snprintf(body, sizeof(body), "{\"name\": \"%s\", \"password\": \"%s\"}", user, password);
		if (post(u, body))
			return -1;
		snprintf(u, sizeof(u), "%s/v3/auth/user/grant", s->url[0]);
		snprintf(body, sizeof(body), "{\"user\": \"%s\", \"role\": \"root\"}", user);
		if (post(u, body))
			return -1;
	}
	snprintf(u, sizeof(u), "%s/v3/auth/enable", s->url[0]);
	return post(u, "{}");
}

int tu_etcd_put_raw(struct tu_server *s, const char *key, size_t klen, const char *val)
{
	char u[160], *body, *kb, *vb;
	size_t kc = 4 * (klen / 3 + 2), vc = 4 * (strlen(val) / 3 + 2);
	int rc;

	kb = malloc(kc);
	vb = malloc(vc);
	body = malloc(kc + vc + 64);
	if (!kb || !vb || !body) {
		free(kb);
		free(vb);
		free(body);
		return -1;
	}
	{
		/* base64 by hand: no libsodium in the test helpers' link needs. */
		static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
		const unsigned char *in[2] = { (const unsigned char *)key, (const unsigned char *)val };
		size_t len[2] = { klen, strlen(val) };
		char *out[2] = { kb, vb };

		for (int w = 0; w < 2; w++) {
			size_t o = 0, i;
			for (i = 0; i + 2 < len[w]; i += 3) {
				unsigned v = (unsigned)in[w][i] << 16 | (unsigned)in[w][i + 1] << 8 | in[w][i + 2];
				out[w][o++] = t[v >> 18];
				out[w][o++] = t[(v >> 12) & 63];
				out[w][o++] = t[(v >> 6) & 63];
				out[w][o++] = t[v & 63];
			}
			if (len[w] - i == 1) {
				unsigned v = (unsigned)in[w][i] << 16;
				out[w][o++] = t[v >> 18];
				out[w][o++] = t[(v >> 12) & 63];
				out[w][o++] = '=';
				out[w][o++] = '=';
			} else if (len[w] - i == 2) {
				unsigned v = (unsigned)in[w][i] << 16 | (unsigned)in[w][i + 1] << 8;
				out[w][o++] = t[v >> 18];
				out[w][o++] = t[(v >> 12) & 63];
				out[w][o++] = t[(v >> 6) & 63];
				out[w][o++] = '=';
			}
			out[w][o] = '\0';
		}
	}
	snprintf(u, sizeof(u), "%s/v3/kv/put", s->url[0]);
	sprintf(body, "{\"key\": \"%s\", \"value\": \"%s\"}", kb, vb);
	rc = post(u, body);
	free(kb);
	free(vb);
	free(body);
	return rc;
}

/* Where s3rver's command is: $TSEC_S3RVER, or npm's global folders. */
static const char *s3rver_path(void)
{
	static const char *const where[] = {
		"/usr/lib/node_modules/s3rver/bin/s3rver.js",
		"/usr/local/lib/node_modules/s3rver/bin/s3rver.js",
	};
	const char *env = getenv("TSEC_S3RVER");

	if (env && *env)
		return env;
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++)
		if (access(where[i], R_OK) == 0)
			return where[i];
	return NULL;
}

int tu_s3_start(struct tu_server *s)
{
	const char *js = s3rver_path();

	memset(s, 0, sizeof(*s));
	if (!js || !tu_have("node"))
		return -1;
	for (int tries = 0; tries < 3; tries++) {
		char port[16], log[96], data[96];

		snprintf(s->dir, sizeof(s->dir), "/tmp/tsec-s3-XXXXXX");
		if (!mkdtemp(s->dir))
			return -1;
		s->n = 1;
		s->client_port[0] = free_port();
		snprintf(port, sizeof(port), "%d", s->client_port[0]);
		snprintf(log, sizeof(log), "%s/s3rver.log", s->dir);
		snprintf(data, sizeof(data), "%s/data", s->dir);
		snprintf(s->url[0], sizeof(s->url[0]), "http://127.0.0.1:%d", s->client_port[0]);
		/* Virtual-host style: BUCKET.s3.localhost (libcurl resolves any
		 * name under localhost to loopback itself). */
		snprintf(s->url[1], sizeof(s->url[1]), "http://s3.localhost:%d", s->client_port[0]);
		snprintf(s->endpoints, sizeof(s->endpoints), "%s", s->url[0]);
		mkdir(data, 0700);
		{
			/*
			 * s3rver encrypts its continuation tokens with a cipher
			 * OpenSSL 3 keeps in its legacy provider: without it,
			 * node 17 and later answer 500 to every listing longer
			 * than one page (issue 49, item 8).  Given where node
			 * knows the option.
			 */
			static int legacy = -1;
			char *argv[] = { "node", "--openssl-legacy-provider", (char *)js, "-d", data,
					 "-a", "127.0.0.1", "-p", port, "--silent",
					 "--service-endpoint", "localhost", "--configure-bucket",
					 "tsec-test", NULL };

			if (legacy < 0)
				legacy = system("node --openssl-legacy-provider -e 0 > /dev/null "
						"2>&1") == 0;
			if (!legacy)
				memmove(&argv[1], &argv[2], sizeof(argv) - 2 * sizeof(argv[0]));
			s->pid[0] = spawn(argv, log);
		}
		/* Up when it answers HTTP at all (node starts in about a
		 * second; up to a minute on a slow machine). */
		for (int t = 0; t < 600; t++) {
			if (tu_http(s->url[0], NULL, NULL, 0, 500) > 0) {
				/* In front of it, the proxy that checks
				 * signatures as S3 would. */
				if (!(s->sigv4 = calloc(1, sizeof(*s->sigv4))) ||
				    tu_sigv4_proxy_start(s->sigv4, s->client_port[0], "S3RVER",
							 "S3RVER")) {
					free(s->sigv4);
					s->sigv4 = NULL;
					break;
				}
				snprintf(s->url[2], sizeof(s->url[2]), "%s", s->url[0]);
				snprintf(s->url[0], sizeof(s->url[0]), "http://127.0.0.1:%d",
					 s->sigv4->port);
				snprintf(s->url[1], sizeof(s->url[1]), "http://s3.localhost:%d",
					 s->sigv4->port);
				snprintf(s->endpoints, sizeof(s->endpoints), "%s", s->url[0]);
				return 0;
			}
			if (waitpid(s->pid[0], NULL, WNOHANG) == s->pid[0]) {
				s->pid[0] = 0;
				break;
			}
			nap_ms(100);
		}
		fprintf(stderr, "s3rver did not come up (see %s)\n", log);
		tu_server_stop(s);
	}
	return -1;
}

void tu_redis_lease_end(const struct tu_server *s, const char *prefix, const char *name)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", s->client_port[0], tv);
	redisReply *r = NULL;

	if (c && !c->err)
		r = redisCommand(c, "DEL %s/l/%s", prefix, name);
	if (!r || r->type != REDIS_REPLY_INTEGER) {
		fprintf(stderr, "tu_redis_lease_end: no answer from redis\n");
		abort();
	}
	freeReplyObject(r);
	redisFree(c);
}
