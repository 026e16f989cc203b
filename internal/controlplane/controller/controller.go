// Package controller holds the reconcilers that run on the leader: node
// liveness, the job lifecycle (pending → running → stopping → restarting
// or done) and the plan applier that turns scheduler plans into attempts
// and assignments in single store transactions.
//
// It imports api, store, scheduler and launch; nothing imports it but the
// server.
package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/launch"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
)

// Config tunes the controller.
type Config struct {
	// NodeTimeout: a node silent this long is lost. Default 3s.
	NodeTimeout time.Duration
	// CheckpointRoot is the parent of default job checkpoint directories.
	CheckpointRoot string
	// Tick is the longest gap between passes. Default 100ms.
	Tick time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Scaler sizes autoscaled deployments; nil holds them at their minimum.
	Scaler Scaler
	// TopologyFiles describe the fabric (leaves, spines, NVLink blocks)
	// beyond what the nodes' labels say.
	TopologyFiles []topology.File
	// JobRetention: a job finished this long ago is deleted with its rank
	// statuses, checkpoint records and progress. 0 keeps finished jobs.
	JobRetention time.Duration
	// MaxFinishedJobs: beyond this many finished jobs the oldest are
	// deleted, whatever their age, so that the store cannot fill up. 0:
	// no limit.
	MaxFinishedJobs int
	// JobArchive, if set, is a file each job retention deletes is first
	// appended to, as one JSON line (api.JobDetail); if the append fails,
	// nothing is deleted.
	JobArchive string
	// RetentionTick is how often retention looks. Default 10s.
	RetentionTick time.Duration
}

// Controller reconciles nodes and jobs. Create with New; Run drives it.
type Controller struct {
	st     *store.Store
	cache  *store.Cache
	live   *Liveness
	cfg    Config
	log    *slog.Logger
	topo   topoCache // used by the Run goroutine only
	ready  *readiness
	scaler Scaler

	rmu      sync.Mutex // guards reasonAt
	reasonAt map[string]time.Time

	subs submissions // new jobs handed over by Submit
	reps reportQueue // rank statuses handed over by Report
	// lastBacklog: the last pass left jobs waiting that it could not
	// place (passes run one at a time).
	lastBacklog bool
}

// New returns a controller over the store, its cache (which the caller
// runs) and the heartbeat table the API fills.
func New(st *store.Store, cache *store.Cache, live *Liveness, cfg Config, log *slog.Logger) *Controller {
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 3 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetentionTick <= 0 {
		cfg.RetentionTick = 10 * time.Second
	}
	return &Controller{st: st, cache: cache, live: live, cfg: cfg, log: log, ready: newReadiness(), scaler: cfg.Scaler,
		topo: topoCache{files: cfg.TopologyFiles}, subs: submissions{poke: make(chan struct{}, 1), arrived: make(chan struct{}, 1), slow: slowPass},
		reps: reportQueue{hold: reportHold}}
}

// Run reconciles after every cache change and at least every Tick until
// ctx ends. It returns nil when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	poke := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.ready.run(ctx, time.Second, func() {
			select {
			case poke <- struct{}{}:
			default:
			}
		})
	}()
	if c.cfg.JobRetention > 0 || c.cfg.MaxFinishedJobs > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); c.retain(ctx) }()
	}
	again := false
	for {
		if !again {
			select {
			case <-ctx.Done():
				return nil
			case <-poke:
			case <-c.subs.poke:
			case <-c.cache.Changed():
			case <-t.C:
			}
			if !c.lastBacklog {
				c.holdReports(ctx)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		rev, follow, err := c.reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("reconcile failed", "err", err)
		}
		again = false
		if rev > 0 {
			// See our own writes before the next pass, so it does not
			// place on GPUs this one gave out.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = c.cache.WaitRevision(wctx, rev)
			cancel()
			select {
			case <-c.cache.Changed():
			default:
			}
			// Then act on them at once if they open new work: an
			// attempt that ended frees GPUs the waiting gangs can take
			// now. A pass that only placed jobs leaves nothing for the
			// next, which would only hold up the next submission.
			again = follow
		}
	}
}

