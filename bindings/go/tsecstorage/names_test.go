package tsecstorage

// Lock names and listings as certmagic makes them, held to FileStorage's
// behaviour (issue 50, items 4 and 5).

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func init() {
	contractCases = append(contractCases, []struct {
		name string
		fn   func(t *testing.T, b *broker, prefix string)
	}{
		{"LockNamesCertmagicMakes", testLockNames},
		{"ListOfAValue", testListOfAValue},
	}...)
}

// certmagic locks "issue_cert_" + the raw name: an IPv6 address (colons),
// a name with '/', a 196-character domain (over 200 bytes), '%', a
// trailing dot.  Each is a lock of its own: taken, held against a second
// Storage, released; two long names that differ only at their end are
// two locks.
func testLockNames(t *testing.T, b *broker, p string) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." +
		strings.Repeat("c", 60) + ".example" // 196 bytes
	names := []string{"issue_cert_2001:db8::1", "issue_cert_::1", "issue_cert_a/b.example",
		"issue_cert_" + long, "issue_cert_" + long[:len(long)-1] + "f",
		"issue_cert_100%.example", "issue_cert_trailing.example.", "issue_cert_\u00e9t\u00e9.example"}
	s, o := app(t, b), app(t, b)
	for _, n := range names {
		if err := s.Lock(ctxBg, n); err != nil {
			t.Fatalf("Lock(%q): %v", n, err)
		}
	}
	// Held: another Storage does not get any of them ...
	for _, n := range names {
		ctx, cancel := context.WithTimeout(ctxBg, 300*time.Millisecond)
		err := o.Lock(ctx, n)
		cancel()
		if err == nil {
			t.Fatalf("%q was taken twice", n)
		}
	}
	// ... until released.
	for _, n := range names {
		if err := s.Unlock(ctxBg, n); err != nil {
			t.Fatalf("Unlock(%q): %v", n, err)
		}
		if err := o.Lock(ctxBg, n); err != nil {
			t.Fatalf("Lock(%q) after its release: %v", n, err)
		}
		o.Unlock(ctxBg, n)
	}
}

// List of a key that holds a value: FileStorage answers an empty list.
func testListOfAValue(t *testing.T, b *broker, p string) {
	s := app(t, b)
	if err := s.Store(ctxBg, p+"/v", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []bool{false, true} {
		keys, err := s.List(ctxBg, p+"/v", rec)
		if err != nil || len(keys) != 0 {
			t.Fatalf("List(%q, %v) = %q, %v; want an empty list", p+"/v", rec, keys, err)
		}
	}
}

func init() {
	contractCases = append(contractCases, struct {
		name string
		fn   func(t *testing.T, b *broker, prefix string)
	}{"LargeValues", testLargeValues})
}

// Values of 1, 10 and 16 MiB are stored and loaded whole (FileStorage
// stores 10 MiB in 19-41 ms); one byte past 16 MiB, and a value past
// what any broker takes, is too_big at once, not a wait for
// "unreachable".  etcd takes no request over its --max-request-bytes
// (1.5 MiB by default): there, a value past it is too_big at once too.
func testLargeValues(t *testing.T, b *broker, p string) {
	s := app(t, b)
	etcd := strings.Contains(t.Name(), "/etcd/")
	for _, n := range []int{1 << 20, 10 << 20, 16 << 20} {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(i * 7)
		}
		start := time.Now()
		err := s.Store(ctxBg, p+"/big", v)
		if etcd && n > 1<<20 {
			var e *Error
			if !errors.As(err, &e) || e.Code != "too_big" || time.Since(start) > 3*time.Second {
				t.Fatalf("etcd, %d bytes: %v after %v, want too_big at once", n, err,
					time.Since(start))
			}
			continue
		}
		if err != nil {
			t.Fatalf("Store of %d bytes: %v", n, err)
		}
		got, err := s.Load(ctxBg, p+"/big")
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Load of %d bytes: %d bytes, %v", n, len(got), err)
		}
		t.Logf("%d bytes stored and loaded in %v", n, time.Since(start))
	}
	for _, n := range []int{16<<20 + 1, 70 << 20} {
		start := time.Now()
		err := s.Store(ctxBg, p+"/big", make([]byte, n))
		var e *Error
		if !errors.As(err, &e) || e.Code != "too_big" || time.Since(start) > 3*time.Second {
			t.Fatalf("Store of %d bytes: %v after %v, want too_big at once", n, err,
				time.Since(start))
		}
	}
}

func init() {
	contractCases = append(contractCases, struct {
		name string
		fn   func(t *testing.T, b *broker, prefix string)
	}{"FolderModified", testFolderModified})
}

// A folder's Stat time is its newest value's (on etcd it was 1970-01-01,
// and certmagic picks the most recent account folder by it).
func testFolderModified(t *testing.T, b *broker, p string) {
	s := app(t, b)
	before := time.Now().Add(-time.Minute)
	if err := s.Store(ctxBg, p+"/users/old/reg.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := s.Store(ctxBg, p+"/users/new/reg.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	ko, err1 := s.Stat(ctxBg, p+"/users/old")
	kn, err2 := s.Stat(ctxBg, p+"/users/new")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if ko.IsTerminal || kn.IsTerminal || ko.Modified.Before(before) ||
		kn.Modified.Before(ko.Modified) || kn.Modified.After(time.Now().Add(time.Minute)) {
		t.Fatalf("folder times: old %v, new %v (around %v)", ko.Modified, kn.Modified,
			time.Now())
	}
}
