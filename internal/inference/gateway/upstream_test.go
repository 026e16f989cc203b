package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer counts the connections its clients open.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, &conns
}

func post(t *testing.T, u *upstream, url, body string) (int, string, error) {
	t.Helper()
	b := []byte(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	resp, err := u.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(got), err
}

func TestUpstreamReusesConnections(t *testing.T) {
	hs, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch string(b) {
		case "stream":
			for range 3 {
				io.WriteString(w, "data: x\n\n")
				w.(http.Flusher).Flush()
			}
		case "hints":
			w.Header().Set("Link", "</x>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "after hints")
		default:
			io.WriteString(w, "echo "+string(b))
		}
	})
	u := newUpstream(http.DefaultTransport, 8)
	defer u.CloseIdleConnections()
	for i, tc := range []struct{ body, want string }{
		{"a", "echo a"}, {"stream", strings.Repeat("data: x\n\n", 3)}, {"hints", "after hints"}, {"b", "echo b"},
	} {
		code, got, err := post(t, u, hs.URL+"/v1/completions", tc.body)
		if err != nil || code != 200 || got != tc.want {
			t.Fatalf("request %d: %d %q %v; want 200 %q", i, code, got, err, tc.want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four sequential requests, want 1", n)
	}
}

// An idle connection the engine closed is noticed on reuse and the
// request resent on a new one; an engine that asks to close gets its
// connection closed.
func TestUpstreamStaleAndClosingConnections(t *testing.T) {
	var closeAfter atomic.Bool
	hs, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if closeAfter.Load() {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "ok")
	})
	u := newUpstream(http.DefaultTransport, 8)
	defer u.CloseIdleConnections()
	if code, _, err := post(t, u, hs.URL, "1"); code != 200 || err != nil {
		t.Fatal(code, err)
	}
	hs.CloseClientConnections() // the engine drops the idle connection
	if code, got, err := post(t, u, hs.URL, "2"); code != 200 || got != "ok" || err != nil {
		t.Fatalf("after the engine closed the idle connection: %d %q %v", code, got, err)
	}
	closeAfter.Store(true)
	before := conns.Load()
	for range 2 {
		if code, _, err := post(t, u, hs.URL, "3"); code != 200 || err != nil {
			t.Fatal(code, err)
		}
	}
	if n := conns.Load() - before; n != 1 {
		// The first of the two reuses the open connection; the second
		// needs a new one since the engine closed the first.
		t.Errorf("%d new connections after Connection: close answers, want 1", n)
	}
}

// A cancelled request closes its connection (the engine's signal to
// abort) instead of returning it to the pool.
func TestUpstreamCancelClosesConnection(t *testing.T) {
	gone := make(chan struct{})
	hs, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	u := newUpstream(http.DefaultTransport, 8)
	defer u.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader("x"))
	resp, err := u.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("read after cancel succeeded")
	}
	resp.Body.Close()
	<-gone
	if n := len(u.hosts[strings.TrimPrefix(hs.URL, "http://")].idle); n != 0 {
		t.Errorf("%d idle connections after a cancelled request, want 0", n)
	}
}

// A connection idle past the timeout is closed, not reused, and a host no
// request went to for that long is forgotten with its connections.
func TestUpstreamExpiresIdleConnections(t *testing.T) {
	var closed atomic.Int32
	var conns atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, "ok") }
	hs := httptest.NewUnstartedServer(http.HandlerFunc(h))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	hs.Start()
	defer hs.Close()
	other, _ := countingServer(t, h)
	u := newUpstream(http.DefaultTransport, 8)
	u.idleTimeout = 200 * time.Millisecond
	defer u.CloseIdleConnections()
	for range 2 { // within the timeout: one connection
		if code, _, err := post(t, u, hs.URL, "x"); code != 200 || err != nil {
			t.Fatal(code, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two requests in a row; want 1", n)
	}
	time.Sleep(450 * time.Millisecond)
	if code, _, err := post(t, u, hs.URL, "x"); code != 200 || err != nil {
		t.Fatal(code, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections after the first sat idle past the timeout; want a new one (2)", n)
	}
	waitFor(t, "the expired connection to be closed", func() bool { return closed.Load() == 1 })

	time.Sleep(450 * time.Millisecond)
	if code, _, err := post(t, u, other.URL, "x"); code != 200 || err != nil {
		t.Fatal(code, err)
	}
	waitFor(t, "the idle connection of a host nobody asked for to be closed", func() bool { return closed.Load() == 2 })
	u.mu.Lock()
	_, kept := u.hosts[strings.TrimPrefix(hs.URL, "http://")]
	n := len(u.hosts)
	u.mu.Unlock()
	if kept || n != 1 {
		t.Errorf("hosts after the first went quiet: %d, first still there %v; want only the other", n, kept)
	}
}
