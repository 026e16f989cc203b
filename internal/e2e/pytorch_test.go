package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// python is Debian's interpreter, which python3-torch installs torch for.
const python = "/usr/bin/python3"

// pytorchSpec is examples/pytorch-ddp/train.py as 2 nodes × 1 rank (gloo
// over the hosts' own addresses).
func pytorchSpec(script string) string {
	return fmt.Sprintf(`name: e2e-pytorch-ddp
ranks: 2
ranksPerNode: 1
gpusPerRank: 1
maxRestarts: 2
restartBackoff: 200ms
terminationGracePeriod: 5s
env:
  OMP_NUM_THREADS: "1"
command: [%s, %s, --steps, "100", --checkpoint-every, "10", --log-every, "20", --step-delay, 50ms, --device, cpu]
`, strconv.Quote(python), strconv.Quote(script))
}

// TestKillHostPyTorch: the PyTorch DDP example across two namespace hosts;
// the host of rank 0 (the TCPStore master and checkpoint writer) dies and
// a spare host takes its place.
func TestKillHostPyTorch(t *testing.T) {
	needCluster(t)
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skip("needs Debian's python3-torch: apt-get install python3-torch")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "pytorch-ddp", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("the PyTorch example: %v", err)
	}
	c := startCluster(t, 3)
	res := failover{
		spec:       pytorchSpec(script),
		mode:       killHost,
		victimRank: 0,
		failAtStep: 30,
		timeout:    150 * time.Second,
	}.run(t, c)
	t.Logf("RESULT kill host, PyTorch DDP 2x1: %s", res)
}
