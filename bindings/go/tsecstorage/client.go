package tsecstorage

/*
#cgo pkg-config: tinysecurity
#include <stdlib.h>
#include <string.h>
#include <tinysecurity/client.h>

// One client, from Go's flat arrays (cgo cannot build the endpoint array
// itself without copying Go pointers into C memory).
static int tsecgo_open(struct tsec_client **out, const char *endpoint,
		       const char *server_key, const char *pub, const char *sec,
		       char **eps, char **keys, size_t n, int timeout_ms,
		       int attempt_ms, struct tsec_error *err)
{
	struct tsec_client_endpoint e[TSEC_CLIENT_MAX_ENDPOINTS];
	struct tsec_client_opts o = {
		.endpoint = endpoint, .server_public_key = server_key,
		.public_key = pub, .secret_key = sec, .timeout_ms = timeout_ms,
		.attempt_ms = attempt_ms,
	};

	if (n > TSEC_CLIENT_MAX_ENDPOINTS)
		n = TSEC_CLIENT_MAX_ENDPOINTS;
	for (size_t i = 0; i < n; i++) {
		e[i].endpoint = eps[i];
		e[i].server_public_key = keys[i];
	}
	if (n) {
		o.endpoints = e;
		o.nendpoints = n;
	}
	return tsec_client_open(out, &o, err);
}
*/
import "C"

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// The client library's numbers, by name (include/tinysecurity/).
const (
	// MaxBrokers is the most Options.Brokers one Storage may be given.
	MaxBrokers = int(C.TSEC_CLIENT_MAX_ENDPOINTS)
	// ErrnoInvalidKey is Error.Errno for a key the broker cannot take.
	ErrnoInvalidKey = int(C.TSEC_EKEY)
	// ErrnoDenied is Error.Errno for a call the policy refused.
	ErrnoDenied = int(C.TSEC_EDENIED)
	// ErrnoUnknown is Error.Errno for a call that may or may not have
	// been carried out (no answer after the broker took it).
	ErrnoUnknown = int(C.TSEC_EUNKNOWN)
)

// conn is one connection of the client library: one call at a time.
type conn struct {
	c       *C.struct_tsec_client
	timeout time.Duration // the client's, as last set
}

// rawJSON is params already written as JSON text (the hot calls' own,
// without encoding/json's reflection).
type rawJSON []byte

