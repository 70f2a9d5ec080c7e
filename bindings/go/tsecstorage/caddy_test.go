package tsecstorage

// Caddy's on-demand TLS, end to end, with the caddy binary Debian
// packages (2.6.2): two Caddy processes, each asking its own tsec-broker
// (the "ask" listener) before it obtains a certificate, the two brokers
// over one etcd, pebble the CA (PEBBLE_VA_ALWAYS_VALID: no challenge is
// fetched).  An allowed name completes an openssl handshake with the
// certificate pebble issued; a refused name gets no certificate and
// nothing is ordered; the rate's N+1-th new name is refused whichever
// Caddy and broker it comes through, because the brokers count on the
// shared etcd; every answer is in the brokers' decision logs.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

const caddyPolicy = `{"version": 1,
 "description": "Caddy's on-demand TLS: names under caddy.test, two new ones an hour",
 "rules": [
  {"id": "edge-obtains", "effect": "allow", "principal": ["svc:caddy"],
   "action": ["cert.obtain"], "resource": ["names/*"], "domain": ["*.caddy.test"],
   "when": {"rate": {"max_new": 2, "window_s": 3600}}},
  {"id": "never-admin", "effect": "deny", "action": ["cert.obtain"],
   "resource": ["names/admin.caddy.test"]}
 ]}`

type caddyProc struct {
	p     *proc
	https string // 127.0.0.1:PORT
}

// startCaddy runs caddy on examples/Caddyfile (on-demand TLS) asking
// askURL, its storage in a folder of its own.
func startCaddy(t *testing.T, pb *pebble, askURL string) *caddyProc {
	t.Helper()
	dir := t.TempDir()
	example, err := os.ReadFile(filepath.Join(buildDir(t), "..", "..", "examples", "Caddyfile"))
	if err != nil || !bytes.Contains(example, []byte("ask http://127.0.0.1:7380/ask")) {
		t.Fatalf("examples/Caddyfile: %v", err)
	}
	for try := 0; try < 3; try++ {
		hp, sp := freePort(t), freePort(t)
		// The README's Caddyfile, asking this test's broker, with the
		// test's CA, ports and storage among its global options.
		conf := strings.Replace(string(example), "http://127.0.0.1:7380/ask", askURL, 1)
		conf = strings.Replace(conf, "{\n", fmt.Sprintf(`{
	admin off
	storage file_system %s
	acme_ca %s
	acme_ca_root %s
	http_port %d
	https_port %d
	skip_install_trust
`, filepath.Join(dir, "data"), pb.dirURL, pb.https, hp, sp), 1)
		cf := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "xdg-data"),
			"XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg-config")}
		p := spawn(t, filepath.Join(dir, fmt.Sprintf("caddy%d.log", try)), env, "caddy", "run",
			"--config", cf, "--adapter", "caddyfile")
		c := &caddyProc{p: p, https: fmt.Sprintf("127.0.0.1:%d", sp)}
		end := time.Now().Add(startDeadline)
		for p.alive() && time.Now().Before(end) {
			if conn, err := net.DialTimeout("tcp", c.https, time.Second); err == nil {
				conn.Close()
				return c
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.stop(syscall.SIGKILL)
		if try == 2 {
			t.Fatalf("caddy did not come up: %s", p.tail())
		}
	}
	return nil
}

