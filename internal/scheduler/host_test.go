package scheduler

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

const gib = int64(1) << 30

// hostSpec is 4 nodes of 8 GPUs, 2 per leaf: node1..node4.
var hostSpec = topology.UniformSpec{Nodes: 4, GPUsPerNode: 8, NodesPerLeaf: 2, NVLink: true}

// withHost sets nodes' CPU (CPUs) and memory (GiB) as {capacity, used}.
func withHost(snap *Snapshot, cpu, mem map[string][2]int64) {
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if c, ok := cpu[n.Name]; ok {
			n.CPUMillis, n.CPUMillisUsed = c[0]*1000, c[1]*1000
		}
		if m, ok := mem[n.Name]; ok {
			n.MemoryBytes, n.MemoryBytesUsed = m[0]*gib, m[1]*gib
		}
	}
}

// allNodes gives every node of hostSpec the same {capacity, used}.
func allNodes(v [2]int64) map[string][2]int64 {
	return map[string][2]int64{"node1": v, "node2": v, "node3": v, "node4": v}
}

func TestHostFit(t *testing.T) {
	tests := []struct {
		name     string
		busy     map[string][]int
		cpu, mem map[string][2]int64
		running  []Running
		opts     Options
		req      Request

		wantRanks  map[string]int // node → ranks placed there
		wantKind   PendingKind
		wantReason string
		wantVictim string
	}{
		{
			name:      "a rank goes to the node with the CPU it asks for",
			cpu:       map[string][2]int64{"node1": {64, 60}, "node2": {64, 0}, "node3": {64, 56}, "node4": {64, 56}},
			req:       Request{JobID: "j", Ranks: 1, GPUsPerRank: 4, CPUMillisPerRank: 16000},
			wantRanks: map[string]int{"node2": 1},
		},
		{
			name:      "CPU, not GPUs, decides how many ranks share a node",
			cpu:       allNodes([2]int64{32, 0}),
			req:       Request{JobID: "j", Ranks: 4, CPUMillisPerRank: 16000},
			wantRanks: map[string]int{"node1": 2, "node2": 2},
		},
		{
			name:      "memory bounds ranks as CPU does",
			mem:       map[string][2]int64{"node1": {256, 200}, "node2": {256, 200}, "node3": {256, 0}, "node4": {256, 200}},
			req:       Request{JobID: "j", Ranks: 1, MemoryBytesPerRank: 64 * gib},
			wantRanks: map[string]int{"node3": 1},
		},
		{
			name:      "a node whose capacity is unknown does not limit",
			cpu:       map[string][2]int64{"node1": {8, 8}, "node2": {8, 8}, "node3": {8, 8}},
			req:       Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 1000000},
			wantRanks: map[string]int{"node4": 1},
		},
		{
			name:      "ranks per node need a node's worth of CPU each",
			cpu:       map[string][2]int64{"node1": {64, 40}, "node2": {64, 0}, "node3": {64, 40}, "node4": {64, 0}},
			req:       Request{JobID: "j", Ranks: 4, RanksPerNode: 2, CPUMillisPerRank: 16000},
			wantRanks: map[string]int{"node2": 2, "node4": 2},
		},
		{
			name:       "too little CPU left on the nodes with free GPUs",
			cpu:        allNodes([2]int64{64, 52}),
			req:        Request{JobID: "j", Ranks: 1, GPUsPerRank: 2, CPUMillisPerRank: 16000},
			wantKind:   PendingResources,
			wantReason: "needs 2 GPUs on one node, 16 CPUs per rank; the best node with free GPUs has 12 CPUs free",
		},
		{
			name:       "a node with CPU but no free GPU does not count",
			busy:       map[string][]int{"node1": gpus(0, 8)},
			cpu:        map[string][2]int64{"node1": {64, 0}, "node2": {64, 60}, "node3": {64, 60}, "node4": {64, 60}},
			req:        Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 8000},
			wantKind:   PendingResources,
			wantReason: "needs 1 GPU on one node, 8 CPUs per rank; the best node with free GPUs has 4 CPUs free",
		},
		{
			name:       "more CPU than any node has",
			cpu:        allNodes([2]int64{12, 0}),
			req:        Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 16000},
			wantKind:   PendingResources,
			wantReason: "needs 1 GPU on one node, 16 CPUs per rank; the largest node has 12 CPUs",
		},
		{
			name:       "too little memory",
			mem:        allNodes([2]int64{256, 208}),
			req:        Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 4000, MemoryBytesPerRank: 64 * gib},
			wantKind:   PendingResources,
			wantReason: "needs 1 GPU on one node, 4 CPUs and 64 GiB of memory per rank; the best node with free GPUs has 48 GiB of memory free",
		},
		{
			name:       "enough for some ranks, not the gang",
			cpu:        allNodes([2]int64{64, 52}),
			req:        Request{JobID: "j", Ranks: 8, RanksPerNode: 2, CPUMillisPerRank: 8000},
			wantKind:   PendingResources,
			wantReason: "needs 8 GPUs as 4 nodes with 2 free GPUs each, 8 CPUs per rank; nodes with free GPUs have the CPU and memory for only part of it (4 nodes have room for a rank)",
		},
		{
			name:       "GPUs, not CPU, are what is missing",
			busy:       map[string][]int{"node1": gpus(0, 8), "node2": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 7)},
			cpu:        allNodes([2]int64{64, 0}),
			req:        Request{JobID: "j", Ranks: 2, CPUMillisPerRank: 1000},
			wantKind:   PendingCapacity,
			wantReason: "needs 2 GPUs (2 ranks × 1), 1 CPU per rank; 1 free in the cluster",
		},
		{
			name:       "a time-sliced rank needs CPU too",
			cpu:        allNodes([2]int64{8, 6}),
			req:        Request{JobID: "j", Ranks: 1, GPUMilli: 500, CPUMillisPerRank: 4000},
			wantKind:   PendingResources,
			wantReason: "needs 1 rank of 500 milli-GPUs, 4 CPUs per rank; the best node with free GPUs has 2 CPUs free",
		},
		{
			name:      "host-only ranks take no GPU",
			busy:      map[string][]int{"node1": gpus(0, 8), "node2": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			cpu:       map[string][2]int64{"node1": {64, 60}, "node2": {64, 0}, "node3": {64, 60}, "node4": {64, 60}},
			req:       Request{JobID: "j", Ranks: 1, HostOnly: true, CPUMillisPerRank: 16000},
			wantRanks: map[string]int{"node2": 1},
		},
		{
			name:       "a host-only request without CPU or memory is invalid",
			req:        Request{JobID: "j", Ranks: 1, HostOnly: true},
			wantKind:   PendingInvalid,
			wantReason: "a host-only request asks for no CPU and no memory",
		},
		{
			name: "preemption frees the victim's CPU with its GPUs",
			busy: map[string][]int{"node2": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			cpu:  map[string][2]int64{"node1": {32, 32}, "node2": {32, 0}, "node3": {32, 0}, "node4": {32, 0}},
			running: []Running{
				{JobID: "victim", Queue: "q", Priority: 0, Preemptible: true, StartedAt: 1,
					Ranks: []Slot{{Node: "node1", GPUs: gpus(0, 2), CPUMillis: 32000}}},
			},
			req:        Request{JobID: "j", Queue: "q", Priority: 5, Ranks: 1, GPUsPerRank: 4, CPUMillisPerRank: 8000},
			wantKind:   PendingPreempting,
			wantVictim: "victim",
		},
		{
			name: "a backfill reservation waits for the CPU to free",
			cpu:  allNodes([2]int64{32, 32}),
			running: []Running{
				{JobID: "r1", Ranks: []Slot{{Node: "node1", GPUs: []int{0}, CPUMillis: 32000}}, EstimatedEnd: 3 * hour},
				{JobID: "r2", Ranks: []Slot{{Node: "node2", GPUs: []int{0}, CPUMillis: 32000}}, EstimatedEnd: 2 * hour},
				{JobID: "r3", Ranks: []Slot{{Node: "node3", GPUs: []int{0}, CPUMillis: 32000}}, EstimatedEnd: 4 * hour},
				{JobID: "r4", Ranks: []Slot{{Node: "node4", GPUs: []int{0}, CPUMillis: 32000}}, EstimatedEnd: 5 * hour},
			},
			opts:     Options{Mode: Backfill, NoPreemption: true},
			req:      Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 16000},
			wantKind: PendingReserved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, snap := testCluster(t, hostSpec, tt.busy)
			if tt.running != nil {
				topo, _ := topology.Uniform(hostSpec)
				snap = withRunningOn(topo, tt.running)
				for i := range snap.Nodes {
					n := &snap.Nodes[i]
					for _, g := range tt.busy[n.Name] {
						n.Free = removeInt(n.Free, g)
					}
				}
			}
			withHost(&snap, tt.cpu, tt.mem)
			reqs := []Request{tt.req}
			plan := ScheduleWith(snap, reqs, tt.opts)
			checkPlan(t, snap, reqs, plan)
			if tt.wantRanks != nil {
				pl := placementOf(plan, "j")
				if pl == nil {
					t.Fatalf("not placed: %+v", plan.Pending)
				}
				got := map[string]int{}
				for _, s := range pl.Ranks {
					got[s.Node]++
					if s.CPUMillis != tt.req.CPUMillisPerRank || s.MemoryBytes != tt.req.MemoryBytesPerRank {
						t.Errorf("rank on %s holds %d CPU millis and %d bytes, want the request's", s.Node, s.CPUMillis, s.MemoryBytes)
					}
				}
				if d := cmp.Diff(tt.wantRanks, got); d != "" {
					t.Errorf("ranks per node (-want +got):\n%s", d)
				}
				return
			}
			pe := pendingOf(plan, "j")
			if pe == nil {
				t.Fatalf("placed, want pending %s", tt.wantKind)
			}
			if pe.Kind != tt.wantKind {
				t.Errorf("kind %s, want %s (%s)", pe.Kind, tt.wantKind, pe.Reason)
			}
			if tt.wantReason != "" && pe.Reason != tt.wantReason {
				t.Errorf("reason\n got %q\nwant %q", pe.Reason, tt.wantReason)
			}
			if tt.wantVictim != "" && (len(plan.Preemptions) != 1 || plan.Preemptions[0].JobID != tt.wantVictim) {
				t.Errorf("preemptions %+v, want %s", plan.Preemptions, tt.wantVictim)
			}
			if tt.wantKind == PendingReserved {
				if len(plan.Reservations) != 1 || plan.Reservations[0].Start != 2*hour || !cmp.Equal(plan.Reservations[0].Nodes, []string{"node2"}) {
					t.Errorf("reservations %+v, want node2 at 2h, when r2's CPU frees", plan.Reservations)
				}
			}
		})
	}
}