// pass is the state of one reconcile pass.
type pass struct {
	c      *Controller
	v      store.View
	now    time.Time
	mu     sync.Mutex // guards maxRev, errs, queued, next, freed and backlog
	maxRev int64
	errs   []error
	queued []queuedWrite
	// What the next pass could do at once (see reconcile): next, a
	// write left a job for it (pending, restarting, stopping) or wrote
	// outside the queue; freed, a write may have freed GPUs (anything
	// but a queueQuiet one); backlog, jobs wait that this pass did not
	// place.
	next, freed, backlog bool
	sem                  chan struct{}
	wg                   sync.WaitGroup
	// subs are the Submit batches this pass took; fresh their jobs by ID.
	subs  []*submission
	fresh map[string]*freshJob
	// reps are the Report batches this pass took; reported their
	// statuses by task key, which win over the view's.
	reps     []*reportBatch
	reported map[string]*api.RankStatus
}

// queuedWrite is a job write waiting for the end of the pass, and what to
// do once it is committed (or not).
type queuedWrite struct {
	w    store.JobWrite
	then func(rev int64, err error)
}

// queue adds one job's write to those the pass commits together at its
// end (a few transactions for the whole pass). then, if not nil, runs
// after the commit. A job gets at most one write per pass.
func (p *pass) queue(w store.JobWrite, then func(rev int64, err error)) {
	p.mu.Lock()
	p.queued = append(p.queued, queuedWrite{w, then})
	p.freed = true
	p.next = p.next || leftForNextPass(w.Job())
	p.mu.Unlock()
}

// leftForNextPass reports whether a job written so is the next pass's
// to act on: to place (pending, restarting) or to end (stopping).
func leftForNextPass(j *api.Job) bool {
	switch j.Status.Phase {
	case api.JobPending, api.JobRestarting, api.JobStopping:
		return true
	}
	return false
}

// queueQuiet is queue for a write after which the next pass has nothing
// new to do: a placement (it takes GPUs, frees none), a pending reason (the
// job waits as it did), a running stamp, a new job stored as it came (this
// pass could not place it).
func (p *pass) queueQuiet(w store.JobWrite, then func(rev int64, err error)) {
	p.mu.Lock()
	p.queued = append(p.queued, queuedWrite{w, then})
	p.mu.Unlock()
}

// flush commits the queued writes, with the reported statuses of each
// job that has one, and returns the reported statuses no write carried
// (for storeReported).
func (p *pass) flush(ctx context.Context) (left []api.RankStatus) {
	p.mu.Lock()
	q := p.queued
	p.queued = nil
	p.mu.Unlock()
	byJob := p.reportedByJob()
	carried := make([][]api.RankStatus, len(q))
	for i := range q {
		id := q[i].w.Job().ID
		if rs := byJob[id]; len(rs) > 0 && len(rs) <= maxCarried {
			q[i].w = q[i].w.WithRankStatuses(rs)
			carried[i] = rs
			delete(byJob, id)
		}
	}
	for _, rs := range byJob {
		left = append(left, rs...)
	}
	if len(q) > 0 {
		ws := make([]store.JobWrite, len(q))
		for i := range q {
			ws[i] = q[i].w
		}
		revs, errs := p.c.st.Commit(ctx, ws)
		for i := range q {
			p.recordFresh(q[i].w.Job(), errs[i])
			if errs[i] != nil {
				left = append(left, carried[i]...) // not stored with it
			}
			if q[i].then != nil {
				q[i].then(revs[i], errs[i])
			} else {
				p.wrote(revs[i], errs[i])
			}
		}
	}
	return left
}

// forEachChunk is how many jobs' checks one goroutine of forEach takes.
// Each check only reads the view (a few microseconds), so a goroutine per
// job cost more in scheduling than the check: with GOMAXPROCS 2 it made
// the pass hand work between threads several times over.
const forEachChunk = 256

// forEach runs fn on every job: inline for up to forEachChunk of them,
// else in chunks beside the rest of the pass (p.wg waits for them). Each
// job is handled once per pass, and fn only reads the pass's view.
func (p *pass) forEach(jobs []*api.Job, fn func(*api.Job)) {
	if len(jobs) <= forEachChunk {
		for _, j := range jobs {
			fn(j)
		}
		return
	}
	for start := 0; start < len(jobs); start += forEachChunk {
		part := jobs[start:min(start+forEachChunk, len(jobs))]
		p.async(func() {
			for _, j := range part {
				fn(j)
			}
		})
	}
}

// async runs fn beside the rest of the pass.
func (p *pass) async(fn func()) {
	p.wg.Add(1)
	p.sem <- struct{}{}
	go func() {
		defer func() { <-p.sem; p.wg.Done() }()
		fn()
	}()
}

