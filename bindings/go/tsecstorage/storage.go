// Package tsecstorage is a certmagic.Storage and certmagic.Locker
// (certmagic 0.17) over tsec-broker, through the tinysecurity client
// library (cgo; found with pkg-config: tinysecurity).
//
// Every call is decided by the broker's policy for the principal the
// broker knows this process as (its CURVE key over tcp, its uid over
// ipc), before the broker's backend (files, etcd or redis) is touched.
// A refusal is an *Error for which errors.Is(err, ErrDenied) holds,
// carrying the deciding rules; a missing key is one for which
// errors.Is(err, fs.ErrNotExist) holds, as certmagic wants.
//
//	s, err := tsecstorage.New(tsecstorage.Options{
//		Endpoint: "tcp://127.0.0.1:7300", ServerPublicKey: serverPub,
//		PublicKey: pub, SecretKey: sec})
//	cfg := certmagic.NewDefault()
//	cfg.Storage = s
//
// A Storage keeps a small pool of connections (the client library's
// connection serves one call at a time) and may be used from any number
// of goroutines; every Lock waits at the broker on one connection more,
// of its own, however many wait at once.
package tsecstorage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// Broker is one of several brokers over one shared backend.
type Broker struct {
	Endpoint        string
	ServerPublicKey string
}

// Options says where the broker is and who this process is.
type Options struct {
	// Endpoint is "tcp://HOST:PORT" or "ipc://PATH".
	Endpoint string
	// ServerPublicKey is the broker's CURVE public key (Z85, 40
	// characters): tcp needs it, and ipc when the broker sets ipc_curve.
	ServerPublicKey string
	// PublicKey and SecretKey are this client's CURVE key pair (Z85), as
	// `tsec keygen --curve NAME` writes them (LoadKeyPair reads them).
	PublicKey, SecretKey string
	// Brokers, when set, are several brokers over one backend (Endpoint
	// is then unused): a call that may run twice goes to the next when
	// one does not answer (the client library's failover).
	Brokers []Broker
	// Timeout bounds each call (default 5 s); a context's deadline
	// shortens it.
	Timeout time.Duration
	// AttemptTimeout is how long one broker of several has to answer
	// before the next is tried (default 1 s).
	AttemptTimeout time.Duration
	// LockTTL is a lock's lease (default 20 s). While held it is renewed
	// every LockTTL/3; a process that dies leaves it to expire.
	LockTTL time.Duration
	// LockPoll bounds one wait for a lock at the broker (default 30 s,
	// the broker's own bound); Lock then asks again.  A context that
	// ends cancels the wait at the broker at once, whatever LockPoll.
	LockPoll time.Duration
	// MaxConns bounds the connections to the broker (default 8).
	MaxConns int
}

var (
	// ErrDenied: the broker's policy refused the call.
	ErrDenied = errors.New("tsecstorage: denied by policy")
	// ErrNotLocked: Unlock of a lock this Storage does not hold.
	ErrNotLocked = errors.New("tsecstorage: lock not held")
	// ErrClosed: the Storage was closed; every call after Close says so.
	ErrClosed = errors.New("tsecstorage: closed")
)

// Error is a call the broker (or the client library) did not carry out.
type Error struct {
	Op      string   // Store, Load, Lock, ...
	Key     string   // the key or lock name
	Code    string   // the wire's name: "denied", "not_found", "invalid_key", ...
	Errno   int      // the negative TSEC_E* number
	Message string   // the broker's message
	Reason  string   // a refusal's reason: "forbidden by floor", "nothing allowed it", ...
	Rules   []string // a refusal's deciding rules (none for "nothing allowed it")
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("tsecstorage: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		if e.Key != "" {
			fmt.Fprintf(&b, " %q", e.Key)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Code)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrDenied) and errors.Is(err, fs.ErrNotExist)
// hold for a refusal and a missing key.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrDenied:
		return e.Code == "denied"
	case fs.ErrNotExist:
		return e.Code == "not_found"
	}
	return false
}

// Storage is a certmagic.Storage over tsec-broker.
type Storage struct {
	opts  Options
	idle  chan *conn
	slots chan struct{}
	name  string

	mu     sync.Mutex
	held   map[string]*held
	closed bool // Close began: no new lock
	done   bool // Close returned: no call at all

	// Every Lock's wait at the broker, on a connection of its own.
	waiter *waiter
}

// held is a lock this Storage holds, kept alive in the background.
type held struct {
	name, token string
	fence       int64
	stop        chan struct{}
	done        chan struct{}
	mu          sync.Mutex
	lost        error // set when a renewal found the lease gone
	renewals    int
}

