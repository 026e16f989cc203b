package cli

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// TestControllerRunsTheSimulatorsPolicy replays a small trace through a
// live in-process cluster and through the simulator with the same queue
// policy and cluster shape, and checks that both start the same jobs at
// each step (issue 22: the controller's policy and the simulator's live
// are one code path).
//
// Time is the test's, not the clock's: every job runs `sleep` until the
// test cancels it, in the order and at the steps the simulator's run
// ends them, and after each step the test waits for the cluster to hold
// exactly the jobs the simulator holds then. A first job holds every GPU
// until all others are queued, so that both see the whole queue at once.
// Nothing depends on how fast the cluster is, only on what it decides.
func TestControllerRunsTheSimulatorsPolicy(t *testing.T) {
	const gpus = 8
	// GPUs and durations (s, the simulator's) of the queued jobs; sized
	// so that gangs wait and later narrow ones may pass wide ones.
	work := []struct {
		gpus int
		dur  float64
	}{{4, 50}, {6, 30}, {2, 70}, {1, 20}, {8, 40}, {3, 15}, {2, 90}, {5, 25}, {1, 60}, {4, 35},
		{7, 45}, {2, 10}, {3, 80}, {1, 55}, {6, 65}, {2, 5}, {8, 12}, {1, 33}, {4, 28}, {3, 41}}
	for _, pol := range []string{"backfill", "greedy"} {
		t.Run(pol, func(t *testing.T) {
			jobs := []trace.Job{{ID: "j00", Submit: 0, Duration: 1, GPUs: gpus, GPUMilli: 1000}}
			for i, w := range work {
				// A distinct binary fraction per job makes every end
				// instant distinct (an end is a sum of durations along a
				// chain of starts, and sums of distinct powers of two
				// differ), so each step ends one job: the cluster may
				// apply two cancellations in separate passes, and a greedy
				// pass between them decides differently.
				d := w.dur + math.Ldexp(1, -(i+1))
				jobs = append(jobs, trace.Job{ID: fmt.Sprintf("j%02d", i+1), Submit: 0, Duration: d, GPUs: w.gpus, GPUMilli: 1000})
			}
			want := simSteps(t, pol, gpus, jobs)

			cl := startCluster(t, 1, gpus)
			if _, errOut, code := cl.run("queue", "set", "default", "--policy", pol); code != 0 {
				t.Fatal(errOut)
			}
			ids := map[string]string{} // trace ID → job ID
			names := map[string]string{}
			for k, j := range jobs {
				id := cl.submitYAML(fmt.Sprintf("name: %s\nranks: 1\ngpusPerRank: %d\ncommand: [sleep, '600']\n", j.ID, j.GPUs))
				ids[j.ID], names[id] = id, j.ID
				if k == 0 {
					cl.waitPhase(id, api.JobRunning, 30*time.Second)
				}
			}
			cl.wait(30*time.Second, "every job queued behind the first", func() bool {
				return len(cl.holding(names)) == 1 && cl.pendingCount() == len(jobs)-1
			})
			for k, st := range want {
				for _, end := range st.ends {
					if _, err := cl.c.Cancel(context.Background(), ids[end]); err != nil {
						t.Fatalf("step %d: cancel %s: %v", k, end, err)
					}
				}
				cl.waitHolding(names, fmt.Sprintf("step %d (after %v ended)", k, st.ends), st.holding...)
			}
		})
	}
}

// step is one instant of the simulator's run at which jobs end: the jobs
// that end then, and every job holding GPUs right after (sorted).
type step struct {
	ends, holding []string
}

