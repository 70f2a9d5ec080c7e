package tsecstorage

// certmagic itself, end to end: pebble issues, two certmagic processes
// (cmd/tsec-certmagic) manage the same name through tsec-broker (one
// broker on files, then two brokers over a 3-member etcd): one ACME
// order, one lock holder, the other loads what was stored; both serve
// TLS with certmagic's GetCertificate and openssl completes a verified
// handshake with the issued chain.  A tenant whose principal may write
// only a.example is refused b.example, and nothing of b's is written.
// The nodes run under the shipped policy, examples/certmagic-policy.json.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// e2eExtra are the test's principals beside the shipped policy's: a
// tenant that owns a.example only, and an admin that reads.
const e2eExtra = `[
  {"id": "tenant-a-certs", "effect": "allow", "principal": ["svc:tenant-a"],
   "action": ["storage.*"],
   "resource": ["certificates/*/a.example/**", "acme/*/users/ops@a.example/**",
                "acme/*/challenge_tokens/a.example.json", "rw_test_*"]},
  {"id": "tenant-a-reads-acme", "effect": "allow", "principal": ["svc:tenant-a"],
   "action": ["storage.exists", "storage.list", "storage.stat"],
   "resource": ["acme", "acme/*", "acme/*/users", "certificates", "certificates/*"]},
  {"id": "tenant-a-locks", "effect": "allow", "principal": ["svc:tenant-a"],
   "action": ["lock.*"], "resource": ["locks/*_a.example"]},
  {"id": "admin-reads", "effect": "allow", "principal": ["svc:admin"],
   "action": ["storage.list", "storage.load", "storage.exists"], "resource": ["**"]}
 ]`

// shippedPolicy is examples/certmagic-policy.json, with extra rules (a
// JSON array) appended: the nodes of the tests hold its role certmagic.
func shippedPolicy(t testing.TB, extra string) string {
	b, err := os.ReadFile(filepath.Join(buildDir(t), "..", "..", "examples",
		"certmagic-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]interface{}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("examples/certmagic-policy.json: %v", err)
	}
	if extra != "" {
		var more []interface{}
		if err := json.Unmarshal([]byte(extra), &more); err != nil {
			t.Fatal(err)
		}
		p["rules"] = append(p["rules"].([]interface{}), more...)
	}
	out, _ := json.Marshal(p)
	return string(out)
}

// certmagicTool builds cmd/tsec-certmagic once per test run.
func certmagicTool(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "tsec-certmagic")
	out, err := exec.Command("go", "build", "-o", bin,
		"tinysecurity.dev/tsecstorage/cmd/tsec-certmagic").CombinedOutput()
	if err != nil {
		t.Fatalf("go build tsec-certmagic: %v\n%s", err, out)
	}
	return bin
}

// cm is one running tsec-certmagic.
type cm struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	log   string
}

func runCertmagic(t *testing.T, bin, name string, args ...string) *cm {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	c := &cm{name: name, cmd: exec.Command(bin, args...), lines: make(chan string, 16), log: log}
	c.cmd.Stderr = f
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	go func() {
		r := bufio.NewScanner(out)
		for r.Scan() {
			c.lines <- r.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// next is the process's next line of output.
func (c *cm) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			b, _ := os.ReadFile(c.log)
			t.Fatalf("%s ended; its log:\n%s", c.name, tailOf(string(b), 30))
		}
		return l
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s said nothing for 3 minutes", c.name)
	}
	return ""
}

// expect reads the next line and requires it to start with want.
func (c *cm) expect(t *testing.T, want string) string {
	t.Helper()
	l := c.next(t)
	if !strings.HasPrefix(l, want) {
		b, _ := os.ReadFile(c.log)
		t.Fatalf("%s: %q, want %q; its log:\n%s", c.name, l, want, tailOf(string(b), 30))
	}
	return strings.TrimSpace(strings.TrimPrefix(l, want))
}

