package scheduler

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/topology"
	gocmp "github.com/google/go-cmp/cmp"
)

func ending(r Running, end int64) Running {
	r.EstimatedEnd = end
	return r
}

func TestBackfill(t *testing.T) {
	now := 10 * hour
	running := []Running{
		ending(job("r1", "q", nodeNames(1, 6)...), now+hour),
		ending(job("r2", "q", nodeNames(9, 16)...), now+3*hour),
	}
	reqs := []Request{
		{JobID: "head", Queue: "q", Ranks: 64, Order: 1, EstimatedDuration: 5 * time.Hour},
		{JobID: "long", Queue: "q", Ranks: 8, Order: 2, EstimatedDuration: 2 * time.Hour},
		{JobID: "short", Queue: "q", Ranks: 8, Order: 3, EstimatedDuration: 30 * time.Minute},
		{JobID: "unknown", Queue: "q", Ranks: 1, Order: 4},
	}
	tests := []struct {
		mode       Mode
		wantPlaced []string
		wantKinds  map[string]PendingKind
		wantResv   []Reservation
	}{
		{
			mode:       Backfill,
			wantPlaced: []string{"short"},
			wantKinds:  map[string]PendingKind{"head": PendingReserved, "long": PendingBackfill, "unknown": PendingBackfill},
			wantResv:   []Reservation{{JobID: "head", Start: now + hour, Nodes: nodeNames(1, 8)}},
		},
		{
			mode:      Strict,
			wantKinds: map[string]PendingKind{"head": PendingCapacity, "long": PendingBlocked, "short": PendingBlocked, "unknown": PendingBlocked},
		},
		{
			mode:       Greedy,
			wantPlaced: []string{"long", "short"},
			wantKinds:  map[string]PendingKind{"head": PendingCapacity, "unknown": PendingCapacity},
		},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode), func(t *testing.T) {
			snap := withRunning(t, small, running)
			snap.Now = now
			plan := ScheduleWith(snap, reqs, Options{Mode: tt.mode})
			checkPlan(t, snap, reqs, plan)
			var placed []string
			for _, pl := range plan.Placements {
				placed = append(placed, pl.JobID)
				if pl.Backfilled != (tt.mode == Backfill) {
					t.Errorf("%s: Backfilled = %v", pl.JobID, pl.Backfilled)
				}
			}
			slices.Sort(placed)
			if diff := gocmp.Diff(tt.wantPlaced, placed); diff != "" {
				t.Errorf("placed (-want +got):\n%s", diff)
			}
			kinds := map[string]PendingKind{}
			for _, pe := range plan.Pending {
				kinds[pe.JobID] = pe.Kind
			}
			if diff := gocmp.Diff(tt.wantKinds, kinds); diff != "" {
				t.Errorf("pending kinds (-want +got):\n%s\n%+v", diff, plan.Pending)
			}
			if diff := gocmp.Diff(tt.wantResv, plan.Reservations); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("reasons", func(t *testing.T) {
		snap := withRunning(t, small, running)
		snap.Now = now
		plan := ScheduleWith(snap, reqs, Options{Mode: Backfill})
		want := map[string]string{
			"head":    "needs 64 GPUs (64 ranks × 1); 16 free in the cluster; reserved 8 nodes that are free in 1h0m0s; gangs behind it start first only if they leave those GPUs alone or end before then",
			"long":    "needs 8 GPUs (8 ranks × 1); 0 free in the cluster outside the GPUs reserved for head; it would delay head, whose reserved GPUs are free in 1h0m0s; 1 gang waits ahead of it in queue q",
			"unknown": "needs 1 GPU on one node; 0 free in the cluster outside the GPUs reserved for head; it would delay head, whose reserved GPUs are free in 1h0m0s; 2 gangs wait ahead of it in queue q",
		}
		for job, w := range want {
			if diff := gocmp.Diff(w, pendingOf(plan, job).Text()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", job, diff)
			}
		}
	})
}

func TestBackfillUnknownEnds(t *testing.T) {
	// r1 has no estimated end: the reservation's start is unknown, so no
	// gang may use its GPUs, but gangs elsewhere still start.
	snap := withRunning(t, small, []Running{job("r1", "q", nodeNames(1, 6)...), job("r2", "q", nodeNames(9, 14)...)})
	reqs := []Request{
		{JobID: "head", Queue: "q", Ranks: 64, Order: 1},
		{JobID: "elsewhere", Queue: "q", Ranks: 16, Order: 2},
		{JobID: "short", Queue: "q", Ranks: 8, Order: 3, EstimatedDuration: time.Minute},
	}
	plan := ScheduleWith(snap, reqs, Options{Mode: Backfill})
	checkPlan(t, snap, reqs, plan)
	if len(plan.Reservations) != 1 || plan.Reservations[0].Start != 0 {
		t.Fatalf("reservations %+v, want one with unknown start", plan.Reservations)
	}
	if pendingOf(plan, "short") == nil {
		t.Errorf("short started on reserved GPUs although the reservation's start is unknown")
	}
	if pl := placementOf(plan, "elsewhere"); pl == nil || !gocmp.Equal(nodesOf(pl), nodeNames(15, 16)) {
		t.Errorf("elsewhere: %+v, want nodes 15-16", pl)
	}
}

func TestBackfillSkipsImpossibleHead(t *testing.T) {
	_, snap := testCluster(t, small, nil)
	reqs := []Request{{JobID: "huge", Ranks: 200, Order: 1}, {JobID: "next", Ranks: 8, Order: 2}}
	plan := ScheduleWith(snap, reqs, Options{Mode: Backfill})
	if len(plan.Reservations) != 0 || placementOf(plan, "next") == nil {
		t.Errorf("a gang bigger than the cluster blocked others: %+v", plan)
	}
}

// TestBackfillNeverDelaysTheHead simulates random backlogs with exact
// duration estimates and checks every reservation: the gang holding it
// starts no later than the reservation said.
func TestBackfillNeverDelaysTheHead(t *testing.T) {
	topo, err := topology.Uniform(topology.UniformSpec{Nodes: 8, GPUsPerNode: 8, NodesPerLeaf: 4, Rails: 8, NVLink: true})
	if err != nil {
		t.Fatal(err)
	}
	seeds := uint64(15)
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 99))
		type jobT struct {
			req   Request
			dur   int64
			start int64
		}
		var jobs []*jobT
		for i := range 60 {
			size := []int{1, 1, 2, 4, 8, 16, 32, 48}[rng.IntN(8)]
			dur := int64(1+rng.IntN(20)) * int64(time.Minute)
			jobs = append(jobs, &jobT{req: Request{JobID: fmt.Sprintf("j%02d", i), Queue: "q", Ranks: size, Order: int64(i),
				EstimatedDuration: time.Duration(dur)}, dur: dur, start: -1})
		}
		promised := map[string]int64{}
		var running []Running
		now := int64(0)
		for steps := 0; ; steps++ {
			if steps > 1000 {
				t.Fatalf("seed %d: no progress", seed)
			}
			running = slices.DeleteFunc(running, func(r Running) bool { return r.EstimatedEnd <= now })
			var reqs []Request
			byID := map[string]*jobT{}
			for _, j := range jobs {
				if j.start < 0 {
					reqs = append(reqs, j.req)
					byID[j.req.JobID] = j
				}
			}
			if len(reqs) == 0 {
				break
			}
			snap := withRunningOn(topo, running)
			snap.Now = now
			plan := ScheduleWith(snap, reqs, Options{Mode: Backfill})
			checkPlan(t, snap, reqs, plan)
			for _, r := range plan.Reservations {
				if r.Start == 0 {
					t.Fatalf("seed %d: reservation with unknown start although every job has an estimate", seed)
				}
				if p, ok := promised[r.JobID]; !ok || r.Start < p {
					promised[r.JobID] = r.Start
				}
			}
			for _, pl := range plan.Placements {
				j := byID[pl.JobID]
				j.start = now
				running = append(running, Running{JobID: pl.JobID, Queue: "q", Ranks: pl.Ranks, StartedAt: now, EstimatedEnd: now + j.dur})
			}
			next := int64(-1)
			for _, r := range running {
				if next < 0 || r.EstimatedEnd < next {
					next = r.EstimatedEnd
				}
			}
			if next < 0 {
				t.Fatalf("seed %d: nothing runs and %d gangs wait: %+v", seed, len(reqs), plan.Pending)
			}
			now = next
		}
		for id, p := range promised {
			var j *jobT
			for _, x := range jobs {
				if x.req.JobID == id {
					j = x
				}
			}
			if j.start > p {
				t.Errorf("seed %d: %s was promised %s and started at %s", seed, id, time.Duration(p), time.Duration(j.start))
			}
		}
		if len(promised) == 0 {
			t.Errorf("seed %d: no reservation was ever made; the test proves nothing", seed)
		}
	}
}

