package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/gangway/gangway/internal/api"
	gwcontainer "github.com/gangway/gangway/internal/node/container"
)

// trainImage holds the example trainer (static) as /train and the
// container tests' program as /rank.
const trainImage = "gangway-test-train:1"

var (
	trainImageOnce sync.Once
	trainImageErr  error
)

// needDocker skips the test where this machine has no Docker engine, and
// otherwise builds trainImage once, from a tar: no registry is reached.
func needDocker(t *testing.T) *client.Client {
	t.Helper()
	if why := gwcontainer.Available(context.Background()); why != "" {
		t.Skip(why)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	trainImageOnce.Do(func() {
		var files []gwcontainer.File
		for name, dir := range map[string]string{"train": "../../examples/train-go", "rank": "../node/container/testdata/rankprog"} {
			bin := filepath.Join(os.TempDir(), "gangway-test-"+name)
			cmd := exec.Command("go", "build", "-o", bin, dir)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				trainImageErr = fmt.Errorf("build %s: %v\n%s", dir, err, out)
				return
			}
			b, err := os.ReadFile(bin)
			if err != nil {
				trainImageErr = err
				return
			}
			files = append(files, gwcontainer.File{Name: name, Mode: 0o755, Body: b})
		}
		trainImageErr = gwcontainer.ImportImage(context.Background(), trainImage, files)
	})
	if trainImageErr != nil {
		t.Fatal(trainImageErr)
	}
	return cli
}

// containersOf lists the containers (running or not) labelled with job id.
// containersOf lists the containers of job id of cl's cluster: those
// with its label and a mount under the cluster's directory, since other
// tests' clusters (other packages' tests run at the same time) number
// their jobs from 1 too.
func containersOf(t *testing.T, cli *client.Client, cl *cluster, id string) []container.Summary {
	t.Helper()
	l, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", gwcontainer.LabelJob+"="+id))})
	if err != nil {
		t.Fatal(err)
	}
	var mine []container.Summary
	for _, c := range l {
		for _, m := range c.Mounts {
			if strings.HasPrefix(m.Source, cl.dir+string(os.PathSeparator)) {
				mine = append(mine, c)
				break
			}
		}
	}
	return mine
}

// TestContainerJobResumesFromItsCheckpoint: a two-rank training job in
// containers checkpoints into the bind-mounted directory; its rank 0's
// container, killed through the engine, ends the attempt with its exit
// code; the next attempt resumes from the checkpoint and succeeds; no
// container of the job is left.
func TestContainerJobResumesFromItsCheckpoint(t *testing.T) {
	cli := needDocker(t)
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML(fmt.Sprintf(`
name: boxed
ranks: 2
image: %s
imagePullPolicy: Never
restartBackoff: 100ms
command: [/train, --steps, "400", --checkpoint-every, "10", --step-delay, 20ms]
`, trainImage))
	var killed string
	cl.wait(60*time.Second, "a checkpoint, then rank 0's container", func() bool {
		d := cl.detail(id)
		if len(d.Checkpoints) == 0 {
			return false
		}
		for _, c := range containersOf(t, cli, cl, id) {
			if c.Labels[gwcontainer.LabelRank] == "0" && c.State == "running" && c.Labels[gwcontainer.LabelAttempt] == "1" {
				killed = c.ID
			}
		}
		return killed != ""
	})
	if err := cli.ContainerKill(context.Background(), killed, "KILL"); err != nil {
		t.Fatal(err)
	}
	d := cl.waitPhase(id, api.JobSucceeded, 90*time.Second)
	atts := d.Job.Status.Attempts
	if len(atts) < 2 || !strings.Contains(atts[0].Reason, "rank 0 on n1 exited with code 137") {
		t.Fatalf("attempts = %+v; want a first ended by rank 0's exit 137", atts)
	}
	out, errOut, code := cl.run("logs", id, "--rank", "1", "--attempt", "2")
	if code != 0 || !strings.Contains(out, "resumed from step") {
		t.Errorf("attempt 2 rank 1 logs (code %d, %s):\n%s\nwant a resume", code, errOut, out)
	}
	// The agent found the checkpoints on the host: the containers wrote
	// them into the bind-mounted directory.
	if len(d.Checkpoints) == 0 {
		t.Error("no checkpoint reported")
	} else if _, err := os.Stat(d.Checkpoints[len(d.Checkpoints)-1].Path); err != nil {
		t.Errorf("the newest checkpoint is not on the host: %v", err)
	}
	cl.wait(10*time.Second, "no container of the job", func() bool { return len(containersOf(t, cli, cl, id)) == 0 })
}

// TestCancelledContainerJobLeavesNoContainer: cancel stops the ranks'
// containers through their shims and the supervisor's reap, and the
// ranks' environment is the launch contract's.
func TestCancelledContainerJobLeavesNoContainer(t *testing.T) {
	cli := needDocker(t)
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML(fmt.Sprintf(`
name: boxed-env
ranks: 2
image: %s
terminationGracePeriod: 1s
command: [/rank, sleep]
`, trainImage))
	cl.wait(60*time.Second, "two running containers", func() bool {
		n := 0
		for _, c := range containersOf(t, cli, cl, id) {
			if c.State == "running" {
				n++
			}
		}
		return n == 2
	})
	cl.wait(20*time.Second, "rank 1 says ready", func() bool {
		out, _, _ := cl.run("logs", id, "--rank", "1")
		return strings.Contains(out, "ready")
	})
	for _, c := range containersOf(t, cli, cl, id) {
		in, err := cli.ContainerInspect(context.Background(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		env := strings.Join(in.Config.Env, "\n") + "\n"
		rank := c.Labels[gwcontainer.LabelRank]
		for _, want := range []string{"RANK=" + rank + "\n", "WORLD_SIZE=2\n", "MASTER_ADDR=127.0.0.1\n", "CUDA_VISIBLE_DEVICES=" + rank + "\n", "GANGWAY_JOB_ID=" + id + "\n"} {
			if !strings.Contains(env, want) {
				t.Errorf("rank %s's container lacks %q in its environment:\n%s", rank, want, env)
			}
		}
		if in.HostConfig.NetworkMode != "host" || in.HostConfig.IpcMode != "host" {
			t.Errorf("rank %s: network %q, ipc %q; want host, host", rank, in.HostConfig.NetworkMode, in.HostConfig.IpcMode)
		}
	}
	if _, errOut, code := cl.run("cancel", id); code != 0 {
		t.Fatalf("cancel: %s", errOut)
	}
	cl.waitPhase(id, api.JobCancelled, 30*time.Second)
	if l := containersOf(t, cli, cl, id); len(l) != 0 {
		t.Fatalf("containers left after the job was cancelled: %+v", l)
	}
}
