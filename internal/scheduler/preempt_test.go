package scheduler

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

const hour = int64(time.Hour)

// with sets a running job's priority and times (checkpoint age in
// minutes before now; 0 for none).
func with(r Running, prio int, ckptAgoMin int64, preemptible bool) Running {
	r.Priority = prio
	r.StartedAt = 1 // long ago
	if ckptAgoMin > 0 {
		r.LastCheckpoint = 10*hour - ckptAgoMin*int64(time.Minute)
	}
	r.Preemptible = preemptible
	return r
}

// fill returns non-preemptible jobs on every node of names.
func fill(queue string, names ...string) []Running {
	var out []Running
	for _, n := range names {
		out = append(out, with(job("fill-"+n, queue, n), 100, 0, false))
	}
	return out
}

func TestPreemption(t *testing.T) {
	tests := []struct {
		name    string
		queues  []Queue
		running []Running
		reqs    []Request
		opts    Options
		// wantVictims lists the victims' job ids, sorted.
		wantVictims []string
		// wantKind is the kind of the first request's pending entry.
		wantKind   PendingKind
		wantReason string // substring of the first request's reason
		check      func(t *testing.T, plan Plan)
	}{
		{
			name: "one big victim beats eight small ones",
			running: append(append(fill("q", nodeNames(3, 16)...),
				with(job("big", "q", "node01"), 0, 30, true)),
				smalls("q", "node02", 8)...),
			reqs:        []Request{{JobID: "p", Queue: "q", Ranks: 8, Priority: 10}},
			wantVictims: []string{"big"},
			wantKind:    PendingPreempting,
			wantReason:  "needs 8 GPUs (8 ranks × 1); preempting 1 job (big) in node node01 to free 8 GPUs; it starts when they have stopped",
		},
		{
			name: "the victim that loses least work since its checkpoint",
			running: append(fill("q", nodeNames(3, 16)...),
				with(job("old-ckpt", "q", "node01"), 0, 60, true),
				with(job("new-ckpt", "q", "node02"), 0, 5, true)),
			reqs:        []Request{{JobID: "p", Queue: "q", Ranks: 1, GPUsPerRank: 8, Priority: 10}},
			wantVictims: []string{"new-ckpt"},
			check: func(t *testing.T, plan Plan) {
				if got, want := plan.Preemptions[0].LostWork, 40*time.Minute; got != want {
					t.Errorf("LostWork = %s, want %s (5 minutes × 8 GPUs)", got, want)
				}
			},
		},
		{
			name: "victims where the gang fits, not just anywhere",
			running: append(fill("q", append(nodeNames(3, 8), nodeNames(10, 16)...)...),
				with(job("leaf1", "q", "node02"), 0, 50, true),
				with(job("leaf3", "q", "node09"), 0, 1, true)),
			reqs:        []Request{{JobID: "p", Queue: "q", Ranks: 16, Priority: 10, Required: topology.LevelLeaf}},
			wantVictims: []string{"leaf1"},
		},
		{
			name:   "reclaim a guarantee from a borrower",
			queues: []Queue{{Name: "a", GuaranteeGPUs: 64}},
			running: []Running{
				with(job("b1", "b", nodeNames(1, 4)...), 50, 10, false),
				with(job("b2", "b", nodeNames(5, 8)...), 50, 10, false),
				with(job("b3", "b", "node09"), 50, 20, true),
				with(job("b4", "b", "node10"), 50, 10, true),
				with(job("b5", "b", nodeNames(11, 16)...), 50, 10, false),
			},
			reqs:        []Request{{JobID: "p", Queue: "a", Ranks: 2, GPUsPerRank: 8}},
			wantVictims: []string{"b3", "b4"},
			wantReason:  "preempting 2 jobs (b3, b4) in leaf leaf3",
			check: func(t *testing.T, plan Plan) {
				for _, v := range plan.Preemptions {
					if !strings.Contains(v.Reason, "queue a gets its guaranteed GPUs") || v.For != "p" {
						t.Errorf("victim %s: reason %q for %s", v.JobID, v.Reason, v.For)
					}
				}
			},
		},
		{
			name:   "reclaim idle guarantee lent to a queue in no cohort",
			queues: []Queue{{Name: "research", GuaranteeGPUs: 128}, {Name: "default", BorrowIdle: true}},
			running: append(fill("default", nodeNames(3, 16)...),
				with(job("d1", "default", "node01"), 50, 10, true),
				with(job("d2", "default", "node02"), 50, 20, true)),
			reqs:        []Request{{JobID: "p", Queue: "research", Ranks: 8}},
			wantVictims: []string{"d1"},
			wantReason:  "preempting 1 job (d1) in node node01",
		},
		{
			name:   "reclaim spares queues within their guarantee",
			queues: []Queue{{Name: "a", GuaranteeGPUs: 32}, {Name: "b", GuaranteeGPUs: 32}, {Name: "c", GuaranteeGPUs: 64}},
			running: []Running{
				with(job("b1", "b", nodeNames(1, 4)...), 0, 60, true),
				with(job("b2", "b", nodeNames(5, 8)...), 0, 60, true),
				with(job("c1", "c", nodeNames(9, 12)...), 0, 1, true),
				with(job("c2", "c", nodeNames(13, 16)...), 0, 1, true),
			},
			reqs:        []Request{{JobID: "p", Queue: "a", Ranks: 16}},
			wantVictims: []string{"b1"},
		},
		{
			name:     "no preemption at equal priority",
			running:  append(fill("q", nodeNames(2, 16)...), with(job("v", "q", "node01"), 5, 10, true)),
			reqs:     []Request{{JobID: "p", Queue: "q", Ranks: 8, Priority: 5}},
			wantKind: PendingCapacity,
		},
		{
			name:       "a borrower does not preempt; its quota says why",
			queues:     []Queue{{Name: "a", GuaranteeGPUs: 8}},
			running:    append(fill("b", nodeNames(2, 16)...), with(job("a1", "a", "node01"), 0, 10, true)),
			reqs:       []Request{{JobID: "p", Queue: "a", Ranks: 8}},
			wantKind:   PendingQuota,
			wantReason: "queue a would use 16 GPUs, above its 8-GPU guarantee",
		},
		{
			name: "jobs already stopping count as free",
			running: append(fill("q", nodeNames(2, 16)...),
				func() Running { r := with(job("s", "q", "node01"), 0, 10, true); r.Stopping = true; return r }()),
			reqs:       []Request{{JobID: "p", Queue: "q", Ranks: 8, Priority: 10}},
			wantKind:   PendingPreempting,
			wantReason: "it waits for stopping jobs to free their GPUs",
		},
		{
			name: "the slot's free GPUs are held for the preemptor",
			running: append(fill("q", append(nodeNames(3, 4), nodeNames(5, 16)...)...),
				with(job("v", "q", "node02"), 0, 10, true)),
			reqs: []Request{
				{JobID: "p", Queue: "q", Ranks: 16, Priority: 10},
				{JobID: "small", Queue: "q", Ranks: 1, Order: 1},
			},
			wantVictims: []string{"v"},
			check: func(t *testing.T, plan Plan) {
				if pl := placementOf(plan, "small"); pl != nil {
					t.Errorf("small took %s, which p needs", pl.Ranks[0].Node)
				}
			},
		},
		{
			name: "searches per pass are bounded",
			running: append(fill("q", nodeNames(3, 16)...),
				with(job("v1", "q", "node01"), 0, 10, true), with(job("v2", "q", "node02"), 0, 10, true)),
			reqs: []Request{
				{JobID: "p1", Queue: "q", Ranks: 8, Priority: 10},
				{JobID: "p2", Queue: "q", Ranks: 8, Priority: 10, Order: 1},
			},
			opts:        Options{MaxPreemptionSearches: 1},
			wantVictims: []string{"v1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := withRunning(t, small, tt.running)
			snap.Now = 10 * hour
			snap.Queues = tt.queues
			plan := ScheduleWith(snap, tt.reqs, tt.opts)
			checkPlan(t, snap, tt.reqs, plan)
			var victims []string
			for _, v := range plan.Preemptions {
				victims = append(victims, v.JobID)
			}
			slices.Sort(victims)
			if diff := cmp.Diff(tt.wantVictims, victims); diff != "" {
				t.Errorf("victims (-want +got):\n%s\npending: %+v", diff, plan.Pending)
			}
			first := tt.reqs[0].JobID
			pe := pendingOf(plan, first)
			if pe == nil {
				t.Fatalf("%s placed; want it pending", first)
			}
			want := tt.wantKind
			if want == 0 {
				want = PendingPreempting
			}
			if pe.Kind != want {
				t.Errorf("kind %s, want %s (%s)", pe.Kind, want, pe.Reason)
			}
			if !strings.Contains(pe.Reason, tt.wantReason) {
				t.Errorf("reason %q does not contain %q", pe.Reason, tt.wantReason)
			}
			if tt.check != nil {
				tt.check(t, plan)
			}
		})
	}
}

