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
			for _, pl := range plan.Placements {
				if pl.Backfilled != (tt.mode == Backfill) {
					t.Errorf("%s: Backfilled = %v", pl.JobID, pl.Backfilled)
				}
			}
			checkOutcome(t, plan, tt.wantPlaced, tt.wantKinds, tt.wantResv)
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

// TestBackfillReasonsOfOneShape checks that gangs of one shape behind a
// reservation are told, each, what holds for it when it is decided (the
// reasons are memoized per shape): the first would delay the head, the
// last, after two short gangs took the reserved GPUs it could use, would
// not.
func TestBackfillReasonsOfOneShape(t *testing.T) {
	now := 10 * hour
	snap := withRunning(t, small, []Running{
		ending(job("r1", "q", nodeNames(1, 6)...), now+hour),
		ending(job("r2", "q", nodeNames(9, 16)...), now+3*hour),
	})
	snap.Now = now
	reqs := []Request{
		{JobID: "head", Queue: "q", Ranks: 64, Order: 1, EstimatedDuration: 5 * time.Hour},
		{JobID: "long", Queue: "q", Ranks: 8, Order: 2, EstimatedDuration: 2 * time.Hour},
		{JobID: "short", Queue: "q", Ranks: 8, Order: 3, EstimatedDuration: 30 * time.Minute},
		{JobID: "long2", Queue: "q", Ranks: 8, Order: 4, EstimatedDuration: 2 * time.Hour},
		{JobID: "short2", Queue: "q", Ranks: 8, Order: 5, EstimatedDuration: 30 * time.Minute},
		{JobID: "long3", Queue: "q", Ranks: 8, Order: 6},
	}
	plan := ScheduleWith(snap, reqs, Options{Mode: Backfill})
	checkPlan(t, snap, reqs, plan)
	checkOutcome(t, plan, []string{"short", "short2"},
		map[string]PendingKind{"head": PendingReserved, "long": PendingBackfill, "long2": PendingBackfill, "long3": PendingCapacity},
		[]Reservation{{JobID: "head", Start: now + hour, Nodes: nodeNames(1, 8)}})
	delay := "needs 8 GPUs (8 ranks × 1); 0 free in the cluster outside the GPUs reserved for head; it would delay head, whose reserved GPUs are free in 1h0m0s"
	want := map[string]string{"long": delay, "long2": delay,
		"long3": "needs 8 GPUs (8 ranks × 1); 0 free in the cluster outside the GPUs reserved for head"}
	for job, w := range want {
		if diff := gocmp.Diff(w, pendingOf(plan, job).Reason); diff != "" {
			t.Errorf("%s (-want +got):\n%s", job, diff)
		}
	}
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

// TestBackfillReservesSeveral gives the first two blocked gangs
// reservations that share no GPU, and checks that later gangs start only
// when they end before the first reservation starts.
func TestBackfillReservesSeveral(t *testing.T) {
	now := 10 * hour
	running := []Running{
		ending(job("r1", "q", nodeNames(1, 8)...), now+hour),
		ending(job("r2", "q", nodeNames(9, 15)...), now+3*hour),
	}
	reqs := []Request{
		{JobID: "a", Queue: "q", Ranks: 64, Order: 1, EstimatedDuration: 2 * time.Hour},
		{JobID: "b", Queue: "q", Ranks: 64, Order: 2, EstimatedDuration: time.Hour},
		{JobID: "long", Queue: "q", Ranks: 8, Order: 3, EstimatedDuration: 2 * time.Hour},
		{JobID: "short", Queue: "q", Ranks: 8, Order: 4, EstimatedDuration: 30 * time.Minute},
	}
	tests := []struct {
		max        int
		wantPlaced []string
		wantKinds  map[string]PendingKind
		wantResv   []Reservation
	}{
		{
			// EASY: only a is reserved; node16 is free for anyone, and
			// long takes it.
			max:        1,
			wantPlaced: []string{"long"},
			wantKinds:  map[string]PendingKind{"a": PendingReserved, "b": PendingCapacity, "short": PendingCapacity},
			wantResv:   []Reservation{{JobID: "a", Start: now + hour, Nodes: nodeNames(1, 8)}},
		},
		{
			// b gets nodes 9-16 at 3 h (a holds 1-8); node16 is b's, so
			// only a gang that is gone before the first reservation starts
			// may use it: short, not long.
			max:        2,
			wantPlaced: []string{"short"},
			wantKinds:  map[string]PendingKind{"a": PendingReserved, "b": PendingReserved, "long": PendingBackfill},
			wantResv: []Reservation{{JobID: "a", Start: now + hour, Nodes: nodeNames(1, 8)},
				{JobID: "b", Start: now + 3*hour, Nodes: nodeNames(9, 16)}},
		},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.max), func(t *testing.T) {
			snap := withRunning(t, small, running)
			snap.Now = now
			plan := ScheduleWith(snap, reqs, Options{Mode: Backfill, MaxReservations: tt.max})
			checkPlan(t, snap, reqs, plan)
			checkOutcome(t, plan, tt.wantPlaced, tt.wantKinds, tt.wantResv)
		})
	}
}

