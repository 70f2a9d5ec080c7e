package tsecstorage

// The tests' servers: tsec-broker (this build's, from TSEC_BUILD_DIR),
// etcd, redis-server and pebble, each on loopback with a temporary
// folder, killed with the test process if it dies first (Pdeathsig) and
// stopped by t.Cleanup.  Nothing here sleeps for a fixed time: each
// start waits on a condition (the server answers) with a deadline.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startDeadline bounds each server's start: generous, for a machine
// three times slower than this one on a bad day.
const startDeadline = 60 * time.Second

func buildDir(t testing.TB) string {
	d := os.Getenv("TSEC_BUILD_DIR")
	if d == "" {
		t.Fatal("TSEC_BUILD_DIR is not set (make go-test sets it)")
	}
	return d
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for pause := time.Millisecond; ; {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, deadline)
		}
		time.Sleep(pause)
		if pause < 100*time.Millisecond {
			pause *= 2
		}
	}
}

// freePort is a loopback port free now (a server that then finds it
// taken fails to start, and its starter tries another).
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// spawn starts a server; its output goes to log.  Stopped at cleanup.
func spawn(t testing.TB, log string, env []string, name string, args ...string) *proc {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", name, err)
	}
	f.Close()
	p := &proc{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	return p
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop signals the process and waits for it (SIGKILL after 10 s).
func (p *proc) stop(sig syscall.Signal) {
	if !p.alive() {
		return
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}

// keyPair makes a CURVE key pair with this build's tsec.
func keyPair(t testing.TB, dir, name string) (pub, sec string) {
	t.Helper()
	prefix := filepath.Join(dir, name)
	out, err := exec.Command(filepath.Join(buildDir(t), "tsec"), "keygen", "--curve",
		prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("tsec keygen: %v: %s", err, out)
	}
	pub, sec, err = LoadKeyPair(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return pub, sec
}

// etcd is one member or a cluster.
type etcd struct {
	endpoints []string
	members   []*proc
}

func startEtcd(t testing.TB, n int) *etcd {
	t.Helper()
	for try := 0; try < 3; try++ {
		dir := t.TempDir()
		cports, pports := make([]int, n), make([]int, n)
		var cluster []string
		for i := 0; i < n; i++ {
			cports[i], pports[i] = freePort(t), freePort(t)
			cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, pports[i]))
		}
		e := &etcd{}
		for i := 0; i < n; i++ {
			curl := fmt.Sprintf("http://127.0.0.1:%d", cports[i])
			purl := fmt.Sprintf("http://127.0.0.1:%d", pports[i])
			e.endpoints = append(e.endpoints, curl)
			e.members = append(e.members, spawn(t, filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
				nil, "etcd", "--name", fmt.Sprintf("m%d", i),
				"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
				"--listen-client-urls", curl, "--advertise-client-urls", curl,
				"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
				"--initial-cluster", strings.Join(cluster, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", dir,
				"--log-level", "error"))
		}
		if e.healthy(t) {
			return e
		}
		for _, m := range e.members {
			m.stop(syscall.SIGKILL)
		}
		if try == 2 {
			t.Fatalf("etcd did not come up: %s", e.members[0].tail())
		}
	}
	return nil
}

func (e *etcd) healthy(t testing.TB) bool {
	end := time.Now().Add(startDeadline)
	for _, ep := range e.endpoints {
		for {
			for _, m := range e.members {
				if !m.alive() {
					return false
				}
			}
			r, err := http.Get(ep + "/health")
			if err == nil {
				var h struct {
					Health string `json:"health"`
				}
				json.NewDecoder(r.Body).Decode(&h)
				r.Body.Close()
				if h.Health == "true" {
					break
				}
			}
			if time.Now().After(end) {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return true
}

func startRedis(t testing.TB) string {
	t.Helper()
	for try := 0; try < 3; try++ {
		dir := t.TempDir()
		port := freePort(t)
		p := spawn(t, filepath.Join(dir, "redis.log"), nil, "redis-server", "--port",
			fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no")
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		end := time.Now().Add(startDeadline)
		for p.alive() && time.Now().Before(end) {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.SetDeadline(time.Now().Add(time.Second))
				c.Write([]byte("PING\r\n"))
				buf := make([]byte, 16)
				n, _ := c.Read(buf)
				c.Close()
				if strings.HasPrefix(string(buf[:n]), "+PONG") {
					return addr
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.stop(syscall.SIGKILL)
		if try == 2 {
			t.Fatalf("redis-server did not come up: %s", p.tail())
		}
	}
	return ""
}

// client is a key pair and the principal the broker maps it to.
type client struct {
	name, principal string
	pub, sec        string
	admin           bool
	roles           []string
}

// broker is one tsec-broker over a backend.
type broker struct {
	endpoint, serverPub string
	dir, store          string
	p                   *proc
	clients             map[string]*client
	first               *client
	owner               testing.TB // the test whose end stops it
}

type brokerSpec struct {
	policy  string      // the policy document
	storage interface{} // a folder, or the backend's object
	state   string      // state_dir (a shared backend needs one)
	clients []*client   // made by newClients
	server  [2]string   // the broker's key pair (pub, sec); made when empty
	ipc     string      // an ipc socket path to serve beside tcp
	extra   map[string]interface{}
}

func newClients(t testing.TB, dir string, specs ...string) []*client {
	var cs []*client
	for _, s := range specs {
		name, principal, _ := strings.Cut(s, "=")
		c := &client{name: name, principal: principal, admin: true}
		c.pub, c.sec = keyPair(t, dir, name)
		cs = append(cs, c)
	}
	return cs
}

func startBroker(t testing.TB, spec brokerSpec) *broker {
	t.Helper()
	dir := t.TempDir()
	bd := buildDir(t)
	if spec.server[0] == "" {
		spec.server[0], spec.server[1] = keyPair(t, dir, "server")
	}
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(spec.policy), 0o600); err != nil {
		t.Fatal(err)
	}
	var clients []map[string]interface{}
	b := &broker{serverPub: spec.server[0], dir: dir, clients: map[string]*client{}, owner: t}
	for _, c := range spec.clients {
		cl := map[string]interface{}{"public_key": c.pub, "principal": c.principal,
			"admin": c.admin}
		if len(c.roles) > 0 {
			cl["roles"] = c.roles
		}
		clients = append(clients, cl)
		b.clients[c.name] = c
		if b.first == nil {
			b.first = c
		}
	}
	if spec.storage == nil {
		b.store = filepath.Join(dir, "store")
		spec.storage = b.store
	}
	for try := 0; try < 3; try++ {
		b.endpoint = fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
		cfg := map[string]interface{}{
			"module": filepath.Join(bd, "libtinysecurity_module.so"), "policy": policy,
			"allow_unsigned_policy": true, "storage": spec.storage,
			"endpoints": endpointsOf(b.endpoint, spec.ipc), "server_secret_key": spec.server[1],
			"clients": clients, "decision_log": filepath.Join(dir, "decisions.log"),
		}
		if spec.state != "" {
			cfg["state_dir"] = spec.state
		}
		for k, v := range spec.extra {
			cfg[k] = v
		}
		text, _ := json.Marshal(cfg)
		cfgPath := filepath.Join(dir, "broker.json")
		if err := os.WriteFile(cfgPath, text, 0o600); err != nil {
			t.Fatal(err)
		}
		b.p = spawn(t, filepath.Join(dir, fmt.Sprintf("broker%d.log", try)), nil,
			filepath.Join(bd, "tsec-broker"), "--config", cfgPath)
		if b.up(t) {
			return b
		}
		b.p.stop(syscall.SIGKILL)
		if try == 2 {
			t.Fatalf("tsec-broker did not come up: %s", b.p.tail())
		}
	}
	return nil
}

func endpointsOf(tcp, ipc string) []string {
	if ipc == "" {
		return []string{tcp}
	}
	return []string{tcp, "ipc://" + ipc}
}

// up waits until the broker answers a health call.
func (b *broker) up(t testing.TB) bool {
	c := spec0(b)
	end := time.Now().Add(startDeadline)
	for b.p.alive() && time.Now().Before(end) {
		s, err := New(Options{Endpoint: b.endpoint, ServerPublicKey: b.serverPub,
			PublicKey: c.pub, SecretKey: c.sec, Timeout: 500 * time.Millisecond})
		if err == nil {
			err = s.Ping(context.Background())
			s.Close()
			if err == nil {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// spec0 is the broker's first client (an admin).
func spec0(b *broker) *client {
	return b.first
}

// storageAs opens a Storage on b as the client name.
func (b *broker) storageAs(t testing.TB, name string, o Options) *Storage {
	t.Helper()
	c := b.clients[name]
	if c == nil {
		t.Fatalf("no client %q", name)
	}
	o.Endpoint, o.ServerPublicKey, o.PublicKey, o.SecretKey = b.endpoint, b.serverPub, c.pub, c.sec
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pebble is an ACME test CA (PEBBLE_VA_ALWAYS_VALID: no challenge is
// fetched), over https with a certificate made here.
type pebble struct {
	dirURL string
	roots  *x509.CertPool // trusts pebble's https
	mgmt   string         // its management address (the issuing roots)
	https  string         // the PEM file of its https certificate
	p      *proc
}

func startPebble(t testing.TB) *pebble {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t, "localhost", net.ParseIP("127.0.0.1"))
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, certPEM, 0o600)
	os.WriteFile(key, keyPEM, 0o600)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	for try := 0; try < 3; try++ {
		port, mport := freePort(t), freePort(t)
		cfg := fmt.Sprintf(`{"pebble": {"listenAddress": "127.0.0.1:%d",
 "managementListenAddress": "127.0.0.1:%d", "certificate": %q, "privateKey": %q,
 "httpPort": %d, "tlsPort": %d, "ocspResponderURL": "", "externalAccountBindingRequired": false}}`,
			port, mport, cert, key, freePort(t), freePort(t))
		cfgPath := filepath.Join(dir, "pebble.json")
		os.WriteFile(cfgPath, []byte(cfg), 0o600)
		p := spawn(t, filepath.Join(dir, "pebble.log"),
			[]string{"PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"},
			"pebble", "-config", cfgPath)
		pb := &pebble{dirURL: fmt.Sprintf("https://127.0.0.1:%d/dir", port), roots: roots,
			mgmt: fmt.Sprintf("https://127.0.0.1:%d", mport), https: cert, p: p}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
			Timeout: 2 * time.Second}
		end := time.Now().Add(startDeadline)
		for p.alive() && time.Now().Before(end) {
			if r, err := hc.Get(pb.dirURL); err == nil {
				r.Body.Close()
				if r.StatusCode == 200 {
					return pb
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.stop(syscall.SIGKILL)
		if try == 2 {
			t.Fatalf("pebble did not come up: %s", p.tail())
		}
	}
	return nil
}

// root returns the PEM of the root pebble issues under.
func (pb *pebble) root(t testing.TB) []byte {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true}}, Timeout: 5 * time.Second} // its own, made at start
	r, err := hc.Get(pb.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String())
}

func selfSigned(t testing.TB, name string, ip net.IP) (certPEM, keyPEM []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		DNSNames: []string{name}, IPAddresses: []net.IP{ip},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}