// handshake asks c for name with openssl, verifying against root; the
// leaf, or nil and openssl's output when no verified handshake came.
func (c *caddyProc) handshake(t *testing.T, rootFile string, roots *x509.CertPool,
	name string) ([]byte, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*startDeadline)
	defer cancel()
	out, err := exec.CommandContext(ctx, "openssl", "s_client", "-connect", c.https,
		"-servername", name, "-CAfile", rootFile, "-verify_return_error",
		"-verify_hostname", name).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Verify return code: 0 (ok)") {
		return nil, tailOf(string(out), 12)
	}
	conn, err := tls.Dial("tcp", c.https, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		t.Fatalf("openssl verified %s, Go did not: %v", name, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw, ""
}

// pebbleCounts is how many orders pebble took and certificates it issued.
func pebbleCounts(pb *pebble) (orders, issued int) {
	b, _ := os.ReadFile(pb.p.log)
	return len(regexp.MustCompile(`POST /order-plz`).FindAll(b, -1)), issuedCount(b)
}

func TestCaddyOnDemand(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Fatal("caddy is not installed (sh scripts/deps.sh go installs it)")
	}
	pb := startPebble(t)
	dir := t.TempDir()
	rootFile := filepath.Join(dir, "root.pem")
	root := pb.root(t)
	os.WriteFile(rootFile, root, 0o600)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(root) {
		t.Fatalf("pebble's root: %q", root)
	}
	et := startEtcd(t, 1)
	clients := newClients(t, dir, "admin=svc:admin")
	var srv [2]string
	srv[0], srv[1] = keyPair(t, dir, "server")
	var brokers [2]*broker
	var asks [2]string
	for i := range brokers {
		port := freePort(t)
		asks[i] = fmt.Sprintf("http://127.0.0.1:%d/ask", port)
		brokers[i] = startBroker(t, brokerSpec{policy: caddyPolicy, clients: clients,
			server: srv, state: t.TempDir(),
			storage: map[string]interface{}{"backend": "etcd", "endpoints": et.endpoints,
				"prefix": "caddy", "timeout_ms": 5000},
			extra: map[string]interface{}{"ask": map[string]interface{}{
				"listen": fmt.Sprintf("127.0.0.1:%d", port), "principal": "svc:caddy"}}})
	}
	c1, c2 := startCaddy(t, pb, asks[0]), startCaddy(t, pb, asks[1])

	// An allowed name: a handshake with the certificate pebble issued.
	orders0, issued0 := pebbleCounts(pb)
	leaf, out := c1.handshake(t, rootFile, roots, "a.caddy.test")
	if leaf == nil {
		t.Fatalf("a.caddy.test: no verified handshake:\n%s\ncaddy: %s", out, c1.p.tail())
	}
	cert, _ := x509.ParseCertificate(leaf)
	if cert.VerifyHostname("a.caddy.test") != nil {
		t.Fatalf("a.caddy.test served a certificate for %v", cert.DNSNames)
	}
	if _, issued := pebbleCounts(pb); issued != issued0+1 {
		t.Fatalf("pebble issued %d certificates for a.caddy.test, want 1", issued-issued0)
	}
	t.Logf("a.caddy.test: serial %x issued by %q, verified by openssl", cert.SerialNumber,
		cert.Issuer.CommonName)

	// Refused names (outside the policy, and denied outright): no
	// certificate, and nothing ordered from pebble.
	for _, name := range []string{"a.other.test", "admin.caddy.test"} {
		orders1, issued1 := pebbleCounts(pb)
		if leaf, _ := c1.handshake(t, rootFile, roots, name); leaf != nil {
			t.Fatalf("%s: a certificate was served", name)
		}
		if orders, issued := pebbleCounts(pb); orders != orders1 || issued != issued1 {
			t.Fatalf("%s: pebble took %d orders and issued %d", name, orders-orders1,
				issued-issued1)
		}
	}

	// The second new name through the other Caddy and broker: allowed
	// (2 of 2); the third, through either, refused: one count in etcd.
	if leaf, out := c2.handshake(t, rootFile, roots, "b.caddy.test"); leaf == nil {
		t.Fatalf("b.caddy.test through the second broker: no handshake:\n%s", out)
	}
	orders2, issued2 := pebbleCounts(pb)
	for i, c := range []*caddyProc{c1, c2} {
		if leaf, _ := c.handshake(t, rootFile, roots, "c.caddy.test"); leaf != nil {
			t.Fatalf("c.caddy.test through caddy %d: the third new name was served", i+1)
		}
	}
	if orders, issued := pebbleCounts(pb); orders != orders2 || issued != issued2 {
		t.Fatalf("c.caddy.test: pebble took %d orders and issued %d", orders-orders2,
			issued-issued2)
	}
	// A name allowed before is no new name: the second Caddy, which has
	// none for it, may obtain a.caddy.test too.
	if leaf, out := c2.handshake(t, rootFile, roots, "a.caddy.test"); leaf == nil {
		t.Fatalf("a.caddy.test through the second Caddy: no handshake:\n%s", out)
	}
	ordersEnd, issuedEnd := pebbleCounts(pb)
	t.Logf("pebble: %d orders, %d certificates in all (%d and %d before the test's names)",
		ordersEnd, issuedEnd, orders0, issued0)

	// Every answer in the decision logs, with its reason.
	var logs []byte
	for _, b := range brokers {
		l, _ := os.ReadFile(filepath.Join(b.dir, "decisions.log"))
		logs = append(logs, l...)
	}
	for _, want := range []string{`"resource":"names/a.caddy.test","context":{},"decision":"allow"`,
		`"resource":"names/a.other.test","context":{},"decision":"deny"`,
		`"resource":"names/admin.caddy.test","context":{},"decision":"deny"`,
		`"resource":"names/c.caddy.test","context":{},"decision":"deny"`,
		`"why":"rate: 2 of 2 new names under caddy.test in 3600 s already allowed"`} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Fatalf("the decision logs lack %s:\n%s", want, logs)
		}
	}
}

