package cli

import (
	"cmp"
	"context"
	"fmt"
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
				var got []string
				deadline := time.Now().Add(60 * time.Second)
				for got = cl.holding(names); !slices.Equal(got, st.holding); got = cl.holding(names) {
					if time.Now().After(deadline) {
						t.Fatalf("step %d (after %v ended): the cluster holds %v; the simulator %v", k, st.ends, got, st.holding)
					}
					time.Sleep(50 * time.Millisecond)
				}
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
	live, _, err := sim.LiveFromQueues([]api.QueueSpec{{Name: api.DefaultQueue, Policy: pol}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(context.Background(), sim.Config{Shape: sim.Shape{Pools: []sim.Pool{{Nodes: 1, GPUsPerNode: gpus}}},
		Policy: live, Placement: sim.GangwayPlacement}, jobs)
	if err != nil {
		t.Fatal(err)
	}
	var times []float64
	for _, j := range r.Jobs {
		if !slices.Contains(times, j.End) {
			times = append(times, j.End)
		}
	}
	slices.Sort(times)
	out := make([]step, 0, len(times))
	for _, at := range times {
		var st step
		for _, j := range r.Jobs {
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
	starts := slices.Clone(r.Jobs)
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
