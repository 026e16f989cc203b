package sim

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/sim/trace"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func pool(nodes, gpus int) Shape { return Shape{Pools: []Pool{{Nodes: nodes, GPUsPerNode: gpus}}} }

func jobs(specs ...[3]float64) []trace.Job {
	out := make([]trace.Job, len(specs))
	for i, s := range specs {
		out[i] = trace.Job{ID: string(rune('A' + i)), Submit: s[0], Duration: s[1], GPUs: int(s[2]), GPUMilli: 1000}
	}
	return out
}

type got struct {
	Start, End float64
	Pre        int
}

func results(r *Result) map[string]got {
	m := map[string]got{}
	for _, j := range r.Jobs {
		m[j.ID] = got{j.Start, j.End, j.Preemptions}
	}
	return m
}

func mustPolicy(t *testing.T, name string) Policy {
	t.Helper()
	if q, ok := strings.CutPrefix(name, "live:"); ok {
		// The controller's configuration with a default queue policy q.
		p, _, err := LiveFromQueues([]api.QueueSpec{{Name: api.DefaultQueue, Policy: q}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p, err := ParsePolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicies(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		placement Placement
		shape     Shape
		jobs      []trace.Job
		want      map[string]got
	}{
		{
			name:   "strict FIFO blocks behind the head",
			policy: "fifo", placement: Consolidate, shape: pool(1, 8),
			jobs: jobs([3]float64{0, 100, 6}, [3]float64{1, 10, 4}, [3]float64{2, 10, 1}),
			want: map[string]got{"A": {0, 100, 0}, "B": {100, 110, 0}, "C": {100, 110, 0}},
		},
		{
			name:   "backfill starts a job that ends before the head's reservation",
			policy: "fifo-backfill", placement: Consolidate, shape: pool(1, 8),
			jobs: jobs([3]float64{0, 100, 6}, [3]float64{1, 10, 4}, [3]float64{2, 50, 2}, [3]float64{3, 500, 2}),
			// C ends at 52, before B's reservation at 100. D would run
			// past it, but on GPUs the reservation leaves alone (B
			// gets A's GPUs at 100), so it starts when C ends.
			want: map[string]got{"A": {0, 100, 0}, "B": {100, 110, 0}, "C": {2, 52, 0}, "D": {52, 552, 0}},
		},
		{
			name:   "live backfills onto GPUs the head's reservation leaves alone",
			policy: "live", placement: Consolidate, shape: pool(1, 8),
			jobs: jobs([3]float64{0, 100, 6}, [3]float64{1, 10, 4}, [3]float64{2, 50, 2}, [3]float64{3, 500, 2}),
			// B will take 4 of A's GPUs: C and D may use the other two
			// whatever their length, as with fifo-backfill.
			want: map[string]got{"A": {0, 100, 0}, "B": {100, 110, 0}, "C": {2, 52, 0}, "D": {52, 552, 0}},
		},
		{
			name:   "live knows no durations: nothing passes a reservation with no start",
			policy: "live:backfill", placement: Consolidate, shape: pool(1, 8),
			jobs: jobs([3]float64{0, 100, 6}, [3]float64{1, 10, 8}, [3]float64{2, 50, 2}),
			// B needs the whole node. fifo-backfill, reading A's end and
			// C's length, starts C at 2; the server knows neither (no
			// time limits), so C waits behind B.
			want: map[string]got{"A": {0, 100, 0}, "B": {100, 110, 0}, "C": {110, 160, 0}},
		},
		{
			name:   "fifo-backfill reads durations to pass a reservation",
			policy: "fifo-backfill", placement: Consolidate, shape: pool(1, 8),
			jobs: jobs([3]float64{0, 100, 6}, [3]float64{1, 10, 8}, [3]float64{2, 50, 2}),
			want: map[string]got{"A": {0, 100, 0}, "B": {100, 110, 0}, "C": {2, 52, 0}},
		},
		{
			name:   "SJF runs the shortest first",
			policy: "sjf", placement: Consolidate, shape: pool(1, 1),
			jobs: jobs([3]float64{0, 100, 1}, [3]float64{1, 50, 1}, [3]float64{2, 10, 1}),
			want: map[string]got{"A": {0, 100, 0}, "B": {110, 160, 0}, "C": {100, 110, 0}},
		},
		{
			name:   "SRTF preempts and the victim owes its restore cost",
			policy: "srtf", placement: Consolidate, shape: pool(1, 1),
			jobs: jobs([3]float64{0, 100, 1}, [3]float64{5, 10, 1}),
			// A resumes at 15 with 95 s left plus 7 s to restore.
			want: map[string]got{"A": {0, 117, 1}, "B": {5, 15, 0}},
		},
		{
			name:   "Tiresias demotes after 3,600 GPU-seconds",
			policy: "tiresias", placement: Consolidate, shape: pool(1, 1),
			jobs: jobs([3]float64{0, 5000, 1}, [3]float64{100, 50, 1}, [3]float64{4000, 50, 1}),
			// B arrives while A is still in queue 0 and waits (first
			// come first served within a queue) until A's demotion at
			// 3,600 s; C preempts A again at 4,000 s. A owes 7 s per
			// preemption: 3,650+7 → 4,000 does 343 s, 4,050+7+1,057.
			want: map[string]got{"A": {0, 5114, 2}, "B": {3600, 3650, 0}, "C": {4000, 4050, 0}},
		},
		{
			name:   "gangway policy preempts a long job for a new one",
			policy: "gangway", placement: GangwayPlacement, shape: pool(1, 1),
			jobs: jobs([3]float64{0, 20000, 1}, [3]float64{10000, 60, 1}),
			want: map[string]got{"A": {0, 20067, 1}, "B": {10000, 10060, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Shape: tt.shape, Policy: mustPolicy(t, tt.policy), Placement: tt.placement}, tt.jobs)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, results(r)); d != "" {
				t.Errorf("jobs (-want +got):\n%s", d)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	r, err := Run(context.Background(), Config{Shape: pool(1, 2), Policy: mustPolicy(t, "fifo"), Placement: Consolidate},
		jobs([3]float64{0, 100, 1}, [3]float64{0, 300, 1}, [3]float64{50, 100, 2}))
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{
		Policy: "fifo", Placement: "consolidate", Jobs: 3,
		AvgJCT: (100 + 300 + 350) / 3.0, P50JCT: 300, P95JCT: 345, P99JCT: 349,
		AvgQueue: 250 / 3.0, MaxQueue: 250, MaxWait: 250, Makespan: 400,
		// JCT over duration: 1, 1 and 3.5.
		AvgSlowdown: 5.5 / 3, P50Slowdown: 1, P99Slowdown: 1 + 0.98*2.5, MaxSlowdown: 3.5,
		// 100 + 300 + 200 GPU-seconds over 2 GPUs × 400 s.
		GPUUtilization: 600.0 / 800, Goodput: 1,
		// C waits from 100 to 300 with one GPU free of the two it needs:
		// not blocked by fragmentation.
		FragBlocked: 0,
		Usage:       &api.UsageRow{Key: "fifo", Jobs: 3, GPUHours: round6(600.0 / 3600), UsefulGPUHours: round6(600.0 / 3600), Goodput: 1},
	}
	if d := cmp.Diff(want, r.Summary, cmpopts.EquateApprox(0, 1e-9), cmpopts.IgnoreFields(Summary{}, "SchedulerCalls")); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
}

// TestSlowdownWaitsAndHorizon checks the bounded slowdown's floor, the
// share of jobs that waited over a day, and the makespan of a run with a
// horizon: the last finish when every job finished, else the horizon.
func TestSlowdownWaitsAndHorizon(t *testing.T) {
	in := jobs(
		[3]float64{0, 100_000, 1}, // runs alone on the one GPU
		[3]float64{1, 2, 1},       // waits 99,999 s, then runs 2 s: slowdown 100,001 / 10
		[3]float64{2, 50, 1},      // waits 100,000 s
	)
	tests := []struct {
		name         string
		horizon      float64
		want         Summary
		wantMakespan float64
	}{
		{
			name: "no horizon",
			want: Summary{Jobs: 3, WaitedOver24h: 2.0 / 3, MaxSlowdown: 100_001.0 / 10, P50Slowdown: 100_050.0 / 50,
				AvgSlowdown: (1 + 100_001.0/10 + 100_050.0/50) / 3},
			wantMakespan: 100_052,
		},
		{
			name:    "every job finished before the horizon",
			horizon: 200_000,
			want: Summary{Jobs: 3, WaitedOver24h: 2.0 / 3, MaxSlowdown: 100_001.0 / 10, P50Slowdown: 100_050.0 / 50,
				AvgSlowdown: (1 + 100_001.0/10 + 100_050.0/50) / 3},
			wantMakespan: 100_052,
		},
		{
			// The first job finishes at 100,000 s; the others wait 90,000 s
			// and more, over a day, when the run stops.
			name:         "some jobs unfinished at the horizon",
			horizon:      100_000,
			want:         Summary{Jobs: 1, Unfinished: 2, WaitedOver24h: 2.0 / 3, MaxSlowdown: 1, P50Slowdown: 1, AvgSlowdown: 1},
			wantMakespan: 100_000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Shape: pool(1, 1), Policy: mustPolicy(t, "fifo"), Placement: Consolidate, Horizon: tt.horizon}, in)
			if err != nil {
				t.Fatal(err)
			}
			s := r.Summary
			got := Summary{Jobs: s.Jobs, Unfinished: s.Unfinished, WaitedOver24h: s.WaitedOver24h,
				AvgSlowdown: s.AvgSlowdown, P50Slowdown: s.P50Slowdown, MaxSlowdown: s.MaxSlowdown}
			if d := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("summary (-want +got):\n%s", d)
			}
			if s.Makespan != tt.wantMakespan {
				t.Errorf("makespan %v, want %v", s.Makespan, tt.wantMakespan)
			}
		})
	}
}

// round6 rounds as usage rows do.
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func TestFragBlocked(t *testing.T) {
	// Two nodes with 4 GPUs each; two 3-GPU jobs leave one GPU free on
	// each node, so a 2-GPU job waits with 2 GPUs free in total.
	r, err := Run(context.Background(), Config{Shape: pool(2, 4), Policy: mustPolicy(t, "fifo"), Placement: Consolidate},
		jobs([3]float64{0, 100, 3}, [3]float64{0, 100, 3}, [3]float64{0, 10, 2}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary.FragBlocked != 1 {
		t.Errorf("frag-blocked share = %v, want 1", r.Summary.FragBlocked)
	}
}

func TestFractionalSharing(t *testing.T) {
	in := []trace.Job{
		{ID: "a", Submit: 0, Duration: 100, GPUs: 1, GPUMilli: 300},
		{ID: "b", Submit: 0, Duration: 100, GPUs: 1, GPUMilli: 300},
		{ID: "c", Submit: 0, Duration: 100, GPUs: 1, GPUMilli: 300},
		{ID: "d", Submit: 0, Duration: 100, GPUs: 1, GPUMilli: 300},
	}
	r, err := Run(context.Background(), Config{Shape: pool(1, 1), Policy: mustPolicy(t, "fifo"), Placement: GangwayPlacement}, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]got{"a": {0, 100, 0}, "b": {0, 100, 0}, "c": {0, 100, 0}, "d": {100, 200, 0}}
	if d := cmp.Diff(want, results(r)); d != "" {
		t.Errorf("jobs (-want +got):\n%s", d)
	}
}

func TestStuck(t *testing.T) {
	_, err := Run(context.Background(), Config{Shape: pool(1, 8), Policy: mustPolicy(t, "fifo")}, jobs([3]float64{0, 1, 16}))
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("err = %v, want ErrStuck", err)
	}
	in := jobs([3]float64{0, 1, 1})
	in[0].GPUModels = []string{"B200"}
	_, err = Run(context.Background(), Config{Shape: Shape{Pools: []Pool{{Nodes: 1, GPUsPerNode: 8, GPUModel: "H100"}}}, Policy: mustPolicy(t, "fifo")}, in)
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("model mismatch: err = %v, want ErrStuck", err)
	}
}

func TestProgressAndCheckpoints(t *testing.T) {
	j := &job{remaining: 1000, ckptEvery: 100, ckptCost: 10, segStart: 0, segRestart: 5}
	for _, tt := range []struct{ t, done, committed float64 }{
		{3, 0, 0},       // restoring
		{55, 50, 0},     // first interval
		{105, 100, 0},   // writing the first checkpoint
		{115, 100, 100}, // committed
		{5 + 4*110 + 30, 430, 400},
	} {
		d, c := j.progress(tt.t)
		if math.Abs(d-tt.done) > 1e-9 || math.Abs(c-tt.committed) > 1e-9 {
			t.Errorf("progress(%v) = %v, %v; want %v, %v", tt.t, d, c, tt.done, tt.committed)
		}
	}
	// 1000 s of work in intervals of 100 writes 9 checkpoints.
	if n := nCkpt(1000, 100); n != 9 {
		t.Errorf("nCkpt = %v, want 9", n)
	}
}

func TestDalyInterval(t *testing.T) {
	// For a small cost Daly's interval approaches Young's sqrt(2δM).
	delta, m := 2.0, 10000.0
	young := math.Sqrt(2 * delta * m)
	got := DalyInterval(delta, m)
	if got < young-delta-1e-9 || got > young*1.02 {
		t.Errorf("DalyInterval = %v, want about %v", got, young)
	}
	if DalyInterval(30000, 10000) != 10000 {
		t.Error("DalyInterval with cost ≥ 2·MTBF should be the MTBF")
	}
	// The expected goodput peaks at Daly's interval.
	best := ExpectedGoodput(got, delta, 60, m)
	for _, f := range []float64{0.5, 0.8, 1.25, 2} {
		if g := ExpectedGoodput(got*f, delta, 60, m); g > best {
			t.Errorf("goodput at %v× the interval (%v) beats the interval's (%v)", f, g, best)
		}
	}
}

func TestFailuresAccounting(t *testing.T) {
	f := Llama3Failures()
	f.Interruptions *= 2000 // frequent enough to hit a small cluster
	in := jobs([3]float64{0, 86400, 8}, [3]float64{0, 86400, 8}, [3]float64{3600, 40000, 4})
	cfg := Config{Shape: pool(4, 8), Policy: mustPolicy(t, "gangway"), Failures: &f,
		Checkpoint: Checkpointing{Auto: true, Cost: 5}, Seed: 7}
	r, err := Run(context.Background(), cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	if s.Jobs != 3 || s.Unfinished != 0 {
		t.Fatalf("jobs %d unfinished %d", s.Jobs, s.Unfinished)
	}
	n := 0
	for _, v := range s.Interruptions {
		n += v
	}
	if n == 0 || s.GPUHoursLost["restart"] == 0 || s.GPUHoursLost["checkpoint"] == 0 {
		t.Fatalf("no failures simulated: %+v", s)
	}
	if !(s.Goodput > 0.5 && s.Goodput < 1) || !(s.ETTR > 0.3 && s.ETTR < 1) {
		t.Errorf("goodput %v, ETTR %v out of range", s.Goodput, s.ETTR)
	}
	// Useful GPU-hours are the jobs' work; with the lost hours they make
	// the hours held: check the books balance.
	useful := (86400*8*2 + 40000*4) / 3600.0
	var lost float64
	for _, v := range s.GPUHoursLost {
		lost += v
	}
	held := s.GPUUtilization * 32 * s.Makespan / 3600
	if math.Abs(useful+lost-held) > 1e-6*held {
		t.Errorf("useful %v + lost %v != held %v", useful, lost, held)
	}
	if math.Abs(s.Goodput-useful/held) > 1e-9 {
		t.Errorf("goodput %v != useful/held %v", s.Goodput, useful/held)
	}
	// The same seed gives the same run.
	r2, err := Run(context.Background(), cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r.Summary, r2.Summary); d != "" {
		t.Errorf("not deterministic (-first +second):\n%s", d)
	}
}

func TestRandomPlacementDeterministic(t *testing.T) {
	var in []trace.Job
	for i := range 200 {
		in = append(in, trace.Job{ID: string(rune('a'+i%26)) + string(rune('0'+i/26)), Submit: float64(i * 10), Duration: float64(300 + i%7*100), GPUs: 1 << (i % 4), GPUMilli: 1000})
	}
	run := func(seed uint64) Summary {
		r, err := Run(context.Background(), Config{Shape: pool(4, 8), Policy: mustPolicy(t, "fifo"), Placement: Random, Seed: seed}, in)
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary
	}
	a, b := run(1), run(1)
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("same seed, different runs:\n%s", d)
	}
}

func TestParseShape(t *testing.T) {
	s, err := ParseShape([]byte("pools:\n  - name: a\n    nodes: 4\n    gpusPerNode: 8\n    gpuModel: H100\n    nodesPerLeaf: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.GPUs() != 32 || s.String() != "4×8 H100" {
		t.Errorf("shape %+v: %d GPUs, %q", s, s.GPUs(), s.String())
	}
	for _, tt := range []struct{ in, want string }{
		{"pools:\n  - nodes: 4\n    gpusPerNode: 8\n    gpus: 3\n", `cluster file: [4:5] unknown field "gpus"`},
		{"pools:\n  - nodes: 0\n    gpusPerNode: 8\n", "cluster file: pools[0]: nodes must be at least 1 (got 0)"},
		{"pools:\n  - nodes: 2\n    gpusPerNode: 65\n", "cluster file: pools[0]: gpusPerNode must be in 1..64 (got 65)"},
	} {
		_, err := ParseShape([]byte(tt.in))
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseShape(%q) error = %v, want %s", tt.in, err, tt.want)
		}
	}
}

func FuzzParseShape(f *testing.F) {
	f.Add([]byte("pools:\n  - nodes: 4\n    gpusPerNode: 8\n"))
	f.Add([]byte(`{"pools":[{"nodes":2,"gpusPerNode":4,"nodesPerLeaf":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseShape(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed shape does not validate: %v", err)
		}
		if s.GPUs() > 0 && s.GPUs() <= 4096 {
			if _, err := newCluster(s); err != nil {
				t.Fatalf("valid shape, no cluster: %v", err)
			}
		}
	})
}

func TestNodesForLoad(t *testing.T) {
	in := jobs([3]float64{0, 3600, 8}, [3]float64{3600, 3600, 8})
	// 57,600 GPU-seconds over a 3,600 s span at load 0.5 needs 32 GPUs.
	n, err := NodesForLoad(in, 0.5, 8)
	if err != nil || n != 4 {
		t.Errorf("NodesForLoad = %d, %v; want 4", n, err)
	}
}

// TestUsageSection: the summary's usage row accounts for the run as live
// accounting would, in its causes: it balances with the GPU-hours held,
// charges lost work only to the causes the failure model maps to, and
// reads no less useful work than the simulator's own finer account.
func TestUsageSection(t *testing.T) {
	t.Run("no failures", func(t *testing.T) {
		r, err := Run(context.Background(), Config{Shape: pool(1, 8), Policy: mustPolicy(t, "fifo")}, jobs([3]float64{0, 3600, 8}, [3]float64{0, 1800, 4}))
		if err != nil {
			t.Fatal(err)
		}
		want := &api.UsageRow{Key: "fifo", Jobs: 2, GPUHours: 10, UsefulGPUHours: 10, Goodput: 1}
		if d := cmp.Diff(want, r.Summary.Usage); d != "" {
			t.Errorf("usage (-want +got):\n%s", d)
		}
	})
	t.Run("failures", func(t *testing.T) {
		f := Llama3Failures()
		f.Interruptions *= 2000
		in := jobs([3]float64{0, 86400, 8}, [3]float64{0, 86400, 8}, [3]float64{3600, 40000, 4})
		r, err := Run(context.Background(), Config{Shape: pool(4, 8), Policy: mustPolicy(t, "gangway"), Failures: &f,
			Checkpoint: Checkpointing{Auto: true, Cost: 5}, Seed: 7}, in)
		if err != nil {
			t.Fatal(err)
		}
		s, u := r.Summary, r.Summary.Usage
		t.Logf("usage %+v; the simulator's goodput %.4f, GPU-hours lost %v", u, s.Goodput, s.GPUHoursLost)
		if u == nil || u.Jobs != 3 || u.RunningGPUHours != 0 {
			t.Fatalf("usage %+v; want 3 jobs, none running", u)
		}
		held := s.GPUUtilization * 32 * s.Makespan / 3600
		if math.Abs(u.GPUHours-held) > 1e-5*held || math.Abs(u.UsefulGPUHours+u.LostTotal()-u.GPUHours) > 1e-5 {
			t.Errorf("usage %v GPU-hours (useful %v + lost %v); held %v", u.GPUHours, u.UsefulGPUHours, u.LostTotal(), held)
		}
		mapped := map[api.Cause]string{api.CauseGPUFault: "gpu", api.CauseNodeLost: "host", api.CauseUserError: "software"}
		for c, v := range u.LostGPUHours {
			if k, ok := mapped[c]; !ok || s.Interruptions[k] == 0 || v <= 0 {
				t.Errorf("lost %v GPU-hours to %q: not a cause the failure model's interruptions (%v) map to", v, c, s.Interruptions)
			}
		}
		if len(u.LostGPUHours) == 0 {
			t.Error("no work lost to any cause")
		}
		if u.Goodput < s.Goodput || u.Goodput >= 1 {
			t.Errorf("usage goodput %v; want at least the simulator's %v (live accounting counts restores and checkpoint writes as useful), below 1", u.Goodput, s.Goodput)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"usage":{"key":"gangway","jobs":3,`) {
			t.Errorf("summary JSON has no usage section keyed by the policy:\n%s", b)
		}
	})
	t.Run("running at the horizon", func(t *testing.T) {
		r, err := Run(context.Background(), Config{Shape: pool(1, 8), Policy: mustPolicy(t, "fifo"), Horizon: 1800}, jobs([3]float64{0, 3600, 8}))
		if err != nil {
			t.Fatal(err)
		}
		if u := r.Summary.Usage; u.RunningGPUHours != 4 || u.GPUHours != 4 || u.UsefulGPUHours != 0 || u.Goodput != 0 {
			t.Errorf("usage %+v; want 4 GPU-hours running, none settled", u)
		}
	})
}

