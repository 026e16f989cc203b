package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

func TestQuota(t *testing.T) {
	// small has 128 GPUs.
	tests := []struct {
		name       string
		queues     []Queue
		running    []Running
		req        Request
		wantReason string // "" when admitted
	}{
		{
			name:    "within the guarantee",
			queues:  []Queue{{Name: "a", GuaranteeGPUs: 64}, {Name: "b", GuaranteeGPUs: 64}},
			running: []Running{job("r1", "a", nodeNames(1, 6)...)},
			req:     Request{JobID: "j", Queue: "a", Ranks: 16},
		},
		{
			name:       "borrowing limit",
			queues:     []Queue{{Name: "a", GuaranteeGPUs: 16, BorrowLimitGPUs: ptr(0)}},
			running:    []Running{job("r1", "a", nodeNames(1, 2)...)},
			req:        Request{JobID: "j", Queue: "a", Ranks: 8},
			wantReason: "queue a would use 24 GPUs; its guarantee is 16 and it may borrow at most 0 more",
		},
		{
			name:    "a cohort lends idle guarantee",
			queues:  []Queue{{Name: "a", Cohort: "c", GuaranteeGPUs: 64}, {Name: "b", Cohort: "c", GuaranteeGPUs: 64}},
			running: []Running{job("r1", "a", nodeNames(1, 8)...)},
			req:     Request{JobID: "j", Queue: "a", Ranks: 32},
		},
		{
			name:       "no cohort, nothing unguaranteed to borrow",
			queues:     []Queue{{Name: "a", GuaranteeGPUs: 64}, {Name: "b", GuaranteeGPUs: 64}},
			running:    []Running{job("r1", "a", nodeNames(1, 8)...)},
			req:        Request{JobID: "j", Queue: "a", Ranks: 8},
			wantReason: "queue a would use 72 GPUs, above its 64-GPU guarantee; it is in no cohort, so it borrows only GPUs no queue is guaranteed, and there are none: the queues' guarantees take all 128 GPUs of this cluster; give it a cohort whose queues lend it their idle guarantee ('gangway queue set a --cohort C'), or lower the guarantees",
		},
		{
			name:       "a guarantee larger than the cluster leaves nothing to borrow, and the reason says whose",
			queues:     []Queue{{Name: "research", GuaranteeGPUs: 256}},
			req:        Request{JobID: "j", Queue: "default", Ranks: 8},
			wantReason: "queue default would use 8 GPUs, above its 0-GPU guarantee; it is in no cohort, so it borrows only GPUs no queue is guaranteed, and there are none: queue research guarantees 256 GPUs of this 128-GPU cluster; give it a cohort whose queues lend it their idle guarantee ('gangway queue set default --cohort C'), or lower the guarantees",
		},
		{
			name:   "a queue that borrows idle guarantee runs on a cluster its neighbour's guarantee exceeds",
			queues: []Queue{{Name: "research", GuaranteeGPUs: 256}, {Name: "default", BorrowIdle: true}},
			req:    Request{JobID: "j", Queue: "default", Ranks: 8},
		},
		{
			name:    "idle guarantee is lent up to what the queues leave idle",
			queues:  []Queue{{Name: "a", GuaranteeGPUs: 64}, {Name: "b", GuaranteeGPUs: 64}, {Name: "default", BorrowIdle: true}},
			running: []Running{job("a1", "a", nodeNames(1, 8)...), job("d1", "default", nodeNames(9, 12)...)},
			req:     Request{JobID: "j", Queue: "default", Ranks: 32},
		},
		{
			name:       "idle guarantee lent out is not lent twice",
			queues:     []Queue{{Name: "a", GuaranteeGPUs: 64}, {Name: "b", GuaranteeGPUs: 64}, {Name: "default", BorrowIdle: true}},
			running:    []Running{job("a1", "a", nodeNames(1, 8)...), job("d1", "default", nodeNames(9, 12)...)},
			req:        Request{JobID: "j", Queue: "default", Ranks: 40},
			wantReason: "queue default would use 72 GPUs, above its 0-GPU guarantee; it borrows the GPUs no queue is guaranteed (0) and those other queues are guaranteed but leave idle (64 now), and 32 of them are left to borrow",
		},
		{
			name:       "an overcommitted guarantee is idle only on paper",
			queues:     []Queue{{Name: "research", GuaranteeGPUs: 256}, {Name: "default", BorrowIdle: true}},
			running:    []Running{job("r1", "research", nodeNames(1, 12)...), job("d1", "default", nodeNames(13, 15)...)},
			req:        Request{JobID: "j", Queue: "default", Ranks: 16},
			wantReason: "queue default would use 40 GPUs, above its 0-GPU guarantee; it borrows the GPUs no queue is guaranteed (0) and those other queues are guaranteed but leave idle (32 now), and 8 of them are left to borrow; queue research guarantees 256 GPUs of this 128-GPU cluster: lower the guarantees with 'gangway queue set'",
		},
		{
			name: "a cohort's borrowing and the idle-guarantee borrower share the pool",
			queues: []Queue{{Name: "a", Cohort: "c", GuaranteeGPUs: 32}, {Name: "b", Cohort: "c", GuaranteeGPUs: 32},
				{Name: "d", GuaranteeGPUs: 32}, {Name: "default", BorrowIdle: true}},
			// default borrows d's idle 32 and the pool's 32; a's cohort
			// has nothing more to borrow.
			running:    []Running{job("a1", "a", nodeNames(1, 8)...), job("d1", "default", nodeNames(9, 16)...)},
			req:        Request{JobID: "j", Queue: "a", Ranks: 8},
			wantReason: "queue a would use 72 GPUs, above its 32-GPU guarantee; cohort c has 0 idle guaranteed GPUs to lend, and 32 of the 32 GPUs no queue is guaranteed are in use",
		},
		{
			name:    "unguaranteed GPUs are lent to anyone",
			queues:  []Queue{{Name: "a", GuaranteeGPUs: 32}, {Name: "b", GuaranteeGPUs: 32}},
			running: []Running{job("r1", "a", nodeNames(1, 4)...)},
			req:     Request{JobID: "j", Queue: "a", Ranks: 64},
		},
		{
			name:   "cohort lending stops at the cohort's idle guarantee",
			queues: []Queue{{Name: "a", Cohort: "c", GuaranteeGPUs: 64}, {Name: "b", Cohort: "c", GuaranteeGPUs: 64}},
			running: []Running{job("r1", "a", nodeNames(1, 8)...), job("r2", "b", nodeNames(9, 14)...),
				job("r3", "a", "node15")},
			req:        Request{JobID: "j", Queue: "a", Ranks: 16},
			wantReason: "queue a would use 88 GPUs, above its 64-GPU guarantee; cohort c has 8 idle guaranteed GPUs to lend, and 0 of the 0 GPUs no queue is guaranteed are in use",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := withRunning(t, small, tt.running)
			snap.Queues = tt.queues
			reqs := []Request{tt.req}
			plan := ScheduleWith(snap, reqs, Options{NoPreemption: true})
			checkPlan(t, snap, reqs, plan)
			pe := pendingOf(plan, "j")
			if tt.wantReason == "" {
				if pe != nil {
					t.Fatalf("pending: %s", pe.Reason)
				}
				return
			}
			if pe == nil || pe.Kind != PendingQuota {
				t.Fatalf("got %+v, want pending on quota", pe)
			}
			if diff := cmp.Diff(tt.wantReason, pe.Reason); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
		})
	}
}

