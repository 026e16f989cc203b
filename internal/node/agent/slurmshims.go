package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// slurmPath is the PATH of a rank of a Slurm job (spec.slurm, which gives
// it SLURM_JOB_ID): a directory in its task directory holding srun and
// scontrol, links to this binary that answers as their stand-ins, ahead
// of the PATH env gives it.
func slurmPath(taskDir, exe string, env []string) (string, error) {
	bin := filepath.Join(taskDir, "slurm-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("slurm stand-ins: %w", err)
	}
	for _, n := range []string{"srun", "scontrol"} {
		p := filepath.Join(bin, n)
		if err := os.Symlink(exe, p); err != nil && !os.IsExist(err) {
			return "", fmt.Errorf("slurm stand-ins: %w", err)
		}
	}
	path := ""
	for _, kv := range env { // the last one is what the rank gets
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if path == "" {
		return bin, nil
	}
	return bin + string(os.PathListSeparator) + path, nil
}