// TestHostBackfillLeavesReservedCPU checks that a gang started by backfill
// does not take the CPU a reservation counts on: the reserved node's free
// GPUs stay usable only by gangs that leave its CPU alone.
func TestHostBackfillLeavesReservedCPU(t *testing.T) {
	topo, _ := topology.Uniform(topology.UniformSpec{Nodes: 2, GPUsPerNode: 8, NVLink: true})
	snap := withRunningOn(topo, []Running{
		// node1: 4 GPUs and 24 of 32 CPUs held until 1 h.
		{JobID: "r1", Ranks: []Slot{{Node: "node1", GPUs: gpus(0, 4), CPUMillis: 24000}}, EstimatedEnd: hour},
		// node2: every GPU held for 10 h.
		{JobID: "r2", Ranks: []Slot{{Node: "node2", GPUs: gpus(0, 8)}}, EstimatedEnd: 10 * hour},
	})
	withHost(&snap, map[string][2]int64{"node1": {32, 24}, "node2": {32, 0}}, nil)
	reqs := []Request{
		// The head needs 2 GPUs and all 32 CPUs of node1: reserved for 1 h.
		{JobID: "head", Ranks: 1, GPUsPerRank: 2, CPUMillisPerRank: 32000, Order: 0},
		// It would fit node1's 4 free GPUs and 8 free CPUs now, and runs
		// past the reservation: it must wait, for the CPU, not the GPUs.
		{JobID: "late", Ranks: 1, GPUsPerRank: 1, CPUMillisPerRank: 8000, Order: 1, EstimatedDuration: 2 * time.Hour},
		// It ends before the reservation starts: it may start.
		{JobID: "short", Ranks: 1, GPUsPerRank: 1, CPUMillisPerRank: 8000, Order: 2, EstimatedDuration: 30 * time.Minute},
	}
	plan := ScheduleWith(snap, reqs, Options{Mode: Backfill, NoPreemption: true})
	checkPlan(t, snap, reqs, plan)
	if pe := pendingOf(plan, "head"); pe == nil || pe.Kind != PendingReserved {
		t.Fatalf("head: %+v, want reserved", pe)
	}
	if pe := pendingOf(plan, "late"); pe == nil || pe.Kind != PendingBackfill {
		t.Errorf("late: %+v, want held back by the reservation", pe)
	}
	if pl := placementOf(plan, "short"); pl == nil || !pl.Backfilled {
		t.Errorf("short: %+v, want backfilled", pl)
	}
}

func TestFmtHost(t *testing.T) {
	for in, want := range map[int64]string{1000: "1 CPU", 16000: "16 CPUs", 500: "0.5 CPUs", 1250: "1.25 CPUs"} {
		if got := fmtCPU(in); got != want {
			t.Errorf("fmtCPU(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{64 * gib: "64 GiB", 512 << 20: "512 MiB", 3 * gib / 2: "1.5 GiB", 100: "100 B", 1 << 40: "1 TiB"} {
		if got := fmtBytes(in); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