// placedPerQueue sums the GPUs placed per queue.
func placedPerQueue(reqs []Request, plan Plan) map[string]int {
	q := map[string]string{}
	for _, r := range reqs {
		q[r.JobID] = r.Queue
	}
	out := map[string]int{}
	for _, pl := range plan.Placements {
		for _, s := range pl.Ranks {
			out[q[pl.JobID]] += len(s.GPUs)
		}
	}
	return out
}

func backlog(queue string, n, gpusPerRank int) []Request {
	var out []Request
	for i := range n {
		out = append(out, Request{JobID: fmt.Sprintf("%s-%03d", queue, i), Queue: queue, Ranks: 1, GPUsPerRank: gpusPerRank, Order: int64(i)})
	}
	return out
}

func TestFairShareOrder(t *testing.T) {
	tests := []struct {
		name    string
		queues  []Queue
		running []Running
		reqs    []Request
		want    map[string]int
	}{
		{
			name:    "the queue with the smaller share goes first",
			running: []Running{job("r1", "a", nodeNames(1, 8)...)},
			reqs:    append(backlog("a", 8, 8), backlog("b", 8, 8)...),
			want:    map[string]int{"b": 64},
		},
		{
			name:   "weights divide the cluster",
			queues: []Queue{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}},
			reqs:   append(backlog("a", 16, 8), backlog("b", 16, 8)...),
			want:   map[string]int{"a": 96, "b": 32},
		},
		{
			name:   "a queue within its guarantee goes before a smaller share",
			queues: []Queue{{Name: "z", GuaranteeGPUs: 64}},
			running: []Running{job("r1", "z", nodeNames(1, 4)...),
				job("r2", "other", nodeNames(5, 15)...)},
			reqs: append(backlog("a", 1, 8), backlog("z", 1, 8)...),
			want: map[string]int{"z": 8},
		},
		{
			name: "dominant resource: CPU-heavy usage counts",
			running: []Running{
				{JobID: "r1", Queue: "a", Ranks: []Slot{{Node: "node01", GPUs: []int{0}}}, CPUMillis: 500_000},
				{JobID: "r2", Queue: "b", Ranks: []Slot{{Node: "node02", GPUs: gpus(0, 8)}, {Node: "node03", GPUs: gpus(0, 8)}}},
			},
			reqs: append(backlog("a", 13, 8), backlog("b", 13, 8)...),
			// 1,000 CPUs in the cluster: a holds half of them, so its
			// dominant share (0.5) is above b's 16/128 until b has 64
			// GPUs; then their shares tie, and a, first by name, takes
			// the rest since its GPUs never outweigh its CPUs.
			want: map[string]int{"a": 56, "b": 48},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := withRunning(t, small, tt.running)
			snap.Queues = tt.queues
			for i := range snap.Nodes {
				snap.Nodes[i].CPUMillis = 1_000_000 / 16
			}
			plan := ScheduleWith(snap, tt.reqs, Options{NoPreemption: true})
			checkPlan(t, snap, tt.reqs, plan)
			if diff := cmp.Diff(tt.want, placedPerQueue(tt.reqs, plan)); diff != "" {
				t.Errorf("GPUs placed per queue (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPriorityWithinQueue(t *testing.T) {
	snap := withRunning(t, small, []Running{job("r", "a", nodeNames(1, 15)...)})
	reqs := []Request{
		{JobID: "low", Queue: "a", Ranks: 8, Order: 1},
		{JobID: "high", Queue: "a", Ranks: 8, Order: 2, Priority: 5},
	}
	plan := ScheduleWith(snap, reqs, Options{NoPreemption: true})
	checkPlan(t, snap, reqs, plan)
	if placementOf(plan, "high") == nil || placementOf(plan, "low") == nil && pendingOf(plan, "low").Ahead != 0 {
		t.Fatalf("placements %+v pending %+v", plan.Placements, plan.Pending)
	}
	if pe := pendingOf(plan, "low"); pe == nil {
		t.Errorf("low placed too; only 8 GPUs were free")
	}
}

// TestFairShareConverges runs many scheduling rounds with jobs of random
// sizes and lengths and checks that each queue's long-run share of busy
// GPUs approaches its weight.
func TestFairShareConverges(t *testing.T) {
	topo, err := topology.Uniform(topology.UniformSpec{Nodes: 8, GPUsPerNode: 8, NodesPerLeaf: 4, NVLink: true})
	if err != nil {
		t.Fatal(err)
	}
	queues := []Queue{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 5}}
	rng := rand.New(rand.NewPCG(1, 2))
	type live struct {
		r   Running
		end int
	}
	var running []live
	next := map[string]int{}
	usedSum := map[string]float64{}
	const rounds, warm = 800, 100
	for round := range rounds {
		running = slices.DeleteFunc(running, func(l live) bool { return l.end <= round })
		var reqs []Request
		for _, q := range queues {
			for range 16 { // every queue always has more work than fits
				id := fmt.Sprintf("%s-%d", q.Name, next[q.Name]+len(reqs))
				reqs = append(reqs, Request{JobID: id, Queue: q.Name, Ranks: []int{1, 1, 2, 4}[rng.IntN(4)], Order: int64(len(reqs))})
			}
		}
		runs := make([]Running, len(running))
		for i := range running {
			runs[i] = running[i].r
		}
		snap := withRunningOn(topo, runs)
		snap.Queues = queues
		plan := ScheduleWith(snap, reqs, Options{NoPreemption: true})
		byID := map[string]Request{}
		for _, r := range reqs {
			byID[r.JobID] = r
		}
		for _, pl := range plan.Placements {
			r := byID[pl.JobID]
			next[r.Queue]++
			running = append(running, live{
				r:   Running{JobID: fmt.Sprintf("%s/%d", pl.JobID, round), Queue: r.Queue, Ranks: pl.Ranks},
				end: round + 1 + rng.IntN(20),
			})
		}
		if round < warm {
			continue
		}
		for _, l := range running {
			for _, s := range l.r.Ranks {
				usedSum[l.r.Queue] += float64(len(s.GPUs))
			}
		}
	}
	total := 0.0
	for _, v := range usedSum {
		total += v
	}
	for _, q := range queues {
		got, want := usedSum[q.Name]/total, q.Weight/8
		t.Logf("queue %s share %.4f want %.4f", q.Name, got, want)
		if got < want-0.03 || got > want+0.03 {
			t.Errorf("queue %s: long-run share %.3f, want %.3f ± 0.03", q.Name, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
