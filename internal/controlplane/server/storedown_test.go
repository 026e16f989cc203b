package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// runServer runs s on a loopback port until the test ends, and returns
// once it serves, with an admin client that does not retry; done gets
// Run's error.
func runServer(t testing.TB, s *Server) (c *client.Client, done <-chan error, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx, ln) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}
	select {
	case <-s.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("Run returned before serving: %v", err)
	}
	adm, err := s.AdminConfig()
	if err != nil {
		stop()
		t.Fatal(err)
	}
	adm.Retries = -1                             // see every answer
	adm.Server = "https://" + ln.Addr().String() // admin.conf has the first run's
	if c, err = client.New(adm); err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, errc, stop
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestStoreUnreachableAnswers503: with its (external) etcd gone, the API
// answers reads and writes 503 saying the store is unreachable, within
// the store's call timeout, both while the caller's token is cached and
// once it must be read from the store again; a write refused so left
// nothing behind, and the server serves again once etcd is back.
func TestStoreUnreachableAnswers503(t *testing.T) {
	dir := t.TempDir()
	ecfg := store.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: loopbackAddr(t), PeerAddr: loopbackAddr(t)}
	ctx := context.Background()
	e, err := store.StartEmbedded(ctx, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	s, err := New(Config{DataDir: filepath.Join(dir, "server"), EtcdEndpoints: []string{e.Endpoint}, EtcdTLS: e.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 500 * time.Millisecond
	s.hooks.storeTimeout = bound
	c, _, stop := runServer(t, s)
	defer stop()
	spec := []byte("command: [\"true\"]\nranks: 1\n")
	if _, err := c.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}

	e.Close()
	ops := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list jobs", func(ctx context.Context) error { _, err := c.Jobs(ctx, client.JobQuery{}); return err }},
		{"describe job", func(ctx context.Context) error { _, err := c.Job(ctx, "1"); return err }},
		{"submit", func(ctx context.Context) error { _, err := c.Submit(ctx, spec); return err }},
		{"set queue", func(ctx context.Context) error {
			_, err := c.SetQueue(ctx, api.QueueSpec{Name: "q", Weight: 1})
			return err
		}},
	}
	round := func(when string) {
		for _, op := range ops {
			t.Run(when+"/"+op.name, func(t *testing.T) {
				// The bound on the answer's time is loose: the point is
				// that it comes, rather than hanging until the client
				// gives up.
				octx, cancel := context.WithTimeout(ctx, 20*bound)
				defer cancel()
				err := op.do(octx)
				var ae *client.APIError
				if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "the store (etcd) is unreachable") {
					t.Fatalf("err = %v; want a 503 saying the store (etcd) is unreachable", err)
				}
			})
		}
	}
	round("token cached")
	time.Sleep(tokenCacheTTL) // the admin's token must now be read from the store
	round("token read")

	if e, err = store.StartEmbedded(ctx, ecfg); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var jobs api.JobList
	if err := wait.Until(wctx, 50*time.Millisecond, func() (bool, error) {
		jobs, err = c.Jobs(wctx, client.JobQuery{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the API never served again once etcd was back: %v", err)
	}
	if len(jobs.Jobs) != 1 {
		t.Errorf("%d jobs stored; want only the one submitted before etcd went (the refused submission stores nothing)", len(jobs.Jobs))
	}
}

// TestEmbeddedEtcdStoppedEndsRun: Run returns an error when its embedded
// member stops under it, whose clients would only fail from then on.
func TestEmbeddedEtcdStoppedEndsRun(t *testing.T) {
	s := newTestServer(t)
	_, done, _ := runServer(t, s)
	s.etcd.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "embedded etcd stopped") {
			t.Fatalf("Run = %v; want an error saying the embedded etcd stopped", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run still running a minute after its embedded etcd stopped")
	}
}

// TestAssignmentsPollBeforeTheCacheLoadsIs503: an agent's long poll to a
// server whose cache has not loaded the store is answered, once its wait
// passes, 503 with the reason, never with a list (an empty one would stop
// the agent's ranks).
func TestAssignmentsPollBeforeTheCacheLoadsIs503(t *testing.T) {
	s := newTestServer(t)
	s.cache = store.NewCache(nil, s.log) // never runs: never loads
	for _, index := range []string{"0", "42"} {
		r := httptest.NewRequest("GET", "/v1/agent/assignments?node=n1&wait=50ms&index="+index, nil)
		w := httptest.NewRecorder()
		s.routes().ServeHTTP(w, asWho(r, &api.Who{Kind: kindNode, Name: "n1"}))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "has not loaded the store") {
			t.Errorf("index %s: %d %s; want 503 saying the store is not loaded yet", index, w.Code, w.Body)
		}
	}
}