// smalls returns n one-GPU preemptible jobs on node.
func smalls(queue, node string, n int) []Running {
	var out []Running
	for g := range n {
		out = append(out, with(jobGPUs(node+"-"+string(rune('a'+g)), queue, node, g), 0, 1, true))
	}
	return out
}

// TestPreemptionIsMinimal compares, on random full clusters, the number of
// victims chosen for a one-node gang with the fewest found by trying every
// subset of the candidates.
func TestPreemptionIsMinimal(t *testing.T) {
	spec := topology.UniformSpec{Nodes: 4, GPUsPerNode: 8, NodesPerLeaf: 4, NVLink: true}
	topo, err := topology.Uniform(spec)
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var running []Running
		var cands []int
		for n := range 4 {
			node := topo.NodeName(topology.NodeID(n))
			for g := 0; g < 8; {
				size := min(8-g, 1+rng.IntN(4))
				r := with(jobGPUs(fmt.Sprintf("%s-%d", node, g), "q", node, gpus(g, g+size)...), 0, int64(1+rng.IntN(60)), rng.IntN(10) < 7)
				if r.Preemptible {
					cands = append(cands, len(running))
				}
				running = append(running, r)
				g += size
			}
		}
		snap := withRunningOn(topo, running)
		snap.Now = 10 * hour
		req := Request{JobID: "p", Queue: "q", Ranks: 1, GPUsPerRank: 1 + rng.IntN(8), Priority: 10}
		plan := ScheduleWith(snap, []Request{req}, Options{})
		checkPlan(t, snap, []Request{req}, plan)

		best := -1
		for mask := 0; mask < 1<<len(cands); mask++ {
			k := bits.OnesCount(uint(mask))
			if best >= 0 && k >= best {
				continue
			}
			var keep []Running
			for i, r := range running {
				if j := slices.Index(cands, i); j < 0 || mask&(1<<j) == 0 {
					keep = append(keep, r)
				}
			}
			p2 := ScheduleWith(withRunningOn(topo, keep), []Request{req}, Options{NoPreemption: true})
			if placementOf(p2, "p") != nil {
				best = k
			}
		}
		if best < 0 {
			if len(plan.Preemptions) != 0 {
				t.Errorf("seed %d: %d victims for a gang that cannot fit", seed, len(plan.Preemptions))
			}
			continue
		}
		if len(plan.Preemptions) != best {
			t.Errorf("seed %d: %d victims for %d GPUs, the fewest is %d (%+v)", seed, len(plan.Preemptions), req.GPUsPerRank, best, plan.Preemptions)
		}
	}
}
