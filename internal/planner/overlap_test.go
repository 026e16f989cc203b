package planner

import "testing"

// NeMo and Megatron-Bridge runs overlap the data-parallel gradient
// reduction with the backward pass and the weight all-gather with the
// next forward (their recipes' DistributedDataParallelConfig); a vector
// that says otherwise keeps its word, and older Megatron-LM runs are not
// assumed to.
func TestBridgeRunsOverlapDP(t *testing.T) {
	var p2, d1 Vector
	for _, v := range publicVectors(t) {
		if v.ID == "P2" {
			p2 = v
		}
	}
	for _, v := range devVectors(t) {
		if v.ID == "D1" {
			d1 = v
		}
	}
	overlap := func(v Vector) bool {
		r, err := v.run(DefaultCatalog(), DefaultStacks())
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		return r.job.overlapDP()
	}
	if !overlap(p2) {
		t.Error("Megatron-Bridge run P2: DP overlap off, want on")
	}
	off := false
	p2.Training.DPOverlap = &off
	if overlap(p2) {
		t.Error("training.dp_overlap false: DP overlap on, want off")
	}
	if overlap(d1) {
		t.Error("Megatron-LM 2021 run D1: DP overlap on, want off")
	}

	// With overlap the exposed reduction shrinks but never below a tenth
	// (the last buckets).
	j := testJob(t, "llama3-70b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 8192, 128
	c := Config{TP: 4, PP: 4, VP: 5, DP: 4, MicroBatch: 1, SP: true, ZeRO: 1}
	on, offv := true, false
	j.OverlapDP = &offv
	exposed := Predict(j, c).Time.DPComm
	j.OverlapDP = &on
	hidden := Predict(j, c).Time.DPComm
	if !(hidden < exposed && hidden >= 0.1*exposed-1e-12) {
		t.Errorf("DP comm %.3g s overlapped, %.3g s not: want less, but at least a tenth", hidden, exposed)
	}
}

// The routed experts' gradients are reduced over the expert-data-parallel
// group — the dp/ep ranks holding the same experts, tp·cp·ep ranks apart —
// not the whole data-parallel group. With EP filling an 8-GPU node its
// members sit one per node, so the reduction has one NIC where the dense
// weights' has eight.
func TestExpertDataParallelReduction(t *testing.T) {
	j := testJob(t, "mixtral-8x7b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 4096, 256
	off := false
	j.OverlapDP = &off
	c := Config{TP: 1, PP: 1, DP: 64, MicroBatch: 1, ZeRO: 1, EP: 8}
	nic := j.Cluster.nicBytesPerSec() * j.Stack.NetworkEfficiency
	if bw, _ := dpBandwidth(j, c); !near(bw, 8*nic, 1e-12) {
		t.Errorf("data-parallel bandwidth %.3g, want 8 NICs %.3g", bw, 8*nic)
	}
	if bw, _ := expertDPBandwidth(j, c); !near(bw, nic, 1e-12) {
		t.Errorf("expert-data-parallel bandwidth %.3g, want one NIC %.3g", bw, nic)
	}
	// ep=4 leaves two members of each expert group in a node.
	c4 := c
	c4.EP = 4
	if bw, _ := expertDPBandwidth(j, c4); !near(bw, 2*nic, 1e-12) {
		t.Errorf("ep=4: expert-data-parallel bandwidth %.3g, want two NICs %.3g", bw, 2*nic)
	}
	experts := stageExpertParams(j, c, false)
	if want := float64(j.Model.RoutedExpertParams()) / 8; !near(experts, want, 1e-12) {
		t.Errorf("expert weights on a GPU %.4g, want %.4g", experts, want)
	}
	// Dense part over 64 ranks at 8 NICs, experts over 8 ranks at one.
	first, _ := stageParams(j, c)
	bw, lat := dpBandwidth(j, c)
	ebw, elat := expertDPBandwidth(j, c)
	g := j.Stack.GradReduceBytes
	want := ringGather((first-experts)*g, 64, bw, lat) + ringGather((first-experts)*2, 64, bw, lat) +
		ringGather(experts*g, 8, ebw, elat) + ringGather(experts*2, 8, ebw, elat)
	if got := Predict(j, c).Time.DPComm; !near(got, want, 1e-9) {
		t.Errorf("DP comm %.4g s, want %.4g s", got, want)
	}
}

// The distributed optimizer shards the routed experts' optimizer states
// over the expert-data-parallel group only: on 64 GPUs with ep=8 each
// expert's fp32 states are split 8 ways, the dense weights' 64.
func TestExpertOptimizerStatesShardOverExpertDP(t *testing.T) {
	j := testJob(t, "mixtral-8x7b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 4096, 256
	c := Config{TP: 1, PP: 1, DP: 64, MicroBatch: 1, ZeRO: 1, EP: 8, Recompute: RecomputeFull}
	mem := Memory(j, c)
	first, _ := stageParams(j, c)
	experts := stageExpertParams(j, c, false)
	want := (first-experts)*12/64 + experts*12/8
	if got := float64(mem.OptimizerBytes); !near(got, want, 1e-6) {
		t.Errorf("optimizer states %.4g GiB, want %.4g GiB", got/gib, want/gib)
	}
}
