package tsecstorage

// certmagic's storage cleaner under the shipped policy
// (examples/certmagic-policy.json): CleanStorage removes an expired
// certificate (its .crt, .key and .json, then the emptied folder) and an
// expired OCSP staple, and keeps a valid certificate and a fresh staple;
// a TLS reader under the same policy may serve them but clean nothing.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"golang.org/x/crypto/ocsp"
)

// leafPEM is a self-signed certificate for name ending at notAfter, and
// its key.
func leafPEM(t *testing.T, name string, notAfter time.Time) (*x509.Certificate,
	crypto.Signer, []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notAfter.Add(-90 * 24 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true,
		BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, k, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// staple is an OCSP response for c (its own issuer) valid until next.
func staple(t *testing.T, c *x509.Certificate, k crypto.Signer, next time.Time) []byte {
	b, err := ocsp.CreateResponse(c, c, ocsp.Response{Status: ocsp.Good,
		SerialNumber: c.SerialNumber, ThisUpdate: next.Add(-time.Hour), NextUpdate: next}, k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCleanStorageShippedPolicy(t *testing.T) {
	dir := t.TempDir()
	clients := newClients(t, dir, "node=svc:node1", "reader=svc:web1")
	clients[0].roles = []string{"certmagic"}
	clients[1].roles = []string{"tls-reader"}
	clients[1].admin = false
	b := startBroker(t, brokerSpec{policy: shippedPolicy(t, ""), clients: clients})
	node, reader := b.storageAs(t, "node", Options{}), b.storageAs(t, "reader", Options{})
	ctx := context.Background()
	const issuer = "certificates/acme-v02.api.letsencrypt.org-directory/"
	oldC, oldK, oldPEM := leafPEM(t, "old.example", time.Now().Add(-48*time.Hour))
	newC, newK, newPEM := leafPEM(t, "new.example", time.Now().Add(48*time.Hour))
	for name, crt := range map[string][]byte{"old.example": oldPEM, "new.example": newPEM} {
		base := issuer + name + "/" + name
		for key, v := range map[string][]byte{base + ".crt": crt,
			base + ".key": []byte("-----BEGIN EC PRIVATE KEY-----\n"), base + ".json": []byte("{}")} {
			if err := node.Store(ctx, key, v); err != nil {
				t.Fatalf("the shipped policy refuses certmagic's %s: %v", key, err)
			}
		}
	}
	stale, fresh := "ocsp/old.example-0123abcd", "ocsp/new.example-4567cdef"
	if err := node.Store(ctx, stale, staple(t, oldC, oldK, time.Now().Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := node.Store(ctx, fresh, staple(t, newC, newK, time.Now().Add(24*time.Hour))); err != nil {
		t.Fatal(err)
	}

	// A reader serves, but its cleaner removes nothing.
	if _, err := reader.Load(ctx, issuer+"new.example/new.example.key"); err != nil {
		t.Fatalf("a tls-reader cannot load a key to serve: %v", err)
	}
	certmagic.CleanStorage(ctx, reader, certmagic.CleanStorageOptions{OCSPStaples: true,
		ExpiredCerts: true})
	if !node.Exists(ctx, issuer+"old.example/old.example.crt") || !node.Exists(ctx, stale) {
		t.Fatal("a tls-reader's cleaner deleted something")
	}

	certmagic.CleanStorage(ctx, node, certmagic.CleanStorageOptions{OCSPStaples: true,
		ExpiredCerts: true, ExpiredCertGracePeriod: time.Hour})
	for _, gone := range []string{issuer + "old.example/old.example.crt",
		issuer + "old.example/old.example.key", issuer + "old.example/old.example.json",
		issuer + "old.example", stale} {
		if node.Exists(ctx, gone) {
			t.Errorf("CleanStorage left %s", gone)
		}
	}
	for _, kept := range []string{issuer + "new.example/new.example.crt",
		issuer + "new.example/new.example.key", issuer + "new.example/new.example.json", fresh} {
		if !node.Exists(ctx, kept) {
			t.Errorf("CleanStorage removed %s", kept)
		}
	}
	// Accounts are never deleted, whoever asks.
	acct := "acme/acme-v02.api.letsencrypt.org-directory/users/ops@example/ops.json"
	if err := node.Store(ctx, acct, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := node.Delete(ctx, acct); err == nil || !node.Exists(ctx, acct) {
		t.Fatalf("an account was deleted: %v", err)
	}
}
