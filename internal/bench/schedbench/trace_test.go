package schedbench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/scheduler"
	"github.com/google/go-cmp/cmp"
)

func TestLoadTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []TraceJob
		wantErr string
	}{
		{
			name: "philly columns",
			in:   "timestamp,duration,num_gpus,gpu_time,cluster\n2017-09-04 10:30:41,2240194.0,8,17921552.0,7f04ca\n2017-09-07 03:58:57,30.5,1,30.5,6214e9\n",
			want: []TraceJob{{GPUs: 8, Duration: 2240194 * time.Second}, {GPUs: 1, Duration: 30500 * time.Millisecond}},
		},
		{
			name: "columns in any order, others ignored",
			in:   "num_gpus,x,duration\n4,a,10\n",
			want: []TraceJob{{GPUs: 4, Duration: 10 * time.Second}},
		},
		{name: "empty", in: "", wantErr: "t.csv: empty file: want a header with num_gpus and duration"},
		{name: "no num_gpus", in: "timestamp,duration\n1,2\n", wantErr: `t.csv:1: header "timestamp,duration" lacks num_gpus or duration`},
		{name: "bad count", in: "duration,num_gpus\n10,0\n", wantErr: `t.csv:2: column num_gpus: "0" is not a GPU count from 1 to 1048576`},
		{name: "bad duration", in: "duration,num_gpus\n10,1\nNaN,2\n", wantErr: `t.csv:3: column duration: "NaN" is not a number of seconds from 0 to 1e9`},
		{name: "short row", in: "duration,num_gpus\n10\n", wantErr: "t.csv:2: 1 columns, want at least 2"},
		{name: "header only", in: "duration,num_gpus\n", wantErr: "t.csv: no jobs after the header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadTrace(strings.NewReader(tt.in), "t.csv")
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

func FuzzLoadTrace(f *testing.F) {
	f.Add("timestamp,duration,num_gpus,gpu_time,cluster\n2017-09-04 10:30:41,2240194.0,8,17921552.0,7f04ca\n")
	f.Add("num_gpus,duration\n1,1e3\n2,\"3\"\n")
	f.Add("duration,num_gpus\n-1,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		jobs, err := LoadTrace(strings.NewReader(in), "f.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, j := range jobs {
			if j.GPUs < 1 || j.Duration < 0 {
				t.Fatalf("bad job %+v", j)
			}
		}
	})
}

// tiny is a small run of the benchmark for tests: 64 nodes, 2,000 jobs.
func tiny() Config {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.NodesPerLeaf, cfg.LeavesPerSpine = 64, 8, 4
	cfg.Backlog, cfg.GangShare, cfg.GangSizes = 600, 0.03, []int{64, 128}
	cfg.Trace = []TraceJob{{1, time.Hour}, {1, time.Minute}, {2, 2 * time.Hour}, {4, time.Hour}, {8, 3 * time.Hour}, {16, time.Hour}}
	cfg.TraceName = "inline"
	return cfg
}

func TestRunDrainsTheBacklog(t *testing.T) {
	for _, mode := range []scheduler.Mode{scheduler.Greedy, scheduler.Backfill} {
		cfg := tiny()
		cfg.Mode = mode
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Drained || res.Placements != cfg.Backlog+res.Preemptions {
			t.Errorf("%s: drained %v, %d placements for %d jobs and %d preemptions", mode, res.Drained, res.Placements, cfg.Backlog, res.Preemptions)
		}
		if res.Decisions < res.Placements || res.PlacementsPerS <= 0 || res.P99DecisionMs < res.P50DecisionMs || res.PeakHeapBytes == 0 {
			t.Errorf("%s: inconsistent result %+v", mode, res)
		}
		if res.Cluster.GPUs != 512 || res.Cluster.Leaves != 8 || res.Cluster.Spines != 2 || res.Backlog.Jobs != 600 {
			t.Errorf("%s: cluster %+v backlog %+v", mode, res.Cluster, res.Backlog)
		}
		if mode == scheduler.Backfill && res.Reserved == 0 {
			t.Errorf("backfill made no reservation")
		}
	}
}

func TestMainFlagsAndJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-o", "xml"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `invalid value "xml" for flag -o: want table, json or yaml`) {
		t.Errorf("bad -o: code %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"-mode", "fifo"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown scheduling mode "fifo"`) {
		t.Errorf("bad -mode: code %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"-trace", "/nonexistent.csv"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "nonexistent.csv") {
		t.Errorf("missing trace: code %d, stderr %q", code, errb.String())
	}
	loadPhilly(t) // skips when the trace is absent
	out.Reset()
	errb.Reset()
	args := []string{"-o", "json", "-nodes-per-leaf", "8", "-leaves-per-spine", "4", "-backlog", "300", "-gang-share", "0", "-nodes", "16"}
	if code := Main(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("code %d, stderr %s", code, errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"placements_per_s", "p50_decision_ms", "p99_decision_ms", "peak_heap_bytes", "cluster", "backlog"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON lacks %s", k)
		}
	}
}

// TestTopologyBeatsBestFit runs the same backlogs with both strategies on
// a small cluster and checks what the Topology strategy is for: gangs
// span fewer leaves and spines than with plain best fit.
func TestTopologyBeatsBestFit(t *testing.T) {
	run := func(st scheduler.Strategy) (leaves, spines float64) {
		for seed := range uint64(3) {
			cfg := tiny()
			cfg.Nodes, cfg.NodesPerLeaf, cfg.LeavesPerSpine = 128, 8, 4
			cfg.Backlog, cfg.GangShare, cfg.GangSizes = 800, 0.05, []int{16, 32, 64, 128}
			cfg.Seed, cfg.Queues, cfg.Strategy = seed+1, 1, st
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			leaves += res.MeanLeaves
			spines += res.MeanSpines
		}
		return leaves / 3, spines / 3
	}
	tl, ts := run(scheduler.Topology)
	bl, bs := run(scheduler.BestFit)
	t.Logf("multi-node gangs span %.2f leaves, %.2f spines with topology; %.2f, %.2f with bestfit", tl, ts, bl, bs)
	if tl >= bl || ts >= bs {
		t.Errorf("topology does not span fewer leaves and spines than bestfit")
	}
}
