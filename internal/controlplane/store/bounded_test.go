package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestUnreachableEtcdIsErrUnavailableInBoundedTime: with its etcd gone, a
// Store's reads and writes fail within its call timeout with
// ErrUnavailable, over the network (an external etcd nobody answers for:
// the client would wait forever) and in process (a stopped member);
// a caller that gives up itself gets its own error.
func TestUnreachableEtcdIsErrUnavailableInBoundedTime(t *testing.T) {
	ctx := context.Background()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	in := e.Client()
	defer in.Close()
	ext, err := DialWith(ctx, DialConfig{Endpoints: []string{e.Endpoint}, TLS: e.ClientTLS()})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	defer ext.Close()
	const bound = 300 * time.Millisecond
	stores := map[string]*Store{"external": NewWith(ext, Options{CallTimeout: bound}), "in process": NewWith(in, Options{CallTimeout: bound})}
	if _, err := stores["external"].CreateJob(ctx, spec(1), time.Now()); err != nil {
		t.Fatal(err)
	}
	e.Close()

	ops := map[string]func(*Store) error{
		"read": func(s *Store) error { _, err := s.Job(ctx, "1"); return err },
		"put":  func(s *Store) error { return s.PutQueue(ctx, &api.Queue{Spec: api.QueueSpec{Name: "q"}}) },
		"transaction": func(s *Store) error {
			return s.PutRankStatuses(ctx, []api.RankStatus{{JobID: "1", Rank: 0, State: api.RankRunning}})
		},
	}
	for sname, s := range stores {
		for oname, op := range ops {
			t.Run(sname+"/"+oname, func(t *testing.T) {
				t0 := time.Now()
				err := op(s)
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err = %v; want ErrUnavailable", err)
				}
				if d := time.Since(t0); d > 10*bound {
					t.Errorf("took %s; want about the call timeout %s", d, bound)
				}
			})
		}
	}
	t.Run("caller's deadline", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, bound/3)
		defer cancel()
		_, err := stores["external"].Job(cctx, "1")
		if errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v; want the caller's own deadline, not ErrUnavailable", err)
		}
	})
}

// TestCallerDeadlineIsTheCallersError: etcd answers a request whose
// caller's deadline passed on its side as its own "request timed out";
// the store says it was the caller's deadline (a heartbeat handler told
// it apart from a failure of its own only so, and answered 500 instead
// of "heard, not stored").
func TestCallerDeadlineIsTheCallersError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	b := boundedKV{d: time.Second}
	for _, etcdErr := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToConnectionLost, errors.New("other")} {
		err := b.check(ctx, etcdErr)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, etcdErr) {
			t.Errorf("check(expired ctx, %v) = %v; want the caller's deadline with etcd's answer", etcdErr, err)
		}
	}
	if err := b.check(ctx, ctx.Err()); err != ctx.Err() {
		t.Errorf("check(expired ctx, its own error) = %v; want it unchanged", err)
	}
}
