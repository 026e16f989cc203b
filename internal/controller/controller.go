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
	"github.com/gangway/gangway/internal/launch"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/store"
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
	return &Controller{st: st, cache: cache, live: live, cfg: cfg, log: log, ready: newReadiness(), scaler: cfg.Scaler}
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poke:
		case <-c.cache.Changed():
		case <-t.C:
		}
		rev, err := c.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("reconcile failed", "err", err)
		}
		if rev > 0 {
			// See our own writes before the next pass.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = c.cache.WaitRevision(wctx, rev)
			cancel()
		}
	}
}

// pass is the state of one reconcile pass.
type pass struct {
	c      *Controller
	v      store.View
	now    time.Time
	maxRev int64
	errs   []error
}

func (p *pass) wrote(rev int64, err error) bool {
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
	p := &pass{c: c, v: c.cache.Snapshot(), now: c.cfg.Now()}
	p.nodes(ctx)
	ids := make([]*api.Job, 0, len(p.v.Jobs))
	for _, j := range p.v.Jobs {
		if !j.Status.Phase.Final() {
			ids = append(ids, j)
		}
	}
	store.SortJobs(ids)
	var pending []*api.Job
	for _, j := range ids {
		switch j.Status.Phase {
		case api.JobPending, api.JobRestarting:
			if j.Status.CancelRequested {
				p.finish(ctx, j.Clone(), api.JobCancelled, "cancelled before it ran")
				continue
			}
			if !j.Status.NotBefore.After(p.now) {
				pending = append(pending, j)
			}
		case api.JobRunning:
			p.running(ctx, j)
		case api.JobStopping:
			p.stopping(ctx, j)
		}
	}
	p.schedule(ctx, pending)
	p.deployments(ctx)
	return p.maxRev, errors.Join(p.errs...)
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
	return p.v.Ranks[api.TaskKey(job, attempt, rank)]
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
		case rs.State == api.RankExited && rs.ExitCode != 0 && reason == "":
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("rank %d on %s exited with code %d%s", rp.Rank, rp.Node, rs.ExitCode, sigSuffix(rs.Signal))
		case rs.State == api.RankExited:
			done++
		case rs.State == api.RankRunning:
			running++
		}
	}
	if reason == "" && j.Spec.HangTimeout > 0 {
		if pr := p.v.Progress[j.ID]; pr != nil && pr.Attempt == a.Number && !pr.Time.IsZero() {
			if silent := p.now.Sub(pr.Time); silent > j.Spec.HangTimeout.D() {
				outcome, reason = api.OutcomeFailed, fmt.Sprintf("no progress for %s (hangTimeout %s)", silent.Round(time.Second), j.Spec.HangTimeout.D())
			}
		}
	}
	m := j.Clone()
	ma := m.Status.Current()
	switch {
	case reason != "":
		p.stop(ctx, m, outcome, reason)
	case done == len(procs):
		p.stop(ctx, m, api.OutcomeSucceeded, "every rank exited 0")
	case ma.RunningAt.IsZero() && running+done == len(procs):
		ma.RunningAt = p.now
		p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
	}
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return " (" + sig + ")"
}

// stop tears the current attempt down: its assignments go in the same
// transaction that marks it stopping.
func (p *pass) stop(ctx context.Context, m *api.Job, outcome api.Outcome, reason string) {
	a := m.Status.Current()
	a.Phase = api.AttemptStopping
	a.Outcome = outcome
	a.Reason = reason
	a.StoppingAt = p.now
	m.Status.Phase = api.JobStopping
	m.Status.Reason = fmt.Sprintf("stopping attempt %d: %s", a.Number, reason)
	rev, err := p.c.st.StopAttempt(ctx, m, a.Number, a.Nodes())
	if !p.wrote(rev, err) {
		return
	}
	p.c.log.Info("stopping attempt", "job_id", m.ID, "attempt", a.Number, "reason", reason)
	a.StopRevision = rev
	p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
}

