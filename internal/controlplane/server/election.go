package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Waits between two failed tries to join the election: doubled per
// failure from the first to the last.
const (
	electionBackoff    = 250 * time.Millisecond
	electionBackoffMax = 4 * time.Second
)

// Election: replicas campaign under electionPrefix, each with a key of
// its session's lease (etcd's concurrency.Election), which lives electionTTL
// seconds past the last keep-alive of its replica. A replica that dies
// without resigning (kill -9, a crash, the machine) so leads on paper for
// up to electionTTL more, and nobody can lead meanwhile, not even itself
// restarted: hence the takeover. Each replica records its session in
// DataDir/LeaderSessionFile; a restart on the same data directory whose
// recorded lease is still alive resumes that session
// (concurrency.WithLease), so its campaign finds its own key, and, if
// that key led, leads at once.
const (
	electionPrefix = store.Root + "leader"
	// electionTTL bounds a failover when a leader dies on another replica:
	// its lease lapses this many seconds after its last keep-alive (which
	// etcd's client sends every third of it), and another replica leads.
	// When the dead replica's etcd member led raft too, the new raft leader
	// first gives every lease its full TTL again (about a second of raft
	// election before that): 3 s measured 5.6 s from kill to a new leader,
	// so 2 s, a little above etcd's least (1.5 s with its default ticks).
	electionTTL = 2
	// LeaderSessionFile, under DataDir, records the replica's election
	// session (leaderSession, JSON).
	LeaderSessionFile = "leader-session"
)

// leaderSession is a replica's record of its election session.
type leaderSession struct {
	// Cluster is the cluster's ID (cluster.go): a record of another
	// cluster's is not taken over.
	Cluster string `json:"cluster"`
	// Lease is the session's lease ID.
	Lease int64 `json:"lease"`
	// Key is the election key of the lease: electionPrefix/<lease in hex>.
	Key string `json:"key"`
	// Host and PID are the replica's host name and process; Value the
	// value it campaigned with: "HOST/PID".
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Value string `json:"value"`
}

func electionKey(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s/%x", electionPrefix, int64(lease))
}

// lead campaigns for leadership and runs the controllers while leader,
// again after each loss of it, until ctx ends; it returns only after the
// goroutines it started have exited.
func (s *Server) lead(ctx context.Context, cli *clientv3.Client) {
	host, _ := os.Hostname()
	pid := os.Getpid()
	if s.hooks.pid != 0 {
		pid = s.hooks.pid
	}
	ttl := electionTTL
	if s.hooks.electionTTL != 0 {
		ttl = s.hooks.electionTTL
	}
	val := fmt.Sprintf("%s/%d", host, pid)
	// The previous run's session, when it can be taken over; tried once.
	resume := s.resumableSession(ctx, cli, host, pid)
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
		opts := []concurrency.SessionOption{concurrency.WithTTL(ttl), concurrency.WithContext(ctx)}
		took := resume != clientv3.NoLease
		if took {
			opts = append(opts, concurrency.WithLease(resume))
			resume = clientv3.NoLease
		}
		sess, err := concurrency.NewSession(cli, opts...)
		if err != nil {
			if !retry("leader session", err) {
				return
			}
			continue
		}
		// Recorded before campaigning: a replica that dies waiting in
		// line also leaves a key, which would lead on paper once the keys
		// before it go.
		s.recordSession(leaderSession{Cluster: s.clusterID, Lease: int64(sess.Lease()), Key: electionKey(sess.Lease()),
			Host: host, PID: pid, Value: val})
		el := concurrency.NewElection(sess, electionPrefix)
		// With a session taken over, Campaign finds the key of its lease,
		// keeps its place in line (its creation revision) and puts val in
		// it (Proclaim).
		if err := el.Campaign(ctx, val); err != nil {
			s.endSession(sess)
			if !retry("campaign", err) {
				return
			}
			continue
		}
		backoff = electionBackoff
		s.log.Info("became leader", "lease", fmt.Sprintf("%x", int64(sess.Lease())), "took_over", took)
		s.publishLeader(ctx, cli, sess.Lease())
		s.setLeader(true)
		// A new leader gives every node a full timeout from now.
		s.mu.Lock()
		s.live = controller.NewLiveness(time.Now()).SetStreakGap(s.fence.StreakGap)
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
			NodeTimeout: s.cfg.NodeTimeout, Fencing: s.fence, CheckpointRoot: s.cfg.CheckpointRoot, Scaler: s.scaler,
			TopologyFiles: s.cfg.TopologyFiles, JobRetention: s.cfg.JobRetention, MaxFinishedJobs: s.cfg.MaxFinishedJobs,
			JobArchive: s.jobArchive(), RetentionTick: s.cfg.RetentionTick, SecretsDir: s.cfg.SecretsDir,
			Preflight: s.cfg.Preflight, Observer: s.metrics,
		}, s.log)
		s.mu.Lock()
		s.ctl = ctl
		s.mu.Unlock()
		// Events are told from what the cache applies from now on.
		recDone := make(chan struct{})
		go func() { defer close(recDone); _ = s.recorder.Run(runCtx) }()
		_ = ctl.Run(runCtx)
		cancel()
		<-recDone
		<-watchDone
		s.mu.Lock()
		s.ctl = nil
		s.mu.Unlock()
		s.setLeader(false)
		if s.hooks.abandonSession && ctx.Err() != nil {
			// As a killed process: the key and its lease stay.
			sess.Orphan()
			return
		}
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(rctx)
		rcancel()
		s.endSession(sess)
	}
}