// TestParseLiveWithQueuePolicy: live:P is the controller with a default
// queue of policy P, named so; a bad P names the queue policies.
func TestParseLiveWithQueuePolicy(t *testing.T) {
	p, err := ParsePolicy("live:backfill")
	if err != nil || p.Name() != "live:backfill" || p.mode() != Backfill || p.Oracle() {
		t.Fatalf("live:backfill = %v, %v", p, err)
	}
	if p, err := ParsePolicy("live:gangway"); err != nil || p.Name() != "live:gangway" || !p.schedPreempt() {
		t.Fatalf("live:gangway = %v, %v", p, err)
	}
	if _, err := ParsePolicy("live:sjf"); err == nil || !strings.Contains(err.Error(), "backfill") {
		t.Errorf("live:sjf = %v; want an error naming the queue policies", err)
	}
}

// TestQueuePolicyNamesAgree: a queue policy's name runs that policy in
// the simulator too (las is gangway-4h, as a queue's las is), and
// Tiresias keeps its own names.
func TestQueuePolicyNamesAgree(t *testing.T) {
	for _, n := range []string{"las", "gangway-4h", "greedy"} {
		p, err := ParsePolicy(n)
		want, _ := policy.New(n)
		if err != nil || want == nil || p.Name() != want.Name() {
			t.Errorf("simulate --policy %s runs %v (%v); want the queue policy %v", n, p, err, want)
		}
	}
	for _, n := range []string{"tiresias", "2d-las"} {
		if p, err := ParsePolicy(n); err != nil || p.Name() != "tiresias" {
			t.Errorf("simulate --policy %s runs %v (%v); want tiresias", n, p, err)
		}
	}
}

