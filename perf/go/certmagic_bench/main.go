// Command certmagic_bench times the same certmagic storage operations
// on certmagic's own FileStorage (A), on tsecstorage through tsec-broker
// (B) and on a FileStorage that keeps the broker's crash promise (C:
// each Store a temporary file, fsync, rename, folder fsync; certmagic's
// own does none of it), in one process (perf/certmagic.sh starts the
// broker and runs it).
//
// Interleaved, so that a machine whose speed drifts weighs on every side
// alike: each operation is warmed up on each side, then run in rounds of
// short blocks (k runs each), the sides' order turning each round (A B C
// C B A, then B C A A C B, ...).  A side's figure is the median of its
// block medians; its drift is the median of the last half of its blocks
// against the first half's.  A ratio (B/A, B/C) is taken round by round,
// each round's blocks against each other, so that drift between rounds
// cancels; with -gate P the run fails when a ratio's last half moved more
// than P% from its first half (it is then no evidence).  Then the floor
// of a call: health and a 4 KiB Load through the C client alone and
// through tsecstorage, wall and this process's CPU per call.
//
// Output, CSV: "floor,case,median_ns,cpu_ns_per_call" rows, then
// "ratio,case,a_ns,b_ns,c_ns,b_over_a,b_over_c,drift_a,drift_b,drift_c"
// rows, then "gate,worst_drift,...".
package main

/*
#cgo pkg-config: tinysecurity
#include <stdlib.h>
#include <time.h>
#include <tinysecurity/client.h>

// The C client alone, opened once and kept, as tsecstorage keeps its
// connections.
static struct tsec_client *open_c(const char *ep, const char *spub, const char *pub,
				  const char *sec)
{
	struct tsec_client_opts o = { .endpoint = ep, .server_public_key = spub,
				      .public_key = pub, .secret_key = sec };
	struct tsec_client *c;
	struct tsec_error err;

	return tsec_client_open(&c, &o, &err) ? NULL : c;
}

// n calls through c, each timed in C: "health" (the floor a call through
// tsecstorage stands on, without Go's part), or with params a load whose
// value comes as a frame, as tsecstorage's Load asks it.
static int calls_c(struct tsec_client *c, const char *params, long long *ns, int n)
{
	struct tsec_error err;

	for (int i = 0; i < n; i++) {
		struct tsec_client_frame out[TSEC_CLIENT_MAX_FRAMES];
		struct timespec a, b;
		size_t nout = 0;
		char *res = NULL;
		int rc;

		clock_gettime(CLOCK_MONOTONIC, &a);
		rc = params ? tsec_client_call_frames(c, "store.get", params, NULL, 0, &res, out,
						      &nout, &err)
			    : tsec_client_call(c, "health", NULL, NULL, &err);
		if (rc)
			return -1;
		free(res);
		tsec_client_frames_free(out, nout);
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[i] = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
	}
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
	"syscall"
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

// The calls certmagic makes, one key each (the set's certificate, 4.4
// KiB), a lock taken and given back, and a renewal turn as certmagic
// makes it: the lock, a look at the stored certificate, the three new
// files, the unlock.
var ops = []op{
	{"load", func(st certmagic.Storage, s *set) error {
		v, err := st.Load(ctx, s.keys[0])
		if err == nil && len(v) != len(s.vals[0]) {
			err = fmt.Errorf("%s: %d bytes, want %d", s.keys[0], len(v), len(s.vals[0]))
		}
		return err
	}},
	{"exists", func(st certmagic.Storage, s *set) error {
		if !st.Exists(ctx, s.keys[0]) {
			return fmt.Errorf("%s: missing", s.keys[0])
		}
		return nil
	}},
	{"stat", func(st certmagic.Storage, s *set) error {
		ki, err := st.Stat(ctx, s.keys[0])
		if err == nil && ki.Size != int64(len(s.vals[0])) {
			err = fmt.Errorf("%s: size %d", s.keys[0], ki.Size)
		}
		return err
	}},
	{"store", func(st certmagic.Storage, s *set) error {
		return st.Store(ctx, s.keys[0], s.vals[0])
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
	w := append([]float64(nil), v...)
	sort.Float64s(w)
	return w[len(w)/2]
}

// block times k runs of fn and returns their median.
func block(k int, fn func() error) (float64, error) {
	t := make([]float64, k)
	for i := range t {
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		t[i] = float64(time.Since(t0).Nanoseconds())
	}
	return median(t), nil
}

// The sides' order in each round: every side early and late alike
// (A B C C B A), so that a machine slowing down within a round weighs on
// all of them alike; rounds alternate with the mirror order.
var order = [][]string{{"A", "B", "C", "C", "B", "A"}, {"B", "C", "A", "A", "C", "B"},
	{"C", "A", "B", "B", "A", "C"}}

// result is one side's figure for one op: the median of its block
// medians, and its drift, the last half of the rounds' median against
// the first half's.
type result struct {
	ns, drift float64
}

func summarize(blocks []float64) result {
	h := len(blocks) / 2
	m1, m2 := median(blocks[:h]), median(blocks[h:])
	return result{median(blocks), 100 * (m2/m1 - 1)}
}

// ratio is x's blocks over y's, round by round (each side runs two
// blocks a round), so that the machine's drift between rounds cancels:
// the median of the rounds' ratios, and the ratio's own drift, the last
// half of the rounds against the first (what the gate judges: a ratio
// that moved within the run is no evidence).
func ratio(x, y []float64) (r, drift float64) {
	rs := make([]float64, len(x)/2)
	for i := range rs {
		rs[i] = median(x[2*i:2*i+2]) / median(y[2*i:2*i+2])
	}
	h := len(rs) / 2
	return median(rs), 100 * (median(rs[h:])/median(rs[:h]) - 1)
}

// interleave runs each op on every side in rounds of short blocks (k
// runs each), sides in turn as order says, after a warm-up of each op
// on each side; the blocks of a side make its figure.
func interleave(sides map[string]certmagic.Storage, s *set, rounds, k int) (
	map[string]map[string]result, error) {
	out := map[string]map[string]result{}
	for _, o := range ops {
		for _, name := range []string{"A", "B", "C"} {
			st := sides[name]
			// Warm-up: a tenth of the runs (caches, connections, the
			// broker's workers and Go's heap settle first).
			if _, err := block(rounds*k/5+2*k, func() error { return o.fn(st, s) }); err != nil {
				return nil, fmt.Errorf("%s on %s: %w", o.name, name, err)
			}
		}
		blocks := map[string][]float64{}
		for r := 0; r < rounds; r++ {
			for _, name := range order[r%len(order)] {
				st := sides[name]
				m, err := block(k, func() error { return o.fn(st, s) })
				if err != nil {
					return nil, fmt.Errorf("%s on %s: %w", o.name, name, err)
				}
				blocks[name] = append(blocks[name], m)
			}
		}
		out[o.name] = map[string]result{}
		for name, b := range blocks {
			out[o.name][name] = summarize(b)
		}
		ba, dba := ratio(blocks["B"], blocks["A"])
		bc, dbc := ratio(blocks["B"], blocks["C"])
		out[o.name]["B/A"] = result{ba, dba}
		out[o.name]["B/C"] = result{bc, dbc}
	}
	return out, nil
}

// cpuNs is the process's CPU time so far (every thread, user and system).
func cpuNs() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}

// switches counts the context switches of every thread of this process
// so far (Go's, the client library's ZeroMQ thread), from /proc.
func switches() float64 {
	dirs, _ := filepath.Glob("/proc/self/task/*/status")
	n := 0.0
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			var v float64
			if strings.HasSuffix(strings.Fields(l + " x")[0], "ctxt_switches:") {
				fmt.Sscanf(strings.Fields(l)[1], "%g", &v)
				n += v
			}
		}
	}
	return n
}

