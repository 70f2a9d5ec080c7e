// Command certmagic_bench times the same certmagic storage operations
// on certmagic's own FileStorage (A), on tsecstorage through tsec-broker
// (B) and on a FileStorage that keeps the broker's crash promise (C:
// each Store a temporary file, fsync, rename, folder fsync; certmagic's
// own does none of it), in one process, in six phases A1 B1 C1 C2 B2
// A2, so that drift on a shared machine hits every side alike
// (perf/certmagic.sh starts the broker and runs it).
//
// Each operation works on one 6 KiB certificate set (certificate chain,
// key, metadata: certmagic's three keys of a site); each phase times n
// rounds of each and keeps the median.  A side's figure is the mean of
// its two phase medians; drift is A2/A1 - 1 and B2/B1 - 1.
//
// Output, CSV: "phase,case,median_ns" rows, then
// "ratio,case,a_ns,b_ns,c_ns,b_over_a,b_over_c,drift_a,drift_b,drift_c"
// rows.
package main

/*
#cgo pkg-config: tinysecurity
#include <stdlib.h>
#include <time.h>
#include <tinysecurity/client.h>

// n "health" calls through the C client alone, each timed in C: the
// floor a call through tsecstorage stands on, without Go's part.
static int ping_c(const char *ep, const char *spub, const char *pub, const char *sec,
		  long long *ns, int n)
{
	struct tsec_client_opts o = { .endpoint = ep, .server_public_key = spub,
				      .public_key = pub, .secret_key = sec };
	struct tsec_client *c;
	struct tsec_error err;

	if (tsec_client_open(&c, &o, &err))
		return -1;
	for (int i = 0; i < n; i++) {
		struct timespec a, b;

		clock_gettime(CLOCK_MONOTONIC, &a);
		if (tsec_client_call(c, "health", NULL, NULL, &err)) {
			tsec_client_close(&c);
			return -1;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[i] = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
	}
	tsec_client_close(&c);
	return 0;
}
*/
import "C"

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/caddyserver/certmagic"
	"tinysecurity.dev/tsecstorage"
)

var ctx = context.Background()

// set is one site's three keys, 6 KiB in all.
type set struct {
	prefix string
	keys   [3]string
	vals   [3][]byte
}

func newSet(issuer, domain string) *set {
	p := path.Join("certificates", issuer, domain)
	s := &set{prefix: p}
	for i, ext := range []string{".crt", ".key", ".json"} {
		s.keys[i] = path.Join(p, domain+ext)
	}
	pemLine := "MIIFazCCA1OgAwIBAgIRAIIQz7DSQONZRGPgu2OCiwAwDQYJKoZIhvcNAQELBQAw\n"
	s.vals[0] = []byte("-----BEGIN CERTIFICATE-----\n" + strings.Repeat(pemLine, 60) +
		"-----END CERTIFICATE-----\n")
	s.vals[1] = []byte("-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat(pemLine, 27) +
		"-----END RSA PRIVATE KEY-----\n")
	s.vals[2] = bytes.Repeat([]byte(`{"sans":["`+domain+`"],"issuer_data":{}}`), 6)
	return s
}

func (s *set) size() int { return len(s.vals[0]) + len(s.vals[1]) + len(s.vals[2]) }

// syncFileStorage is certmagic's FileStorage writing as the broker's
// file backend does: a value reaches the disk before it replaces the
// old one, and the rename reaches it before Store returns.
type syncFileStorage struct{ certmagic.FileStorage }

