package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/launch"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

// The applier alone turns what the lifecycle and the scheduler decided,
// and the new jobs and rank statuses the API handed over, into store
// writes (deployments, in deploy.go, write their own). It queues each
// job's write, so that the pass commits them together at its end (flush)
// in a few transactions, with the rank statuses reported for those jobs;
// lost nodes it writes at once, statuses no job write carried last.

// apply queues the write a lifecycle decision needs.
func (p *pass) apply(d decision) {
	m := d.job
	switch d.step {
	case stepStamp:
		p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
	case stepStop:
		a := m.Status.Current()
		p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), func(rev int64, err error) {
			if p.wrote(rev, err) {
				p.c.log.Info("stopping attempt", "job_id", m.ID, "attempt", a.Number, "reason", a.Reason)
			}
		})
	case stepStopEnd:
		p.logFinished(m)
		a := m.Status.Current()
		p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), p.observeRestart(m))
	case stepEnd:
		p.logFinished(m)
		p.queue(p.c.st.UpdateJobWrite(m), p.observeRestart(m))
	case stepAmend:
		p.queue(p.c.st.UpdateJobWrite(m), func(rev int64, err error) {
			if p.wrote(rev, err) {
				p.c.log.Info("attempt's cause amended: something outside the job came first", "job_id", m.ID, "restarts", m.Status.Restarts)
			}
		})
	case stepSignal:
		a := m.Status.Current()
		asg := p.assignments(m, a)
		for i := range asg {
			asg[i].Signal, asg[i].SignalSeq = d.signal, a.SignalSeq
		}
		p.queueQuiet(p.c.st.StartAttemptWrite(m, asg), func(rev int64, err error) {
			if p.wrote(rev, err) {
				p.c.log.Info("signalling ranks", "job_id", m.ID, "attempt", a.Number, "signal", d.signal, "requeue", !a.RequeuedAt.IsZero())
			}
		})
	case stepFinish:
		p.queue(p.c.st.UpdateJobWrite(m), func(rev int64, err error) {
			if p.wrote(rev, err) {
				p.logFinished(m)
			}
		})
	}
}

// observeRestart is what to do once m's write is stored: tell the
// observer of a restart when the attempt that ended leaves m to run again.
func (p *pass) observeRestart(m *api.Job) func(rev int64, err error) {
	if m.Status.Phase != api.JobRestarting {
		return nil
	}
	cause := api.CauseOf(m.Status.Current())
	return func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.cfg.Observer.Restarted(cause)
		}
	}
}

// logFinished logs a job that a decision finished.
func (p *pass) logFinished(m *api.Job) {
	if st := &m.Status; st.Phase.Final() {
		p.c.log.Info("job finished", "job_id", m.ID, "phase", st.Phase, "reason", st.Reason)
	}
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
		if f := p.fresh[id]; f != nil && f.claim != nil {
			q[i].w = q[i].w.WithClaim(f.claim)
		}
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

// reportedByJob groups the pass's reported statuses by job, in task key
// order.
func (p *pass) reportedByJob() map[string][]api.RankStatus {
	if len(p.reported) == 0 {
		return nil
	}
	keys := make([]string, 0, len(p.reported))
	for k := range p.reported {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := map[string][]api.RankStatus{}
	for _, k := range keys {
		r := p.reported[k]
		out[r.JobID] = append(out[r.JobID], *r)
	}
	return out
}

// storeReported stores the reported statuses no committed write of the
// pass carried, and tells every taken batch how it went.
func (p *pass) storeReported(ctx context.Context, left []api.RankStatus) {
	if len(p.reps) == 0 {
		return
	}
	err := p.c.st.PutRankStatuses(ctx, left)
	for _, b := range p.reps {
		b.done <- err
	}
}

// storeFresh queues the plain creation of every fresh job the pass did
// not write otherwise (not placed, no new reason). The pass's async work
// is done by now.
func (p *pass) storeFresh() {
	if len(p.fresh) == 0 {
		return
	}
	written := map[string]bool{}
	for _, q := range p.queued {
		written[q.w.Job().ID] = true
	}
	for _, s := range p.subs {
		for _, j := range s.jobs {
			if !written[j.ID] {
				p.queueQuiet(p.c.st.UpdateJobWrite(j), nil)
			}
		}
	}
}

// recordFresh notes how a fresh job's write went.
func (p *pass) recordFresh(j *api.Job, err error) {
	if f := p.fresh[j.ID]; f != nil {
		f.stored, f.err = j, err
	}
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
		// A stale view, or a retried submission: expected, not failures.
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrKeyTaken) {
			p.errs = append(p.errs, err)
		}
		return false
	}
	p.maxRev = max(p.maxRev, rev)
	return true
}

