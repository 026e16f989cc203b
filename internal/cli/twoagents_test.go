package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/agent"
	"github.com/gangway/gangway/internal/node/gpu"
)

// TestSecondAgentOnOneMachineRefused: a second agent started on a machine
// as the first was (same --name, and so the same --data-dir), or with its
// own data directory but the same name, would become the same node and
// share its rank supervisor, and every job would fail with "already
// running". Each is refused with a message that names the flags to set;
// the first keeps its node.
func TestSecondAgentOnOneMachineRefused(t *testing.T) {
	cl := startCluster(t, 1, 2)
	tests := []struct {
		name    string
		dataDir string
		want    []string
	}{
		{"same data directory", cl.agentDir("n1"), []string{"--data-dir " + cl.agentDir("n1") + " is in use by another agent", "--name"}},
		{"own data directory, same name", filepath.Join(cl.dir, "second"), []string{"--name n1", "held by another live agent", "--data-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disc, err := gpu.NewFake(2, "H100-SXM-80GB", gpu.WithSeed("n1-second"))
			if err != nil {
				t.Fatal(err)
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			a, err := agent.New(agent.Config{Server: cl.url, JoinToken: cl.admin.Token, CAFile: cl.admin.CAFile, Name: "n1", Address: "127.0.0.1",
				DataDir: tt.dataDir, GPUs: disc, ShimPath: exe, Log: testLogger(t, "n1-second")})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = a.Run(ctx)
			if err == nil {
				t.Fatal("the second agent ran until the test gave up; want it refused")
			}
			t.Logf("refused: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
	// The first agent still holds its node: a job runs on it.
	id := cl.submitYAML("ranks: 1\ncommand: [true]\n")
	cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
}
