package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestStatusBatcherCommitsQueuedHeartbeatsTogether(t *testing.T) {
	ctx := context.Background()
	e, err := store.StartEmbedded(ctx, store.EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli := e.Client()
	defer cli.Close()
	st := store.New(cli)
	b := &statusBatcher{st: st}

	// A commit is in progress: ten heartbeats queue behind it.
	b.mu.Lock()
	b.busy = true
	b.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.put(ctx, []api.RankStatus{{JobID: "7", Attempt: 1, Rank: i, State: api.RankRunning}})
		}()
	}
	for {
		b.mu.Lock()
		n := len(b.waiters)
		b.mu.Unlock()
		if n == 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	before, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The in-progress commit ends; the next heartbeat commits for all.
	b.mu.Lock()
	b.busy = false
	b.mu.Unlock()
	// Rank 3 again, now exited: within one round the newest wins.
	if err := b.put(ctx, []api.RankStatus{{JobID: "7", Attempt: 1, Rank: 3, State: api.RankExited}}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	after, _ := st.Revision(ctx)
	if after-before != 1 {
		t.Errorf("eleven heartbeats took %d transactions; want 1", after-before)
	}
	rs, err := st.RankStatuses(ctx, "7")
	if err != nil || len(rs) != 10 {
		t.Fatalf("stored %d statuses (%v); want 10", len(rs), err)
	}
	for _, r := range rs {
		if want := api.RankRunning; r.Rank == 3 && r.State != api.RankExited || r.Rank != 3 && r.State != want {
			t.Errorf("rank %d: %s", r.Rank, r.State)
		}
	}
}

// TestStatusBatcherStarterAnswersWithinItsDeadline: the heartbeat that
// starts a commit while the store takes no write (etcd lost quorum) gets
// its answer when its own deadline ends, as every other caller does, with
// the commit still going on: held for the commit's own timeout, the
// heartbeat's answer came past the agent's lease and the node fenced its
// ranks (the chaos suite's quorum loss with the leader alive).
func TestStatusBatcherStarterAnswersWithinItsDeadline(t *testing.T) {
	ctx := context.Background()
	// An etcd endpoint that takes connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b := &statusBatcher{st: store.New(cli)}

	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = b.put(hctx, []api.RankStatus{{JobID: "7", Attempt: 1, Rank: 0, State: api.RankExited}})
	b.mu.Lock()
	busy := b.busy
	b.mu.Unlock()
	if !errors.Is(err, context.DeadlineExceeded) || !busy {
		t.Fatalf("put = %v with the commit in progress %v; want the caller's deadline while the commit goes on", err, busy)
	}
	cli.Close() // the commit fails now; it must end
	for busy {
		time.Sleep(time.Millisecond)
		b.mu.Lock()
		busy = b.busy
		b.mu.Unlock()
	}
}