func (p *pass) stopping(ctx context.Context, j *api.Job) {
	a := j.Status.Current()
	if a == nil {
		return
	}
	m := j.Clone()
	ma := m.Status.Current()
	if ma.StopRevision == 0 {
		// The follow-up write after StopAttempt was lost; the current
		// revision is at least the stop's, so it is a safe bound.
		ma.StopRevision = p.v.Rev
		p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
		return
	}
	for _, node := range a.Nodes() {
		n := p.v.Nodes[node]
		if n == nil || n.Status.State == api.NodeLost {
			continue // a lost node's agent has fenced itself
		}
		if _, ack := p.c.live.Get(node); ack < a.StopRevision {
			return
		}
	}
	ma.Phase = api.AttemptEnded
	ma.EndedAt = p.now
	st := &m.Status
	switch {
	case ma.Outcome == api.OutcomeSucceeded:
		p.finish(ctx, m, api.JobSucceeded, "")
		return
	case st.CancelRequested || ma.Outcome == api.OutcomeCancelled:
		p.finish(ctx, m, api.JobCancelled, "cancelled by user")
		return
	case ma.Outcome == api.OutcomeInterrupted:
		st.Phase = api.JobRestarting
		st.NotBefore = p.now
		st.Reason = fmt.Sprintf("attempt %d interrupted (%s); restarting", ma.Number, ma.Reason)
	default:
		maxR := api.DefaultMaxRestarts
		if m.Spec.MaxRestarts != nil {
			maxR = *m.Spec.MaxRestarts
		}
		if st.Restarts >= maxR {
			p.finish(ctx, m, api.JobFailed, fmt.Sprintf("attempt %d failed: %s; no restarts left (maxRestarts %d)", ma.Number, ma.Reason, maxR))
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
	p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
}

func (p *pass) finish(ctx context.Context, m *api.Job, phase api.JobPhase, reason string) {
	m.Status.Phase = phase
	m.Status.Reason = reason
	m.Status.FinishedAt = p.now
	if p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m)) {
		p.c.log.Info("job finished", "job_id", m.ID, "phase", phase, "reason", reason)
	}
}

// schedule builds the snapshot of free GPUs, asks the scheduler for a plan
// and applies it.
func (p *pass) schedule(ctx context.Context, pending []*api.Job) {
	if len(pending) == 0 {
		return
	}
	used := map[string]map[int]bool{}
	ports := map[string]map[int]bool{}
	for _, j := range p.v.Jobs {
		a := j.Status.Current()
		if a == nil || a.Phase == api.AttemptEnded {
			continue
		}
		for _, rp := range a.Placement {
			if used[rp.Node] == nil {
				used[rp.Node] = map[int]bool{}
			}
			for _, g := range rp.GPUs {
				used[rp.Node][g] = true
			}
		}
		if len(a.Placement) > 0 {
			n := a.Placement[0].Node
			if ports[n] == nil {
				ports[n] = map[int]bool{}
			}
			ports[n][a.MasterPort] = true
		}
	}
	var snap scheduler.Snapshot
	names := make([]string, 0, len(p.v.Nodes))
	for name := range p.v.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := p.v.Nodes[name]
		if !n.Schedulable() || len(n.GPUs) == 0 {
			continue
		}
		sn := scheduler.Node{Name: name, Total: len(n.GPUs), Labels: n.Labels}
		for _, g := range n.GPUs {
			if !used[name][g.Index] && (g.Health == "" || g.Health == "ok") {
				sn.Free = append(sn.Free, g.Index)
			}
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	byID := map[string]*api.Job{}
	reqs := make([]scheduler.Request, 0, len(pending))
	for _, j := range pending {
		byID[j.ID] = j
		reqs = append(reqs, scheduler.Request{
			JobID: j.ID, Queue: j.Spec.Queue, Priority: j.Spec.Priority,
			Order: j.SubmittedAt.UnixNano(), Ranks: j.Spec.Ranks, GPUsPerRank: j.Spec.GPUsPerRank,
			RanksPerNode: j.Spec.RanksPerNode, NodeSelector: j.Spec.NodeSelector,
		})
	}
	plan := scheduler.Schedule(snap, reqs)
	for _, pl := range plan.Placements {
		p.startAttempt(ctx, byID[pl.JobID], pl, ports)
	}
	for _, pe := range plan.Pending {
		j := byID[pe.JobID]
		reason := pe.Reason
		if j.Status.Phase == api.JobRestarting {
			reason = "restarting: " + reason
		}
		if j.Status.Reason == reason {
			continue
		}
		m := j.Clone()
		m.Status.Reason = reason
		p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
	}
}

func (p *pass) startAttempt(ctx context.Context, j *api.Job, pl scheduler.Placement, ports map[string]map[int]bool) {
	m := j.Clone()
	a := api.Attempt{Number: len(m.Status.Attempts) + 1, Phase: api.AttemptRunning, CreatedAt: p.now}
	slots := make([]slot, len(pl.Ranks))
	for i, s := range pl.Ranks {
		slots[i] = slot{node: s.Node, gpus: s.GPUs}
	}
	topo, terr := p.c.topo.get(p.v.Nodes)
	if terr != nil {
		p.c.log.Warn("cluster topology unusable; ranks follow placement order", "err", terr)
		topo = nil
	}
	placement, grid, err := rankLayout(&m.Spec, slots, topo)
	if err != nil {
		m.Status.Reason = "cannot number the ranks: " + err.Error()
		p.wrote(m.ModRevision, p.c.st.UpdateJob(ctx, m))
		return
	}
	a.Placement, a.Grid = placement, grid
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
		}
	}
	rev, err := p.c.st.StartAttempt(ctx, m, asg)
	if p.wrote(rev, err) {
		resume := int64(-1)
		if a.ResumeFrom != nil {
			resume = a.ResumeFrom.Step
		}
		p.c.log.Info("placed attempt", "job_id", m.ID, "attempt", a.Number, "nodes", ma.Nodes(), "resume_step", resume)
	}
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