// wroteNow is wrote for a write made outside the queue (a deployment's,
// a replica job created): the next pass runs at once to act on it.
func (p *pass) wroteNow(rev int64, err error) bool {
	p.mu.Lock()
	p.next = p.next || err == nil
	p.mu.Unlock()
	return p.wrote(rev, err)
}

func (p *pass) wrote(rev int64, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if !errors.Is(err, store.ErrConflict) {
			p.errs = append(p.errs, err)
		}
		return false
	}
	p.maxRev = max(p.maxRev, rev)
	return true
}

// Reconcile runs one pass and returns the newest revision it wrote.
func (c *Controller) Reconcile(ctx context.Context) (int64, error) {
	rev, _, err := c.reconcile(ctx)
	return rev, err
}

// reconcile is Reconcile, and says whether the pass's writes open work
// for the next pass at once (see pass.next).
func (c *Controller) reconcile(ctx context.Context) (int64, bool, error) {
	start := time.Now()
	p := &pass{c: c, v: c.cache.Snapshot(), now: c.cfg.Now(), sem: make(chan struct{}, 64)}
	p.nodes(ctx)
	p.subs = c.take()
	p.reps, p.reported = c.takeReports()
	ids := make([]*api.Job, 0, len(p.v.Jobs))
	for _, j := range p.v.Jobs {
		if !j.Status.Phase.Final() {
			ids = append(ids, j)
		}
	}
	if len(p.subs) > 0 {
		p.fresh = map[string]*freshJob{}
		for _, s := range p.subs {
			for _, j := range s.jobs {
				p.fresh[j.ID] = &freshJob{}
				ids = append(ids, j)
			}
		}
	}
	store.SortJobs(ids)
	// An array with a limit ("%N") offers the scheduler only as many of
	// its waiting tasks as it has room to run.
	room := map[string]int{}
	for _, j := range ids {
		if t := j.Array; t != nil && t.Limit > 0 {
			if _, ok := room[t.ID]; !ok {
				room[t.ID] = t.Limit
			}
			if j.Status.Phase == api.JobRunning || j.Status.Phase == api.JobStopping {
				room[t.ID]--
			}
		}
	}
	var pending, live []*api.Job
	for _, j := range ids {
		switch j.Status.Phase {
		case api.JobPending, api.JobRestarting:
			if j.Status.CancelRequested {
				live = append(live, j)
				continue
			}
			if j.Status.NotBefore.After(p.now) {
				continue
			}
			if t := j.Array; t != nil && t.Limit > 0 {
				if room[t.ID] <= 0 {
					p.mu.Lock()
					p.backlog = true
					p.mu.Unlock()
					continue
				}
				room[t.ID]--
			}
			pending = append(pending, j)
		case api.JobRunning, api.JobStopping:
			live = append(live, j)
		}
	}
	p.forEach(live, func(j *api.Job) {
		switch j.Status.Phase {
		case api.JobRunning:
			p.running(ctx, j)
		case api.JobStopping:
			p.stopping(ctx, j)
		default: // cancelled before it ran
			p.finish(ctx, j.Clone(), api.JobCancelled, "cancelled before it ran")
		}
	})
	p.schedule(ctx, pending)
	p.deployments(ctx)
	p.wg.Wait()
	p.storeFresh()
	// What a new job handed to a pass waits for beyond its own write.
	c.subs.passNanos.Store(int64(time.Since(start)))
	left := p.flush(ctx)
	err := errors.Join(p.errs...)
	// Submitters wait for their jobs' own writes only, not for the rank
	// statuses no job write carried, which take a transaction of their own.
	answer(p.subs, p.fresh, err)
	p.storeReported(ctx, left)
	c.lastBacklog = p.backlog
	// Freed GPUs matter only to jobs that wait for them.
	return p.maxRev, p.next || (p.freed && p.backlog), err
}

func (p *pass) nodes(ctx context.Context) {
	for name, n := range p.v.Nodes {
		if n.Status.State != api.NodeReady {
			continue
		}
		at, _ := p.c.live.Get(name)
		silent := p.now.Sub(at)
		if silent <= p.c.cfg.NodeTimeout {
			continue
		}
		m := n.Clone()
		m.Status.State = api.NodeLost
		m.Status.LostAt = p.now
		m.Status.Reason = fmt.Sprintf("no heartbeat for %.1fs", silent.Seconds())
		if err := p.c.st.PutNode(ctx, m); p.wrote(m.ModRevision, err) {
			p.c.log.Info("node lost", "node", name, "silent_s", silent.Seconds())
			p.v.Nodes[name] = m
		}
	}
}