// floors times the cheapest call (health) and a 4 KiB Load through the C
// client alone and through tsecstorage, interleaved in blocks as the ops
// are: wall (median of block medians) and CPU per call of this process.
func floors(ts *tsecstorage.Storage, s *set, ep, spub, pub, sec string, rounds, k int) {
	cs := []*C.char{C.CString(ep), C.CString(spub), C.CString(pub), C.CString(sec),
		C.CString(fmt.Sprintf(`{"key":%q}`, s.keys[0]))}
	defer func() {
		for _, c := range cs {
			C.free(unsafe.Pointer(c))
		}
	}()
	cc := C.open_c(cs[0], cs[1], cs[2], cs[3])
	if cc == nil {
		fmt.Fprintln(os.Stderr, "certmagic_bench: the C client did not open")
		os.Exit(1)
	}
	defer C.tsec_client_close(&cc)
	type floor struct {
		name string
		run  func() ([]float64, error)
	}
	inC := func(get bool) func() ([]float64, error) {
		return func() ([]float64, error) {
			ns := make([]C.longlong, k)
			var params *C.char
			if get {
				params = cs[4]
			}
			if C.calls_c(cc, params, &ns[0], C.int(k)) != 0 {
				return nil, fmt.Errorf("the C client failed")
			}
			t := make([]float64, k)
			for i := range ns {
				t[i] = float64(ns[i])
			}
			return t, nil
		}
	}
	inGo := func(get bool) func() ([]float64, error) {
		return func() ([]float64, error) {
			t := make([]float64, k)
			for i := range t {
				t0 := time.Now()
				var err error
				if get {
					_, err = ts.Load(ctx, s.keys[0])
				} else {
					err = ts.Ping(ctx)
				}
				if err != nil {
					return nil, err
				}
				t[i] = float64(time.Since(t0).Nanoseconds())
			}
			return t, nil
		}
	}
	fs := []floor{{"ping_c", inC(false)}, {"ping_go", inGo(false)},
		{"get4k_c", inC(true)}, {"get4k_go", inGo(true)}}
	for _, f := range fs { // warm: connections made, caches filled
		for i := 0; i < 2; i++ {
			if _, err := f.run(); err != nil {
				fmt.Fprintln(os.Stderr, "certmagic_bench:", f.name, err)
				os.Exit(1)
			}
		}
	}
	wall := map[string][]float64{}
	cpu := map[string][]float64{}
	sw := map[string][]float64{}
	fmt.Println("floor,case,median_ns,cpu_ns_per_call,switches_per_call")
	for r := 0; r < rounds; r++ {
		for j := range fs {
			f := fs[(j+r)%len(fs)]
			c0, s0 := cpuNs(), switches()
			t, err := f.run()
			if err != nil {
				fmt.Fprintln(os.Stderr, "certmagic_bench:", f.name, err)
				os.Exit(1)
			}
			cpu[f.name] = append(cpu[f.name], (cpuNs()-c0)/float64(k))
			sw[f.name] = append(sw[f.name], (switches()-s0)/float64(k))
			wall[f.name] = append(wall[f.name], median(t))
		}
	}
	for _, f := range fs {
		fmt.Printf("floor,%s,%.0f,%.0f,%.1f\n", f.name, median(wall[f.name]), median(cpu[f.name]),
			median(sw[f.name]))
	}
	// Go's part: each round's Go block against its C block, so that
	// the machine's drift between rounds cancels; the median of those.
	diff := func(m map[string][]float64, g, c string) float64 {
		d := make([]float64, len(m[g]))
		for i := range d {
			d[i] = m[g][i] - m[c][i]
		}
		return median(d)
	}
	for _, x := range [][3]string{{"go_over_c_ping", "ping_go", "ping_c"},
		{"go_over_c_get4k", "get4k_go", "get4k_c"}} {
		fmt.Printf("floor,%s,%.0f,%.0f,%.1f\n", x[0], diff(wall, x[1], x[2]),
			diff(cpu, x[1], x[2]), diff(sw, x[1], x[2]))
	}
}

