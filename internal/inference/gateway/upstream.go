package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// upstream is the gateway's transport to plain-HTTP engines: an
// http.RoundTripper that writes each request and reads its answer on a
// pooled keep-alive connection in the caller's goroutine. net/http's
// Transport hands every request to a writer goroutine and every answer
// from a reader goroutine, two goroutine hand-offs (and, on a quiet
// machine, thread wake-ups) per request that a proxy in front of
// zero-latency engines spends most of its CPU on; here the answer's body
// is read straight from the connection by whoever reads resp.Body.
// Requests are serialized by http.Request.Write and answers parsed by
// http.ReadResponse. Other schemes go to fallback.
//
// A connection idle longer than idleTimeout is closed rather than reused
// (the engine has most likely dropped it, and its socket would otherwise
// stay open after the engine went away); hosts without connections are
// forgotten, as endpoints come and go with replicas.
//
// A reused connection that the engine closed while it sat idle fails
// before any answer; such a request is resent once on a new connection
// when it has GetBody, as net/http does. Cancelling the request's
// context closes its connection, which is how an engine learns the
// client left.
type upstream struct {
	fallback http.RoundTripper
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	maxConns int // per host, idle and busy together
	// idleTimeout is how long a connection may wait in the pool.
	idleTimeout time.Duration

	mu    sync.Mutex // guards hosts and swept
	hosts map[string]*hostConns
	swept time.Time // when every host's pool was last expired
}

// upstreamIdleTimeout is net/http's DefaultTransport's IdleConnTimeout.
const upstreamIdleTimeout = 90 * time.Second

type hostConns struct {
	slots chan struct{} // one token per open connection, cap maxConns
	idle  []*upConn     // most recently used last
}

type upConn struct {
	up     *upstream
	host   *hostConns
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool
	idleAt time.Time // when it was last put back
}

var _ http.RoundTripper = (*upstream)(nil)

func newUpstream(fallback http.RoundTripper, maxConns int) *upstream {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &upstream{fallback: fallback, dial: d.DialContext, maxConns: maxConns, idleTimeout: upstreamIdleTimeout,
		hosts: map[string]*hostConns{}}
}

// RoundTrip implements http.RoundTripper.
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	return u.roundTripWithin(req, 0)
}

// roundTripWithin is RoundTrip that gives the engine at most headers
// (when positive) from the end of the request's write to the end of the
// answer's headers, else fails with errNoHeaders. On a pooled connection
// that is a read deadline: no timer, goroutine or context of its own.
func (u *upstream) roundTripWithin(req *http.Request, headers time.Duration) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return roundTripWithin(u.fallback, req, headers)
	}
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for try := 0; ; try++ {
		c, err := u.get(ctx, addr)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := c.roundTrip(req, headers)
		if err == nil {
			return resp, nil
		}
		reused := c.reused
		c.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errNoHeaders) {
			return nil, err // the engine took the request: not to be resent
		}
		// An idle connection the engine had closed: once more, anew.
		if reused && try == 0 && req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
			continue
		}
		return nil, err
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// get returns an idle connection to addr or dials one, waiting for a
// slot while maxConns are open.
func (u *upstream) get(ctx context.Context, addr string) (*upConn, error) {
	now := time.Now()
	u.mu.Lock()
	stale := u.expireLocked(now)
	h := u.hosts[addr]
	if h == nil {
		h = &hostConns{slots: make(chan struct{}, u.maxConns)}
		u.hosts[addr] = h
	}
	stale = append(stale, h.expireLocked(now, u.idleTimeout)...)
	var c *upConn
	if n := len(h.idle); n > 0 {
		c = h.idle[n-1]
		h.idle = h.idle[:n-1]
	}
	u.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	if c != nil {
		c.reused = true
		return c, nil
	}
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	nc, err := u.dial(ctx, "tcp", addr)
	if err != nil {
		<-h.slots
		return nil, err
	}
	return &upConn{up: u, host: h, nc: nc, br: bufio.NewReaderSize(nc, 32<<10), bw: bufio.NewWriterSize(nc, 64<<10)}, nil
}

