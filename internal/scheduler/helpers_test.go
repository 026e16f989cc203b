package scheduler

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gangway/gangway/internal/topology"
)

// testCluster returns a uniform topology and a snapshot with every GPU
// free except those in busy (node name → GPU indices).
func testCluster(t testing.TB, spec topology.UniformSpec, busy map[string][]int) (*topology.Topology, Snapshot) {
	t.Helper()
	topo, err := topology.Uniform(spec)
	if err != nil {
		t.Fatal(err)
	}
	return topo, snapshotOf(topo, busy)
}

func snapshotOf(topo *topology.Topology, busy map[string][]int) Snapshot {
	snap := Snapshot{Topology: topo}
	for n := range topo.NumNodes() {
		name := topo.NodeName(topology.NodeID(n))
		total := topo.GPUs(topology.NodeID(n))
		var free []int
		for g := range total {
			if !slices.Contains(busy[name], g) {
				free = append(free, g)
			}
		}
		snap.Nodes = append(snap.Nodes, Node{Name: name, Total: total, Free: free})
	}
	return snap
}

// small is a 16-node cluster: 8 GPUs and 8 rails per node, 4 nodes per
// leaf, 2 leaves per spine (2 spines).
var small = topology.UniformSpec{Nodes: 16, GPUsPerNode: 8, NodesPerLeaf: 4, LeavesPerSpine: 2, Rails: 8, NVLink: true}

func gpus(from, to int) []int {
	var out []int
	for g := from; g < to; g++ {
		out = append(out, g)
	}
	return out
}

// checkPlan asserts what every plan must satisfy: each request is decided
// once; a placed gang has all its ranks with the GPUs it asked for; no GPU
// is given twice or given while busy; fractional GPUs are not
// overcommitted; pending gangs have reasons; victims are preemptible
// running jobs.
func checkPlan(t testing.TB, snap Snapshot, reqs []Request, plan Plan) {
	t.Helper()
	seen := map[string]int{}
	for _, pl := range plan.Placements {
		seen[pl.JobID]++
	}
	for _, pe := range plan.Pending {
		seen[pe.JobID]++
		if pe.Reason == "" {
			t.Errorf("pending %s has no reason", pe.JobID)
		}
	}
	byID := map[string]*Request{}
	for i := range reqs {
		byID[reqs[i].JobID] = &reqs[i]
		if seen[reqs[i].JobID] != 1 {
			t.Errorf("request %s decided %d times, want once", reqs[i].JobID, seen[reqs[i].JobID])
		}
	}
	free := map[string]map[int]bool{}
	milli := map[string]int{}
	mig := map[string]uint8{}
	// CPU and memory left per node; absent where not limited.
	cpuLeft, memLeft := map[string]int64{}, map[string]int64{}
	labels := map[string]map[string]string{}
	for _, n := range snap.Nodes {
		labels[n.Name] = n.Labels
		if n.CPUMillis > 0 {
			cpuLeft[n.Name] = n.CPUMillis - n.CPUMillisUsed
		}
		if n.MemoryBytes > 0 {
			memLeft[n.Name] = n.MemoryBytes - n.MemoryBytesUsed
		}
		free[n.Name] = map[int]bool{}
		for _, g := range n.Free {
			free[n.Name][g] = true
		}
		for _, s := range n.Shared {
			key := fmt.Sprintf("%s/%d", n.Name, s.Index)
			milli[key] = s.UsedMilli
			mig[key] = s.MIGUsed
		}
	}
	for _, pl := range plan.Placements {
		r := byID[pl.JobID]
		if r == nil {
			t.Errorf("placement for unknown job %s", pl.JobID)
			continue
		}
		if len(pl.Ranks) != r.Ranks {
			t.Errorf("%s: %d ranks placed, want %d (gang all-or-nothing)", pl.JobID, len(pl.Ranks), r.Ranks)
		}
		perNode := map[string]int{}
		for i, s := range pl.Ranks {
			perNode[s.Node]++
			if s.CPUMillis != r.CPUMillisPerRank || s.MemoryBytes != r.MemoryBytesPerRank {
				t.Errorf("%s rank %d holds %d CPU millis, %d bytes; it asked for %d, %d", pl.JobID, i, s.CPUMillis, s.MemoryBytes, r.CPUMillisPerRank, r.MemoryBytesPerRank)
			}
			if left, ok := cpuLeft[s.Node]; ok && s.CPUMillis > 0 {
				if cpuLeft[s.Node] = left - s.CPUMillis; cpuLeft[s.Node] < 0 {
					t.Errorf("%s rank %d: node %s has no CPU left for it (%d millis short)", pl.JobID, i, s.Node, -cpuLeft[s.Node])
				}
			}
			if left, ok := memLeft[s.Node]; ok && s.MemoryBytes > 0 {
				if memLeft[s.Node] = left - s.MemoryBytes; memLeft[s.Node] < 0 {
					t.Errorf("%s rank %d: node %s has no memory left for it", pl.JobID, i, s.Node)
				}
			}
			for k, vs := range r.NodeSelectorIn {
				if !slices.Contains(vs, labels[s.Node][k]) {
					t.Errorf("%s rank %d: node %s has %s=%q, not one of %q", pl.JobID, i, s.Node, k, labels[s.Node][k], vs)
				}
			}
			if r.HostOnly {
				if len(s.GPUs) != 0 || s.Milli != 0 || s.MIGProfile != "" {
					t.Errorf("%s rank %d: host-only rank got GPUs %v", pl.JobID, i, s.GPUs)
				}
				continue
			}
			if r.GPUMilli > 0 || r.MIGProfile != "" {
				if len(s.GPUs) != 1 {
					t.Errorf("%s rank %d: fractional rank on %d GPUs", pl.JobID, i, len(s.GPUs))
					continue
				}
				key := fmt.Sprintf("%s/%d", s.Node, s.GPUs[0])
				if free[s.Node][s.GPUs[0]] {
					delete(free[s.Node], s.GPUs[0])
					milli[key], mig[key] = 0, 0
				} else if _, shared := milli[key]; !shared {
					t.Errorf("%s rank %d: GPU %s is neither free nor shared", pl.JobID, i, key)
				}
				if r.GPUMilli > 0 {
					if mig[key] != 0 {
						t.Errorf("%s rank %d: time-slice on MIG GPU %s", pl.JobID, i, key)
					}
					milli[key] += s.Milli
					if milli[key] > 1000 {
						t.Errorf("GPU %s overcommitted: %d milli", key, milli[key])
					}
				} else {
					shape, err := ParseMIGProfile(s.MIGProfile)
					if err != nil {
						t.Errorf("%s rank %d: %v", pl.JobID, i, err)
						continue
					}
					b := shape.bits(s.MIGStart)
					if shape.Starts&(1<<uint(s.MIGStart)) == 0 || mig[key]&b != 0 || milli[key] != 0 {
						t.Errorf("%s rank %d: MIG %s at %d does not fit on %s (used %08b)", pl.JobID, i, s.MIGProfile, s.MIGStart, key, mig[key])
					}
					mig[key] |= b
				}
				continue
			}
			want := max(1, r.GPUsPerRank)
			if len(s.GPUs) != want {
				t.Errorf("%s rank %d: %d GPUs, want %d", pl.JobID, i, len(s.GPUs), want)
			}
			for _, g := range s.GPUs {
				if !free[s.Node][g] {
					t.Errorf("%s rank %d: GPU %s/%d is not free or given twice", pl.JobID, i, s.Node, g)
				}
				delete(free[s.Node], g)
			}
		}
		if r.RanksPerNode > 0 {
			for n, k := range perNode {
				if k != r.RanksPerNode {
					t.Errorf("%s: %d ranks on %s, want %d", pl.JobID, k, n, r.RanksPerNode)
				}
			}
		}
		if r.NodeSelector != nil {
			for n := range perNode {
				for _, sn := range snap.Nodes {
					if sn.Name == n && !topology.Selects(r.NodeSelector, r.NodeSelectorIn, sn.Labels) {
						t.Errorf("%s: node %s does not match the selector", pl.JobID, n)
					}
				}
			}
		}
	}
	running := map[string]*Running{}
	for i := range snap.Running {
		running[snap.Running[i].JobID] = &snap.Running[i]
	}
	victims := map[string]bool{}
	for _, v := range plan.Preemptions {
		r := running[v.JobID]
		switch {
		case r == nil:
			t.Errorf("victim %s is not running", v.JobID)
		case !r.Preemptible || r.Stopping:
			t.Errorf("victim %s is not preemptible or already stopping", v.JobID)
		case victims[v.JobID]:
			t.Errorf("victim %s chosen twice", v.JobID)
		}
		victims[v.JobID] = true
	}
}

