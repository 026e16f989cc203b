package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/launch"
)

// Reports are node-scoped: a node speaks only for the ranks assigned to it.
// screenReports keeps of a heartbeat the rank statuses, progress lines and
// checkpoints of ranks the job's current attempt, or the one before it,
// places on the reporting node (the one before: a stopped rank's last
// status, and its agent's reports of it, may come after the next attempt
// was placed), and checkpoints only under the job's checkpoint directory.
// It drops the rest before anything is stored: reports of another node's
// ranks, of attempts long gone, and of jobs the server does not hold live
// (unknown, or finished meanwhile), which it would otherwise store and
// never delete. It reads the live jobs from the server's cache, which the
// leader's passes read too: no store read per report.

// refusalLogEvery bounds the log about one node's refused reports to a
// line per interval.
const refusalLogEvery = 30 * time.Second

// cacheCatchUp bounds how long a heartbeat waits for this server's cache
// to reach the assignments revision the agent acknowledged, so that a
// server whose cache lags another's (the agent polls one, reports to
// another) does not refuse the reports of a freshly placed attempt.
const cacheCatchUp = time.Second

// refusals counts refused reports: in all (Server.RefusedReports), and per
// node since its last log line.
type refusals struct {
	total atomic.Int64

	mu     sync.Mutex // guards byNode
	byNode map[string]*nodeRefusals
}

type nodeRefusals struct {
	pending  int       // refused since loggedAt
	loggedAt time.Time // zero: never logged
}

// RefusedReports is how many reports agents made that the server refused
// and did not store since it started (see screenReports).
func (s *Server) RefusedReports() int64 { return s.refused.total.Load() }

// reportScope answers, for one heartbeat, whether the reporting node holds
// a job's rank. It remembers the last job it looked up: a heartbeat's
// reports come sorted by task key, so mostly in runs of one job.
type reportScope struct {
	s    *Server
	node string
	id   string
	job  *api.Job // nil: not live
}

func (sc *reportScope) lookup(id string) *api.Job {
	if id != sc.id || sc.id == "" {
		sc.id = id
		sc.job, _ = sc.s.cache.Job(id)
	}
	return sc.job
}

// attempt is the job's attempt number n if it is the current attempt or
// the one before it.
func attempt(j *api.Job, n int) *api.Attempt {
	as := j.Status.Attempts
	for i := len(as) - 1; i >= 0 && i >= len(as)-2; i-- {
		if as[i].Number == n {
			return &as[i]
		}
	}
	return nil
}

// holds reports whether attempt a places rank on node.
func holds(a *api.Attempt, rank int, node string) bool {
	p := a.Placement
	if rank >= 0 && rank < len(p) && p[rank].Rank == rank {
		return p[rank].Node == node // placements are in rank order
	}
	for i := range p {
		if p[i].Rank == rank {
			return p[i].Node == node
		}
	}
	return false
}

// rank reports whether the node may report on rank of attempt n of job id.
func (sc *reportScope) rank(id string, n, rank int) bool {
	j := sc.lookup(id)
	if j == nil {
		return false
	}
	a := attempt(j, n)
	return a != nil && holds(a, rank, sc.node)
}

// checkpoint reports whether the node may report ck for job id: a rank of
// ck's attempt runs on the node, and ck lies under the job's checkpoint
// directory (compared as clean absolute paths: a path with ".." or one
// that is not clean is refused, not resolved).
func (sc *reportScope) checkpoint(id string, ck *api.Checkpoint) bool {
	j := sc.lookup(id)
	if j == nil {
		return false
	}
	a := attempt(j, ck.Attempt)
	if a == nil || !onNode(a, sc.node) {
		return false
	}
	dir := filepath.Clean(launch.CheckpointDir(j, sc.s.cfg.CheckpointRoot))
	p := ck.Path
	return filepath.IsAbs(p) && filepath.IsAbs(dir) && filepath.Clean(p) == p && under(p, dir)
}

