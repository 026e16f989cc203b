package server

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/base/wait"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine behind:
// Run must stop everything it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.EtcdLeaks()...)
}

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{DataDir: filepath.Join(t.TempDir(), "server")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunLeadsThenStops: one replica on its embedded etcd becomes leader,
// and Run returns nil once ctx ends, with its goroutines gone (TestMain).
func TestRunLeadsThenStops(t *testing.T) {
	s := newTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	adm, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(adm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	err = wait.Until(wctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run returned before leading: %v", err)
		default:
		}
		h, err := c.Health(wctx)
		return err == nil && h.Leader, nil
	})
	if err != nil {
		t.Fatalf("never became leader: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v; want nil after ctx ended", err)
	}
	if s.controller() != nil {
		t.Error("still holds a controller after Run returned")
	}
}

// TestRunReturnsServeError: a listener that fails makes Run return its
// error after stopping what it had started.
func TestRunReturnsServeError(t *testing.T) {
	s := newTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := s.Run(context.Background(), ln); err == nil {
		t.Fatal("Run = nil with a closed listener; want its error")
	}
}

// asWho is r as authenticated as wh (for tests of the routes behind
// guard).
func asWho(r *http.Request, wh *api.Who) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), whoKey{}, wh))
}
