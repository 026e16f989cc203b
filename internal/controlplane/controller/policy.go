package controller

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

// This file hands the queues' policies (internal/scheduler/policy, the
// code the simulator runs) to the scheduler: each job's state is computed
// from its status alone (policy.Replay over its attempts), so nothing is
// stored for them. A request's priority is its spec priority above its
// policy's level, so that a job's priority always wins over the policy,
// and the scheduler, which preempts within a queue only for a higher
// priority, preempts for the policy only among jobs of one spec priority.
// Guarantees between queues preempt borrowers regardless of priority.

// policies is every queue's policy during one pass.
type policies struct {
	byQueue map[string]policy.Policy
	def     policy.Policy
	// states is each job's policy state at statesAt, replayed once
	// (state); assignLanes sets the Lane of those in a lane queue.
	states   map[string]*policy.Job
	statesAt time.Time
	// lane is each job's place in its queue's overdue lane, for queues
	// whose policy has one (assignLanes).
	lane map[string]policy.LaneState
	// ranks is, per preempting queue, its running and pending jobs as
	// applyRunning and orderRequests saw them, for keepPlaces.
	ranks map[string][]rankEntry
}

// rankEntry is a job of a preempting queue in the ranking that decides
// which running jobs lose their place (keepPlaces).
type rankEntry struct {
	id     string
	band   int // spec priority: a higher one always ranks above
	key    policy.Key
	submit time.Time
	r      policy.Ranked
}

// addRank records a job of queue q for keepPlaces.
func (ps *policies) addRank(q string, e rankEntry) {
	if ps.ranks == nil {
		ps.ranks = map[string][]rankEntry{}
	}
	ps.ranks[queueOf(q)] = append(ps.ranks[queueOf(q)], e)
}

// queuePolicies resolves the queues' policies with their settings
// (policy.ForQueue, as the simulator's live does). A stored name or
// setting this build does not accept (written by another version) runs
// the default.
func queuePolicies(qs map[string]*api.Queue) policies {
	ps := policies{byQueue: make(map[string]policy.Policy, len(qs)), states: map[string]*policy.Job{}}
	ps.def, _ = policy.New(policy.Default)
	for name, q := range qs {
		if p, err := policy.ForQueue(&q.Spec); err == nil {
			ps.byQueue[name] = p
		}
	}
	if p := ps.byQueue[api.DefaultQueue]; p != nil {
		ps.def = p
	}
	return ps
}

// of is the policy of queue q.
func (ps policies) of(q string) policy.Policy {
	if q == "" {
		q = api.DefaultQueue
	}
	if p := ps.byQueue[q]; p != nil {
		return p
	}
	return ps.def
}

// mode is the scheduler's mode for the pass: the default queue's
// policy's; queues whose policy runs another have it as their own
// (schedQueues).
func (ps policies) mode() scheduler.Mode { return ps.def.Mode() }

// seconds is t on the policies' clock.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// policyJob is j as its queue's policy p sees it at now: its attempts
// replayed from its submit.
func policyJob(p policy.Policy, j *api.Job, now time.Time) policy.Job {
	gpus := j.Spec.GPUs()
	if gpus == 0 {
		gpus = j.Spec.Ranks
	}
	st := policy.Job{Submit: seconds(j.SubmittedAt), GPUs: gpus, Queue: j.Spec.Queue, User: j.Spec.User}
	segs := make([]policy.Segment, 0, len(j.Status.Attempts))
	for i := range j.Status.Attempts {
		a := &j.Status.Attempts[i]
		g := 0
		for _, rp := range a.Placement {
			g += len(rp.GPUs)
		}
		s := policy.Segment{Start: seconds(a.CreatedAt), GPUs: g}
		switch {
		case a.Phase != api.AttemptEnded:
			s.Open = true
		case !a.EndedAt.IsZero():
			s.End = seconds(a.EndedAt)
		default:
			s.End = s.Start
		}
		if g == 0 && !s.Open {
			continue // never held GPUs (a preflight that found none)
		}
		segs = append(segs, s)
		if s.Open {
			break
		}
	}
	policy.Replay(p, &st, segs, seconds(now))
	if a := j.Status.Current(); a != nil && a.Phase != api.AttemptEnded {
		st.LaneRun = a.Lane
	}
	return st
}