// endSession revokes sess's lease, which deletes its key, and forgets the
// record of it. Not sess.Close: it revokes with the session's context,
// lead's, which has ended when this run stops.
func (s *Server) endSession(sess *concurrency.Session) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := sess.Client().Revoke(ctx, sess.Lease())
	cancel()
	if err != nil {
		// The lease outlives this run by its TTL; its record stays, for
		// a restart to take over.
		return
	}
	if s.cfg.DataDir == "" {
		return
	}
	path := filepath.Join(s.cfg.DataDir, LeaderSessionFile)
	if rec, err := readLeaderSession(path); err == nil && rec.Lease == int64(sess.Lease()) {
		_ = os.Remove(path)
	}
}

// recordSession writes rec to DataDir/LeaderSessionFile (atomically,
// 0600). Failing costs only a slower restart.
func (s *Server) recordSession(rec leaderSession) {
	if s.cfg.DataDir == "" {
		return
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = pki.WriteFile(filepath.Join(s.cfg.DataDir, LeaderSessionFile), b, 0o600)
	}
	if err != nil {
		s.log.Warn("cannot record the election session; a restart will wait for it to expire", "err", err)
	}
}

func readLeaderSession(path string) (leaderSession, error) {
	var rec leaderSession
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

// resumableSession is the lease of the session this data directory's
// previous run recorded, if it may be taken over: NoLease if there is
// none, or it may not (resumeRefusal), or it has expired. It bounds its
// reads of etcd, a moment at start.
func (s *Server) resumableSession(ctx context.Context, cli *clientv3.Client, host string, pid int) clientv3.LeaseID {
	if s.cfg.DataDir == "" {
		return clientv3.NoLease
	}
	rec, err := readLeaderSession(filepath.Join(s.cfg.DataDir, LeaderSessionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return clientv3.NoLease
	}
	if err != nil {
		s.log.Warn("cannot read the previous run's election session", "err", err)
		return clientv3.NoLease
	}
	f := sessionFacts{cluster: s.clusterID, host: host, pid: pid, external: len(s.cfg.EtcdEndpoints) > 0, alive: processAlive}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(rec.Lease), clientv3.WithAttachedKeys())
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		f.ttl = -1
	case err != nil:
		s.log.Warn("cannot read the previous run's election lease", "lease", fmt.Sprintf("%x", rec.Lease), "err", err)
		return clientv3.NoLease
	default:
		f.ttl = ttl.TTL
		for _, k := range ttl.Keys {
			// The leader's URL (forward.go) rides on the same lease.
			if string(k) != leaderURLKey {
				f.keys = append(f.keys, string(k))
			}
		}
	}
	if slices.Contains(f.keys, rec.Key) {
		resp, err := cli.Get(ctx, rec.Key)
		if err != nil {
			s.log.Warn("cannot read the previous run's election key", "key", rec.Key, "err", err)
			return clientv3.NoLease
		}
		if len(resp.Kvs) > 0 {
			f.value = string(resp.Kvs[0].Value)
		}
	}
	if why := resumeRefusal(rec, f); why != "" {
		s.log.Info("not taking over the previous run's election session", "lease", fmt.Sprintf("%x", rec.Lease), "why", why)
		return clientv3.NoLease
	}
	return clientv3.LeaseID(rec.Lease)
}

// sessionFacts is what decides whether a recorded session may be taken
// over: this run's, and what etcd holds of the lease.
type sessionFacts struct {
	cluster, host string
	pid           int
	// external: the store is an external etcd, which a second server on
	// this data directory may share (an embedded one is locked by the
	// first).
	external bool
	alive    func(pid int) bool
	// ttl is the lease's remaining life in seconds, <= 0 when it is
	// gone; keys are the keys attached to it and value the value of the
	// recorded key, if it is one of them.
	ttl   int64
	keys  []string
	value string
}

// resumeRefusal says why rec may not be taken over, "" when it may: it
// must be this cluster's and this host's, made by a process no longer
// running (with an external etcd), and its lease alive with no key but its
// election key, which still names this host.
func resumeRefusal(rec leaderSession, f sessionFacts) string {
	switch {
	case rec.Lease == 0 || rec.Key != electionKey(clientv3.LeaseID(rec.Lease)):
		return "the record is not of an election session"
	case rec.Cluster != f.cluster:
		return fmt.Sprintf("it is cluster %s's, not this one's (%s)", rec.Cluster, f.cluster)
	case rec.Host != f.host:
		return fmt.Sprintf("it was made on host %s, not %s", rec.Host, f.host)
	case f.external && rec.PID != f.pid && f.alive(rec.PID):
		return fmt.Sprintf("process %d that made it still runs on this host: another server on this data directory?", rec.PID)
	case f.ttl <= 0:
		return "its lease has expired"
	}
	for _, k := range f.keys {
		if k != rec.Key {
			return fmt.Sprintf("its lease also holds %s, which is not this replica's election key", k)
		}
	}
	if len(f.keys) > 0 && !strings.HasPrefix(f.value, rec.Host+"/") {
		return fmt.Sprintf("its election key holds %q, not this host's", f.value)
	}
	return ""
}

// processAlive reports whether a process pid runs on this host (a reused
// pid counts: the takeover is refused, and the session expires instead).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// testHooks are settings only tests change; zero values are production's.
type testHooks struct {
	// storeTimeout bounds each etcd request (store.Options.CallTimeout);
	// 0: the store's default.
	storeTimeout time.Duration
	// electionTTL replaces electionTTL (seconds); pid this process's id
	// in the election (a test's runs share one process).
	electionTTL, pid int
	// abandonSession ends Run as a killed process would leave its
	// election: neither resigned nor revoked.
	abandonSession bool
}
