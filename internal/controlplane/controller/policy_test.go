package controller

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

// TestQueuePolicyOrder: a las queue puts the job that has had the least
// GPU-service first and gives it the higher priority, the spec priority
// ranks above the policy, and a job that has just started is protected.
func TestQueuePolicyOrder(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0.Add(3*time.Hour + 30*time.Minute) // old has waited 2.5 h: aged one level, not starving
	qs := map[string]*api.Queue{"q": {Spec: api.QueueSpec{Name: "q", Policy: "las"}}}
	pols := queuePolicies(qs)
	mk := func(id string, submit time.Duration, prio int, ran time.Duration) *api.Job {
		j := &api.Job{ID: id, SubmittedAt: t0.Add(submit), Spec: api.JobSpec{Queue: "q", Ranks: 1, GPUsPerRank: 8, Priority: prio}}
		if ran > 0 {
			start := t0.Add(submit)
			j.Status.Attempts = []api.Attempt{{Phase: api.AttemptEnded, CreatedAt: start, EndedAt: start.Add(ran),
				Placement: []api.RankPlacement{{Node: "n", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}}
		}
		return j
	}
	// old ran 8 GPU-hours (level 3); fresh never ran; boss ran as long
	// but has spec priority 1.
	pending := []*api.Job{mk("old", 0, 0, time.Hour), mk("fresh", time.Hour, 0, 0), mk("boss", 2*time.Hour, 1, time.Hour)}
	reqs := make([]scheduler.Request, len(pending))
	pols.orderRequests(reqs, pending, now)
	order := map[string]int64{}
	for i, j := range pending {
		order[j.ID] = reqs[i].Order
	}
	if !(order["boss"] < order["fresh"] && order["fresh"] < order["old"]) {
		t.Errorf("order = %v; want boss (priority 1), fresh (least service), old", order)
	}
	if !(reqs[2].Priority > reqs[1].Priority && reqs[1].Priority > reqs[0].Priority) {
		t.Errorf("priorities old %d fresh %d boss %d; want boss > fresh > old", reqs[0].Priority, reqs[1].Priority, reqs[2].Priority)
	}
	if pols.mode() != scheduler.Greedy {
		t.Errorf("mode = %v; want the default queue's (gangway: greedy)", pols.mode())
	}

	run := mk("run", 0, 0, 0)
	run.Status.Attempts = []api.Attempt{{Phase: api.AttemptRunning, CreatedAt: now.Add(-time.Minute),
		Placement: []api.RankPlacement{{Node: "n", GPUs: []int{0}}}}}
	a := run.Status.Current()
	// Protected from the policy: the top of its spec priority's band, so
	// only a higher spec priority (or a guarantee) preempts it.
	p := pols.of("q")
	top := p.Levels()
	r := scheduler.Running{Preemptible: true}
	pols.applyRunning(&r, run, a, nil, now)
	if r.Priority != top || !r.Preemptible {
		t.Errorf("a job 1 min into its attempt: priority %d, preemptible %v; want %d (protected for min-run from its own priority), true", r.Priority, r.Preemptible, top)
	}
	if boss := schedPriority(p, 1, &policy.Job{GPUs: 8}, seconds(now)); boss <= r.Priority {
		t.Errorf("a spec-priority-1 job's priority %d does not exceed a protected priority-0 job's %d", boss, r.Priority)
	}
	r = scheduler.Running{Preemptible: true}
	pols.applyRunning(&r, run, a, &api.Checkpoint{Time: now.Add(-time.Hour)}, now.Add(time.Hour))
	if r.Priority != top {
		t.Errorf("a checkpointing job with no checkpoint since its start: priority %d; want protected, %d", r.Priority, top)
	}
	r = scheduler.Running{Preemptible: true}
	pols.applyRunning(&r, run, a, &api.Checkpoint{Time: now}, now.Add(time.Hour))
	if r.Priority >= top {
		t.Errorf("a job past min-run with a checkpoint since its start is protected (priority %d)", r.Priority)
	}
}

// TestQueueLane: in a gangway queue, a job that has waited past the
// overdue bound enters the lane (ranks first, top priority) while the
// lane has room, and a running job that entered it is never preempted;
// overdue jobs beyond the lane's share keep their level (no higher
// priority than a new job's).
func TestQueueLane(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0.Add(10 * time.Hour)
	qs := map[string]*api.Queue{"q": {Spec: api.QueueSpec{Name: "q", Policy: "gangway"}}}
	pols := queuePolicies(qs)
	mk := func(id string, submit time.Duration) *api.Job {
		return &api.Job{ID: id, SubmittedAt: t0.Add(submit), Status: api.JobStatus{Phase: api.JobPending},
			Spec: api.JobSpec{Queue: "q", Ranks: 1, GPUsPerRank: 8}}
	}
	// On 32 GPUs the lane's quarter is 8: one overdue 8-GPU gang fills it.
	lane := mk("lane", 0) // started in the lane after waiting 7 h, 3 h into its 4-hour turn
	lane.Status.Phase = api.JobRunning
	lane.Status.Attempts = []api.Attempt{{Phase: api.AttemptRunning, CreatedAt: t0.Add(7 * time.Hour), Lane: true,
		Placement: []api.RankPlacement{{Node: "n", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}}
	late := mk("late", time.Hour)         // overdue, but the lane is full
	late.Status.Phase = api.JobRestarting // preempted, waiting again
	fresh := mk("fresh", 9*time.Hour+59*time.Minute)
	jobs := map[string]*api.Job{"lane": lane, "late": late, "fresh": fresh}
	pols.assignLanes(jobs, 32, now)
	r := scheduler.Running{Preemptible: true}
	pols.applyRunning(&r, lane, lane.Status.Current(), nil, now)
	if lp := pols.of("q"); r.Priority != lp.Levels() {
		t.Errorf("a job running in the lane: priority %d; want the top of its band, %d", r.Priority, lp.Levels())
	}
	pending := []*api.Job{late, fresh}
	reqs := make([]scheduler.Request, len(pending))
	pols.orderRequests(reqs, pending, now)
	if reqs[0].Priority != reqs[1].Priority {
		t.Errorf("with the lane full, the overdue job keeps its level: priorities %d, %d; want equal", reqs[0].Priority, reqs[1].Priority)
	}
	// On 64 GPUs the lane has room: late enters it and outranks fresh.
	pols.assignLanes(jobs, 64, now)
	pols.orderRequests(reqs, pending, now)
	if reqs[0].Priority <= reqs[1].Priority {
		t.Errorf("overdue job with room in the lane: priority %d vs %d, order %d vs %d; want first", reqs[0].Priority, reqs[1].Priority, reqs[0].Order, reqs[1].Order)
	}
	// Its turn over (4 h after its start), the lane job leaves the lane
	// for its level, and late takes its room on 32 GPUs.
	pols = queuePolicies(qs) // a new pass
	after := t0.Add(11*time.Hour + time.Second)
	pols.assignLanes(jobs, 32, after)
	r = scheduler.Running{Preemptible: true}
	pols.applyRunning(&r, lane, lane.Status.Current(), nil, after)
	if pols.lane["lane"] != policy.LaneNone || pols.lane["late"] != policy.LaneGranted || r.Priority >= pols.of("q").Levels() {
		t.Errorf("after its turn: lanes %v, priority %d; want it out at its level and late granted", pols.lane, r.Priority)
	}
	// The lane is what was recorded at the start, not how long the job
	// had waited: one the levels started after a long wait (the lane was
	// full then) is not in it, and the lane has room again on 32 GPUs.
	lane.Status.Attempts[0].Lane = false
	pols = queuePolicies(qs) // a new pass
	pols.assignLanes(jobs, 32, now)
	if pols.lane["lane"] != policy.LaneNone || pols.lane["late"] != policy.LaneGranted {
		t.Errorf("levels-started job: lanes %v; want it out and late granted", pols.lane)
	}
}

// TestKeepPlaces: in a preempting queue, a running job that keeps its
// place in the policy's ranking is not offered as a victim, though its
// priority is below the pending job's (the old rule offered it, and the
// scheduler, preferring the least lost work, took it); the job that loses
// its place is preempted instead (issue 22).
func TestKeepPlaces(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0.Add(3 * time.Hour) // nobody has waited long enough to age
	qs := map[string]*api.Queue{"q": {Spec: api.QueueSpec{Name: "q", Policy: "las"}}}
	gpus := func(lo int) []int { return []int{lo, lo + 1, lo + 2, lo + 3} }
	mk := func(id string, submit time.Duration, earlier time.Duration, startedAgo time.Duration, lo int) *api.Job {
		j := &api.Job{ID: id, SubmittedAt: t0.Add(submit), Spec: api.JobSpec{Queue: "q", Ranks: 1, GPUsPerRank: 4}}
		if earlier > 0 {
			j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Phase: api.AttemptEnded, CreatedAt: t0.Add(submit),
				EndedAt: t0.Add(submit + earlier), Placement: []api.RankPlacement{{Node: "n", GPUs: gpus(0)}}})
		}
		if startedAgo > 0 {
			j.Status.Phase = api.JobRunning
			j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Phase: api.AttemptRunning, CreatedAt: now.Add(-startedAgo),
				Placement: []api.RankPlacement{{Node: "n", GPUs: gpus(lo)}}})
		} else {
			j.Status.Phase = api.JobPending
		}
		return j
	}
	// keeper has had about 1.3 GPU-hours (level 1), loser 10 (level 3),
	// p none (level 0): p, keeper, loser. On 8 GPUs p and keeper fit;
	// loser loses its place. keeper lost less work since it started, so
	// the scheduler would take it if offered.
	keeper := mk("keeper", time.Hour, 15*time.Minute, 5*time.Minute, 0)
	loser := mk("loser", 0, 150*time.Minute, 30*time.Minute, 4)
	p := mk("p", 2*time.Hour, 0, 0, 0)
	for _, tc := range []struct {
		name   string
		keep   bool // apply keepPlaces: the new rule
		victim string
	}{{"old rule", false, "keeper"}, {"new rule", true, "loser"}} {
		t.Run(tc.name, func(t *testing.T) {
			pols := queuePolicies(qs)
			snap := scheduler.Snapshot{Now: now.UnixNano(), Queues: []scheduler.Queue{{Name: "q"}},
				Nodes: []scheduler.Node{{Name: "n", Total: 8, Free: []int{}}}}
			for _, j := range []*api.Job{keeper, loser} {
				a := j.Status.Current()
				r := scheduler.Running{JobID: j.ID, Queue: "q", Preemptible: true, StartedAt: a.CreatedAt.UnixNano(),
					Ranks: []scheduler.Slot{{Node: "n", GPUs: a.Placement[0].GPUs}}}
				pols.applyRunning(&r, j, a, nil, now)
				snap.Running = append(snap.Running, r)
			}
			reqs := []scheduler.Request{schedRequest(p)}
			pols.orderRequests(reqs, []*api.Job{p}, now)
			if snap.Running[0].Priority >= reqs[0].Priority {
				t.Fatalf("keeper's policy priority %d is not below p's %d: the test shows nothing", snap.Running[0].Priority, reqs[0].Priority)
			}
			if tc.keep {
				pols.keepPlaces(snap.Running, 8)
				if snap.Running[0].Priority < reqs[0].Priority || snap.Running[1].Priority >= reqs[0].Priority {
					t.Errorf("after keepPlaces: keeper %d, loser %d, p %d; want keeper at or above p, loser below",
						snap.Running[0].Priority, snap.Running[1].Priority, reqs[0].Priority)
				}
			}
			plan := scheduler.ScheduleWith(snap, reqs, scheduler.Options{Mode: scheduler.Greedy})
			var got []string
			for _, v := range plan.Preemptions {
				got = append(got, v.JobID)
			}
			if len(got) != 1 || got[0] != tc.victim {
				t.Errorf("preempted %v; want [%s]", got, tc.victim)
			}
		})
	}
}
