package scheduler

import (
	"fmt"
	"testing"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

func TestParseMIGProfile(t *testing.T) {
	tests := []struct {
		in      string
		want    MIGShape
		wantErr string
	}{
		{in: "1g.10gb", want: MIGShape{Profile: "1g.10gb", ComputeSlices: 1, Width: 1, Starts: 0b0111_1111}},
		{in: "2g.20gb", want: MIGShape{Profile: "2g.20gb", ComputeSlices: 2, Width: 2, Starts: 0b0001_0101}},
		{in: "3g.40gb", want: MIGShape{Profile: "3g.40gb", ComputeSlices: 3, Width: 4, Starts: 0b0001_0001}},
		{in: "4g.40gb", want: MIGShape{Profile: "4g.40gb", ComputeSlices: 4, Width: 4, Starts: 1}},
		{in: "7g.80gb", want: MIGShape{Profile: "7g.80gb", ComputeSlices: 7, Width: 8, Starts: 1}},
		{in: "1g.10gb+me", want: MIGShape{Profile: "1g.10gb+me", ComputeSlices: 1, Width: 1, Starts: 0b0111_1111}},
		{in: "5g.40gb", wantErr: `MIG profile "5g.40gb": no profile has 5 compute slices; valid are 1, 2, 3, 4 and 7 (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "g.10gb", wantErr: `MIG profile "g.10gb": no "g." after the compute slices (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "1g.10", wantErr: `MIG profile "1g.10": memory does not end in "gb" (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "1g.0gb", wantErr: `MIG profile "1g.0gb": memory "0gb" is not a positive number of GB (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "xg.10gb", wantErr: `MIG profile "xg.10gb": compute slices "x" are not a positive number (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "1g.10gb+foo", wantErr: `MIG profile "1g.10gb+foo": unknown suffix "+foo" (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
		{in: "", wantErr: `MIG profile "": no "g." after the compute slices (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMIGProfile(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseMIGProfile(f *testing.F) {
	for _, s := range []string{"1g.10gb", "3g.40gb+me", "7g.80gb", "2g.", "g.gb", "+me", "99g.1gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMIGProfile(s)
		if err != nil {
			return
		}
		if m.Profile != s || m.Width < 1 || m.Width > 8 || m.Starts == 0 {
			t.Fatalf("%q parsed to %+v", s, m)
		}
		for st := range 8 {
			if m.Starts&(1<<uint(st)) != 0 && st+m.Width > 8 {
				t.Fatalf("%q: start %d + width %d leaves the GPU", s, st, m.Width)
			}
		}
	})
}

// TestFractionalPacking checks the plain best-fit rules for fractional
// ranks (the BestFit strategy, and MIG under any strategy); the Topology
// strategy's fragmentation-aware choice is TestFragmentation*.
func TestFractionalPacking(t *testing.T) {
	spec := topology.UniformSpec{Nodes: 4, GPUsPerNode: 8, NodesPerLeaf: 2, NVLink: true}
	tests := []struct {
		name   string
		busy   map[string][]int
		shared map[string][]SharedGPU
		reqs   []Request
		// want maps job → "node/gpu" of each rank ("" when pending).
		want map[string][]string
	}{
		{
			name: "time slices share one GPU until it is full",
			reqs: []Request{
				{JobID: "a", Ranks: 1, GPUMilli: 300, Order: 1},
				{JobID: "b", Ranks: 1, GPUMilli: 400, Order: 2},
				{JobID: "c", Ranks: 1, GPUMilli: 300, Order: 3},
				{JobID: "d", Ranks: 1, GPUMilli: 100, Order: 4},
			},
			want: map[string][]string{"a": {"node1/0"}, "b": {"node1/0"}, "c": {"node1/0"}, "d": {"node1/1"}},
		},
		{
			name:   "best fit among shared GPUs",
			shared: map[string][]SharedGPU{"node2": {{Index: 3, UsedMilli: 200}}, "node4": {{Index: 0, UsedMilli: 700}}},
			reqs:   []Request{{JobID: "a", Ranks: 1, GPUMilli: 300}},
			want:   map[string][]string{"a": {"node4/0"}},
		},
		{
			name: "a fresh GPU comes from the fullest node",
			busy: map[string][]int{"node3": gpus(0, 7)},
			reqs: []Request{{JobID: "a", Ranks: 1, GPUMilli: 500}},
			want: map[string][]string{"a": {"node3/7"}},
		},
		{
			name:   "MIG instance at a valid position beside others",
			shared: map[string][]SharedGPU{"node2": {{Index: 5, MIGUsed: 0b0000_1111}}},
			reqs:   []Request{{JobID: "a", Ranks: 1, MIGProfile: "3g.40gb"}, {JobID: "b", Ranks: 1, MIGProfile: "4g.40gb", Order: 1}},
			// b cannot start at 0 beside a 4g instance: a fresh GPU on
			// node2, the node with the fewest free GPUs.
			want: map[string][]string{"a": {"node2/5"}, "b": {"node2/0"}},
		},
		{
			name:   "MIG and time slices do not share a GPU",
			shared: map[string][]SharedGPU{"node2": {{Index: 5, UsedMilli: 100}}},
			reqs:   []Request{{JobID: "a", Ranks: 1, MIGProfile: "1g.10gb"}},
			want:   map[string][]string{"a": {"node2/0"}},
		},
		{
			name: "a fractional gang is all or nothing",
			busy: map[string][]int{"node1": gpus(0, 8), "node2": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 7)},
			reqs: []Request{{JobID: "a", Ranks: 3, GPUMilli: 500}, {JobID: "b", Ranks: 2, GPUMilli: 500, Order: 1}},
			want: map[string][]string{"a": nil, "b": {"node4/7", "node4/7"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, snap := testCluster(t, spec, tt.busy)
			for i := range snap.Nodes {
				n := &snap.Nodes[i]
				for _, s := range tt.shared[n.Name] {
					n.Shared = append(n.Shared, s)
					n.Free = removeInt(n.Free, s.Index)
				}
			}
			plan := ScheduleWith(snap, tt.reqs, Options{Strategy: BestFit})
			checkPlan(t, snap, tt.reqs, plan)
			got := map[string][]string{}
			for _, r := range tt.reqs {
				got[r.JobID] = nil
				if pl := placementOf(plan, r.JobID); pl != nil {
					for _, s := range pl.Ranks {
						got[r.JobID] = append(got[r.JobID], fmt.Sprintf("%s/%d", s.Node, s.GPUs[0]))
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\npending: %+v", diff, plan.Pending)
			}
		})
	}
}

// TestFractionalKeepsWholeGPUsFree packs many small slices and checks that
// they use the fewest GPUs possible, leaving whole nodes untouched.
func TestFractionalKeepsWholeGPUsFree(t *testing.T) {
	_, snap := testCluster(t, topology.UniformSpec{Nodes: 4, GPUsPerNode: 8, NVLink: true}, nil)
	var reqs []Request
	milli := 0
	for i := range 24 {
		m := []int{100, 250, 500, 150}[i%4]
		milli += m
		reqs = append(reqs, Request{JobID: fmt.Sprintf("f%02d", i), Ranks: 1, GPUMilli: m, Order: int64(i)})
	}
	plan := Schedule(snap, reqs)
	checkPlan(t, snap, reqs, plan)
	if len(plan.Placements) != len(reqs) {
		t.Fatalf("%d of %d placed: %+v", len(plan.Placements), len(reqs), plan.Pending)
	}
	used := map[string]bool{}
	nodes := map[string]bool{}
	for _, pl := range plan.Placements {
		used[fmt.Sprintf("%s/%d", pl.Ranks[0].Node, pl.Ranks[0].GPUs[0])] = true
		nodes[pl.Ranks[0].Node] = true
	}
	if lower := (milli + 999) / 1000; len(used) > lower+1 {
		t.Errorf("%d milli-GPUs spread over %d GPUs; the lower bound is %d", milli, len(used), lower)
	}
	if len(nodes) != 1 {
		t.Errorf("slices on %d nodes, want 1", len(nodes))
	}
}

func removeInt(s []int, v int) []int {
	out := s[:0:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
