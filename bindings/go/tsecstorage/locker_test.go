package tsecstorage

// The Locker as a certificate manager bets on it (issue 48): a Lock whose
// context ends returns at once and never holds the lock after its error;
// one Storage holds as many locks as certmagic's jobs may; and a waiting
// Lock holds no connection another call needs.  Each case runs on every
// backend (TestContract).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func init() {
	contractCases = append(contractCases, []struct {
		name string
		fn   func(t *testing.T, b *broker, prefix string)
	}{
		{"LockCancelledReturnsAtOnce", testLockCancelled},
		{"CancelledLockHoldsNothing", testCancelledHoldsNothing},
		{"ManyLocksHeld", testManyLocksHeld},
		{"WaitsHoldNoConnection", testWaitsHoldNoConnection},
		{"LockSurvivesBrokerRestart", testLockSurvivesRestart},
	}...)
}

// restart stops b as systemd does (SIGTERM) and starts it again on the
// same configuration, for as long as the test that started it runs (not
// only the subtest that restarts it: the cases after it need it too).
func (b *broker) restart(t *testing.T) {
	t.Helper()
	b.p.stop(syscall.SIGTERM)
	b.p = spawn(b.owner, filepath.Join(b.dir, "restarted.log"), nil,
		filepath.Join(buildDir(t), "tsec-broker"), "--config", filepath.Join(b.dir, "broker.json"))
	if !b.up(t) {
		t.Fatalf("tsec-broker did not come up again: %s", b.p.tail())
	}
}