// expireLocked takes the idle connections past idleTimeout out of h's
// pool (oldest first in it) and returns them to be closed.
func (h *hostConns) expireLocked(now time.Time, timeout time.Duration) []*upConn {
	i := 0
	for i < len(h.idle) && now.Sub(h.idle[i].idleAt) > timeout {
		i++
	}
	if i == 0 {
		return nil
	}
	stale := append([]*upConn(nil), h.idle[:i]...)
	h.idle = append(h.idle[:0], h.idle[i:]...)
	return stale
}

// expireLocked, at most every half idleTimeout, expires every host's pool
// and forgets hosts with no connection open, returning what to close.
func (u *upstream) expireLocked(now time.Time) []*upConn {
	if now.Sub(u.swept) < u.idleTimeout/2 {
		return nil
	}
	u.swept = now
	var stale []*upConn
	for addr, h := range u.hosts {
		s := h.expireLocked(now, u.idleTimeout)
		stale = append(stale, s...)
		if len(h.idle) == 0 && len(h.slots) == len(s) {
			delete(u.hosts, addr) // nothing open once s is closed
		}
	}
	return stale
}

// put returns a connection whose answer was read to its end.
func (u *upstream) put(c *upConn) {
	c.idleAt = time.Now()
	u.mu.Lock()
	c.host.idle = append(c.host.idle, c)
	u.mu.Unlock()
}

// CloseIdleConnections closes the connections no request holds.
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	var idle []*upConn
	for _, h := range u.hosts {
		idle = append(idle, h.idle...)
		h.idle = nil
	}
	u.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
	if f, ok := u.fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

func (c *upConn) close() {
	c.nc.Close()
	<-c.host.slots
}

// aLongTimeAgo is a deadline in the past: it fails blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req and reads its answer's head; the body is read
// from the connection through resp.Body, which puts the connection back
// (or closes it) when closed.
func (c *upConn) roundTrip(req *http.Request, headers time.Duration) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	// Write calls the trace's WroteRequest once it is done with the body.
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("write request: %w", err)
	}
	if headers > 0 {
		c.nc.SetReadDeadline(time.Now().Add(headers))
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			stop()
			if headers > 0 && ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("%w (%v)", errNoHeaders, headers)
			}
			return nil, fmt.Errorf("read answer: %w", err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // an interim answer; the final one follows
		}
		if headers > 0 {
			c.nc.SetReadDeadline(time.Time{})
			if ctx.Err() != nil {
				// Cancelled meanwhile: keep the cancellation's deadline.
				c.nc.SetDeadline(aLongTimeAgo)
			}
		}
		resp.Body = &upBody{body: resp.Body, c: c, stop: stop, keep: !resp.Close}
		return resp, nil
	}
}

// upBody is an answer's body over its connection.
type upBody struct {
	body io.ReadCloser
	c    *upConn
	stop func() bool // false once the context's cancellation fired
	keep bool        // the engine did not ask to close
	eof  bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close puts the connection back when the answer was read to its end
// and the request was not cancelled; else it closes it (an answer left
// unread may still be streaming).
func (b *upBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	b.body.Close()
	if b.stop() && b.eof && b.keep && b.c.br.Buffered() == 0 {
		b.c.up.put(b.c)
		return nil
	}
	b.c.close()
	return nil
}

// errNoHeaders is a round trip's error when the engine sent no response
// headers within the bound it was given.
var errNoHeaders = errors.New("no response headers in time")

// headerBounded is a transport that bounds the wait for headers itself
// (the gateway's own).
type headerBounded interface {
	roundTripWithin(req *http.Request, headers time.Duration) (*http.Response, error)
}

// roundTripWithin bounds any transport's wait for headers (when headers
// is positive) with a timer that cancels the request: errNoHeaders.
func roundTripWithin(rt http.RoundTripper, req *http.Request, headers time.Duration) (*http.Response, error) {
	if hb, ok := rt.(headerBounded); ok {
		return hb.roundTripWithin(req, headers)
	}
	if headers <= 0 {
		return rt.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	t := time.AfterFunc(headers, func() { cancel(errNoHeaders) })
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if t.Stop() {
		if err != nil {
			cancel(nil)
			return nil, err
		}
		// The body is read under ctx: end it with the body.
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	// Fired: the answer, if any, was cut off.
	if err == nil {
		resp.Body.Close()
	}
	cancel(nil)
	if req.Context().Err() != nil {
		return nil, req.Context().Err()
	}
	return nil, fmt.Errorf("%w (%v)", errNoHeaders, headers)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