// placementOf returns the placement of job, or nil.
func placementOf(plan Plan, job string) *Placement {
	for i := range plan.Placements {
		if plan.Placements[i].JobID == job {
			return &plan.Placements[i]
		}
	}
	return nil
}

// pendingOf returns the pending entry of job, or nil.
func pendingOf(plan Plan, job string) *Pending {
	for i := range plan.Pending {
		if plan.Pending[i].JobID == job {
			return &plan.Pending[i]
		}
	}
	return nil
}

// nodesOf lists a placement's distinct nodes in order.
func nodesOf(pl *Placement) []string {
	var out []string
	for _, s := range pl.Ranks {
		if !slices.Contains(out, s.Node) {
			out = append(out, s.Node)
		}
	}
	slices.Sort(out)
	return out
}

// withRunning returns a snapshot of spec where the running jobs hold their
// GPUs and every other GPU is free.
func withRunning(t testing.TB, spec topology.UniformSpec, running []Running) Snapshot {
	t.Helper()
	topo, err := topology.Uniform(spec)
	if err != nil {
		t.Fatal(err)
	}
	return withRunningOn(topo, running)
}

// withRunningOn is withRunning on a topology built once.
func withRunningOn(topo *topology.Topology, running []Running) Snapshot {
	busy := map[string][]int{}
	for _, r := range running {
		for _, s := range r.Ranks {
			busy[s.Node] = append(busy[s.Node], s.GPUs...)
		}
	}
	snap := snapshotOf(topo, busy)
	snap.Running = running
	return snap
}

// job returns a running job with whole nodes' GPUs (8 each) on nodes.
func job(id, queue string, nodes ...string) Running {
	r := Running{JobID: id, Queue: queue, Preemptible: true}
	for _, n := range nodes {
		r.Ranks = append(r.Ranks, Slot{Node: n, GPUs: gpus(0, 8)})
	}
	return r
}

// jobGPUs returns a running job with the given GPUs of one node.
func jobGPUs(id, queue, node string, g ...int) Running {
	return Running{JobID: id, Queue: queue, Preemptible: true, Ranks: []Slot{{Node: node, GPUs: g}}}
}

func nodeNames(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("node%02d", i))
	}
	return out
}
