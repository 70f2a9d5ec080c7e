package tsecstorage

/*
#include <stdlib.h>
#include <tinysecurity/client.h>
*/
import "C"

import (
	"encoding/json"
	"errors"
	"sync"
	"time"
	"unsafe"
)

// waiter runs every Lock's call at the broker on one connection of its
// own, many at once (the client library's tsec_client_send and
// tsec_client_next), so that a Lock waiting for a held lock holds none
// of the connections the Storage's other calls use (issue 48: twelve
// waiting Locks made a Load on the same Storage wait 0.9-2.1 s), and a
// Lock whose context ends is cancelled at the broker at once: the
// broker drops its wait, or lets go a lock it took for it, even one it
// answered already.
//
// One goroutine owns the connection.  Lock hands it commands through
// queue and wakes it: by tsec_client_interrupt while it waits in C, by
// the wake channel while it waits in Go.
type waiter struct {
	s *Storage

	mu     sync.Mutex
	queue  []waitCmd
	inC    bool // the goroutine waits in tsec_client_next
	active bool // the goroutine runs
	closed bool
	conn   *conn // the goroutine's, while it runs
	wake   chan struct{}
}

type waitCmd struct {
	call   *waitCall
	cancel bool // the call's answer is no longer wanted
}

// waitCall is one lock.acquire through the waiter.
type waitCall struct {
	params   map[string]interface{}
	timeout  time.Duration // how long its answer may take
	deadline time.Time     // set when sent
	done     chan waitResult
	id       C.long // set when sent
}

type waitResult struct {
	r   acquired
	err error
}

// errWaitEnded: the caller's context ended first.
var errWaitEnded = errors.New("tsecstorage: the wait ended first")

func newWaiter(s *Storage) *waiter {
	return &waiter{s: s, wake: make(chan struct{}, 1)}
}

// acquire runs one lock.acquire with params, answered within timeout,
// and waits for its answer or for done: errWaitEnded then, and the call
// is cancelled at the broker.
func (w *waiter) acquire(done <-chan struct{}, params map[string]interface{},
	timeout time.Duration) (acquired, error) {
	c := &waitCall{params: params, timeout: timeout, done: make(chan waitResult, 1)}
	if err := w.put(waitCmd{call: c}); err != nil {
		return acquired{}, err
	}
	select {
	case res := <-c.done:
		return res.r, res.err
	case <-done:
		w.put(waitCmd{call: c, cancel: true})
		return acquired{}, errWaitEnded
	}
}