// TestLaneTurnShorterThanARestore: lane turns no longer than the restore
// a preempted gang owes would never let the jobs taking them finish; the
// run is refused, naming the setting.
func TestLaneTurnShorterThanARestore(t *testing.T) {
	q := api.QueueSpec{Name: api.DefaultQueue, Policy: "gangway", LaneTurn: api.Duration(20 * time.Second)}
	live, _, err := LiveFromQueues([]api.QueueSpec{q})
	if err != nil {
		t.Fatal(err)
	}
	jobs := []trace.Job{{ID: "a", GPUs: 8, GPUMilli: 1000, Duration: 100}}
	_, err = Run(context.Background(), Config{Shape: Shape{Pools: []Pool{{Nodes: 1, GPUsPerNode: 8}}}, Policy: live}, jobs)
	if err == nil || !strings.Contains(err.Error(), "laneTurn") || !strings.Contains(err.Error(), "30s") {
		t.Errorf("a 20 s turn against 30 s restores: %v; want a refusal naming laneTurn and the restore", err)
	}
	cfg := Config{Shape: Shape{Pools: []Pool{{Nodes: 1, GPUsPerNode: 8}}}, Policy: live, PreemptCost: func(int) float64 { return 0 }}
	if _, err := Run(context.Background(), cfg, jobs); err != nil {
		t.Errorf("free restores: %v", err)
	}
}