func TestSortReleases(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for n := range 300 {
		keys := make([]releaseKey, n)
		ids := make([]string, n)
		for i := range keys {
			keys[i] = releaseKey{end: rng.Int64N(50) - 25, tie: rng.Int64N(4) - 1, i: int32(i)}
			if rng.IntN(10) == 0 {
				keys[i].end = noEnd
			}
			if rng.IntN(3) == 0 {
				keys[i].end = rng.Int64()
			}
			ids[i] = fmt.Sprintf("id%d", rng.IntN(1000))
		}
		want := slices.Clone(keys)
		byID := func(a, b int32) int { return strings.Compare(ids[a], ids[b]) }
		slices.SortStableFunc(want, func(a, b releaseKey) int {
			if a.end != b.end {
				return cmp.Compare(a.end, b.end)
			}
			if a.tie != b.tie {
				return cmp.Compare(a.tie, b.tie)
			}
			return byID(a.i, b.i)
		})
		sortReleases(keys, byID)
		for i := range keys {
			a, b := keys[i], want[i]
			if a.end != b.end || a.tie != b.tie || ids[a.i] != ids[b.i] {
				t.Fatalf("n=%d: position %d is %+v (%s), want %+v (%s)", n, i, a, ids[a.i], b, ids[b.i])
			}
		}
	}
}
