package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/slurm"
)

// A Slurm batch script runs unchanged: its #SBATCH headers make the gang,
// each task runs the script with Slurm's variables, srun runs the step in
// the task, scontrol show hostnames lists the nodes, and what gangway
// reads differently is said.
func TestSubmitSlurmBatchScript(t *testing.T) {
	cl := startCluster(t, 2, 2)
	script := filepath.Join(t.TempDir(), "multinode.sbatch")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
#SBATCH --job-name=slurm-compat
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-task=1
#SBATCH --time=10:00
#SBATCH --mail-type=END
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --label --kill-on-bad-exit=1 -n 4 /bin/sh -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS local $SLURM_LOCALID node $SLURM_NODEID nodes $SLURM_JOB_NODELIST gpus $CUDA_VISIBLE_DEVICES first $1 arg $2"' step "$first" "$1"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cl.run("submit", "--parsable", script, "hello")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if !strings.Contains(errOut, "--mail-type") {
		t.Errorf("no note on the ignored --mail-type: %q", errOut)
	}
	d := cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	if d.Job.Spec.Name != "slurm-compat" || d.Job.Spec.Ranks != 4 || d.Job.Spec.TimeLimit.D() != 10*time.Minute || !d.Job.Spec.Slurm {
		t.Errorf("spec %+v", d.Job.Spec)
	}
	a := d.Job.Status.Current()
	p := a.Placement[3]
	logs, errOut, code := cl.run("logs", id, "--rank", "3", "--stdout")
	if code != 0 {
		t.Fatalf("logs: %s", errOut)
	}
	want := fmt.Sprintf("task 3 of 4 local %d node %d nodes %s gpus %d first 127.0.0.1 arg hello", p.LocalRank, p.NodeRank, slurm.CompressHosts(a.Nodes()), p.GPUs[0])
	if strings.TrimSpace(logs) != want {
		t.Errorf("rank 3 printed %q, want %q", strings.TrimSpace(logs), want)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dependency=afterok:99999", "--wrap", "true"}, "job 99999 does not exist"},
		{[]string{"--dependency=afterok:1?afterok:2", "--wrap", "true"}, "--dependency"},
		{[]string{"-N", "3", "-n", "4", "--wrap", "true"}, "does not divide"},
		{[]string{"--time", "soon", "--wrap", "true"}, "--time"},
	} {
		if _, errOut, code := cl.run(append([]string{"submit"}, tc.args...)...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("submit %q: code %d, %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.sh")
	os.WriteFile(bad, []byte("#!/bin/sh\n#SBATCH --frobnicate=2\ntrue\n"), 0o644)
	if _, errOut, code := cl.run("submit", bad); code == 0 || !strings.Contains(errOut, "--frobnicate") || !strings.Contains(errOut, "line 2") {
		t.Errorf("unknown #SBATCH option: code %d, %q", code, errOut)
	}
	// --wrap and --wait: the exit status is the job's.
	if out, errOut, code := cl.run("submit", "--wait", "--no-requeue", "-J", "wrapped", "--wrap", "exit 3"); code != 1 || !strings.Contains(errOut, "failed") {
		t.Errorf("submit --wait of a failing job: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code := cl.run("submit", "--wait", "-N", "2", "--", "sh", "-c", "test $SLURM_NNODES = 2"); code != 0 || !strings.Contains(out, "Submitted batch job") {
		t.Errorf("submit --wait -- CMD: code %d, %q %q", code, out, errOut)
	}
}

// The README's Slurm script is read as a Slurm user means it, and the
// spec it makes is admitted.
func TestReadmeSlurmScript(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Coming from Slurm")
	_, rest, ok2 := strings.Cut(rest, "```bash\n")
	script, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README has no Slurm script under Coming from Slurm")
	}
	var o slurm.Options
	sc, err := slurm.ParseScript(&o, []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := slurm.Spec(&o, sc, "job.sbatch", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec.Default()
	if err := spec.Validate(); err != nil || spec.Ranks != 8 || spec.RanksPerNode != 4 || spec.GPUsPerRank != 1 || spec.TimeLimit.D() != 24*time.Hour {
		t.Errorf("spec %+v: %v", spec, err)
	}
}

// Dependencies as Slurm's: a job waits, saying for what, until the jobs
// it names succeed; one whose dependency can no longer hold is cancelled,
// saying why; one on a job that already failed is refused.
func TestSubmitDependencies(t *testing.T) {
	cl := startCluster(t, 1, 4)
	submit := func(args ...string) string {
		t.Helper()
		out, errOut, code := cl.run(append([]string{"submit", "--parsable"}, args...)...)
		if code != 0 {
			t.Fatalf("submit %q: %d %s", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	first := submit("-J", "first", "--wrap", "sleep 2")
	then := submit("-J", "then", "--dependency", "afterok:"+first, "--wrap", "true")
	cl.wait(10*time.Second, "the dependent job to say what it waits for", func() bool {
		d := cl.detail(then)
		return d.Job.Status.Phase == api.JobPending && strings.Contains(d.Job.Status.Reason, "waits for job "+first+" to succeed")
	})
	cl.waitPhase(first, api.JobSucceeded, 20*time.Second)
	d := cl.waitPhase(then, api.JobSucceeded, 20*time.Second)
	if a := d.Job.Status.Attempts[0]; a.CreatedAt.Before(cl.detail(first).Job.Status.FinishedAt) {
		t.Errorf("job %s started at %s, before job %s ended", then, a.CreatedAt, first)
	}

	failing := submit("-J", "failing", "--no-requeue", "--wrap", "sleep 2; exit 1")
	doomed := submit("-J", "doomed", "--dependency", "afterok:"+failing, "--wrap", "true")
	d = cl.waitPhase(doomed, api.JobCancelled, 30*time.Second)
	if !strings.Contains(d.Job.Status.Reason, "can no longer hold") || len(d.Job.Status.Attempts) != 0 {
		t.Errorf("doomed job: %s after %d attempts", d.Job.Status.Reason, len(d.Job.Status.Attempts))
	}
	if _, errOut, code := cl.run("submit", "--dependency", "afterok:"+failing, "--wrap", "true"); code == 0 || !strings.Contains(errOut, "can never hold") {
		t.Errorf("a dependency on a failed job: %d %q; want it refused", code, errOut)
	}
	after := submit("--dependency", "afternotok:"+failing, "--wrap", "true")
	cl.waitPhase(after, api.JobSucceeded, 20*time.Second)
}