// state is j's state under its queue's policy p at now, replayed from its
// attempts once per pass (a pass has one now).
func (ps *policies) state(p policy.Policy, j *api.Job, now time.Time) *policy.Job {
	if !now.Equal(ps.statesAt) {
		clear(ps.states)
		ps.statesAt = now
	}
	if st := ps.states[j.ID]; st != nil {
		return st
	}
	st := policyJob(p, j, now)
	ps.states[j.ID] = &st
	return &st
}

// topOfBand is the highest scheduler priority of spec priority spec under
// p: a job there is preempted only for a higher spec priority.
func topOfBand(p policy.Policy, spec int) int {
	return spec*(p.Levels()+1) + p.Levels()
}

// schedPriority is a job's scheduler priority: its spec priority above
// the level its policy gives it.
func schedPriority(p policy.Policy, spec int, st *policy.Job, now float64) int {
	if !p.Preempts() {
		return spec
	}
	return spec*(p.Levels()+1) + p.Priority(st, now)
}

// applyRunning sets a running job's priority and, where its queue's
// policy preempts, whether it may be preempted now: not while the policy
// protects it (it has just started), nor, for a job that checkpoints,
// before its first checkpoint of this attempt.
func (ps *policies) applyRunning(r *scheduler.Running, j *api.Job, a *api.Attempt, ck *api.Checkpoint, now time.Time) {
	p := ps.of(j.Spec.Queue)
	if !p.Preempts() {
		return
	}
	st := ps.state(p, j, now)
	t := seconds(now)
	r.Priority = schedPriority(p, j.Spec.Priority, st, t)
	protected := p.Protected(st, t) || (ck != nil && ck.Time.Before(a.CreatedAt))
	if !r.Stopping {
		// A job the scheduler may not preempt at all keeps its GPUs
		// first, as a protected one does.
		ps.addRank(j.Spec.Queue, rankEntry{id: j.ID, band: j.Spec.Priority, key: p.Key(st, t), submit: j.SubmittedAt,
			r: policy.Ranked{GPUs: st.GPUs, Running: true, Protected: protected || !r.Preemptible}})
	}
	if protected {
		// Protected from the policy alone: the top of its spec
		// priority's band, so no job of that priority preempts it, while
		// a higher priority still does and a guarantee still reclaims
		// what it borrowed (the scheduler preempts within a queue only
		// for a strictly higher priority).
		r.Priority = topOfBand(p, j.Spec.Priority)
	}
}