func (s *syncFileStorage) Store(_ context.Context, key string, v []byte) error {
	name := s.Filename(key)
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(v); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type op struct {
	name string
	fn   func(st certmagic.Storage, s *set) error
}

var ops = []op{
	{"store_set", func(st certmagic.Storage, s *set) error {
		for i := range s.keys {
			if err := st.Store(ctx, s.keys[i], s.vals[i]); err != nil {
				return err
			}
		}
		return nil
	}},
	{"load_set", func(st certmagic.Storage, s *set) error {
		for i := range s.keys {
			v, err := st.Load(ctx, s.keys[i])
			if err != nil {
				return err
			}
			if len(v) != len(s.vals[i]) {
				return fmt.Errorf("%s: %d bytes, want %d", s.keys[i], len(v), len(s.vals[i]))
			}
		}
		return nil
	}},
	{"exists_set", func(st certmagic.Storage, s *set) error {
		for i := range s.keys {
			if !st.Exists(ctx, s.keys[i]) {
				return fmt.Errorf("%s: missing", s.keys[i])
			}
		}
		return nil
	}},
	{"list_site", func(st certmagic.Storage, s *set) error {
		k, err := st.List(ctx, s.prefix, false)
		if err == nil && len(k) != 3 {
			err = fmt.Errorf("%s: %d keys", s.prefix, len(k))
		}
		return err
	}},
	{"lock_unlock", func(st certmagic.Storage, s *set) error {
		if err := st.Lock(ctx, "renew_cert_"+path.Base(s.prefix)); err != nil {
			return err
		}
		return st.Unlock(ctx, "renew_cert_"+path.Base(s.prefix))
	}},
	// A renewal turn as certmagic makes it: the lock, a look at the
	// stored certificate, the three new files, the unlock.
	{"renewal_turn", func(st certmagic.Storage, s *set) error {
		name := "renew_cert_" + path.Base(s.prefix)
		if err := st.Lock(ctx, name); err != nil {
			return err
		}
		if _, err := st.Load(ctx, s.keys[0]); err != nil {
			return err
		}
		for i := range s.keys {
			if err := st.Store(ctx, s.keys[i], s.vals[i]); err != nil {
				return err
			}
		}
		return st.Unlock(ctx, name)
	}},
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// phase times n rounds of each op on st and returns each op's median.
func phase(st certmagic.Storage, s *set, n int) (map[string]float64, error) {
	out := map[string]float64{}
	for _, o := range ops {
		t := make([]float64, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := o.fn(st, s); err != nil {
				return nil, fmt.Errorf("%s: %w", o.name, err)
			}
			t[i] = float64(time.Since(t0).Nanoseconds())
		}
		out[o.name] = median(t)
	}
	return out, nil
}

func main() {
	endpoint := flag.String("endpoint", "", "the broker")
	serverKey := flag.String("server-key", "", "the broker's public key file")
	key := flag.String("key", "", "this client's key pair prefix")
	dir := flag.String("dir", "", "certmagic FileStorage's folder")
	n := flag.Int("n", 200, "rounds of each operation per phase")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "certmagic_bench:", err)
		os.Exit(1)
	}
	spub, err := os.ReadFile(*serverKey)
	if err != nil {
		fail(err)
	}
	pub, sec, err := tsecstorage.LoadKeyPair(*key)
	if err != nil {
		fail(err)
	}
	ts, err := tsecstorage.New(tsecstorage.Options{Endpoint: *endpoint,
		ServerPublicKey: strings.TrimSpace(string(spub)), PublicKey: pub, SecretKey: sec})
	if err != nil {
		fail(err)
	}
	defer ts.Close()
	if err := os.MkdirAll(*dir+"/sync", 0o700); err != nil {
		fail(err)
	}
	sides := map[string]certmagic.Storage{"A": &certmagic.FileStorage{Path: *dir + "/plain"},
		"B": ts, "C": &syncFileStorage{certmagic.FileStorage{Path: *dir + "/sync"}}}
	s := newSet("acme-bench", "bench.example")
	if s.size() < 6000 || s.size() > 6400 {
		fail(fmt.Errorf("the set is %d bytes, not 6 KiB", s.size()))
	}
	// Warm both (the set written, connections open), discarded.
	for _, st := range sides {
		if _, err := phase(st, s, 1+*n/10); err != nil {
			fail(err)
		}
	}
	res := map[string]map[string]float64{}
	fmt.Println("phase,case,median_ns")
	for _, p := range []string{"A1", "B1", "C1", "C2", "B2", "A2"} {
		r, err := phase(sides[p[:1]], s, *n)
		if err != nil {
			fail(fmt.Errorf("phase %s: %w", p, err))
		}
		res[p] = r
		for _, o := range ops {
			fmt.Printf("%s,%s,%.0f\n", p, o.name, r[o.name])
		}
	}
	// The floor of a call through the broker, in the same run: the
	// C client alone, then the same call through tsecstorage.
	fmt.Println("floor,case,median_ns")
	for _, f := range []string{"ping_c", "ping_go", "ping_c", "ping_go"} {
		t := make([]float64, *n)
		if f == "ping_c" {
			ns := make([]C.longlong, *n)
			cs := []*C.char{C.CString(*endpoint), C.CString(strings.TrimSpace(string(spub))),
				C.CString(pub), C.CString(sec)}
			rc := C.ping_c(cs[0], cs[1], cs[2], cs[3], &ns[0], C.int(*n))
			for _, c := range cs {
				C.free(unsafe.Pointer(c))
			}
			if rc != 0 {
				fail(fmt.Errorf("ping_c failed"))
			}
			for i := range ns {
				t[i] = float64(ns[i])
			}
		} else {
			for i := range t {
				t0 := time.Now()
				if err := ts.Ping(ctx); err != nil {
					fail(err)
				}
				t[i] = float64(time.Since(t0).Nanoseconds())
			}
		}
		fmt.Printf("floor,%s,%.0f\n", f, median(t))
	}
	fmt.Println("ratio,case,a_ns,b_ns,c_ns,b_over_a,b_over_c,drift_a,drift_b,drift_c")
	for _, o := range ops {
		side := func(x string) (float64, float64) {
			m1, m2 := res[x+"1"][o.name], res[x+"2"][o.name]
			return (m1 + m2) / 2, 100 * (m2/m1 - 1)
		}
		a, da := side("A")
		b, db := side("B")
		c, dc := side("C")
		fmt.Printf("ratio,%s,%.0f,%.0f,%.0f,%.2f,%.2f,%+.1f%%,%+.1f%%,%+.1f%%\n", o.name, a, b, c,
			b/a, b/c, da, db, dc)
		if math.IsNaN(b / a) {
			fail(fmt.Errorf("%s: no figure", o.name))
		}
	}
}