// simSteps runs jobs through the simulator with the live policy of a
// cluster whose default queue has policy pol, on one node of gpus GPUs.
func simSteps(t *testing.T, pol string, gpus int, jobs []trace.Job) []step {
	t.Helper()
	res := simResults(t, api.QueueSpec{Name: api.DefaultQueue, Policy: pol}, gpus, jobs, nil)
	var times []float64
	for _, j := range res {
		if !slices.Contains(times, j.End) {
			times = append(times, j.End)
		}
	}
	slices.Sort(times)
	out := make([]step, 0, len(times))
	for _, at := range times {
		var st step
		for _, j := range res {
			if j.End == at {
				st.ends = append(st.ends, j.ID)
			}
			if j.Start <= at && j.End > at {
				st.holding = append(st.holding, j.ID)
			}
		}
		if len(st.ends) > 1 {
			t.Fatalf("jobs %v end at the same instant; the test needs one end per step", st.ends)
		}
		slices.Sort(st.holding)
		out = append(out, st)
	}
	// The order must not be trivial: some job starts before one
	// submitted earlier.
	starts := slices.Collect(maps.Values(res))
	slices.SortStableFunc(starts, func(a, b sim.JobResult) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if slices.IsSortedFunc(starts, func(a, b sim.JobResult) int { return strings.Compare(a.ID, b.ID) }) {
		t.Fatalf("policy %s starts the trace in submit order; the test would not tell policies apart", pol)
	}
	return out
}

// holding lists, by trace ID (names maps job IDs to them), the jobs whose
// current attempt holds GPUs, sorted.
func (cl *cluster) holding(names map[string]string) []string {
	cl.t.Helper()
	l, err := cl.c.Jobs(context.Background(), client.JobQuery{Live: true})
	if err != nil {
		cl.t.Fatalf("list jobs: %v", err)
	}
	var out []string
	for _, j := range l.Jobs {
		if a := j.Status.Current(); a != nil && a.Phase != api.AttemptEnded && names[j.ID] != "" {
			out = append(out, names[j.ID])
		}
	}
	slices.Sort(out)
	return out
}

// waitHolding waits up to a minute for the cluster to hold exactly want
// (trace IDs, sorted), what the simulator holds at step.
func (cl *cluster) waitHolding(names map[string]string, step string, want ...string) {
	cl.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for got := cl.holding(names); !slices.Equal(got, want); got = cl.holding(names) {
		if time.Now().After(deadline) {
			cl.t.Fatalf("%s: the cluster holds %v; the simulator %v", step, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// simResults runs jobs through the simulator with the live policy of a
// cluster whose only queue is q, on one node of gpus GPUs (cost: the
// restore a preempted gang owes; nil, Helios'), by trace ID.
func simResults(t *testing.T, q api.QueueSpec, gpus int, jobs []trace.Job, cost func(int) float64) map[string]sim.JobResult {
	t.Helper()
	live, _, err := sim.LiveFromQueues([]api.QueueSpec{q})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(context.Background(), sim.Config{Shape: sim.Shape{Pools: []sim.Pool{{Nodes: 1, GPUsPerNode: gpus}}},
		Policy: live, Placement: sim.GangwayPlacement, PreemptCost: cost}, jobs)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]sim.JobResult{}
	for _, j := range r.Jobs {
		res[j.ID] = j
	}
	return res
}

// pendingCount is how many jobs wait to be placed.
func (cl *cluster) pendingCount() int {
	cl.t.Helper()
	l, err := cl.c.Jobs(context.Background(), client.JobQuery{Live: true})
	if err != nil {
		cl.t.Fatalf("list jobs: %v", err)
	}
	n := 0
	for _, j := range l.Jobs {
		if j.Status.Phase == api.JobPending {
			n++
		}
	}
	return n
}

// TestControllerRunsTheLane replays, through a live in-process cluster and
// through the simulator, a queue whose policy is gangway with small
// settings, and checks that both make the overdue lane's decisions: a job
// that has waited overdueAfter enters the lane and preempts a job of its
// own level; a job that arrives later starts beside it; when the lane's
// job ends, the preempted job, overdue by then, takes the room it frees
// and preempts the newcomer.
//
// Levels cannot tell these apart (levelBase is so large that every job
// stays at the first level, where nothing preempts), so without the lane
// the cluster would keep the first job and the test fails at its first
// step. Every decision is taken when the test lets it: the lane's grant
// comes overdueAfter after a submit, while nothing else changes, and
// every other one at a submit or a cancel, after the pending job has
// waited past overdueAfter in both. What the test waits for is sets of
// jobs, not times.
//
// The scenario stays where the controller's lane, recomputed each pass
// (policy.LanePolicy.Assign), and the simulator's incremental one agree:
// the controller counts in the lane every running job that waited
// overdueAfter before it started, while the simulator counts only those
// it granted room, not an overdue job the levels started while the lane
// was full. Victims are offered by one rule in both (policy.Victims).
func TestControllerRunsTheLane(t *testing.T) {
	const gpus, overdue = 8, 5 // GPUs; seconds
	queue := api.QueueSpec{Name: api.DefaultQueue, Policy: "gangway", LaneShare: 0.5, OverdueAfter: api.Duration(overdue * time.Second),
		LevelBase: api.Duration(api.MaxLevelBase), MinRun: api.Duration(time.Second)}
	// a holds the cluster; b waits, enters the lane at 5 s (half the GPUs
	// are its room) and preempts a; c arrives at 12 s and starts beside b;
	// b ends at 25 s, and a, overdue since 10 s, enters the lane and
	// preempts c; c runs again when a ends.
	jobs := []trace.Job{{ID: "a", Submit: 0, Duration: 100, GPUs: 8, GPUMilli: 1000}, {ID: "b", Submit: 0, Duration: 20, GPUs: 4, GPUMilli: 1000},
		{ID: "c", Submit: 12, Duration: 50, GPUs: 4, GPUMilli: 1000}}
	res := simResults(t, queue, gpus, jobs, nil)
	a, b, c := res["a"], res["b"], res["c"]
	if a.Start != 0 || a.Preemptions != 1 || b.Start != overdue || b.End != overdue+20 || c.Start != 12 || c.Preemptions != 1 || !(b.End < a.End && a.End < c.End) {
		t.Fatalf("the simulator: a %+v, b %+v, c %+v; want a started at 0 and preempted once, b started at %d s (overdue), c started at 12 s and preempted once, then a and c ending", a, b, c, overdue)
	}
	if a.End-b.End < 100-overdue {
		t.Fatalf("the simulator: a ends at %g, b at %g; want a to run again when b ends", a.End, b.End)
	}

	cl := startCluster(t, 1, gpus)
	args := []string{"queue", "set", "default", "--policy", "gangway", "--lane-share", "0.5", "--overdue-after", "5s",
		"--level-base", api.MaxLevelBase.String(), "--min-run", "1s"}
	if _, errOut, code := cl.run(args...); code != 0 {
		t.Fatal(errOut)
	}
	names := map[string]string{}
	ids := map[string]string{}
	submit := func(j trace.Job) {
		id := cl.submitYAML(fmt.Sprintf("name: %s\nranks: 1\ngpusPerRank: %d\npreemptionGracePeriod: 10s\ncommand: [sleep, '600']\n", j.ID, j.GPUs))
		ids[j.ID], names[id] = id, j.ID
	}
	hold := func(step string, want ...string) {
		t.Helper()
		cl.waitHolding(names, step, want...)
	}
	cancel := func(name string) {
		t.Helper()
		if _, err := cl.c.Cancel(context.Background(), ids[name]); err != nil {
			t.Fatal(err)
		}
	}
	submit(jobs[0])
	hold("a submitted", "a")
	submit(jobs[1])
	hold("b overdue", "b")
	submit(jobs[2])
	hold("c submitted", "b", "c")
	// The simulator's a has waited 15 s when b ends: overdue. Let the
	// cluster's wait pass overdueAfter too.
	cl.wait(60*time.Second, "a requeued", func() bool {
		d, err := cl.c.Job(context.Background(), ids["a"])
		if err != nil {
			t.Fatal(err)
		}
		return d.Job.Status.Phase == api.JobRestarting || d.Job.Status.Phase == api.JobPending
	})
	time.Sleep((overdue + 1) * time.Second)
	cancel("b")
	hold("b ended", "a")
	cancel("a")
	hold("a ended", "c")
	cancel("c")
	hold("c ended")
}

// TestControllerRunsTheLaneTurns: with turns in the lane, two jobs that
// each fill the lane take turns, in the simulator and on a live cluster:
// b, overdue, preempts a; when b's turn is over a, overdue meanwhile,
// takes the lane and preempts b; then b again. With turns off (until the
// job ends) b would keep the GPUs to its end.
func TestControllerRunsTheLaneTurns(t *testing.T) {
	const gpus, overdue, turn = 8, 2, 5 // GPUs; seconds
	queue := api.QueueSpec{Name: api.DefaultQueue, Policy: "gangway", LaneShare: 0.5, OverdueAfter: api.Duration(overdue * time.Second),
		LevelBase: api.Duration(api.MaxLevelBase), MinRun: api.Duration(time.Second), LaneTurn: api.Duration(turn * time.Second)}
	jobs := []trace.Job{{ID: "a", Submit: 0, Duration: 100, GPUs: 8, GPUMilli: 1000}, {ID: "b", Submit: 0, Duration: 3 * turn, GPUs: 8, GPUMilli: 1000}}
	// The cluster's ranks (sleep) restore at once; so do the simulator's.
	res := simResults(t, queue, gpus, jobs, func(int) float64 { return 0 })
	// a 0–2, b 2–7, a 7–12, b 12–17, a 17–22, b 22–27 (its 15 s done).
	if a, b := res["a"], res["b"]; b.Start != overdue || b.Preemptions != 2 || b.End != overdue+5*turn || a.Preemptions != 3 {
		t.Fatalf("the simulator: a %+v, b %+v; want b to start at %d s and the two to take %d-second turns until b ends at %d s", a, b, overdue, turn, overdue+5*turn)
	}

	cl := startCluster(t, 1, gpus)
	args := []string{"queue", "set", "default", "--policy", "gangway", "--lane-share", "0.5", "--overdue-after", fmt.Sprint(overdue, "s"),
		"--level-base", api.MaxLevelBase.String(), "--min-run", "1s", "--lane-turn", fmt.Sprint(turn, "s")}
	if _, errOut, code := cl.run(args...); code != 0 {
		t.Fatal(errOut)
	}
	names := map[string]string{}
	ids := map[string]string{}
	for _, j := range jobs {
		id := cl.submitYAML(fmt.Sprintf("name: %s\nranks: 1\ngpusPerRank: %d\npreemptionGracePeriod: 10s\ncommand: [sleep, '600']\n", j.ID, j.GPUs))
		ids[j.ID], names[id] = id, j.ID
	}
	// Each holder in turn, as the simulator's: a (submitted first), b
	// (overdue), a (b's turn over), b.
	for i, want := range []string{"a", "b", "a", "b"} {
		cl.waitHolding(names, fmt.Sprintf("turn %d", i), want)
	}
	for _, id := range ids {
		cl.run("cancel", id)
	}
}