// nodes writes every node the lifecycle finds lost, at once (not queued),
// and updates the pass's view so that its jobs see them lost.
func (p *pass) nodes(ctx context.Context) {
	for name, n := range p.v.Nodes {
		m, silent := p.life.nodeLost(name, n)
		if m == nil {
			continue
		}
		if err := p.c.st.PutNode(ctx, m); p.wrote(m.ModRevision, err) {
			p.c.log.Info("node lost", "node", name, "silent_s", silent.Seconds())
			p.v.Nodes[name] = m
		}
	}
}

// applyPlan queues the writes of the scheduler's plan: placements become
// attempts, preemptions send the checkpoint signal, and gangs that wait
// get their reason (at most every reasonEvery). byID are the pending jobs
// the plan was asked for; ports, the rendezvous ports in use by node.
func (p *pass) applyPlan(ctx context.Context, plan scheduler.Plan, byID map[string]*api.Job, ports map[string]map[int]bool) {
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
		p.kinds[j.ID] = pe.Kind.String()
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
	if at, ok := c.reasonAt[job]; ok && now.Sub(at) < reasonEvery && current != "" && current != api.ReasonNew {
		return false
	}
	c.reasonAt[job] = now
	if len(c.reasonAt) > 100000 {
		clear(c.reasonAt) // forget finished jobs now and then
	}
	return true
}

// preempt sends a victim's ranks their checkpoint signal; the attempt stops
// once a new checkpoint lands or the grace period ends (see running).
func (p *pass) preempt(ctx context.Context, pe scheduler.Preemption) {
	m := p.life.preempting(pe)
	if m == nil {
		return
	}
	asg := p.assignments(m, m.Status.Current())
	for i := range asg {
		asg[i].Signal, asg[i].SignalSeq = m.Spec.Signal(), m.Status.Current().SignalSeq
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
	a.Lane = p.lanes[j.ID] == policy.LaneGranted
	if p.c.cfg.Preflight.wants(j, a.Nodes()) {
		a.Preflight = &api.PreflightRun{}
	}
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
			w := p.c.st.UpdateJobWrite(f)
			if fj := p.fresh[f.ID]; fj != nil && fj.claim != nil {
				w = w.WithClaim(fj.claim) // a new job: created now, with its key
			}
			revs, errs := p.c.st.Commit(ctx, []store.JobWrite{w})
			p.wrote(revs[0], errs[0])
			return
		}
		if p.wrote(rev, err) {
			p.c.cfg.Observer.Placed(m.Spec.Queue, p.now.Sub(waitedSince(j)))
			resume := int64(-1)
			if a.ResumeFrom != nil {
				resume = a.ResumeFrom.Step
			}
			p.c.log.Info("placed attempt", "job_id", m.ID, "attempt", a.Number, "nodes", ma.Nodes(), "resume_step", resume, "preflight", a.Preflight != nil)
		}
	})
}

// assignments are the processes of an attempt with everything their
// agents need to start them.
func (p *pass) assignments(m *api.Job, ma *api.Attempt) []api.Assignment {
	ckdir := launch.CheckpointDir(m, p.c.cfg.CheckpointRoot)
	procs := launch.Processes(m, ma)
	asg := make([]api.Assignment, len(procs))
	if ma.Preflight != nil {
		for i, r := range procs {
			asg[i] = preflightAssignment(m, ma, r, i, len(procs), p.v.Nodes, p.c.cfg.Preflight.Args)
		}
		return asg
	}
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
			JobID: m.ID, Attempt: ma.Number, Rank: r, Node: rp.Node, Queue: m.Spec.Queue, User: m.Spec.User,
			Command: cmd, Env: p.withSecrets(m, launch.Env(in)), Files: files,
			WorkingDir:  m.Spec.WorkingDir,
			GPUs:        gpus,
			Resources:   m.Spec.Resources,
			Grace:       m.Spec.TerminationGracePeriod,
			WatchCkpt:   r == 0,
			CheckpointD: ckdir,
			// No log files to create for output nobody reads.
			DiscardOutput: m.Spec.Output == api.OutputDiscard,
			Logs:          m.Spec.Logs,
			RunAs:         m.Spec.RunAs,
			Container:     m.Spec.ContainerOf(),
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
