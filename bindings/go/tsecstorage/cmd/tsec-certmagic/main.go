// Command tsec-certmagic obtains certificates with certmagic, keeping
// every certificate, key, account and lock in tsec-broker through
// tsecstorage, and serves TLS with them: a whole certmagic program in a
// page, and the end-to-end tests' ACME client.
//
//	tsec-certmagic -brokers tcp://127.0.0.1:7300 -server-key server.pub \
//	    -key issuer -ca https://acme.example/dir -email ops@example.com \
//	    -domains example.com,www.example.com -serve 127.0.0.1:8443
//
// It prints "managed" once certmagic has the certificates (obtained or
// loaded from storage) and "serving ADDR" once it listens; it stops when
// its standard input closes or on SIGTERM.  Any failure is one line
// "error: ..." and exit status 2.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"tinysecurity.dev/tsecstorage"
)

func fail(f string, a ...interface{}) {
	fmt.Printf("error: "+f+"\n", a...)
	os.Exit(2)
}

func main() {
	brokers := flag.String("brokers", "", "broker endpoints, comma-separated (tried in turn)")
	serverKey := flag.String("server-key", "", "the brokers' CURVE public key file (NAME.pub)")
	key := flag.String("key", "", "this client's key pair, as `tsec keygen --curve PREFIX` wrote it")
	ca := flag.String("ca", "", "the ACME directory URL")
	caRoot := flag.String("ca-root", "", "a PEM file of roots to trust for the ACME server's https")
	email := flag.String("email", "", "the ACME account's email")
	domains := flag.String("domains", "", "names to manage, comma-separated")
	httpPort := flag.Int("http-port", 0, "the HTTP-01 challenge port (0: certmagic's default, 80)")
	serve := flag.String("serve", "", "serve TLS on this address once managed")
	lockTTL := flag.Duration("lock-ttl", 0, "lease of certmagic's locks (0: tsecstorage's default)")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up managing after this long")
	flag.Parse()
	if *brokers == "" || *serverKey == "" || *key == "" || *ca == "" || *domains == "" {
		fail("need -brokers, -server-key, -key, -ca and -domains")
	}
	spub, err := os.ReadFile(*serverKey)
	if err != nil {
		fail("%v", err)
	}
	pub, sec, err := tsecstorage.LoadKeyPair(*key)
	if err != nil {
		fail("%v", err)
	}
	o := tsecstorage.Options{PublicKey: pub, SecretKey: sec, LockTTL: *lockTTL}
	for _, ep := range strings.Split(*brokers, ",") {
		o.Brokers = append(o.Brokers, tsecstorage.Broker{Endpoint: ep,
			ServerPublicKey: strings.TrimSpace(string(spub))})
	}
	if len(o.Brokers) == 1 {
		o.Endpoint, o.ServerPublicKey, o.Brokers = o.Brokers[0].Endpoint,
			o.Brokers[0].ServerPublicKey, nil
	}
	storage, err := tsecstorage.New(o)
	if err != nil {
		fail("%v", err)
	}
	defer storage.Close()

	var roots *x509.CertPool
	if *caRoot != "" {
		pem, err := os.ReadFile(*caRoot)
		if err != nil {
			fail("%v", err)
		}
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
	}
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.Lock(os.Stderr), zap.InfoLevel))

	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           logger,
	})
	defer cache.Stop()
	cfg = certmagic.New(cache, certmagic.Config{Storage: storage, Logger: logger})
	cfg.Issuers = []certmagic.Issuer{certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
		CA: *ca, TestCA: *ca, Email: *email, Agreed: true, TrustedRoots: roots,
		DisableTLSALPNChallenge: true, AltHTTPPort: *httpPort, ListenHost: "127.0.0.1",
		Logger: logger,
	})}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := cfg.ManageSync(ctx, strings.Split(*domains, ",")); err != nil {
		fail("%v", err)
	}
	fmt.Println("managed")
	if *serve == "" {
		return
	}
	ln, err := net.Listen("tcp", *serve)
	if err != nil {
		fail("%v", err)
	}
	tc := cfg.TLSConfig()
	tc.NextProtos = []string{"http/1.1"}
	tl := tls.NewListener(ln, tc)
	fmt.Printf("serving %s\n", ln.Addr())
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if t, ok := c.(*tls.Conn); ok && t.Handshake() == nil {
					io.WriteString(c, "hello from "+t.ConnectionState().ServerName+"\n")
				}
			}(c)
		}
	}()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-stop:
	case <-eof:
	}
	tl.Close()
}
