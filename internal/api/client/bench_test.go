package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// The two requests measured end to end: an agent's heartbeat and the e2e
// benchmark's submission. Allocations count the test server's too.

func benchClient(b *testing.B, timeout time.Duration) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"1"}` + "\n"))
	}))
	c, err := New(Config{Server: srv.URL, Timeout: timeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
	})
	return c
}

func BenchmarkHeartbeat(b *testing.B) {
	c := benchClient(b, 10*time.Second)
	// As the agent sends it: bounded by the fence lease.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	hb := api.Heartbeat{Node: "n1", Ranks: []api.RankStatus{{JobID: "1", State: api.RankRunning}}, SentAt: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Heartbeat(ctx, &hb); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSubmitID(b *testing.B) {
	c := benchClient(b, time.Minute)
	spec := []byte(`{"ranks":1,"command":["true"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.SubmitID(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
	}
}