// checkOutcome compares the gangs a plan placed (in id order), the kinds
// of those it did not, and its reservations with what is wanted.
func checkOutcome(t *testing.T, plan Plan, wantPlaced []string, wantKinds map[string]PendingKind, wantResv []Reservation) {
	t.Helper()
	var placed []string
	for _, pl := range plan.Placements {
		placed = append(placed, pl.JobID)
	}
	slices.Sort(placed)
	if diff := gocmp.Diff(wantPlaced, placed); diff != "" {
		t.Errorf("placed (-want +got):\n%s", diff)
	}
	kinds := map[string]PendingKind{}
	for _, pe := range plan.Pending {
		kinds[pe.JobID] = pe.Kind
	}
	if diff := gocmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("pending kinds (-want +got):\n%s\n%+v", diff, plan.Pending)
	}
	if diff := gocmp.Diff(wantResv, plan.Reservations); diff != "" {
		t.Errorf("reservations (-want +got):\n%s", diff)
	}
}

// TestBackfillNeverDelaysTheHead simulates random backlogs with exact
// duration estimates, with one reservation per pass and with several, and
// checks that no gang a pass starts holds reserved GPUs past the
// reservation's start, that reservations share no GPU, and that the head
// starts no later than its reservation said.
func TestBackfillNeverDelaysTheHead(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprint(k), func(t *testing.T) { testNeverDelays(t, k) })
	}
}

func testNeverDelays(t *testing.T, maxResv int) {
	topo, err := topology.Uniform(topology.UniformSpec{Nodes: 8, GPUsPerNode: 8, NodesPerLeaf: 4, Rails: 8, NVLink: true})
	if err != nil {
		t.Fatal(err)
	}
	seeds := uint64(15)
	if testing.Short() {
		seeds = 5
	}
	several := 0
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
			pass := NewPass(snap, reqs, Options{Mode: Backfill, MaxReservations: maxResv})
			for _, more := pass.Step(); more; _, more = pass.Step() {
			}
			plan := pass.Plan()
			checkPlan(t, snap, reqs, plan)
			if len(plan.Reservations) > maxResv {
				t.Fatalf("seed %d: %d reservations, at most %d allowed", seed, len(plan.Reservations), maxResv)
			}
			several = max(several, len(plan.Reservations))
			// Within the pass: reservations share no GPU, and at its start
			// every reserved GPU is free of the running jobs and of the
			// gangs this plan starts.
			holds := func(ranks []Slot, end int64, rv *reservation) bool {
				for _, sl := range ranks {
					id, _ := topo.NodeByName(sl.Node)
					for _, m := range rv.masks {
						if m.node != int32(id) {
							continue
						}
						for _, g := range sl.GPUs {
							if m.mask&(1<<uint(g)) != 0 && end > rv.start {
								return true
							}
						}
					}
				}
				return false
			}
			for i, rv := range pass.resvs {
				for _, other := range pass.resvs[i+1:] {
					if holds(maskSlots(topo, other.masks), noEnd, rv) {
						t.Fatalf("seed %d: reservations of %s and %s share GPUs", seed, rv.job, other.job)
					}
				}
				for _, r := range running {
					if holds(r.Ranks, r.EstimatedEnd, rv) {
						t.Fatalf("seed %d: %s's reserved GPUs are still held by %s at its start", seed, rv.job, r.JobID)
					}
				}
				for _, pl := range plan.Placements {
					if holds(pl.Ranks, now+byID[pl.JobID].dur, rv) {
						t.Fatalf("seed %d: %s, started now, still holds %s's reserved GPUs at its start", seed, pl.JobID, rv.job)
					}
				}
			}
			// Across passes: the first reservation of each pass (the head)
			// is a promise. Later ones may move, as the reservations ahead
			// of them are worked out again on the next pass.
			for k, r := range plan.Reservations {
				if r.Start == 0 {
					t.Fatalf("seed %d: reservation with unknown start although every job has an estimate", seed)
				}
				if k > 0 {
					continue
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
	if several < maxResv {
		t.Errorf("no pass made %d reservations; the test proves nothing for them", maxResv)
	}
}

// maskSlots turns node masks into slots, for comparisons.
func maskSlots(topo *topology.Topology, masks []nodeMask) []Slot {
	var out []Slot
	for _, m := range masks {
		sl := Slot{Node: topo.NodeName(topology.NodeID(m.node))}
		for g := 0; g < 64; g++ {
			if m.mask&(1<<uint(g)) != 0 {
				sl.GPUs = append(sl.GPUs, g)
			}
		}
		out = append(out, sl)
	}
	return out
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

// TestBackfillQueuedBehindReservations: gangs that each fit the emptied
// cluster but queue behind the gangs reserved ahead of them (an array's
// node-sized tasks on a cluster of a few nodes, which run a few at a
// time) are told so, not that they never fit.
func TestBackfillQueuedBehindReservations(t *testing.T) {
	now := 10 * hour
	snap := withRunning(t, small, []Running{
		ending(job("r1", "q", nodeNames(1, 8)...), now+hour),
		ending(job("r2", "q", nodeNames(9, 16)...), now+2*hour),
	})
	snap.Now = now
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{JobID: fmt.Sprintf("task%d", i), Queue: "q", Ranks: 128, Order: int64(i + 1), EstimatedDuration: time.Hour})
	}
	plan := ScheduleWith(snap, reqs, Options{Mode: Backfill, MaxReservations: 2})
	checkPlan(t, snap, reqs, plan)
	for _, id := range []string{"task1", "task2", "task3"} {
		pe := pendingOf(plan, id)
		if pe == nil {
			t.Fatalf("%s placed; the cluster is full", id)
		}
		if strings.Contains(pe.Reason, "does not fit even") || !strings.Contains(pe.Reason, "it fits once the gang reserved ahead of it (task0) has started") {
			t.Errorf("%s's reason %q; want it told it waits behind the reserved gangs", id, pe.Reason)
		}
	}
}