func (p *pass) rank(job string, attempt, rank int) *api.RankStatus {
	k := api.TaskKey(job, attempt, rank)
	if r := p.reported[k]; r != nil {
		return r
	}
	return p.v.Ranks[k]
}

func (p *pass) running(ctx context.Context, j *api.Job) {
	a := j.Status.Current()
	if a == nil || a.Phase != api.AttemptRunning {
		return
	}
	outcome, reason := api.Outcome(""), ""
	if j.Status.CancelRequested {
		outcome, reason = api.OutcomeCancelled, "cancelled by user"
	}
	for _, node := range a.Nodes() {
		if reason != "" {
			break
		}
		n := p.v.Nodes[node]
		switch {
		case n == nil || n.Status.State == api.NodeLost:
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("node %s lost", node)
		case n.Status.Draining:
			outcome, reason = api.OutcomeInterrupted, fmt.Sprintf("node %s is draining", node)
		}
	}
	done, running := 0, 0
	procs := launch.Processes(j, a)
	for _, r := range procs {
		rp := a.Placement[r]
		rs := p.rank(j.ID, a.Number, rp.Rank)
		if rs == nil {
			continue
		}
		switch {
		case rs.State == api.RankFailedStart && reason == "":
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("rank %d on %s could not start: %s", rp.Rank, rp.Node, rs.Message)
		case rs.State == api.RankExited && rs.ExitCode != 0 && reason == "" && !a.PreemptedAt.IsZero():
			// Being preempted: a rank that dies of the checkpoint signal
			// (or exits after saving) is stopping as asked, not failing.
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s; rank %d exited with code %d%s after the checkpoint signal",
				a.PreemptedFor, rp.Rank, rs.ExitCode, sigSuffix(rs.Signal))
		case rs.State == api.RankExited && rs.ExitCode != 0 && reason == "":
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("rank %d on %s exited with code %d%s", rp.Rank, rp.Node, rs.ExitCode, sigSuffix(rs.Signal))
		case rs.State == api.RankExited:
			done++
		case rs.State == api.RankRunning:
			running++
		}
	}
	if reason == "" && !a.PreemptedAt.IsZero() {
		ck := p.v.Ckpts[j.ID]
		switch {
		case ck != nil && ck.Time.After(a.PreemptedAt):
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s after checkpointing step %d", a.PreemptedFor, ck.Step)
		case p.now.Sub(a.PreemptedAt) >= j.Spec.PreemptionGrace():
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s; no checkpoint within the %s grace", a.PreemptedFor, j.Spec.PreemptionGrace())
		}
	}
	if reason == "" && j.Spec.TimeLimit > 0 && p.now.Sub(a.CreatedAt) > j.Spec.TimeLimit.D() {
		outcome, reason = api.OutcomeTimedOut, fmt.Sprintf("ran past its time limit of %s", j.Spec.TimeLimit.D())
	}
	if reason == "" && j.Spec.HangTimeout > 0 {
		if pr := p.v.Progress[j.ID]; pr != nil && pr.Attempt == a.Number && !pr.Time.IsZero() {
			if silent := p.now.Sub(pr.Time); silent > j.Spec.HangTimeout.D() {
				outcome, reason = api.OutcomeFailed, fmt.Sprintf("no progress for %s (hangTimeout %s)", silent.Round(time.Second), j.Spec.HangTimeout.D())
			}
		}
	}
	// Most running jobs need no write: clone only those that do.
	switch {
	case reason != "":
		p.stop(ctx, j.Clone(), outcome, reason)
	case done == len(procs):
		p.stop(ctx, j.Clone(), api.OutcomeSucceeded, "every rank exited 0")
	case a.RunningAt.IsZero() && running+done == len(procs):
		m := j.Clone()
		m.Status.Current().RunningAt = p.now
		p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
	}
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return " (" + sig + ")"
}

// stop tears the current attempt down: its assignments go in the same
// transaction that marks it stopping. That transaction's revision is the
// stop revision agents must acknowledge; it is the job's ModRevision
// afterwards (see stopping).
func (p *pass) stop(ctx context.Context, m *api.Job, outcome api.Outcome, reason string) {
	a := m.Status.Current()
	a.Phase = api.AttemptStopping
	a.Outcome = outcome
	a.Reason = reason
	a.StoppingAt = p.now
	if p.allExited(m, a) {
		// Nothing can still run: end now, in the transaction that removes
		// the assignments, without waiting for the agents' acknowledgement.
		p.end(m)
		p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), nil)
		return
	}
	m.Status.Phase = api.JobStopping
	m.Status.Reason = fmt.Sprintf("stopping attempt %d: %s", a.Number, reason)
	p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.log.Info("stopping attempt", "job_id", m.ID, "attempt", a.Number, "reason", reason)
		}
	})
}