func tailOf(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// e2e holds what every phase shares.
type e2e struct {
	bin, dir, serverPubFile, rootFile string
	pb                                *pebble
	root                              *x509.CertPool
	server                            [2]string
	clients                           []*client
}

func (e *e2e) args(t *testing.T, brokers []string, key, domain string) []string {
	return []string{"-brokers", strings.Join(brokers, ","), "-server-key", e.serverPubFile,
		"-key", filepath.Join(e.dir, key), "-ca", e.pb.dirURL, "-ca-root", e.pb.https,
		"-email", "ops@" + domain, "-domains", domain,
		"-http-port", fmt.Sprint(freePort(t)), "-lock-ttl", "3s"}
}

// issuedCount counts the certificates pebble has issued so far (the
// phases run one after the other, each counting its own).
func issuedCount(log []byte) int {
	return len(regexp.MustCompile(`Issued certificate serial`).FindAll(log, -1))
}

// handshake connects to addr for name with openssl, verifying the chain
// against pebble's root, and returns the leaf's DER.
func (e *e2e) handshake(t *testing.T, addr, name string) []byte {
	t.Helper()
	out, err := exec.Command("openssl", "s_client", "-connect", addr, "-servername", name,
		"-CAfile", e.rootFile, "-verify_return_error", "-verify_hostname", name).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Verify return code: 0 (ok)") {
		t.Fatalf("openssl s_client %s -servername %s: %v\n%s", addr, name, err,
			tailOf(string(out), 20))
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: e.root})
	if err != nil {
		t.Fatalf("tls.Dial %s (%s): %v", addr, name, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func TestCertmagicEndToEnd(t *testing.T) {
	e := &e2e{bin: certmagicTool(t), dir: t.TempDir(), pb: startPebble(t)}
	e.server[0], e.server[1] = keyPair(t, e.dir, "server")
	e.serverPubFile = filepath.Join(e.dir, "server.pub")
	root := e.pb.root(t)
	e.rootFile = filepath.Join(e.dir, "root.pem")
	os.WriteFile(e.rootFile, root, 0o600)
	e.root = x509.NewCertPool()
	if !e.root.AppendCertsFromPEM(root) {
		t.Fatalf("pebble's root: %q", root)
	}
	e.clients = newClients(t, e.dir, "admin=svc:admin", "node1=svc:node1", "node2=svc:node2",
		"tenant=svc:tenant-a")
	e.clients[1].roles = []string{"certmagic"}
	e.clients[2].roles = []string{"certmagic"}
	policy := shippedPolicy(t, e2eExtra)
	e.clients[3].admin = false

	b := startBroker(t, brokerSpec{policy: policy, clients: e.clients, server: e.server})
	t.Run("TwoProcessesOneBroker", func(t *testing.T) {
		e.twoNodes(t, "shared.example", []string{b.endpoint}, []string{b.endpoint})
	})
	t.Run("TenantRefused", func(t *testing.T) { e.tenant(t, b) })
	t.Run("TwoBrokersOverEtcd", func(t *testing.T) {
		et := startEtcd(t, 3)
		spec := brokerSpec{policy: policy, clients: e.clients, server: e.server,
			storage: map[string]interface{}{"backend": "etcd", "endpoints": et.endpoints,
				"prefix": "cm", "timeout_ms": 5000}}
		spec.state = t.TempDir()
		b1 := startBroker(t, spec)
		spec.state = t.TempDir()
		b2 := startBroker(t, spec)
		e.twoNodes(t, "fleet.example", []string{b1.endpoint, b2.endpoint},
			[]string{b2.endpoint, b1.endpoint})
	})
}

// twoNodes runs two certmagic processes managing name at once, through
// the brokers each is given; one order, both serve the same leaf.
func (e *e2e) twoNodes(t *testing.T, name string, via1, via2 []string) {
	log0, _ := os.ReadFile(e.pb.p.log)
	before := issuedCount(log0)
	p1 := runCertmagic(t, e.bin, "node1", append(e.args(t, via1, "node1", name),
		"-serve", "127.0.0.1:0")...)
	p2 := runCertmagic(t, e.bin, "node2", append(e.args(t, via2, "node2", name),
		"-serve", "127.0.0.1:0")...)
	p1.expect(t, "managed")
	p2.expect(t, "managed")
	a1, a2 := p1.expect(t, "serving"), p2.expect(t, "serving")
	log1, _ := os.ReadFile(e.pb.p.log)
	if n := issuedCount(log1) - before; n != 1 {
		t.Fatalf("pebble issued %d certificates for %s, want one", n, name)
	}
	l1, l2 := e.handshake(t, a1, name), e.handshake(t, a2, name)
	if !bytes.Equal(l1, l2) {
		t.Fatal("the two processes serve different certificates")
	}
	// Both got the certificate from the store: the one order's.
	a := adminStorage(t, e, via1[0])
	stored, err := a.Load(context.Background(), "certificates/"+issuerKey(e.pb.dirURL)+"/"+
		name+"/"+name+".crt")
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := pemLeaf(stored)
	if !bytes.Equal(leaf, l1) {
		t.Fatal("the served certificate is not the stored one")
	}
	c, _ := x509.ParseCertificate(l1)
	t.Logf("%s: one order; both serve serial %x, issued by %q, verified by openssl",
		name, c.SerialNumber, c.Issuer.CommonName)
}

func (e *e2e) tenant(t *testing.T, b *broker) {
	bad := runCertmagic(t, e.bin, "tenant-b", e.args(t, []string{b.endpoint}, "tenant", "b.example")...)
	l := bad.expect(t, "error:")
	if !strings.Contains(l, "denied") {
		t.Fatalf("the tenant's b.example failed, but not as a refusal: %s", l)
	}
	t.Logf("b.example refused: %s", l)
	good := runCertmagic(t, e.bin, "tenant-a", e.args(t, []string{b.endpoint}, "tenant", "a.example")...)
	good.expect(t, "managed")
	a := adminStorage(t, e, b.endpoint)
	keys, err := a.List(context.Background(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	sawA := false
	for _, k := range keys {
		if strings.Contains(k, "b.example") {
			t.Fatalf("the refused tenant wrote %s", k)
		}
		sawA = sawA || strings.HasSuffix(k, "/a.example.crt")
	}
	if !sawA {
		t.Fatalf("a.example's certificate is not stored: %q", keys)
	}
	t.Logf("stored: %d keys, none of b.example's", len(keys))
}

func adminStorage(t *testing.T, e *e2e, endpoint string) *Storage {
	c := e.clients[0]
	s, err := New(Options{Endpoint: endpoint, ServerPublicKey: e.server[0], PublicKey: c.pub,
		SecretKey: c.sec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// issuerKey is certmagic's folder for an ACME directory URL.
func issuerKey(dir string) string {
	u := strings.TrimPrefix(dir, "https://")
	host, path, _ := strings.Cut(u, "/")
	return strings.ReplaceAll(host, ":", "-") + "-" + strings.ReplaceAll(path, "/", "-")
}

// pemLeaf is the DER of the first certificate of a PEM bundle.
func pemLeaf(b []byte) ([]byte, error) {
	for {
		blk, rest := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("no certificate in the bundle")
		}
		if blk.Type == "CERTIFICATE" {
			return blk.Bytes, nil
		}
		b = rest
	}
}