var (
	_ certmagic.Storage = (*Storage)(nil)
	_ certmagic.Locker  = (*Storage)(nil)
)

// New makes a Storage.  It checks the options and opens one client at
// once, so that malformed keys or endpoints are New's error; the broker
// is reached lazily: one that is not there yet is an error of the first
// call, not of New.
func New(o Options) (*Storage, error) {
	if o.Endpoint == "" && len(o.Brokers) == 0 {
		return nil, errors.New("tsecstorage: no Endpoint and no Brokers")
	}
	if len(o.Brokers) > MaxBrokers {
		return nil, fmt.Errorf("tsecstorage: at most %d Brokers", MaxBrokers)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = time.Second
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 20 * time.Second
	}
	if o.LockTTL < 300*time.Millisecond {
		return nil, errors.New("tsecstorage: LockTTL below 300 ms")
	}
	if o.LockPoll <= 0 {
		o.LockPoll = 30 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 8
	}
	s := &Storage{
		opts:  o,
		idle:  make(chan *conn, o.MaxConns),
		slots: make(chan struct{}, o.MaxConns),
		held:  map[string]*held{},
		name:  o.Endpoint,
	}
	s.waiter = newWaiter(s)
	if s.name == "" {
		s.name = o.Brokers[0].Endpoint
	}
	// Open one now, so that bad keys or endpoints fail here.
	c, err := openConn(&s.opts)
	if err != nil {
		return nil, err
	}
	s.slots <- struct{}{}
	s.idle <- c
	return s, nil
}

// LoadKeyPair reads PREFIX.pub and PREFIX.key as `tsec keygen --curve
// PREFIX` writes them.
func LoadKeyPair(prefix string) (public, secret string, err error) {
	p, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		return "", "", err
	}
	k, err := os.ReadFile(prefix + ".key")
	if err != nil {
		return "", "", err
	}
	return strings.TrimSpace(string(p)), strings.TrimSpace(string(k)), nil
}

// String names the storage for certmagic's logs.
func (s *Storage) String() string { return "tsecstorage:" + s.name }

// Close releases every lock still held and closes the connections.
func (s *Storage) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	names := make([]string, 0, len(s.held))
	for n := range s.held {
		names = append(names, n)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	for _, n := range names {
		s.unlock(ctx, n)
	}
	s.waiter.close()
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	for {
		select {
		case c := <-s.idle:
			c.close()
		default:
			return nil
		}
	}
}

// isDone: Close has returned.
func (s *Storage) isDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *Storage) get(ctx context.Context) (*conn, error) {
	select {
	case c := <-s.idle:
		return c, nil
	default:
	}
	select {
	case c := <-s.idle:
		return c, nil
	case s.slots <- struct{}{}:
		c, err := openConn(&s.opts)
		if err != nil {
			<-s.slots
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Storage) put(c *conn, broken bool) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if broken || closed {
		// A call that got no reply may still be answered later; a
		// fresh connection never sees that answer.
		c.close()
		<-s.slots
		return
	}
	s.idle <- c
}

// call runs one call on a pooled connection, with timeout extra time
// beyond Options.Timeout (for a lock wait at the broker).
func (s *Storage) call(ctx context.Context, op, key string, extra time.Duration,
	method string, params, out interface{}) error {
	_, err := s.callFrames(ctx, op, key, extra, method, params, nil, false, out)
	return err
}

// callFrames is call with values as frames beside the JSON (conn.callFrames).
func (s *Storage) callFrames(ctx context.Context, op, key string, extra time.Duration,
	method string, params interface{}, in [][]byte, want bool, out interface{}) ([][]byte,
	error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isDone() {
		return nil, ErrClosed
	}
	c, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	broken, frames, err := c.callFrames(ctx, s.opts.Timeout+extra, method, params, in, want,
		out)
	s.put(c, broken)
	if err != nil && broken && ctx.Err() != nil {
		// No answer before the caller's deadline: say that, not
		// "unreachable".  An answer (a refusal, say) is kept.
		return nil, ctx.Err()
	}
	var e *Error
	if errors.As(err, &e) {
		e.Op, e.Key = op, key
	}
	return frames, err
}

// value is a stored value in a reply: a frame of its own (asked for by
// Load), or, from a broker that answers in JSON, text as it is or other
// bytes as base64.
type value struct {
	Frame int     `json:"value_frame"`
	Value *string `json:"value,omitempty"`
	B64   []byte  `json:"value_b64,omitempty"`
}

func (v *value) bytes(frames [][]byte) ([]byte, error) {
	switch {
	case v.Frame > 0:
		if v.Frame > len(frames) {
			return nil, fmt.Errorf("tsecstorage: the reply names frame %d and has %d",
				v.Frame, len(frames))
		}
		return frames[v.Frame-1], nil
	case v.Value != nil:
		return []byte(*v.Value), nil
	case v.B64 == nil:
		return []byte{}, nil
	}
	return v.B64, nil
}

func keyErr(op, key string) error {
	return &Error{Op: op, Key: key, Code: "invalid_key", Errno: ErrnoInvalidKey,
		Message: "empty key"}
}

// Store puts value at key (nil and empty values are stored as empty).
func (s *Storage) Store(ctx context.Context, key string, v []byte) error {
	if key == "" {
		return keyErr("Store", key)
	}
	// The value as a frame of its own: any bytes, never escaped or
	// base64'd into the JSON.
	p := struct {
		Key   string `json:"key"`
		Frame int    `json:"value_frame"`
	}{key, 1}
	_, err := s.callFrames(ctx, "Store", key, 0, "store.put", &p, [][]byte{v}, false, nil)
	return err
}

// Load returns the value at key; a missing key is fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, keyErr("Load", key)
	}
	var r value
	frames, err := s.callFrames(ctx, "Load", key, 0, "store.get", keyParams(key), nil, true, &r)
	if err != nil {
		return nil, err
	}
	return r.bytes(frames)
}