// allExited reports whether every process of the attempt has reported a
// terminal state (or its node is lost, so its agent fenced it).
func (p *pass) allExited(j *api.Job, a *api.Attempt) bool {
	for _, r := range launch.Processes(j, a) {
		rp := a.Placement[r]
		if n := p.v.Nodes[rp.Node]; n == nil || n.Status.State == api.NodeLost {
			continue
		}
		if rs := p.rank(j.ID, a.Number, r); rs == nil || !rs.State.Terminal() {
			return false
		}
	}
	return true
}

func (p *pass) stopping(ctx context.Context, j *api.Job) {
	a := j.Status.Current()
	if a == nil {
		return
	}
	// The stop revision: recorded by older versions; else the revision
	// the cache saw the attempt's assignments deleted at; else the job's
	// own revision, which the stop transaction set (a later write only
	// moves it later, which is safe, merely slower).
	stopRev := a.StopRevision
	if stopRev == 0 {
		stopRev = p.v.Stops[j.ID][a.Number]
	}
	if stopRev == 0 || stopRev > j.ModRevision {
		stopRev = j.ModRevision
	}
	if !p.allExited(j, a) {
		for _, node := range a.Nodes() {
			n := p.v.Nodes[node]
			if n == nil || n.Status.State == api.NodeLost {
				continue // a lost node's agent has fenced itself
			}
			if _, ack := p.c.live.Get(node); ack < stopRev {
				return
			}
		}
	}
	m := j.Clone()
	p.end(m)
	p.queue(p.c.st.UpdateJobWrite(m), nil)
}

// end marks the current attempt Ended and moves the job on: finished,
// requeued or restarting with backoff. It writes nothing.
func (p *pass) end(m *api.Job) {
	ma := m.Status.Current()
	ma.Phase = api.AttemptEnded
	ma.EndedAt = p.now
	st := &m.Status
	done := func(phase api.JobPhase, reason string) {
		st.Phase, st.Reason, st.FinishedAt = phase, reason, p.now
		p.c.log.Info("job finished", "job_id", m.ID, "phase", phase, "reason", reason)
	}
	switch {
	case ma.Outcome == api.OutcomeSucceeded:
		done(api.JobSucceeded, "")
	case st.CancelRequested || ma.Outcome == api.OutcomeCancelled:
		done(api.JobCancelled, "cancelled by user")
	case ma.Outcome == api.OutcomeTimedOut:
		done(api.JobFailed, fmt.Sprintf("attempt %d %s", ma.Number, ma.Reason))
	case ma.Outcome == api.OutcomeInterrupted, ma.Outcome == api.OutcomePreempted:
		st.Phase = api.JobRestarting
		st.NotBefore = p.now
		st.Reason = fmt.Sprintf("attempt %d %s (%s); requeued", ma.Number, ma.Outcome, ma.Reason)
	default:
		maxR := m.Spec.RestartLimit()
		if st.Restarts >= maxR {
			done(api.JobFailed, fmt.Sprintf("attempt %d failed: %s; no restarts left (maxRestarts %d)", ma.Number, ma.Reason, maxR))
			return
		}
		backoff := m.Spec.RestartBackoff.D() << st.Restarts
		if backoff > api.MaxRestartBackoff || backoff < 0 {
			backoff = api.MaxRestartBackoff
		}
		st.Restarts++
		st.Phase = api.JobRestarting
		st.NotBefore = p.now.Add(backoff)
		st.Reason = fmt.Sprintf("attempt %d failed: %s; restart %d of %d after %s", ma.Number, ma.Reason, st.Restarts, maxR, backoff)
	}
}

func (p *pass) finish(ctx context.Context, m *api.Job, phase api.JobPhase, reason string) {
	m.Status.Phase = phase
	m.Status.Reason = reason
	m.Status.FinishedAt = p.now
	p.queue(p.c.st.UpdateJobWrite(m), func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.log.Info("job finished", "job_id", m.ID, "phase", phase, "reason", reason)
		}
	})
}

