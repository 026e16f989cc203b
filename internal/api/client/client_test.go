package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/version"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a server answering every request with h and a client of
// it; both are closed when the test ends.
func serve(t *testing.T, cfg Config, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	cfg.Server = srv.URL
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
	})
	return c
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func TestNewRejectsBadServer(t *testing.T) {
	for _, s := range []string{"", "127.0.0.1:7070", "ftp://host", "http://"} {
		if _, err := New(Config{Server: s}); err == nil {
			t.Errorf("New(%q) = nil error; want one", s)
		}
	}
}

func TestDecodesAnswers(t *testing.T) {
	want := api.JobList{Index: 42, Jobs: []*api.Job{{ID: "7", Spec: api.JobSpec{Name: "train", Ranks: 2}}}}
	var got struct{ method, uri, ctype string }
	c := serve(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		got.method, got.uri, got.ctype = r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type")
		writeJSON(w, http.StatusOK, want)
	})
	l, err := c.Jobs(context.Background(), JobQuery{Live: true, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("Jobs (-want +got):\n%s", diff)
	}
	if got.method != "GET" || got.uri != "/v1/jobs?limit=5&live=true" {
		t.Errorf("request %s %s; want GET /v1/jobs?limit=5&live=true", got.method, got.uri)
	}
	if _, err := c.Heartbeat(context.Background(), &api.Heartbeat{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got.method != "POST" || got.uri != "/v1/agent/heartbeat" || got.ctype != "application/json" {
		t.Errorf("heartbeat sent as %s %s (%s); want POST /v1/agent/heartbeat (application/json)", got.method, got.uri, got.ctype)
	}
}

func TestRequestPaths(t *testing.T) {
	var uri string
	c := serve(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		uri = r.Method + " " + r.URL.RequestURI()
		writeJSON(w, http.StatusOK, struct{}{})
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"long poll", func() error {
			_, err := c.Assignments(ctx, AssignmentQuery{Node: "n-1", Index: 9, Wait: 10 * time.Second, Delta: true})
			return err
		}, "GET /v1/agent/assignments?node=n-1&index=9&wait=10s&delta=1"},
		{"first poll", func() error { _, err := c.Assignments(ctx, AssignmentQuery{Node: "n-1"}); return err }, "GET /v1/agent/assignments?node=n-1"},
		{"blocking jobs", func() error { _, err := c.Jobs(ctx, JobQuery{Index: 3, Wait: time.Second}); return err }, "GET /v1/jobs?index=3&wait=1s"},
		{"finished jobs", func() error { _, err := c.Jobs(ctx, JobQuery{All: true, Since: "7d", Limit: 10}); return err }, "GET /v1/jobs?all=true&limit=10&since=7d"},
		{"array cancel", func() error { _, err := c.CancelArray(ctx, "12"); return err }, "POST /v1/jobs/12/cancel?array=1"},
		{"escaped id", func() error { _, err := c.Job(ctx, "a/b"); return err }, "GET /v1/jobs/a%2Fb"},
		{"scale", func() error { _, err := c.Scale(ctx, "web", 3); return err }, "POST /v1/deployments/web/scale?replicas=3"},
		{"delete queue", func() error { return c.DeleteQueue(ctx, "q") }, "DELETE /v1/queues/q"},
		{"health", func() error { _, err := c.Health(ctx); return err }, "GET /healthz"},
		{"drain", func() error { _, err := c.NodeAction(ctx, "n-1", "drain"); return err }, "POST /v1/nodes/n-1/drain"},
		{"usage", func() error {
			_, err := c.Usage(ctx, UsageQuery{By: api.UsageByUser, Since: "7d", User: "alice", Archived: true})
			return err
		}, "GET /v1/reports/usage?archived=true&by=user&since=7d&user=alice"},
		{"usage, all defaults", func() error { _, err := c.Usage(ctx, UsageQuery{}); return err }, "GET /v1/reports/usage"},
	} {
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if uri != tc.want {
			t.Errorf("%s: sent %q; want %q", tc.name, uri, tc.want)
		}
	}
}

func TestAPIError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   APIError
	}{
		{"fields", 422, `{"error":"spec.ranks: too many","fields":[{"message":"first"},{"field":"spec.ranks","message":"too many"}]}`,
			APIError{Status: 422, Message: "spec.ranks: too many", Field: "spec.ranks",
				Fields: []*api.FieldError{{Msg: "first"}, {Field: "spec.ranks", Msg: "too many"}}}},
		{"message only", 409, `{"error":"job 3 already succeeded"}`, APIError{Status: 409, Message: "job 3 already succeeded"}},
		{"not JSON", 502, "bad gateway\n", APIError{Status: 502, Message: "bad gateway"}},
		{"empty", 500, "", APIError{Status: 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, Config{Retries: -1}, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			_, err := c.Submit(context.Background(), []byte("ranks: 1\n"))
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T); want an *APIError", err, err)
			}
			if diff := cmp.Diff(&tc.want, ae); diff != "" {
				t.Errorf("APIError (-want +got):\n%s", diff)
			}
		})
	}
	if got := (&APIError{Status: 500}).Error(); got != "HTTP 500" {
		t.Errorf("Error() = %q; want HTTP 500", got)
	}
}

// flaky answers 503 to the first n requests, then 200 with {}.
func flaky(n int32, hits *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) <= n {
			writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "the cache is behind the store"})
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

