package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeGateway answers chat completions as a gateway does, streamed, while
// up; while down it answers 503, or (cut) closes the stream before [DONE].
type fakeGateway struct {
	srv  *httptest.Server
	down atomic.Bool
	cut  bool
	hits atomic.Int64
}

func newFakeGateway(t *testing.T) *fakeGateway {
	g := &fakeGateway{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.hits.Add(1)
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if g.down.Load() && !g.cut {
			http.Error(w, "no ready replica", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		if !g.down.Load() {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// TestRequesterRetriesOnTheNextGateway: a request whose gateway fails is
// tried again on the next one and counts as one request, not failed; one
// that fails everywhere for its whole budget counts as failed.
func TestRequesterRetriesOnTheNextGateway(t *testing.T) {
	up, down, cut := newFakeGateway(t), newFakeGateway(t), newFakeGateway(t)
	down.down.Store(true)
	cut.down.Store(true)
	cut.cut = true
	// A closed port: the connection is refused, as from a killed replica.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	q := &requester{gateways: []string{dead, down.srv.URL, cut.srv.URL, up.srv.URL}, budget: 10 * time.Second, hc: &http.Client{}}
	defer q.hc.CloseIdleConnections()
	ctx := context.Background()
	q.one(ctx, "hello")
	requests, failed, retries, _ := q.counts()
	if requests != 1 || failed != 0 || retries != 3 {
		t.Errorf("requests %d, failed %d, retries %d; want 1, 0, 3 (three gateways failed before the fourth answered)", requests, failed, retries)
	}
	if up.hits.Load() != 1 || down.hits.Load() != 1 || cut.hits.Load() != 1 {
		t.Errorf("hits: up %d, down %d, cut %d; want one each", up.hits.Load(), down.hits.Load(), cut.hits.Load())
	}

	q = &requester{gateways: []string{dead, down.srv.URL}, budget: 700 * time.Millisecond, hc: &http.Client{}}
	defer q.hc.CloseIdleConnections()
	start := time.Now()
	q.one(ctx, "hello")
	requests, failed, retries, failures := q.counts()
	if requests != 1 || failed != 1 || retries < 1 || len(failures) != 1 {
		t.Errorf("requests %d, failed %d, retries %d, failures %q; want 1 failed after retries", requests, failed, retries, failures)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("a 700ms budget took %s", el)
	}
	if len(failures) == 1 && !strings.Contains(failures[0], "503") && !strings.Contains(failures[0], "refused") {
		t.Errorf("failure %q names neither the 503 nor the refused connection", failures[0])
	}

	// Cut short by the run's end: counted neither way.
	q = &requester{gateways: []string{down.srv.URL}, budget: time.Minute, hc: &http.Client{}}
	defer q.hc.CloseIdleConnections()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	q.one(cctx, "hello")
	if requests, failed, _, _ := q.counts(); requests != 0 || failed != 0 {
		t.Errorf("a request cut short counted: requests %d, failed %d", requests, failed)
	}
}

// TestRequesterRun: run's workers send requests until the context ends,
// and stop.
func TestRequesterRun(t *testing.T) {
	up := newFakeGateway(t)
	q := &requester{gateways: []string{up.srv.URL}, budget: time.Second, hc: &http.Client{}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	q.run(ctx, 2, 10*time.Millisecond)
	if requests, failed, _, _ := q.counts(); requests < 2 || failed != 0 {
		t.Errorf("requests %d, failed %d; want several, none failed", requests, failed)
	}
}