// schedule builds the scheduler's snapshot (free and shared GPUs,
// running gangs, queues, topology), asks for a plan and applies it:
// placements become attempts, preemptions send the checkpoint signal, and
// pending gangs get their reason.
func (p *pass) schedule(ctx context.Context, pending []*api.Job) {
	if len(pending) == 0 {
		return
	}
	topo, terr := p.c.topo.get(p.v.Nodes, p.v.NodesGen)
	if terr != nil {
		p.c.log.Warn("cluster topology unusable; placing without it", "err", terr)
		topo = nil
	}
	snap := scheduler.Snapshot{Now: p.now.UnixNano(), Topology: topo}
	used := map[string]map[int]bool{}
	shared := map[string]map[int]*scheduler.SharedGPU{}
	ports := map[string]map[int]bool{}
	ids := make([]string, 0, len(p.v.Jobs))
	for id := range p.v.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	snap.Running = make([]scheduler.Running, 0, len(ids))
	for _, id := range ids {
		j := p.v.Jobs[id]
		a := j.Status.Current()
		if a == nil || a.Phase == api.AttemptEnded {
			continue
		}
		r := scheduler.Running{Ranks: make([]scheduler.Slot, 0, len(a.Placement)),
			JobID: j.ID, Queue: j.Spec.Queue, Priority: j.Spec.Priority,
			StartedAt: a.CreatedAt.UnixNano(), Preemptible: j.Spec.IsPreemptible(),
			Stopping: a.Phase == api.AttemptStopping || !a.PreemptedAt.IsZero(),
		}
		if j.Spec.TimeLimit > 0 {
			r.EstimatedEnd = a.CreatedAt.Add(j.Spec.TimeLimit.D()).UnixNano()
		}
		if ck := p.v.Ckpts[j.ID]; ck != nil {
			r.LastCheckpoint = ck.Time.UnixNano()
		}
		for _, rp := range a.Placement {
			r.Ranks = append(r.Ranks, scheduler.Slot{Node: rp.Node, GPUs: rp.GPUs, Milli: rp.Milli, MIGProfile: rp.MIGProfile, MIGStart: rp.MIGStart})
			if rp.Milli > 0 || rp.MIGProfile != "" {
				if shared[rp.Node] == nil {
					shared[rp.Node] = map[int]*scheduler.SharedGPU{}
				}
				g := rp.GPUs[0]
				sg := shared[rp.Node][g]
				if sg == nil {
					sg = &scheduler.SharedGPU{Index: g}
					shared[rp.Node][g] = sg
				}
				sg.UsedMilli += rp.Milli
				if rp.MIGProfile != "" {
					if shape, err := scheduler.ParseMIGProfile(rp.MIGProfile); err == nil {
						sg.MIGUsed |= uint8((1<<uint(shape.Width) - 1) << uint(rp.MIGStart))
					}
				}
				continue
			}
			if used[rp.Node] == nil {
				used[rp.Node] = map[int]bool{}
			}
			for _, g := range rp.GPUs {
				used[rp.Node][g] = true
			}
		}
		snap.Running = append(snap.Running, r)
		if len(a.Placement) > 0 {
			n := a.Placement[0].Node
			if ports[n] == nil {
				ports[n] = map[int]bool{}
			}
			ports[n][a.MasterPort] = true
		}
	}
	names := make([]string, 0, len(p.v.Nodes))
	for name := range p.v.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	snap.Nodes = make([]scheduler.Node, 0, len(names))
	for _, name := range names {
		n := p.v.Nodes[name]
		if !n.Schedulable() || len(n.GPUs) == 0 {
			continue
		}
		sn := scheduler.Node{Name: name, Total: len(n.GPUs), Labels: n.Labels,
			CPUMillis: int64(n.CPUs) * 1000, MemoryBytes: n.MemoryBytes, Free: make([]int, 0, len(n.GPUs))}
		for _, g := range n.GPUs {
			if g.Health != "" && g.Health != "ok" {
				continue
			}
			if sg := shared[name][g.Index]; sg != nil {
				sn.Shared = append(sn.Shared, *sg)
			} else if !used[name][g.Index] {
				sn.Free = append(sn.Free, g.Index)
			}
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	qnames := make([]string, 0, len(p.v.Queues))
	for name := range p.v.Queues {
		qnames = append(qnames, name)
	}
	sort.Strings(qnames)
	for _, name := range qnames {
		q := p.v.Queues[name].Spec
		snap.Queues = append(snap.Queues, scheduler.Queue{Name: q.Name, Cohort: q.Cohort,
			GuaranteeGPUs: q.GuaranteeGPUs, BorrowLimitGPUs: q.BorrowLimitGPUs, Weight: q.Weight})
	}
	byID := map[string]*api.Job{}
	reqs := make([]scheduler.Request, 0, len(pending))
	for _, j := range pending {
		byID[j.ID] = j
		reqs = append(reqs, schedRequest(j))
	}
	addHostUse(&snap, p.v.Jobs)
	plan := scheduler.ScheduleWith(snap, reqs, scheduler.Options{Mode: scheduler.Backfill, Strategy: scheduler.Topology,
		MaxReservations: scheduler.ServerReservations})
	for _, w := range plan.Warnings {
		p.c.log.Warn("scheduler", "warning", w)
	}
	for _, pl := range plan.Placements {
		p.startAttempt(ctx, byID[pl.JobID], pl, ports)
	}
	if len(plan.Pending) > 0 {
		p.mu.Lock()
		p.backlog = true
		// Placements too: look at the rest again with them seen
		// (preemption searches are bounded per pass).
		p.next = p.next || len(plan.Placements) > 0
		p.mu.Unlock()
	}
	for _, pe := range plan.Preemptions {
		p.preempt(ctx, pe)
	}
	for _, pe := range plan.Pending {
		j := byID[pe.JobID]
		reason := pe.Text()
		if j.Status.Phase == api.JobRestarting {
			reason = "restarting: " + reason
		}
		if j.Status.Reason == reason || !p.c.reasonDue(j.ID, j.Status.Reason, p.now) {
			continue
		}
		m := j.Clone()
		m.Status.Reason = reason
		p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
	}
}

// reasonEvery bounds how often one pending job's reason is rewritten: its
// counts ("40 free", "3 gangs wait ahead") change on almost every pass, and
// rewriting every waiting job each pass would cost a store write per job
// per pass.
const reasonEvery = 5 * time.Second

// reasonDue reports whether a job's pending reason may be rewritten now
// (at once when it had none), and records that it was.
func (c *Controller) reasonDue(job, current string, now time.Time) bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.reasonAt == nil {
		c.reasonAt = map[string]time.Time{}
	}
	if at, ok := c.reasonAt[job]; ok && now.Sub(at) < reasonEvery && current != "" && current != "waiting for the scheduler" {
		return false
	}
	c.reasonAt[job] = now
	if len(c.reasonAt) > 100000 {
		clear(c.reasonAt) // forget finished jobs now and then
	}
	return true
}

// schedRequest is a pending job as the scheduler sees it.
func schedRequest(j *api.Job) scheduler.Request {
	s := &j.Spec
	r := scheduler.Request{
		JobID: j.ID, Queue: s.Queue, Priority: s.Priority, Order: j.SubmittedAt.UnixNano(),
		Ranks: s.Ranks, GPUsPerRank: s.GPUsPerRank, RanksPerNode: s.RanksPerNode, NodeSelector: s.NodeSelector,
		GPUMilli: s.GPUMilli, MIGProfile: s.MIGProfile, EstimatedDuration: s.TimeLimit.D(),
	}
	if r.GPUMilli > 0 || r.MIGProfile != "" {
		r.GPUsPerRank = 0
	}
	if par := s.Parallelism; par != nil && (par.TP > 0 || par.PP > 0 || par.DP > 0) {
		r.TP, r.PP, r.DP = par.TP, par.PP, par.DP
		if o, err := topology.ParseRankOrder(par.Order); err == nil {
			r.RankOrder = o
		}
	}
	if t := s.Topology; t != nil {
		r.Required, _ = topology.ParseLevel(t.Required)
		r.Preferred, _ = topology.ParseLevel(t.Preferred)
	}
	if s.Resources != nil {
		r.CPUMillisPerRank, r.MemoryBytesPerRank = s.Resources.CPUMillis, s.Resources.MemoryBytes
	}
	return r
}

// preempt sends a victim's ranks their checkpoint signal; the attempt stops
// once a new checkpoint lands or the grace period ends (see running).
func (p *pass) preempt(ctx context.Context, pe scheduler.Preemption) {
	j := p.v.Jobs[pe.JobID]
	if j == nil {
		return
	}
	a := j.Status.Current()
	if a == nil || a.Phase != api.AttemptRunning || !a.PreemptedAt.IsZero() {
		return
	}
	m := j.Clone()
	ma := m.Status.Current()
	ma.PreemptedAt = p.now
	ma.PreemptedFor = pe.For
	m.Status.Reason = fmt.Sprintf("preempted for job %s (%s); %s sent, stopping within %s", pe.For, pe.Reason, m.Spec.Signal(), m.Spec.PreemptionGrace())
	asg := p.assignments(m, ma)
	for i := range asg {
		asg[i].Signal, asg[i].SignalSeq = m.Spec.Signal(), 1
	}
	p.queue(p.c.st.StartAttemptWrite(m, asg), func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.log.Info("preempting", "job_id", m.ID, "for", pe.For, "reason", pe.Reason, "lost_work", pe.LostWork)
		}
	})
}

