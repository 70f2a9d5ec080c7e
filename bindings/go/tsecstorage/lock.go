package tsecstorage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// lockNameMax is the broker's longest lock name (TSEC_LOCK_NAME_MAX).
const lockNameMax = 200

// LockName is the broker's lock for certmagic's lock name (the policy
// sees it as locks/<LockName(name)>).  certmagic locks "issue_cert_" and
// the raw name: an IPv6 address has colons, a name may hold '/', and a
// long one passes the broker's 200 bytes, none of which a lock name (one
// key segment) may.  Bytes a key segment refuses or reads otherwise ('%'
// itself, ':', '/', '\', controls, anything past ASCII, and a last '.'
// or ' ') are written %XX, so the name stays readable and a policy's
// "locks/issue_cert_*" still matches; a name longer than 200 bytes so
// written keeps its first 167 and ends in "~" and 32 hex digits of the
// whole name's SHA-256, so two long names are two locks.  The same name
// is the same lock in every process.
func LockName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		last := i == len(name)-1
		if c == '%' || c == ':' || c == '/' || c == '\\' || c < 0x20 || c >= 0x7f ||
			(last && (c == '.' || c == ' ')) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	s := b.String()
	if len(s) > lockNameMax {
		sum := sha256.Sum256([]byte(name))
		s = strings.TrimRight(s[:lockNameMax-33], ". ") + "~" + hex.EncodeToString(sum[:16])
	}
	return s
}

type acquired struct {
	Token       string `json:"token"`
	Fence       int64  `json:"fence"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

// Lock takes the lock name, waiting until it is free or ctx ends.  The
// broker's lock is one for every process and broker on its backend
// (never two holders); while this Storage holds it, it is renewed in
// the background every LockTTL/3, so it outlives a slow critical
// section; a process that dies leaves it to expire after LockTTL.  Two
// goroutines of one process taking the same name wait for each other
// like any two holders.  The wait runs at the broker on a connection
// of its own (the Storage's other calls never wait behind it), and a
// ctx that ends cancels it there at once: Lock returns ctx's error and
// holds nothing, the broker letting go a lock it took for this call
// meanwhile.
func (s *Storage) Lock(ctx context.Context, name string) error {
	ttl := s.opts.LockTTL.Milliseconds()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return ErrClosed
		}
		// One wait at the broker at a time, no longer than LockPoll;
		// within the context's deadline, with room for the answer, so
		// that the broker says "timed out" before this process stops
		// listening.
		wait := s.opts.LockPoll
		if dl, ok := ctx.Deadline(); ok && time.Until(dl)*4/5 < wait {
			wait = time.Until(dl) * 4 / 5
		}
		if wait < time.Millisecond {
			return context.DeadlineExceeded
		}
		r, err := s.waiter.acquire(ctx.Done(), map[string]interface{}{
			"name": LockName(name), "ttl_ms": ttl, "timeout_ms": wait.Milliseconds(),
			"deadline_ms": (wait + s.opts.Timeout).Milliseconds(),
		}, wait+s.opts.Timeout)
		if err == errWaitEnded {
			return ctx.Err()
		}
		var e *Error
		if errors.As(err, &e) {
			e.Op, e.Key = "Lock", name
			if e.Code == "timed_out" {
				continue
			}
		}
		if err != nil {
			return err
		}
		h := &held{name: name, token: r.Token, fence: r.Fence,
			stop: make(chan struct{}), done: make(chan struct{})}
		s.mu.Lock()
		old := s.held[name]
		s.held[name] = h
		s.mu.Unlock()
		if old != nil {
			// Ours before, and its lease ended unnoticed: the broker
			// gave the name out again, to us.
			close(old.stop)
			<-old.done
		}
		go s.keep(h)
		return nil
	}
}

// keep renews h every LockTTL/3 until Unlock stops it or the lease is
// found gone.
func (s *Storage) keep(h *held) {
	defer close(h.done)
	every := s.opts.LockTTL / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		var r acquired
		err := s.call(ctx, "Lock", h.name, 0, "lock.renew", map[string]interface{}{
			"name": LockName(h.name), "token": h.token, "ttl_ms": s.opts.LockTTL.Milliseconds(),
		}, &r)
		cancel()
		var e *Error
		if errors.As(err, &e) && (e.Code == "not_owner" || e.Code == "not_found" ||
			e.Code == "denied") {
			// The lease is gone (or the policy no longer lets us
			// keep it): Unlock will say so.
			h.mu.Lock()
			h.lost = err
			h.mu.Unlock()
			return
		}
		next := every
		if err != nil {
			// The broker did not answer: try again soon, while the
			// lease still runs.
			next = every / 4
		} else {
			h.mu.Lock()
			h.renewals++
			h.mu.Unlock()
		}
		t.Reset(next)
	}
}

// Unlock releases the lock name, which this Storage must hold; ErrNotLocked
// otherwise.  When the lease had ended before (a renewal found it gone),
// the error says so.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	if s.isDone() {
		return ErrClosed
	}
	return s.unlock(ctx, name)
}

func (s *Storage) unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("tsecstorage: Unlock %q: %w", name, ErrNotLocked)
	}
	close(h.stop)
	<-h.done
	h.mu.Lock()
	lost := h.lost
	h.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("tsecstorage: Unlock %q: the lease had ended before: %w", name, lost)
	}
	return s.call(ctx, "Unlock", name, 0, "lock.release",
		map[string]string{"name": LockName(name), "token": h.token}, nil)
}

// renewals says how often the lock name was renewed since Lock took it
// (-1 when not held); tests read it through export_test.go.
func (s *Storage) renewals(name string) int {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return -1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewals
}