// brokerStat reads one of b's stats (an int).
func brokerStat(t *testing.T, b *broker, name string) int64 {
	t.Helper()
	c := b.first
	cn, err := openConn(&Options{Endpoint: b.endpoint, ServerPublicKey: b.serverPub,
		PublicKey: c.pub, SecretKey: c.sec, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	var r map[string]interface{}
	if _, err := cn.call(ctxBg, 5*time.Second, "stats", struct{}{}, &r); err != nil {
		t.Fatal(err)
	}
	v, _ := r[name].(float64)
	return int64(v)
}

// A Lock waiting at the broker, its context then cancelled: it returns
// with the context's error at once (not after its wait at the broker,
// LockPoll, here 20 s), its wait is gone from the broker, and the lock,
// let go by its holder, goes to the next caller.
func testLockCancelled(t *testing.T, b *broker, p string) {
	s := app(t, b)
	o := b.storageAs(t, "app", Options{LockPoll: 20 * time.Second})
	if err := s.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	before := brokerStat(t, b, "lock_waits")
	ctx, cancel := context.WithCancel(ctxBg)
	got := make(chan error, 1)
	go func() { got <- o.Lock(ctx, p) }()
	waitFor(t, "the wait at the broker", 30*time.Second, func() bool {
		return brokerStat(t, b, "lock_waits") > before
	})
	cancelled := time.Now()
	cancel()
	var err error
	select {
	case err = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("a cancelled Lock did not return")
	}
	took := time.Since(cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	// The requirement is 100 ms; a second is the bound no machine here
	// misses, and the old binding (a wait of LockPoll) always did.
	if took > time.Second {
		t.Fatalf("a cancelled Lock returned %v after its context ended", took)
	}
	t.Logf("a cancelled Lock returned %v after its context ended", took)
	waitFor(t, "the wait dropped at the broker", 30*time.Second, func() bool {
		return brokerStat(t, b, "lock_waits") == before
	})
	if err := s.Unlock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(ctxBg, 10*time.Second)
	defer cancel()
	if err := app(t, b).Lock(ctx, p); err != nil {
		t.Fatalf("the lock after a cancelled waiter: %v", err)
	}
}

// The cancel crosses the grant: the holder lets go just as the waiter's
// context ends.  Whichever comes first, the waiter either holds the
// lock (Lock returned nil) or holds nothing (Lock returned the context's
// error and the lock is free at once, not after its lease).
func testCancelledHoldsNothing(t *testing.T, b *broker, p string) {
	s := app(t, b)
	o := b.storageAs(t, "app", Options{LockPoll: 20 * time.Second})
	q := b.storageAs(t, "app", Options{LockTTL: 60 * time.Second})
	for round := 0; round < 6; round++ {
		name := fmt.Sprintf("%s-%d", p, round)
		if err := s.Lock(ctxBg, name); err != nil {
			t.Fatal(err)
		}
		before := brokerStat(t, b, "lock_waits")
		ctx, cancel := context.WithCancel(ctxBg)
		got := make(chan error, 1)
		go func() { got <- o.Lock(ctx, name) }()
		waitFor(t, "the wait at the broker", 30*time.Second, func() bool {
			return brokerStat(t, b, "lock_waits") > before
		})
		// Together, in an order that varies with the round.
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if round%2 == 0 {
				time.Sleep(time.Duration(round) * 100 * time.Microsecond)
			}
			cancel()
		}()
		go func() { defer wg.Done(); s.Unlock(ctxBg, name) }()
		wg.Wait()
		err := <-got
		if err == nil {
			// It won: it holds the lock, and lets it go.
			if err := o.Unlock(ctxBg, name); err != nil {
				t.Fatalf("round %d: Unlock of a lock Lock returned: %v", round, err)
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := o.Unlock(ctxBg, name); !errors.Is(err, ErrNotLocked) {
			t.Fatalf("round %d: a Lock that failed left the Storage holding: %v", round, err)
		}
		// Free for another at once: the lease (20 s) is not waited out.
		lctx, lcancel := context.WithTimeout(ctxBg, 10*time.Second)
		err = q.Lock(lctx, name)
		lcancel()
		if err != nil {
			t.Fatalf("round %d: after a cancelled Lock the lock stayed held: %v", round, err)
		}
		q.Unlock(ctxBg, name)
	}
}

// certmagic runs up to 1,000 jobs, each of which may hold a lock: one
// Storage holds 1,000 at once (the broker refused past 256).
func testManyLocksHeld(t *testing.T, b *broker, p string) {
	s := app(t, b)
	const n = 1000
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctxBg, 60*time.Second)
			defer cancel()
			errs <- s.Lock(ctx, fmt.Sprintf("%s-%d", p, i))
		}(i)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("Lock: %v", err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d Lock calls failed", failed, n)
	}
	for i := 0; i < n; i++ {
		if err := s.Unlock(ctxBg, fmt.Sprintf("%s-%d", p, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// Twelve Lock calls waiting for held locks, and a Load on the same
// Storage (8 connections): the Load is answered while they wait (it
// waited for one of them to come back from the broker).
func testWaitsHoldNoConnection(t *testing.T, b *broker, p string) {
	s := app(t, b)
	o := b.storageAs(t, "app", Options{LockPoll: 30 * time.Second})
	if err := o.Store(ctxBg, p+"/v", []byte("value")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		if err := s.Lock(ctxBg, fmt.Sprintf("%s-%d", p, i)); err != nil {
			t.Fatal(err)
		}
	}
	before := brokerStat(t, b, "lock_waits")
	ctx, cancel := context.WithCancel(ctxBg)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o.Lock(ctx, fmt.Sprintf("%s-%d", p, i))
		}(i)
	}
	waitFor(t, "twelve waits at the broker", 30*time.Second, func() bool {
		return brokerStat(t, b, "lock_waits") >= before+12
	})
	lctx, lcancel := context.WithTimeout(ctxBg, 10*time.Second)
	v, err := o.Load(lctx, p+"/v")
	lcancel()
	if err != nil || string(v) != "value" {
		t.Fatalf("a Load beside twelve waiting Locks: %q, %v", v, err)
	}
	cancel()
	wg.Wait()
	for i := 0; i < 12; i++ {
		s.Unlock(ctxBg, fmt.Sprintf("%s-%d", p, i))
	}
}

// A lock held through a broker that restarts stays its holder's: nobody
// else takes it meanwhile, and its holder renews and releases it through
// the broker started again (the file store's locks were released at the
// stop, and another process took the lock 2-3 ms after the restart).
func testLockSurvivesRestart(t *testing.T, b *broker, p string) {
	a := b.storageAs(t, "app", Options{LockTTL: 60 * time.Second})
	if err := a.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	b.restart(t)
	o := app(t, b)
	ctx, cancel := context.WithTimeout(ctxBg, 500*time.Millisecond)
	err := o.Lock(ctx, p)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after a broker restart another took a held lock: %v", err)
	}
	if err := a.Unlock(ctxBg, p); err != nil {
		t.Fatalf("the holder's Unlock after the restart: %v", err)
	}
	if err := o.Lock(ctxBg, p); err != nil {
		t.Fatal(err)
	}
	o.Unlock(ctxBg, p)
}