// keyParams is {"key": key}, written as JSON.
func keyParams(key string) rawJSON {
	b := make([]byte, 0, len(key)+12)
	b = append(b, `{"key":`...)
	b = appendJSONString(b, key)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: '"', '\\' and controls
// escaped, everything else (UTF-8 as it is) copied.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// The methods' names in C memory, made once each and kept.
var (
	methodsMu sync.Mutex
	methods   = map[string]*C.char{}
)

func cMethod(m string) *C.char {
	methodsMu.Lock()
	defer methodsMu.Unlock()
	c, ok := methods[m]
	if !ok {
		c = C.CString(m)
		methods[m] = c
	}
	return c
}

func cfree(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

func cstr(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func openConn(o *Options) (*conn, error) {
	var out *C.struct_tsec_client
	var cerr C.struct_tsec_error

	ep, sk := cstr(o.Endpoint), cstr(o.ServerPublicKey)
	pub, sec := cstr(o.PublicKey), cstr(o.SecretKey)
	defer func() {
		cfree(ep)
		cfree(sk)
		cfree(pub)
		// The secret's copy in C memory is wiped before it is freed.
		if sec != nil {
			C.memset(unsafe.Pointer(sec), 0, C.size_t(len(o.SecretKey)))
		}
		cfree(sec)
	}()
	n := len(o.Brokers)
	var eps, keys **C.char
	if n > 0 {
		size := C.size_t(n) * C.size_t(unsafe.Sizeof((*C.char)(nil)))
		eps = (**C.char)(C.malloc(size))
		keys = (**C.char)(C.malloc(size))
		es := unsafe.Slice(eps, n)
		ks := unsafe.Slice(keys, n)
		for i, b := range o.Brokers {
			es[i], ks[i] = cstr(b.Endpoint), cstr(b.ServerPublicKey)
		}
		defer func() {
			for i := range es {
				cfree(es[i])
				cfree(ks[i])
			}
			C.free(unsafe.Pointer(eps))
			C.free(unsafe.Pointer(keys))
		}()
	}
	rc := C.tsecgo_open(&out, ep, sk, pub, sec, eps, keys, C.size_t(n),
		C.int(o.Timeout/time.Millisecond), C.int(o.AttemptTimeout/time.Millisecond), &cerr)
	if rc != 0 {
		return nil, &Error{Op: "open", Code: errName(int(rc)), Errno: int(rc),
			Message: C.GoString(&cerr.msg[0])}
	}
	return &conn{c: out}, nil
}

func (c *conn) close() {
	C.tsec_client_close(&c.c)
}

func errName(code int) string {
	return C.GoString(C.tsec_errname(C.int(code)))
}

// wireError is an error reply's object.
type wireError struct {
	Code    string   `json:"code"`
	Errno   int      `json:"errno"`
	Message string   `json:"message"`
	Where   string   `json:"where"`
	Reason  string   `json:"reason"`
	Rules   []string `json:"rules"`
}

// errorOf is the error of a call that returned rc: the broker's error
// reply (its message, and a refusal's reason and rules) when there was
// one, else the client library's.
func (c *conn) errorOf(rc C.int, cerr *C.struct_tsec_error) *Error {
	e := &Error{Code: errName(int(rc)), Errno: int(rc), Message: C.GoString(&cerr.msg[0])}
	if le := C.tsec_client_last_error(c.c); le != nil {
		var w wireError
		if json.Unmarshal([]byte(C.GoString(le)), &w) == nil {
			e.Message, e.Reason, e.Rules = w.Message, w.Reason, w.Rules
			if e.Rules == nil && w.Reason != "" {
				e.Rules = []string{}
			}
		}
	}
	return e
}

// call sends one call and decodes its result into out (when not nil).
// timeout is the whole call's; the caller's context may shorten it.
// A call that got no reply leaves the connection unfit: noReply is then
// true and the caller closes it.
func (c *conn) call(ctx context.Context, timeout time.Duration, method string,
	params interface{}, out interface{}) (noReply bool, err error) {
	noReply, _, err = c.callFrames(ctx, timeout, method, params, nil, false, out)
	return noReply, err
}

// callFrames is call with values as frames of their own beside the JSON,
// never escaped into it: in goes after the params (which name each by a
// member "<name>_frame": N, from 1), and with want the broker answers
// values as frames too, returned in order.  The bytes are copied into C
// memory for the call (cgo may not hand C memory holding Go pointers)
// and wiped there after it: a value may be a private key.
func (c *conn) callFrames(ctx context.Context, timeout time.Duration, method string,
	params interface{}, in [][]byte, want bool, out interface{}) (noReply bool,
	frames [][]byte, err error) {
	cut := false
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			timeout, cut = left, true
		}
	}
	if timeout < time.Millisecond {
		return false, nil, context.DeadlineExceeded
	}
	var p []byte
	if raw, ok := params.(rawJSON); ok {
		p = append(raw, 0)
	} else {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		// Keys and PEM as they are: no \u003c for '<'.
		enc.SetEscapeHTML(false)
		if err := enc.Encode(params); err != nil {
			return false, nil, err
		}
		buf.WriteByte(0)
		p = buf.Bytes()
	}
	cm := cMethod(method)
	var res *C.char
	var cerr C.struct_tsec_error
	if c.timeout != timeout {
		C.tsec_client_set_timeout(c.c, C.int(timeout/time.Millisecond))
		c.timeout = timeout
	}
	var cin *C.struct_tsec_client_frame
	if len(in) > 0 {
		cin = (*C.struct_tsec_client_frame)(C.malloc(C.size_t(len(in)) *
			C.size_t(unsafe.Sizeof(C.struct_tsec_client_frame{}))))
		cs := unsafe.Slice(cin, len(in))
		for i, b := range in {
			cs[i].data, cs[i].len = C.CBytes(b), C.size_t(len(b))
		}
		defer func() {
			for i := range cs {
				C.memset(unsafe.Pointer(cs[i].data), 0, cs[i].len)
				C.free(unsafe.Pointer(cs[i].data))
			}
			C.free(unsafe.Pointer(cin))
		}()
	}
	var cout [C.TSEC_CLIENT_MAX_FRAMES]C.struct_tsec_client_frame
	var nout C.size_t
	var outp *C.struct_tsec_client_frame
	if want {
		outp = &cout[0]
	}
	rc := C.tsec_client_call_frames(c.c, cm, (*C.char)(unsafe.Pointer(&p[0])), cin,
		C.size_t(len(in)), &res, outp, &nout, &cerr)
	if nout > 0 {
		for i := 0; i < int(nout); i++ {
			frames = append(frames, C.GoBytes(unsafe.Pointer(cout[i].data), C.int(cout[i].len)))
		}
		C.tsec_client_frames_free(&cout[0], nout)
	}
	if rc != 0 {
		e := c.errorOf(rc, &cerr)
		if C.tsec_client_last_error(c.c) != nil {
			return false, nil, e
		}
		// No error reply: nothing answered, or the reply was not one.
		if cut && (rc == C.TSEC_EUNREACHABLE || rc == C.TSEC_EUNKNOWN) {
			// Within the caller's deadline, which ended the wait.
			return true, nil, context.DeadlineExceeded
		}
		return true, nil, e
	}
	defer C.free(unsafe.Pointer(res))
	if out == nil || res == nil {
		return false, frames, nil
	}
	if v, ok := out.(*value); ok && len(frames) == 1 &&
		C.GoString(res) == `{"value_frame":1}` {
		v.Frame = 1 // a Load's usual answer, without the decoder
		return false, frames, nil
	}
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(res), C.int(C.strlen(res))), out); err != nil {
		return false, nil, fmt.Errorf("tsecstorage: %s: malformed result: %w", method, err)
	}
	return false, frames, nil
}
