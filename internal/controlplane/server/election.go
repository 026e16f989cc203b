package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Waits between two failed tries to join the election: doubled per
// failure from the first to the last.
const (
	electionBackoff    = 250 * time.Millisecond
	electionBackoffMax = 4 * time.Second
)

// lead campaigns for leadership and runs the controllers while leader,
// again after each loss of it, until ctx ends; it returns only after the
// goroutines it started have exited.
func (s *Server) lead(ctx context.Context, cli *clientv3.Client) {
	host, _ := os.Hostname()
	backoff := electionBackoff
	// retry waits after a failure; false when ctx ended meanwhile.
	retry := func(what string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn(what+" failed; retrying", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, electionBackoffMax)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5), concurrency.WithContext(ctx))
		if err != nil {
			if !retry("leader session", err) {
				return
			}
			continue
		}
		el := concurrency.NewElection(sess, store.Root+"leader")
		if err := el.Campaign(ctx, fmt.Sprintf("%s/%d", host, os.Getpid())); err != nil {
			sess.Close()
			if !retry("campaign", err) {
				return
			}
			continue
		}
		backoff = electionBackoff
		s.log.Info("became leader")
		s.setLeader(true)
		// A new leader gives every node a full timeout from now.
		s.mu.Lock()
		s.live = controller.NewLiveness(time.Now())
		s.mu.Unlock()
		// Losing the session (etcd unreachable past its TTL) ends this
		// term: the watcher cancels runCtx, and is waited for below.
		runCtx, cancel := context.WithCancel(ctx)
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			select {
			case <-sess.Done():
			case <-runCtx.Done():
			}
			cancel()
		}()
		ctl := controller.New(s.st, s.cache, s.liveness(), controller.Config{
			NodeTimeout: s.cfg.NodeTimeout, CheckpointRoot: s.cfg.CheckpointRoot, Scaler: s.scaler,
			TopologyFiles: s.cfg.TopologyFiles, JobRetention: s.cfg.JobRetention, MaxFinishedJobs: s.cfg.MaxFinishedJobs,
			JobArchive: s.cfg.JobArchive, RetentionTick: s.cfg.RetentionTick, SecretsDir: s.cfg.SecretsDir,
		}, s.log)
		s.mu.Lock()
		s.ctl = ctl
		s.mu.Unlock()
		_ = ctl.Run(runCtx)
		cancel()
		<-watchDone
		s.mu.Lock()
		s.ctl = nil
		s.mu.Unlock()
		s.setLeader(false)
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(rctx)
		rcancel()
		sess.Close()
	}
}

// testHooks are settings only tests change; zero values are production's.
type testHooks struct {
	// storeTimeout bounds each etcd request (store.Options.CallTimeout);
	// 0: the store's default.
	storeTimeout time.Duration
}
