package server

import (
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/planner"
)

func h100Nodes(n int) []*api.Node {
	var out []*api.Node
	for i := 0; i < n; i++ {
		node := &api.Node{Name: string(rune('a' + i)), Status: api.NodeStatus{State: api.NodeReady}}
		for g := 0; g < 8; g++ {
			node.GPUs = append(node.GPUs, api.GPU{Index: g, Model: "H100-SXM-80GB"})
		}
		out = append(out, node)
	}
	return out
}

func TestAdmitParallelism(t *testing.T) {
	cat := planner.DefaultCatalog()
	tests := []struct {
		name    string
		spec    api.JobSpec
		errHas  string // "" means admitted
		wantTP  int
		predict bool
	}{
		{name: "no grid", spec: api.JobSpec{Ranks: 8, GPUsPerRank: 1}},
		{name: "tp wider than the NVLink domain", spec: api.JobSpec{Ranks: 16, GPUsPerRank: 1, Parallelism: &api.Parallelism{TP: 16}},
			errHas: "exceeds the NVLink domain of 8 GPUs"},
		{name: "70B without model sharding does not fit", spec: api.JobSpec{Ranks: 8, GPUsPerRank: 1,
			Parallelism: &api.Parallelism{TP: 1, PP: 1}, Model: &api.ModelRef{Name: "llama3-70b", Seq: 8192, GlobalBatch: 64}},
			errHas: "cannot run llama3-70b"},
		{name: "explicit grid that fits gets a prediction", spec: api.JobSpec{Ranks: 32, GPUsPerRank: 1,
			Parallelism: &api.Parallelism{TP: 8, PP: 4}, Model: &api.ModelRef{Name: "llama3-70b", Seq: 4096, GlobalBatch: 64}},
			wantTP: 8, predict: true},
		{name: "auto fills the grid", spec: api.JobSpec{Ranks: 16, GPUsPerRank: 1,
			Parallelism: &api.Parallelism{Auto: true}, Model: &api.ModelRef{Name: "llama3-8b", Seq: 8192, GlobalBatch: 128}},
			predict: true},
		{name: "unknown model", spec: api.JobSpec{Ranks: 8, GPUsPerRank: 1,
			Parallelism: &api.Parallelism{Auto: true}, Model: &api.ModelRef{Name: "gpt-9"}}, errHas: "gpt-9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := admitParallelism(&tt.spec, h100Nodes(4), cat)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v; want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			p := tt.spec.Parallelism
			if p == nil {
				return
			}
			if tt.wantTP > 0 && p.TP != tt.wantTP {
				t.Errorf("tp = %d, want %d", p.TP, tt.wantTP)
			}
			if max(p.TP, 1)*max(p.PP, 1)*p.DP != tt.spec.Ranks && p.DP != 0 {
				t.Errorf("grid %d×%d×%d does not cover %d ranks", p.TP, p.PP, p.DP, tt.spec.Ranks)
			}
			if tt.predict && (p.Predicted == nil || p.Predicted.TokensPerSecPerGPU <= 0) {
				t.Errorf("no prediction recorded: %+v", p.Predicted)
			}
		})
	}
}

func TestAdmitCheckpointDir(t *testing.T) {
	roots := []string{"/data/checkpoints", "/shared/ckpt/"}
	for _, c := range []struct {
		dir string
		ok  bool
	}{
		{"", true},
		{"/data/checkpoints/llama", true},
		{"/shared/ckpt/a/b", true},
		{"/etc", false},
		{"/data/checkpoints", false}, // the root itself holds every job's
		{"/data/checkpointsX/y", false},
		{"/", false},
	} {
		err := admitCheckpointDir(&api.JobSpec{CheckpointDir: c.dir}, roots)
		if c.ok != (err == nil) {
			t.Errorf("checkpointDir %q: %v; want admitted %v", c.dir, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "spec.checkpointDir") {
			t.Errorf("checkpointDir %q: %v; want the field named", c.dir, err)
		}
	}
}

// TestAdmitSize: a command and env copied into every rank or array task
// must fit the store's transactions.
func TestAdmitSize(t *testing.T) {
	arg := strings.Repeat("a", 100<<10-1) // 100 KiB with its NUL
	tests := []struct {
		name   string
		spec   api.JobSpec
		errHas string // "" means admitted
	}{
		{"a typical gang", api.JobSpec{Ranks: 1024, Command: []string{"python3", "train.py"}, Env: map[string]string{"NCCL_DEBUG": "INFO"}}, ""},
		{"a big script on few ranks", api.JobSpec{Ranks: 8, Command: []string{"sh", "-c", arg}}, ""},
		{"a big script on 1024 ranks", api.JobSpec{Ranks: 1024, Command: []string{"sh", "-c", arg}}, "spec.command: with spec.env"},
		{"a big env on 1024 ranks", api.JobSpec{Ranks: 1024, Command: []string{"x"}, Env: map[string]string{"A": arg}}, "to start the gang"},
		{"a typical array", api.JobSpec{Ranks: 1, Array: "0-9999", Command: []string{"python3", "sweep.py", "--lr=0.1"}}, ""},
		{"a big script in an array", api.JobSpec{Ranks: 1, Array: "0-1", Command: []string{"sh", "-c", arg + arg}}, "each array task"},
		{"an array too big in all", api.JobSpec{Ranks: 1, Array: "0-9999", Command: []string{"sh", "-c", arg[:10<<10]}}, "spec.array: 10000 tasks"},
	}
	for _, tt := range tests {
		err := admitSize(&tt.spec)
		if tt.errHas == "" && err != nil || tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)) {
			t.Errorf("%s: admitSize = %v; want %q", tt.name, err, tt.errHas)
		}
	}
}