// orderRequests sets the pending requests' priorities and orders them:
// by priority, then their policy's key, then submit time and ID. reqs[i]
// is pending[i]'s request.
func (ps *policies) orderRequests(reqs []scheduler.Request, pending []*api.Job, now time.Time) {
	t := seconds(now)
	keys := make([]policy.Key, len(reqs))
	idx := make([]int, len(reqs))
	for i, j := range pending {
		p := ps.of(j.Spec.Queue)
		st := ps.state(p, j, now)
		keys[i] = p.Key(st, t)
		reqs[i].Priority = schedPriority(p, j.Spec.Priority, st, t)
		idx[i] = i
		if p.Preempts() {
			ps.addRank(j.Spec.Queue, rankEntry{id: j.ID, band: j.Spec.Priority, key: keys[i], submit: j.SubmittedAt,
				r: policy.Ranked{GPUs: st.GPUs, Starving: p.Starving(st, t)}})
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(reqs[b].Priority, reqs[a].Priority); c != 0 {
			return c
		}
		if keys[a].Less(keys[b]) {
			return -1
		}
		if keys[b].Less(keys[a]) {
			return 1
		}
		if c := pending[a].SubmittedAt.Compare(pending[b].SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(pending[a].ID, pending[b].ID)
	})
	for rank, i := range idx {
		reqs[i].Order = int64(rank)
	}
}

// assignLanes settles, from scratch, which pending and running jobs are
// in their queue's overdue lane (policy.LanePolicy.Assign), the lane's
// share being of gpus, the cluster's GPUs. jobs are every job; running
// ones are those with an attempt not ended, pending ones those Pending or
// Restarting (a preempted job waits again as Restarting).
func (ps *policies) assignLanes(jobs map[string]*api.Job, gpus int, now time.Time) {
	byQueue := map[*policy.LanePolicy][]*policy.Job{}
	ids := map[*policy.Job]string{}
	for id, j := range jobs {
		lp, ok := ps.of(j.Spec.Queue).(*policy.LanePolicy)
		if !ok {
			continue
		}
		a := j.Status.Current()
		running := a != nil && a.Phase != api.AttemptEnded
		if !running && j.Status.Phase != api.JobPending && j.Status.Phase != api.JobRestarting {
			continue
		}
		st := ps.state(lp, j, now)
		byQueue[lp] = append(byQueue[lp], st)
		ids[st] = id
	}
	if len(byQueue) == 0 {
		return
	}
	ps.lane = make(map[string]policy.LaneState, len(ids))
	for lp, sts := range byQueue {
		// Map order must not decide who enters the lane first.
		slices.SortFunc(sts, func(a, b *policy.Job) int { return strings.Compare(ids[a], ids[b]) })
		lp.Assign(sts, gpus, seconds(now))
		for _, st := range sts {
			ps.lane[ids[st]] = st.Lane
		}
	}
}

// keepPlaces leaves preemptible, in each queue whose policy preempts,
// only the running jobs the simulator would offer the scheduler
// (policy.Victims): the queue's pending and running jobs are ranked by
// spec priority, then the policy's key, then submit time and ID, and get
// their GPUs in that order, protected running jobs first; running jobs
// that keep their place are not victims of this pass. Their share is
// healthy, the cluster's GPUs in service, less those held by other
// queues' running jobs (with one queue, as in the simulator, the
// cluster's). Stopping jobs are left out: their GPUs are as good as free.
//
// A job that keeps its place gets the top of its spec priority's band
// rather than Preemptible=false: no job of its priority preempts it then
// (the scheduler preempts within a queue only for a strictly higher
// priority), while a higher spec priority still does, and a queue
// reclaiming its guarantee still takes back what this one borrowed
// (borrowers are preempted regardless of priority, but only when
// Preemptible).
func (ps *policies) keepPlaces(running []scheduler.Running, healthy int) {
	if len(ps.ranks) == 0 {
		return
	}
	held := map[string]int{} // GPUs held by each queue's running jobs
	for i := range running {
		r := &running[i]
		if r.Stopping {
			continue
		}
		for _, s := range r.Ranks {
			held[queueOf(r.Queue)] += len(s.GPUs)
		}
	}
	total := 0
	for _, g := range held {
		total += g
	}
	keep := map[string]int{} // running jobs that keep their place: their spec priority
	for q, es := range ps.ranks {
		slices.SortStableFunc(es, func(a, b rankEntry) int {
			if c := cmp.Compare(b.band, a.band); c != 0 {
				return c
			}
			if a.key.Less(b.key) {
				return -1
			}
			if b.key.Less(a.key) {
				return 1
			}
			if c := a.submit.Compare(b.submit); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		jobs := make([]policy.Ranked, len(es))
		for i, e := range es {
			jobs[i] = e.r
		}
		offered := policy.Victims(jobs, healthy-(total-held[q]))
		for i, e := range es {
			if e.r.Running && (offered == nil || !offered[i]) {
				keep[e.id] = e.band
			}
		}
	}
	for i := range running {
		r := &running[i]
		if band, ok := keep[r.JobID]; ok {
			r.Priority = max(r.Priority, topOfBand(ps.of(r.Queue), band))
		}
	}
}

// queueOf is the name of a job's queue, the default for none.
func queueOf(q string) string {
	if q == "" {
		return api.DefaultQueue
	}
	return q
}