func TestRetriesGETOn503(t *testing.T) {
	var hits atomic.Int32
	c := serve(t, Config{RetryBackoff: time.Nanosecond}, flaky(2, &hits))
	if _, err := c.Nodes(context.Background()); err != nil {
		t.Fatalf("Nodes after two 503s: %v", err)
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("%d requests; want 3 (two retried)", n)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	var hits atomic.Int32
	c := serve(t, Config{RetryBackoff: time.Nanosecond, Retries: 1}, flaky(100, &hits))
	_, err := c.Nodes(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("err = %v; want the last 503", err)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("%d requests; want 2 (Retries: 1)", n)
	}
}

func TestDoesNotRetryPOSTOrClientErrors(t *testing.T) {
	var hits atomic.Int32
	c := serve(t, Config{RetryBackoff: time.Nanosecond}, flaky(100, &hits))
	if _, err := c.Cancel(context.Background(), "1"); err == nil {
		t.Fatal("Cancel succeeded on a 503")
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("POST sent %d times; want once", n)
	}

	hits.Store(0)
	c = serve(t, Config{RetryBackoff: time.Nanosecond}, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: "job 9: not found"})
	})
	if _, err := c.Job(context.Background(), "9"); err == nil {
		t.Fatal("Job succeeded on a 404")
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("GET answered 404 sent %d times; want once", n)
	}
}

// cancelOnClose cancels a context when the client closes an answer's
// body: after a try is over and before any backoff.
type cancelOnClose struct {
	http.RoundTripper
	cancel context.CancelFunc
}

func (t cancelOnClose) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(r)
	if err == nil {
		resp.Body = closeHook{resp.Body, t.cancel}
	}
	return resp, err
}

type closeHook struct {
	io.ReadCloser
	hook func()
}

func (c closeHook) Close() error { err := c.ReadCloser.Close(); c.hook(); return err }

func TestContextEndsRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hits atomic.Int32
	// The backoff would outlast the test: only the cancelled context can
	// end the wait.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := serve(t, Config{RetryBackoff: time.Hour, Transport: cancelOnClose{tr, cancel}}, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "busy"})
	})
	_, err := c.Nodes(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("%d requests; want 1", n)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens at its address now
	c, err := New(Config{Server: srv.URL, RetryBackoff: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(context.Background()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("err = %v; want ErrUnreachable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Nodes(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Errorf("cancelled: err = %v; want context.Canceled, not ErrUnreachable", err)
	}
}

func TestUserAgent(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{"", "gangway/" + version.Version},
		{"gangway-bench/1", "gangway-bench/1"},
	} {
		var got string
		c := serve(t, Config{UserAgent: tc.cfg}, func(w http.ResponseWriter, r *http.Request) {
			got = r.UserAgent()
			writeJSON(w, http.StatusOK, struct{}{})
		})
		if _, err := c.Register(context.Background(), &api.RegisterRequest{}); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("User-Agent %q; want %q", got, tc.want)
		}
	}
}

func TestLogsStreamsAndReportsErrors(t *testing.T) {
	c := serve(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("rank") == "1" {
			http.Error(w, "no stderr log for 3/1/1 on node n1", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte("line 1\nline 2\n"))
	})
	var b strings.Builder
	if err := c.Logs(context.Background(), "3", LogQuery{Stream: "stdout"}, &b); err != nil || b.String() != "line 1\nline 2\n" {
		t.Errorf("Logs = %q, %v", b.String(), err)
	}
	err := c.Logs(context.Background(), "3", LogQuery{Rank: 1, Stream: "stderr"}, &b)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Message != "no stderr log for 3/1/1 on node n1" {
		t.Errorf("err = %#v; want a 404 with the agent's text", err)
	}
}

// TestLinksNoServer holds the package to its doc: the user's client must
// not link the etcd server or any control-plane package.
func TestLinksNoServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to list the dependencies with")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/gangway/gangway/internal/api/client").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/gangway/gangway/internal/api":          true,
		"github.com/gangway/gangway/internal/api/client":   true,
		"github.com/gangway/gangway/internal/base/version": true,
		"github.com/gangway/gangway/internal/base/pki":     true,
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.etcd.io/etcd/server") {
			t.Errorf("links %s", p)
		}
		if strings.HasPrefix(p, "github.com/gangway/gangway/") && !allowed[p] {
			t.Errorf("links %s; the client may import only api, base/pki and base/version of gangway's packages", p)
		}
	}
}

// TestMovesToTheNextReplica: of several servers, a request that cannot
// reach the current one is retried on the next, which later requests keep
// using.
func TestMovesToTheNextReplica(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // connections refused
	hits := 0
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Write([]byte(`{"ok":true,"leader":true}`))
	}))
	defer live.Close()
	c, err := New(Config{Server: deadURL + ", " + live.URL, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("health with the first server down: %v", err)
	}
	if c.Server() != live.URL {
		t.Errorf("now calling %s; want the live %s", c.Server(), live.URL)
	}
	if _, err := c.Health(context.Background()); err != nil || hits != 2 {
		t.Errorf("second request: %v, %d hits on the live server; want 2", err, hits)
	}
	if _, err := New(Config{Server: live.URL + ",ftp://x"}); err == nil || !strings.Contains(err.Error(), `"ftp://x"`) {
		t.Errorf("a bad URL among several: %v; want it named", err)
	}
}