// put queues a command for the goroutine (started if it is not running)
// and wakes it.
func (w *waiter) put(cmd waitCmd) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.queue = append(w.queue, cmd)
	if !w.active {
		w.active = true
		go w.run()
	} else if w.inC {
		C.tsec_client_interrupt(w.conn.c)
	} else {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// close stops the goroutine; calls still waiting get ErrClosed.
func (w *waiter) close() {
	w.mu.Lock()
	w.closed = true
	if w.active && w.inC {
		C.tsec_client_interrupt(w.conn.c)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the goroutine: it sends what is queued, reads the answers and
// hands each to its call, gives up calls whose deadline passed, and ends
// when the Storage closes or after a minute with nothing to do.
func (w *waiter) run() {
	calls := map[C.long]*waitCall{}
	for {
		w.mu.Lock()
		cmds, closed := w.queue, w.closed
		w.queue = nil
		w.mu.Unlock()
		if closed {
			w.stop(calls, cmds)
			return
		}
		w.start(cmds, calls)
		if len(calls) > 0 {
			w.next(calls)
			continue
		}
		select {
		case <-w.wake:
			continue
		case <-time.After(time.Minute):
		}
		w.mu.Lock()
		if len(w.queue) == 0 && !w.closed {
			w.active = false
			cn := w.conn
			w.conn = nil
			w.mu.Unlock()
			if cn != nil {
				cn.close()
			}
			return
		}
		w.mu.Unlock()
	}
}

// stop ends the goroutine: what waits gets ErrClosed.
func (w *waiter) stop(calls map[C.long]*waitCall, cmds []waitCmd) {
	w.mu.Lock()
	w.active = false
	cn := w.conn
	w.conn = nil
	w.mu.Unlock()
	for _, c := range calls {
		c.done <- waitResult{err: ErrClosed}
	}
	for _, cmd := range cmds {
		if !cmd.cancel {
			cmd.call.done <- waitResult{err: ErrClosed}
		}
	}
	if cn != nil {
		cn.close()
	}
}

// start sends each queued call, and each queued cancel of a call sent.
func (w *waiter) start(cmds []waitCmd, calls map[C.long]*waitCall) {
	for _, cmd := range cmds {
		c := cmd.call
		if cmd.cancel {
			if c.id != 0 && calls[c.id] == c {
				delete(calls, c.id)
			}
			if c.id != 0 {
				var cerr C.struct_tsec_error
				C.tsec_client_cancel(w.conn.c, c.id, &cerr)
			}
			continue
		}
		if err := w.open(); err != nil {
			c.done <- waitResult{err: err}
			continue
		}
		text, err := json.Marshal(c.params)
		if err != nil {
			c.done <- waitResult{err: err}
			continue
		}
		cm, cp := C.CString("lock.acquire"), C.CString(string(text))
		var cerr C.struct_tsec_error
		C.tsec_client_set_timeout(w.conn.c, C.int(c.timeout/time.Millisecond))
		rc := C.tsec_client_send(w.conn.c, cm, cp, &c.id, &cerr)
		C.free(unsafe.Pointer(cm))
		C.free(unsafe.Pointer(cp))
		if rc != 0 {
			c.done <- waitResult{err: w.conn.errorOf(rc, &cerr)}
			continue
		}
		c.deadline = time.Now().Add(c.timeout)
		calls[c.id] = c
	}
}

// open makes the goroutine's connection, the first time.
func (w *waiter) open() error {
	if w.conn != nil {
		return nil
	}
	cn, err := openConn(&w.s.opts)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.conn = cn
	w.mu.Unlock()
	return nil
}

// next waits in C for the next answer (until the earliest deadline, a
// second at most, or a wake), and hands it to its call; calls whose
// deadline passed are given up and cancelled at the broker.
func (w *waiter) next(calls map[C.long]*waitCall) {
	wait := time.Second
	now := time.Now()
	for _, c := range calls {
		if d := c.deadline.Sub(now); d < wait {
			wait = d
		}
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	var id C.long
	var res *C.char
	var cerr C.struct_tsec_error
	w.mu.Lock()
	w.inC = true
	w.mu.Unlock()
	rc := C.tsec_client_next(w.conn.c, C.int(wait/time.Millisecond), &id, &res, &cerr)
	w.mu.Lock()
	w.inC = false
	w.mu.Unlock()
	if c := calls[id]; id != 0 && c != nil {
		delete(calls, id)
		var r acquired
		var err error
		if rc != 0 {
			err = w.conn.errorOf(rc, &cerr)
		} else if err = json.Unmarshal([]byte(C.GoString(res)), &r); err != nil {
			err = errors.New("tsecstorage: lock.acquire: malformed result: " + err.Error())
		}
		c.done <- waitResult{r: r, err: err}
	}
	if res != nil {
		C.free(unsafe.Pointer(res))
	}
	now = time.Now()
	for k, c := range calls {
		if now.After(c.deadline) {
			delete(calls, k)
			C.tsec_client_cancel(w.conn.c, c.id, &cerr)
			c.done <- waitResult{err: &Error{Code: "outcome_unknown", Errno: ErrnoUnknown,
				Message: "the broker did not answer in time: the call was cancelled " +
					"there (a lock it took for it is let go)"}}
		}
	}
}