// Delete removes key, or everything under it when it is a prefix; a key
// that is not there is no error (certmagic: an error only if the key
// still exists afterwards).
func (s *Storage) Delete(ctx context.Context, key string) error {
	if key == "" {
		return keyErr("Delete", key)
	}
	err := s.call(ctx, "Delete", key, 0, "store.delete", map[string]string{"key": key}, nil)
	var e *Error
	if errors.As(err, &e) && e.Code == "invalid_argument" {
		// A folder: the broker deletes one only when told it is
		// (the policy sees "recursive").
		err = s.call(ctx, "Delete", key, 0, "store.delete",
			map[string]interface{}{"key": key, "recursive": true}, nil)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Exists says whether key is there (a value or a prefix of values); any
// error, a refusal included, answers false.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	if key == "" {
		return false
	}
	var r struct {
		Exists bool `json:"exists"`
	}
	return s.call(ctx, "Exists", key, 0, "store.exists", map[string]string{"key": key},
		&r) == nil && r.Exists
}

// List returns the keys under prefix: its direct children, or with
// recursive every key below it, prefixes ("directories") included, as
// certmagic's FileStorage walks them.  A missing prefix is
// fs.ErrNotExist.
func (s *Storage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	var r struct {
		Keys []string `json:"keys"`
	}
	if err := s.call(ctx, "List", prefix, 0, "store.list",
		map[string]interface{}{"prefix": prefix, "recursive": recursive}, &r); err != nil {
		// A value, not a folder: nothing below it, as FileStorage
		// answers.
		var e *Error
		if errors.As(err, &e) && e.Code == "invalid_argument" {
			if ki, serr := s.Stat(ctx, prefix); serr == nil && ki.IsTerminal {
				return []string{}, nil
			}
		}
		return nil, err
	}
	if !recursive {
		out := make([]string, 0, len(r.Keys))
		for _, k := range r.Keys {
			out = append(out, strings.TrimSuffix(k, "/"))
		}
		return out, nil
	}
	// The broker lists the values below; certmagic also wants each
	// prefix between them and the one asked for.
	base := strings.Trim(prefix, "/")
	if base != "" {
		base += "/"
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(r.Keys))
	for _, k := range r.Keys {
		for d := path.Dir(k); d != "." && d != "/" && strings.HasPrefix(d+"/", base) &&
			d+"/" != base; d = path.Dir(d) {
			if seen[d] {
				break
			}
			seen[d] = true
			out = append(out, d)
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// Ping asks the broker whether it serves (its "health" call, which
// touches neither the policy nor the backend): for readiness checks,
// and the floor of any call's cost.
func (s *Storage) Ping(ctx context.Context) error {
	return s.call(ctx, "Ping", "", 0, "health", struct{}{}, nil)
}

// Stat describes key: a value (IsTerminal) or a prefix of values.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	if key == "" {
		return certmagic.KeyInfo{}, keyErr("Stat", key)
	}
	var r struct {
		Size    int64 `json:"size"`
		MtimeNs int64 `json:"mtime_ns"`
		IsFile  bool  `json:"is_file"`
	}
	if err := s.call(ctx, "Stat", key, 0, "store.stat", map[string]string{"key": key},
		&r); err != nil {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key, Modified: time.Unix(0, r.MtimeNs), Size: r.Size,
		IsTerminal: r.IsFile}, nil
}
