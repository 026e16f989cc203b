package infbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The load generator's client reads the answers a Go server writes:
// streamed (chunked, flushed in pieces), sized, errors, and a server that
// closes the connection after answering.
func TestRawConnReadsAnswers(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch string(b) {
		case "stream":
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		case "sized":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		case "missing":
			http.Error(w, "no such model", http.StatusNotFound)
		}
	}))
	defer hs.Close()
	bodies := [][]byte{[]byte("stream"), []byte("sized"), []byte("close"), []byte("missing")}
	tgt, err := newLoadTarget(hs.URL, "/v1/completions", bodies)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConn{addr: tgt.addr}
	defer c.close()
	for round := range 2 {
		for i, want := range []string{"", "", "", "status 404"} {
			start := time.Now()
			first, err := c.roundTrip(tgt.heads[i], bodies[i])
			if got := fmt.Sprint(err); (want == "" && err != nil) || (want != "" && !strings.Contains(got, want)) {
				t.Fatalf("round %d, %s: err %v, want %q", round, bodies[i], err, want)
			}
			if err == nil && first.Before(start) {
				t.Errorf("%s: first byte before the request", bodies[i])
			}
			if string(bodies[i]) == "close" && c.nc != nil {
				t.Error("connection kept after Connection: close")
			}
		}
	}
}

func TestLoadGenCountsEveryRequest(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer hs.Close()
	bodies := [][]byte{[]byte("a"), []byte("b")}
	tgt, _ := newLoadTarget(hs.URL, "/", bodies)
	g := newLoadGen([]loadTarget{tgt, tgt}, bodies)
	defer g.close()
	for _, shape := range []loadShape{
		{rate: 2000, conns: 4, requests: 300, seed: 1},
		{concurrency: 3, requests: 100},
	} {
		if err := g.dial(shape); err != nil {
			t.Fatal(err)
		}
		res := g.run(context.Background(), shape)
		if len(res.e2e) != shape.requests || res.errors != 0 {
			t.Fatalf("%+v: %d answered, %d errors (%v)", shape, len(res.e2e), res.errors, res.firstErr)
		}
		for i := range res.e2e {
			if res.e2e[i] < 0 || (i > 0 && res.e2e[i] < res.e2e[i-1]) {
				t.Fatal("latencies negative or unsorted")
			}
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	if d, ok := parseSchedstat([]byte("255166195 105084588 957\n")); !ok || d != 255166195 {
		t.Errorf("got %v %v", d, ok)
	}
	if _, ok := parseSchedstat([]byte("")); ok {
		t.Error("empty accepted")
	}
}