// onNode reports whether attempt a places any rank on node.
func onNode(a *api.Attempt, node string) bool {
	for i := range a.Placement {
		if a.Placement[i].Node == node {
			return true
		}
	}
	return false
}

// screenReports drops from hb, in place, the reports its node may not make
// (see above), and returns how many it dropped, having counted and (at
// most once per node per refusalLogEvery) logged them. It fails, dropping
// nothing, while the cache has not listed the store yet (a server just
// started): the agent then keeps its reports for the next heartbeat.
func (s *Server) screenReports(ctx context.Context, hb *api.Heartbeat) (int, error) {
	if len(hb.Ranks)+len(hb.Checkpoints)+len(hb.Progress) == 0 {
		return 0, nil
	}
	if want := max(hb.AckRevision, 1); s.cache.Revision() < want {
		wctx, cancel := context.WithTimeout(ctx, cacheCatchUp)
		err := s.cache.WaitRevision(wctx, want) // on timeout, judge by what the cache has
		cancel()
		if err != nil && s.cache.Revision() == 0 {
			return 0, fmt.Errorf("screen reports: the server's cache is not listed yet: %w", err)
		}
	}
	sc := reportScope{s: s, node: hb.Node}
	refused := 0
	hb.Ranks = keep(hb.Ranks, &refused, func(rs *api.RankStatus) bool {
		return sc.rank(rs.JobID, rs.Attempt, rs.Rank) || s.storedAlready(hb.Node, *rs)
	})
	hb.Progress = keep(hb.Progress, &refused, func(p *api.Progress) bool { return sc.rank(p.JobID, p.Attempt, p.Rank) })
	hb.Checkpoints = keep(hb.Checkpoints, &refused, func(c *api.CheckpointReport) bool { return sc.checkpoint(c.JobID, &c.Checkpoint) })
	if refused > 0 {
		s.countRefused(hb.Node, refused)
	}
	return refused, nil
}

// storedAlready reports whether node's rs is the status this server last
// stored for its rank: an agent repeats a rank's last status until it
// sees the rank unassigned, and its job may have finished (and left the
// cache) meanwhile. storeReports skips it; it is no refusal.
func (s *Server) storedAlready(node string, rs api.RankStatus) bool {
	rs.Node = node
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writtenLocked(rs)
}

// writtenLocked reports whether rs (its Node set) is the status last
// stored for its rank. s.mu must be held.
func (s *Server) writtenLocked(rs api.RankStatus) bool {
	old, ok := s.written[api.TaskKey(rs.JobID, rs.Attempt, rs.Rank)]
	return ok && old == rs
}

// keep filters xs in place to what ok accepts, adding the others to
// *refused.
func keep[T any](xs []T, refused *int, ok func(*T) bool) []T {
	out := xs[:0]
	for i := range xs {
		if ok(&xs[i]) {
			out = append(out, xs[i])
		} else {
			*refused++
		}
	}
	return out
}

// countRefused counts n refused reports of node and logs them, with those
// refused since its last line, unless it logged within refusalLogEvery.
func (s *Server) countRefused(node string, n int) {
	s.refused.total.Add(int64(n))
	now := time.Now()
	s.refused.mu.Lock()
	if s.refused.byNode == nil {
		s.refused.byNode = map[string]*nodeRefusals{}
	}
	r := s.refused.byNode[node]
	if r == nil {
		r = &nodeRefusals{}
		s.refused.byNode[node] = r
	}
	r.pending += n
	log := r.loggedAt.IsZero() || now.Sub(r.loggedAt) >= refusalLogEvery
	count := r.pending
	if log {
		r.loggedAt, r.pending = now, 0
	}
	s.refused.mu.Unlock()
	if log {
		s.log.Warn("refused reports of ranks not assigned to the node, of jobs not live, or of checkpoints outside the job's directory",
			"node", node, "refused", count)
	}
}