func main() {
	endpoint := flag.String("endpoint", "", "the broker")
	serverKey := flag.String("server-key", "", "the broker's public key file")
	key := flag.String("key", "", "this client's key pair prefix")
	dir := flag.String("dir", "", "certmagic FileStorage's folder")
	n := flag.Int("n", 4000, "runs of each operation on each side")
	k := flag.Int("k", 20, "runs in one block")
	gate := flag.Float64("gate", 0, "fail when a side drifts more than this many percent (0: never)")
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
	// The set on every side, so reads find it.
	for _, st := range sides {
		for i := range s.keys {
			if err := st.Store(ctx, s.keys[i], s.vals[i]); err != nil {
				fail(err)
			}
		}
	}
	if *n < 4**k { // a smoke: two rounds of small blocks
		*k = *n/4 + 1
	}
	rounds := *n / (2 * *k)
	if rounds < 2 {
		rounds = 2
	}
	res, err := interleave(sides, s, rounds, *k)
	if err != nil {
		fail(err)
	}
	floors(ts, s, *endpoint, strings.TrimSpace(string(spub)), pub, sec, 4*rounds, 2**k)
	fmt.Println("ratio,case,a_ns,b_ns,c_ns,b_over_a,b_over_c,drift_a,drift_b,drift_c," +
		"drift_b_over_a,drift_b_over_c")
	worst := 0.0
	for _, o := range ops {
		r := res[o.name]
		a, b, c, ba, bc := r["A"], r["B"], r["C"], r["B/A"], r["B/C"]
		fmt.Printf("ratio,%s,%.0f,%.0f,%.0f,%.2f,%.2f,%+.1f%%,%+.1f%%,%+.1f%%,%+.1f%%,%+.1f%%\n",
			o.name, a.ns, b.ns, c.ns, ba.ns, bc.ns, a.drift, b.drift, c.drift, ba.drift,
			bc.drift)
		if math.IsNaN(ba.ns) || math.IsNaN(bc.ns) {
			fail(fmt.Errorf("%s: no figure", o.name))
		}
		worst = math.Max(worst, math.Max(math.Abs(ba.drift), math.Abs(bc.drift)))
	}
	fmt.Printf("gate,worst_ratio_drift,%.1f%%,limit,%.0f%%\n", worst, *gate)
	if *gate > 0 && worst > *gate {
		fail(fmt.Errorf("a ratio moved %.1f%% within the run (gate %.0f%%): no ratio here is "+
			"evidence; run it again on a quieter machine", worst, *gate))
	}
}
