package tsecstorage

// certmagic's storage contract (storage.go, certmagic 0.17), sentence by
// sentence, against tsec-broker over the file backend, etcd and redis.
// Learnt from the public suite oyato/certmagic-storage-tests (written
// for the context-free API); none of its code is here.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const contractPolicy = `{"version": 1,
 "rules": [
  {"id": "app-all", "effect": "allow", "principal": ["svc:app"],
   "action": ["storage.*", "lock.*"], "resource": ["**"]},
  {"id": "app-no-secrets", "effect": "deny", "principal": ["svc:app"],
   "action": ["storage.store"], "resource": ["secrets/**"]},
  {"id": "reader-reads", "effect": "allow", "principal": ["svc:reader"],
   "action": ["storage.load", "storage.exists", "storage.stat", "storage.list"],
   "resource": ["**"]}
 ]}`

// contractBrokers starts one broker per backend, each with the clients
// app (svc:app) and reader (svc:reader).
func contractBrokers(t *testing.T) map[string]*broker {
	dir := t.TempDir()
	cs := newClients(t, dir, "app=svc:app", "reader=svc:reader")
	cs[1].admin = false
	out := map[string]*broker{}
	out["file"] = startBroker(t, brokerSpec{policy: contractPolicy, clients: cs})
	e := startEtcd(t, 1)
	out["etcd"] = startBroker(t, brokerSpec{policy: contractPolicy, clients: cs,
		state: t.TempDir(), storage: map[string]interface{}{"backend": "etcd",
			"endpoints": e.endpoints, "prefix": "contract", "timeout_ms": 3000}})
	r := startRedis(t)
	out["redis"] = startBroker(t, brokerSpec{policy: contractPolicy, clients: cs,
		state: t.TempDir(), storage: map[string]interface{}{"backend": "redis",
			"endpoints": []string{r}, "prefix": "contract", "timeout_ms": 3000}})
	return out
}

var ctxBg = context.Background()

func TestContract(t *testing.T) {
	brokers := contractBrokers(t)
	for _, name := range []string{"file", "etcd", "redis"} {
		b := brokers[name]
		t.Run(name, func(t *testing.T) {
			for _, c := range contractCases {
				c := c
				t.Run(c.name, func(t *testing.T) { c.fn(t, b, c.name) })
			}
		})
	}
}

var contractCases = []struct {
	name string
	fn   func(t *testing.T, b *broker, prefix string)
}{
	{"EmptyKeyRefused", testEmptyKey},
	{"MissingKey", testMissingKey},
	{"NilAndEmptyValues", testNilAndEmpty},
	{"Overwrite", testOverwrite},
	{"BinaryValues", testBinary},
	{"AfterDelete", testAfterDelete},
	{"NestedPrefixes", testNested},
	{"ConcurrentStores", testConcurrentStores},
	{"Denied", testDenied},
	{"ContextCancelled", testContextCancelled},
	{"UnlockNotHeld", testUnlockNotHeld},
	{"LockExcludes", testLockExcludes},
	{"LocksManyGoroutines", testLocksMany},
	{"LockOutlivesTTL", testLockOutlivesTTL},
	{"LockExpiresWhenHolderDies", testLockHolderDies},
}

func app(t *testing.T, b *broker) *Storage { return b.storageAs(t, "app", Options{}) }

// "Store puts value at key"; "Keys are prefix-based ... without a
// leading slash": the empty key names nothing and is refused.
func testEmptyKey(t *testing.T, b *broker, _ string) {
	s := app(t, b)
	if err := s.Store(ctxBg, "", []byte{}); err == nil {
		t.Fatal("Store of the empty key succeeded")
	}
	if _, err := s.Load(ctxBg, ""); err == nil {
		t.Fatal("Load of the empty key succeeded")
	}
	if _, err := s.Stat(ctxBg, ""); err == nil {
		t.Fatal("Stat of the empty key succeeded")
	}
	if err := s.Delete(ctxBg, ""); err == nil {
		t.Fatal("Delete of the empty key succeeded")
	}
	if s.Exists(ctxBg, "") {
		t.Fatal("the empty key exists")
	}
}

// "The Load, Delete, List, and Stat methods should return fs.ErrNotExist
// if the key does not exist" (Delete: "An error should be returned only
// if the key still exists when the method returns").
func testMissingKey(t *testing.T, b *broker, p string) {
	s := app(t, b)
	k := p + "/nothing/here"
	if s.Exists(ctxBg, k) {
		t.Fatal("a key never stored exists")
	}
	if _, err := s.Load(ctxBg, k); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load: %v, want fs.ErrNotExist", err)
	}
	if _, err := s.Stat(ctxBg, k); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat: %v, want fs.ErrNotExist", err)
	}
	if _, err := s.List(ctxBg, k, true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("List recursive: %v, want fs.ErrNotExist", err)
	}
	if _, err := s.List(ctxBg, k, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("List: %v, want fs.ErrNotExist", err)
	}
	if err := s.Delete(ctxBg, k); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
}

func testNilAndEmpty(t *testing.T, b *broker, p string) {
	s := app(t, b)
	for i, v := range [][]byte{nil, {}} {
		k := fmt.Sprintf("%s/v%d", p, i)
		if err := s.Store(ctxBg, k, v); err != nil {
			t.Fatalf("Store(%v): %v", v, err)
		}
		if !s.Exists(ctxBg, k) {
			t.Fatal("an empty value does not exist")
		}
		got, err := s.Load(ctxBg, k)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Load: %q, %v; want an empty, non-nil value", got, err)
		}
		if st, err := s.Stat(ctxBg, k); err != nil || st.Size != 0 || !st.IsTerminal {
			t.Fatalf("Stat: %+v, %v", st, err)
		}
	}
}

// "Load() should always return the value from the last call to Store()".
func testOverwrite(t *testing.T, b *broker, p string) {
	s := app(t, b)
	k := p + "/k"
	before := time.Now().Add(-time.Minute)
	for _, v := range []string{"first", "second, longer", "3"} {
		if err := s.Store(ctxBg, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load(ctxBg, k)
		if err != nil || string(got) != v {
			t.Fatalf("Load: %q, %v; want %q", got, err, v)
		}
		st, err := s.Stat(ctxBg, k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Key != k || st.Size != int64(len(v)) || !st.IsTerminal ||
			st.Modified.Before(before) || st.Modified.After(time.Now().Add(time.Minute)) {
			t.Fatalf("Stat: %+v after storing %q", st, v)
		}
	}
}

// Values are bytes: NUL, invalid UTF-8 and a 6 KiB certificate set
// come back as stored.
func testBinary(t *testing.T, b *broker, p string) {
	s := app(t, b)
	big := bytes.Repeat([]byte("-----BEGIN CERTIFICATE-----\nMIIB<>&\"\\\n"), 160)
	for i, v := range [][]byte{{0}, {0xff, 0xfe, 0, 'a'}, []byte("caf\xc3\xa9 \u2028"), big} {
		k := fmt.Sprintf("%s/b%d", p, i)
		if err := s.Store(ctxBg, k, v); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load(ctxBg, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("value %d: got %d bytes, %v", i, len(got), err)
		}
	}
}

func testAfterDelete(t *testing.T, b *broker, p string) {
	s := app(t, b)
	k := p + "/k"
	if err := s.Store(ctxBg, k, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctxBg, k); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctxBg, k) {
		t.Fatal("exists after Delete")
	}
	if _, err := s.Load(ctxBg, k); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load after Delete: %v", err)
	}
	if _, err := s.Stat(ctxBg, k); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Delete: %v", err)
	}
	if err := s.Delete(ctxBg, k); err != nil {
		t.Fatalf("a second Delete: %v", err)
	}
}

// "List returns all keys that match prefix. If recursive is true,
// non-terminal keys will be enumerated"; KeyInfo.IsTerminal is "false
// for keys that only contain other keys"; Delete of a prefix removes
// everything under it.
func testNested(t *testing.T, b *broker, p string) {
	s := app(t, b)
	d := p + "/dir"
	k1, k2, k3 := d+"/k1", d+"/k/a/b", d+"/k/c"
	for _, k := range []string{k1, k2, k3} {
		if err := s.Store(ctxBg, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Stat(ctxBg, d)
	if err != nil || st.Key != d || st.IsTerminal {
		t.Fatalf("Stat(prefix): %+v, %v", st, err)
	}
	st, err = s.Stat(ctxBg, k2)
	if err != nil || st.Key != k2 || !st.IsTerminal || st.Size != int64(len(k2)) {
		t.Fatalf("Stat(key): %+v, %v", st, err)
	}
	if !s.Exists(ctxBg, d+"/k") {
		t.Fatal("a prefix does not exist")
	}
	want := func(recursive bool, prefix string, exp ...string) {
		t.Helper()
		got, err := s.List(ctxBg, prefix, recursive)
		if err != nil {
			t.Fatalf("List(%s, %v): %v", prefix, recursive, err)
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("List(%s, %v) = %q, want %q", prefix, recursive, got, exp)
		}
	}
	want(false, d, d+"/k", k1)
	want(true, d, d+"/k", d+"/k/a", k2, k3, k1)
	want(false, d+"/k", d+"/k/a", k3)
	want(true, d+"/k/", d+"/k/a", k2, k3)
	if err := s.Delete(ctxBg, d+"/k"); err != nil {
		t.Fatal(err)
	}
	want(true, d, k1)
	if s.Exists(ctxBg, k2) || s.Exists(ctxBg, d+"/k") {
		t.Fatal("Delete of a prefix left keys under it")
	}
	if err := s.Delete(ctxBg, d); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctxBg, d) || s.Exists(ctxBg, k1) {
		t.Fatal("Delete of a prefix left it")
	}
}

// "Implementations of Storage must be safe for concurrent use";
// "concurrent calls to Store() should not corrupt a file".
func testConcurrentStores(t *testing.T, b *broker, p string) {
	s := app(t, b)
	inParallel(t, 16, func(g int) error {
		for i := 0; i < 10; i++ {
			shared := p + "/shared"
			mine := fmt.Sprintf("%s/g%d", p, g)
			v := bytes.Repeat([]byte{byte('a' + g)}, 3000+g)
			if err := s.Store(ctxBg, shared, v); err != nil {
				return err
			}
			if err := s.Store(ctxBg, mine, v); err != nil {
				return err
			}
			got, err := s.Load(ctxBg, mine)
			if err != nil || !bytes.Equal(got, v) {
				return fmt.Errorf("g%d: own key read back wrong (%v)", g, err)
			}
			got, err = s.Load(ctxBg, shared)
			if err != nil || len(got) < 3000 || !bytes.Equal(got,
				bytes.Repeat(got[:1], len(got))) || len(got) != 3000+int(got[0]-'a') {
				return fmt.Errorf("shared key torn: %d bytes, %v", len(got), err)
			}
		}
		return nil
	})
}

// inParallel runs fn(0..n-1) in n goroutines and fails the test with
// each one's error.
func inParallel(t *testing.T, n int, fn func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			errs[g] = fn(g)
		}(g)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// A refusal is ErrDenied with its reason and rules, and writes nothing.
func testDenied(t *testing.T, b *broker, p string) {
	s := app(t, b)
	r := b.storageAs(t, "reader", Options{})
	err := r.Store(ctxBg, p+"/x", []byte("v"))
	var e *Error
	if !errors.Is(err, ErrDenied) || !errors.As(err, &e) || e.Reason != "nothing allowed it" ||
		len(e.Rules) != 0 || e.Op != "Store" || e.Key != p+"/x" {
		t.Fatalf("reader's Store: %#v", err)
	}
	err = s.Store(ctxBg, "secrets/"+p, []byte("v"))
	if !errors.Is(err, ErrDenied) || !errors.As(err, &e) || e.Reason != "forbidden by rule" ||
		!reflect.DeepEqual(e.Rules, []string{"app-no-secrets"}) {
		t.Fatalf("app's Store under secrets/: %#v", err)
	}
	if !strings.Contains(err.Error(), "app-no-secrets") {
		t.Fatalf("the message does not name the rule: %v", err)
	}
	if s.Exists(ctxBg, "secrets/"+p) || s.Exists(ctxBg, p+"/x") {
		t.Fatal("a refused Store wrote")
	}
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a refusal is not a missing key")
	}
	if err := r.Lock(ctxBg, p); !errors.Is(err, ErrDenied) {
		t.Fatalf("reader's Lock: %v", err)
	}
}

// "honor context cancellations".
func testContextCancelled(t *testing.T, b *broker, p string) {
	s := app(t, b)
	ctx, cancel := context.WithCancel(ctxBg)
	cancel()
	if err := s.Store(ctx, p+"/k", []byte("v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Store: %v", err)
	}
	if err := s.Lock(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v", err)
	}
	if s.Exists(ctxBg, p+"/k") {
		t.Fatal("a cancelled Store wrote")
	}
}

// "Unlock ... must ONLY be called after a successful call to Lock":
// anything else is an error.
func testUnlockNotHeld(t *testing.T, b *broker, p string) {
	s, o := app(t, b), app(t, b)
	if err := s.Unlock(ctxBg, p); !errors.Is(err, ErrNotLocked) {
		t.Fatalf("Unlock of a lock never taken: %v", err)
	}
	if err := s.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(ctxBg, p); !errors.Is(err, ErrNotLocked) {
		t.Fatalf("Unlock by another Storage: %v", err)
	}
	if err := s.Unlock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlock(ctxBg, p); !errors.Is(err, ErrNotLocked) {
		t.Fatalf("a second Unlock: %v", err)
	}
}

// "multiple Lock calls at the same time always results in only one
// caller receiving the lock"; Lock blocks until it can be obtained or
// the context ends; other names are independent.
func testLockExcludes(t *testing.T, b *broker, p string) {
	s, o := app(t, b), app(t, b)
	if err := s.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	if err := o.Lock(ctxBg, p+"-other"); err != nil {
		t.Fatalf("another name: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctxBg, 300*time.Millisecond)
	err := o.Lock(ctx, p)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held lock: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- o.Lock(ctxBg, p) }()
	if err := s.Unlock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the lock once it was free")
	}
	for _, n := range []string{p, p + "-other"} {
		if err := o.Unlock(ctxBg, n); err != nil {
			t.Fatal(err)
		}
	}
}

// Many goroutines of two Storages (two connections pools, as two
// processes), the same and different names: never two holders.
func testLocksMany(t *testing.T, b *broker, p string) {
	ss := []*Storage{app(t, b), app(t, b)}
	var inside [4]int32
	var taken, overlaps int32
	inParallel(t, 16, func(g int) error {
		s, n := ss[g%2], g%4
		name := fmt.Sprintf("%s-%d", p, n)
		for i := 0; i < 5; i++ {
			if err := s.Lock(ctxBg, name); err != nil {
				return err
			}
			if atomic.AddInt32(&inside[n], 1) != 1 {
				atomic.AddInt32(&overlaps, 1)
			}
			atomic.AddInt32(&taken, 1)
			time.Sleep(time.Millisecond) // inside the critical section
			atomic.AddInt32(&inside[n], -1)
			if err := s.Unlock(ctxBg, name); err != nil {
				return err
			}
		}
		return nil
	})
	if overlaps != 0 {
		t.Fatalf("two holders of one lock at once, %d times", overlaps)
	}
	if taken != 80 {
		t.Fatalf("%d of 80 critical sections ran", taken)
	}
}

// The lock outlives its lease while held: renewed in the background, it
// is still held after several lease lengths, and taken at once when
// unlocked.
func testLockOutlivesTTL(t *testing.T, b *broker, p string) {
	s := b.storageAs(t, "app", Options{LockTTL: time.Second})
	o := app(t, b)
	start := time.Now()
	if err := s.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "four renewals", 60*time.Second, func() bool {
		return s.Renewals(p) >= 4 && time.Since(start) > 1500*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(ctxBg, 200*time.Millisecond)
	err := o.Lock(ctx, p)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the lock was taken while its holder renewed it: %v", err)
	}
	if err := s.Unlock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	if err := o.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	o.Unlock(ctxBg, p)
}

// A holder that dies leaves its lock to expire: another process takes
// it after the lease.  The holder is this test binary run again
// (TestHelperHoldLock), killed with SIGKILL once it holds the lock.
func testLockHolderDies(t *testing.T, b *broker, p string) {
	c := b.clients["app"]
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "TSEC_GO_HOLD="+strings.Join([]string{b.endpoint,
		b.serverPub, c.pub, c.sec, p}, " "))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("the holder said %q, %v", line, err)
	}
	s := app(t, b)
	ctx, cancel := context.WithTimeout(ctxBg, 200*time.Millisecond)
	err = s.Lock(ctx, p)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the lock of a live holder was taken: %v", err)
	}
	cmd.Process.Kill()
	killed := time.Now()
	ctx, cancel = context.WithTimeout(ctxBg, 60*time.Second)
	defer cancel()
	if err := s.Lock(ctx, p); err != nil {
		t.Fatalf("the dead holder's lock never expired: %v", err)
	}
	// Its lease was a second; renewed until the kill, so not taken
	// sooner than the rest of that lease.
	t.Logf("taken %v after the holder died", time.Since(killed).Round(time.Millisecond))
	s.Unlock(ctxBg, p)
}

// TestHelperHoldLock is the lock holder of testLockHolderDies, run in a
// process of its own.
func TestHelperHoldLock(t *testing.T) {
	spec := os.Getenv("TSEC_GO_HOLD")
	if spec == "" {
		t.Skip("the lock holder of LockExpiresWhenHolderDies, run by that test")
	}
	f := strings.Fields(spec)
	s, err := New(Options{Endpoint: f[0], ServerPublicKey: f[1], PublicKey: f[2],
		SecretKey: f[3], LockTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(ctxBg, f[4]); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	select {}
}

// Over ipc the broker knows the caller by its uid, with no key at all:
// the same calls, the same refusals.
func TestIPC(t *testing.T) {
	dir := t.TempDir()
	cs := newClients(t, dir, "app=svc:app")
	sock := filepath.Join(dir, "b.sock")
	startBroker(t, brokerSpec{policy: contractPolicy, clients: cs, ipc: sock,
		extra: map[string]interface{}{"ipc_uids": []map[string]interface{}{
			{"uid": os.Getuid(), "principal": "svc:app"}}}})
	s, err := New(Options{Endpoint: "ipc://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Store(ctxBg, "ipc/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctxBg, "ipc/k"); err != nil || string(v) != "v" {
		t.Fatalf("Load: %q, %v", v, err)
	}
	if err := s.Lock(ctxBg, "ipc"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlock(ctxBg, "ipc"); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if err := s.Store(ctxBg, "secrets/k", nil); !errors.As(err, &e) ||
		!reflect.DeepEqual(e.Rules, []string{"app-no-secrets"}) {
		t.Fatalf("Store under secrets/ over ipc: %v", err)
	}
}

// Every call after Close answers ErrClosed (issue 53, item 9: only Lock
// did; the others took a connection again, and Store after Close stored).
func TestCallsAfterClose(t *testing.T) {
	dir := t.TempDir()
	cs := newClients(t, dir, "app=svc:app")
	sock := filepath.Join(dir, "b.sock")
	startBroker(t, brokerSpec{policy: contractPolicy, clients: cs, ipc: sock,
		extra: map[string]interface{}{"ipc_uids": []map[string]interface{}{
			{"uid": os.Getuid(), "principal": "svc:app"}}}})
	s, err := New(Options{Endpoint: "ipc://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store(ctxBg, "closed/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, loadErr := s.Load(ctxBg, "closed/k")
	_, listErr := s.List(ctxBg, "closed", true)
	_, statErr := s.Stat(ctxBg, "closed/k")
	_, obtainErr := s.Obtain(ctxBg, "a.example.com", true)
	for what, err := range map[string]error{
		"Store":  s.Store(ctxBg, "closed/k2", []byte("v")),
		"Load":   loadErr,
		"Delete": s.Delete(ctxBg, "closed/k"),
		"List":   listErr,
		"Stat":   statErr,
		"Lock":   s.Lock(ctxBg, "closed"),
		"Unlock": s.Unlock(ctxBg, "closed"),
		"Ping":   s.Ping(ctxBg),
		"Obtain": obtainErr,
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	if s.Exists(ctxBg, "closed/k") {
		t.Error("Exists after Close: true")
	}
}