func (p *pass) startAttempt(ctx context.Context, j *api.Job, pl scheduler.Placement, ports map[string]map[int]bool) {
	m := j.Clone()
	a := api.Attempt{Number: len(m.Status.Attempts) + 1, Phase: api.AttemptRunning, CreatedAt: p.now}
	a.Placement, a.Grid = rankLayout(&m.Spec, pl)
	a.Span = &api.Span{Nodes: pl.Nodes, Leaves: pl.Leaves, Spines: pl.Spines, Backfilled: pl.Backfilled}
	master := a.Placement[0].Node
	a.MasterAddr = p.v.Nodes[master].Address
	a.MasterPort = pickPort(j.ID, a.Number, ports[master])
	if ports[master] == nil {
		ports[master] = map[int]bool{}
	}
	ports[master][a.MasterPort] = true
	if ck := p.v.Ckpts[j.ID]; ck != nil {
		c := *ck
		a.ResumeFrom = &c
	}
	m.Status.Attempts = append(m.Status.Attempts, a)
	m.Status.Phase = api.JobRunning
	m.Status.Reason = ""
	if m.Status.StartedAt.IsZero() {
		m.Status.StartedAt = p.now
	}
	ma := m.Status.Current()
	asg := p.assignments(m, ma)
	p.queueQuiet(p.c.st.StartAttemptWrite(m, asg), func(rev int64, err error) {
		if errors.Is(err, store.ErrTooLarge) {
			// Trying again every pass cannot help: the store's limits
			// must change first.
			f := j.Clone()
			f.Status.Phase, f.Status.FinishedAt = api.JobFailed, p.now
			f.Status.Reason = fmt.Sprintf("cannot start: its %d ranks' assignments do not fit one store transaction: %v", len(asg), err)
			p.wrote(f.ModRevision, p.c.st.UpdateJob(ctx, f))
			return
		}
		if p.wrote(rev, err) {
			resume := int64(-1)
			if a.ResumeFrom != nil {
				resume = a.ResumeFrom.Step
			}
			p.c.log.Info("placed attempt", "job_id", m.ID, "attempt", a.Number, "nodes", ma.Nodes(), "resume_step", resume)
		}
	})
}