// The Go binding's DecisionFunc, as certmagic's OnDemandConfig takes it,
// on a broker over files and one over redis (the Caddy test counts over
// etcd): allowed names pass, the rate's third new name and names outside
// the policy are refusals (ErrDenied) with the reason, a malformed name is
// refused, and Obtain's dry question counts nothing.
func TestDecisionFunc(t *testing.T) {
	dir := t.TempDir()
	clients := newClients(t, dir, "admin=svc:admin", "edge=svc:caddy")
	clients[1].admin = false
	t.Run("file", func(t *testing.T) {
		testDecisionFunc(t, startBroker(t, brokerSpec{policy: caddyPolicy, clients: clients}))
	})
	t.Run("redis", func(t *testing.T) {
		r := startRedis(t)
		testDecisionFunc(t, startBroker(t, brokerSpec{policy: caddyPolicy, clients: clients,
			state: t.TempDir(), storage: map[string]interface{}{"backend": "redis",
				"endpoints": []string{r}, "prefix": "ondemand", "timeout_ms": 3000}}))
	})
}

func testDecisionFunc(t *testing.T, b *broker) {
	s := b.storageAs(t, "edge", Options{})
	od := &certmagic.OnDemandConfig{DecisionFunc: s.DecisionFunc}
	for _, name := range []string{"one.caddy.test", "two.caddy.test", "one.caddy.test"} {
		if err := od.DecisionFunc(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	o, err := s.Obtain(context.Background(), "three.caddy.test", true)
	if err != nil || o.Allow || o.Used != 2 || o.MaxNew != 2 || o.Suffix != "caddy.test" {
		t.Fatalf("dry three.caddy.test: %+v, %v", o, err)
	}
	for _, c := range []struct{ name, why string }{
		{"three.caddy.test", "rate: 2 of 2 new names under caddy.test"},
		{"www.example.org", "not in [*.caddy.test]"},
		{"admin.caddy.test", "forbidden by rule"},
		{"bad name.caddy.test", "name:"},
	} {
		err := od.DecisionFunc(c.name)
		var e *Error
		if !errors.Is(err, ErrDenied) || !errors.As(err, &e) || !strings.Contains(e.Message, c.why) {
			t.Fatalf("%s: %v, want a refusal saying %q", c.name, err, c.why)
		}
	}
}
