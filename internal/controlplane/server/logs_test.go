package server

import (
	"bytes"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

// TestLogProcess: a rank of a per-node launch reads its node's launcher's
// log; torchrun's is filtered to the rank's local rank.
func TestLogProcess(t *testing.T) {
	// Two nodes of two ranks: 0,1 on a (node rank 0), 2,3 on b.
	a := &api.Attempt{Placement: []api.RankPlacement{
		{Rank: 0, Node: "a", NodeRank: 0, LocalRank: 0}, {Rank: 1, Node: "a", NodeRank: 0, LocalRank: 1},
		{Rank: 2, Node: "b", NodeRank: 1, LocalRank: 0}, {Rank: 3, Node: "b", NodeRank: 1, LocalRank: 1},
	}}
	for _, tt := range []struct {
		launch           api.LaunchMode
		rank             int
		whole            bool
		wantProc, wantLR int
	}{
		{api.LaunchPerRank, 3, false, 3, -1},
		{"", 1, false, 1, -1},
		{api.LaunchTorchrun, 1, false, 0, 1},
		{api.LaunchTorchrun, 3, false, 2, 1},
		{api.LaunchTorchrun, 2, false, 2, 0},
		{api.LaunchTorchrun, 3, true, 2, -1},
		{api.LaunchDeepSpeed, 3, false, 2, -1},
		{api.LaunchPerNode, 1, false, 0, -1},
	} {
		proc, lr := logProcess(&api.JobSpec{Launch: tt.launch}, a, tt.rank, tt.whole)
		if proc != tt.wantProc || lr != tt.wantLR {
			t.Errorf("%s rank %d whole=%v: process %d, local rank %d; want %d, %d", tt.launch, tt.rank, tt.whole, proc, lr, tt.wantProc, tt.wantLR)
		}
	}
}

// TestLocalRankLines keeps one local rank's lines of torchrun's output,
// without torchrun's mark, and torchrun's own, whatever the writes' sizes.
func TestLocalRankLines(t *testing.T) {
	in := "WARNING:torch.distributed.run:\n[default0]:hi 0\n[default1]:hi 1\n[stderr] [default1]:err 1\n" +
		"[default10]:hi 10\n[stderr] Traceback (most recent call last):\n[default1]:last"
	want := "WARNING:torch.distributed.run:\nhi 1\n[stderr] err 1\n[stderr] Traceback (most recent call last):\nlast"
	for _, chunk := range []int{1, 7, len(in)} {
		var b bytes.Buffer
		l := &localRankLines{w: &b, local: 1}
		for i := 0; i < len(in); i += chunk {
			if _, err := l.Write([]byte(in[i:min(i+chunk, len(in))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("writes of %d bytes: %q; want %q", chunk, b.String(), want)
		}
	}
}