// assignments are the processes of an attempt with everything their
// agents need to start them.
func (p *pass) assignments(m *api.Job, ma *api.Attempt) []api.Assignment {
	ckdir := launch.CheckpointDir(m, p.c.cfg.CheckpointRoot)
	procs := launch.Processes(m, ma)
	asg := make([]api.Assignment, len(procs))
	for i, r := range procs {
		rp := ma.Placement[r]
		in := launch.Input{Job: m, Attempt: ma, Rank: r, Nodes: p.v.Nodes, CheckpointDir: ckdir}
		cmd, files := launch.Command(in)
		gpus := rp.GPUs
		if m.Spec.Launch.PerNode() {
			gpus = nil
			for _, q := range ma.Placement {
				if q.Node == rp.Node {
					gpus = append(gpus, q.GPUs...)
				}
			}
		}
		asg[i] = api.Assignment{
			JobID: m.ID, Attempt: ma.Number, Rank: r, Node: rp.Node,
			Command: cmd, Env: launch.Env(in), Files: files,
			WorkingDir:  m.Spec.WorkingDir,
			GPUs:        gpus,
			Resources:   m.Spec.Resources,
			Grace:       m.Spec.TerminationGracePeriod,
			WatchCkpt:   r == 0,
			CheckpointD: ckdir,
			// No log files to create for output nobody reads.
			DiscardOutput: m.Spec.Output == api.OutputDiscard,
		}
	}
	return asg
}

// pickPort chooses a rendezvous port on the master node that no live
// attempt there uses, starting from a hash so that retries move on.
func pickPort(job string, attempt int, inUse map[int]bool) int {
	const base, span = 29500, 2000
	h := fnv.New32a()
	h.Write([]byte(job))
	start := int(h.Sum32()%span) + attempt*7
	for i := 0; i < span; i++ {
		port := base + (start+i)%span
		if !inUse[port] {
			return port
		}
	}
	return base + start%span
}
