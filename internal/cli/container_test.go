package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/agent"
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
	if why := gwcontainer.Available(context.Background(), ""); why != "" {
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

// containerJob starts a cluster of one node with two GPUs and submits
// spec there, its "IMAGE" replaced by trainImage.
func containerJob(t *testing.T, spec string) (*client.Client, *cluster, string) {
	t.Helper()
	cli := needDocker(t)
	cl := startCluster(t, 1, 2)
	return cli, cl, cl.submitYAML(strings.ReplaceAll(spec, "IMAGE", trainImage))
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
// container, killed through the engine, ends the attempt; the next attempt resumes from the checkpoint and succeeds; no
// container of the job is left.
func TestContainerJobResumesFromItsCheckpoint(t *testing.T) {
	cli, cl, id := containerJob(t, `
name: boxed
ranks: 2
image: IMAGE
imagePullPolicy: Never
restartBackoff: 100ms
command: [/train, --steps, "400", --checkpoint-every, "10", --step-delay, 20ms]
`)
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
	// Rank 1 sees its peer go within milliseconds, and its shim may end
	// first (rank 0's has the engine's kill to wait out): either exit
	// may be the first the attempt hears of.
	if len(atts) < 2 || !strings.Contains(atts[0].Reason, "rank 0 on n1 exited with code 137") &&
		!strings.Contains(atts[0].Reason, "rank 1 on n1 exited with code 1: train-example: rank 1") {
		t.Fatalf("attempts = %+v; want a first ended by rank 0's exit 137 or rank 1's losing it", atts)
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
	cli, cl, id := containerJob(t, `
name: boxed-env
ranks: 2
image: IMAGE
terminationGracePeriod: 1s
command: [/rank, sleep]
`)
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

// TestDemoDocker runs `gangway demo --driver docker -o json`, shrunk: the
// demo makes its image from this executable, its ranks run in containers,
// a node dies with its containers, the gang resumes elsewhere from its
// checkpoint and ends with the reference's final loss; no container of
// the demo is left.
func TestDemoDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo; skipped with -short")
	}
	cli := needDocker(t)
	saved := demoShape
	t.Cleanup(func() { demoShape = saved })
	demoShape = demoConfig{nodes: 3, gpus: 4, ranks: 4, perNode: 2, steps: 160, killAtStep: 60,
		stepDelay: 20 * time.Millisecond, timeout: 150 * time.Second}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"demo", "--driver", "docker", "-o", "json"}, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: os.Getenv})
	t.Log(stderr.String())
	if code != 0 {
		t.Fatalf("demo --driver docker exited %d:\n%s", code, stdout.String())
	}
	var sum map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", stdout.String(), err)
	}
	for _, k := range []string{"fault", "detection_s", "recovery_s", "resumed_from_step", "killed_at_step", "final_loss",
		"reference_final_loss", "loss_rel_diff", "tolerance", "killed_node", "attempts", "restarts", "total_s", "ok"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %q: %s", k, stdout.String())
		}
	}
	if sum["driver"] != "docker" || sum["ok"] != true || sum["attempts"] != 2.0 || sum["resumed_from_step"].(float64) <= 0 {
		t.Errorf("summary = %s; want driver docker, ok, 2 attempts, a resume", stdout.String())
	}
	if sum["final_loss"] != sum["reference_final_loss"] {
		t.Errorf("final loss %v, reference %v: want equal", sum["final_loss"], sum["reference_final_loss"])
	}
	if !strings.Contains(stderr.String(), "in a Docker container of image gangway-demo:") {
		t.Errorf("the demo's progress does not say its ranks ran in containers:\n%s", stderr.String())
	}
	l, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", gwcontainer.LabelNode))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l {
		if strings.HasPrefix(c.Image, "gangway-demo:") {
			t.Errorf("container %v of the demo left behind (%s)", c.Names, c.State)
		}
	}
}

// TestAgentRestartKeepsContainerRanksAndSweepsStrays: an agent stopped
// while a container job trains leaves its ranks running; the agent that
// starts next re-attaches to them, reports their exits (the job succeeds
// in its first attempt), and removes, at its start, a container labelled
// for its instance whose rank its supervisor does not know (as a shim and
// supervisor killed together leave one) while keeping the job's.
func TestAgentRestartKeepsContainerRanksAndSweepsStrays(t *testing.T) {
	cli, cl, id := containerJob(t, `
name: boxed-restart
ranks: 2
image: IMAGE
imagePullPolicy: Never
command: [/train, --steps, "250", --checkpoint-every, "0", --step-delay, 20ms]
`)
	running := func() int {
		n := 0
		for _, c := range containersOf(t, cli, cl, id) {
			if c.State == "running" {
				n++
			}
		}
		return n
	}
	cl.wait(60*time.Second, "two running containers", func() bool { return running() == 2 })
	cl.stopAgent("n1")

	b, err := os.ReadFile(filepath.Join(cl.agentDir("n1"), "instance-id"))
	if err != nil {
		t.Fatal(err)
	}
	instance := strings.TrimSpace(string(b))
	ctx := context.Background()
	stray := gwcontainer.NameFor(instance, "gone.1.0")
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: trainImage, Entrypoint: []string{"/rank", "sleep"},
		Labels: map[string]string{gwcontainer.LabelJob: "gone", gwcontainer.LabelAttempt: "1", gwcontainer.LabelRank: "0",
			gwcontainer.LabelTask: "gone.1.0", gwcontainer.LabelNode: "n1", gwcontainer.LabelInstance: instance}},
		&container.HostConfig{NetworkMode: "host"}, nil, nil, stray)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}) })
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := running(); n != 2 {
		t.Fatalf("%d of the job's containers running with its agent stopped; want 2", n)
	}

	cl.startAgent("n1", 2)
	cl.wait(20*time.Second, "the stray container removed", func() bool {
		_, err := cli.ContainerInspect(ctx, created.ID)
		return err != nil
	})
	d := cl.waitPhase(id, api.JobSucceeded, 60*time.Second)
	if n := len(d.Job.Status.Attempts); n != 1 {
		t.Errorf("%d attempts; want the first to run on through the agent's restart: %+v", n, d.Job.Status.Attempts)
	}
	cl.wait(10*time.Second, "no container of the job", func() bool { return len(containersOf(t, cli, cl, id)) == 0 })
}

// TestEngineDownIsTheNodesFault: a node whose Docker engine does not
// answer cannot start a container rank; the attempt ends as the node's
// fault (node-fault, no restart used), not the user's, and the job runs
// on another node.
func TestEngineDownIsTheNodesFault(t *testing.T) {
	needDocker(t)
	cl := startClusterWith(t, 0, 0, nil)
	cl.adjustAgent = func(c *agent.Config) {
		if c.Name == "n1" {
			c.DockerHost = "unix://" + filepath.Join(cl.dir, "no-docker.sock")
		}
	}
	cl.startAgent("n1", 2)
	cl.waitNodes(1)
	id := cl.submitYAML(strings.ReplaceAll(`
name: boxed-elsewhere
ranks: 1
image: IMAGE
imagePullPolicy: Never
maxRestarts: 0
command: [/train, --steps, "20", --step-delay, 0s]
`, "IMAGE", trainImage))
	cl.wait(30*time.Second, "attempt 1 ended", func() bool {
		as := cl.detail(id).Job.Status.Attempts
		return len(as) > 0 && as[0].Phase == api.AttemptEnded
	})
	cl.startAgent("n2", 2)
	d := cl.waitPhase(id, api.JobSucceeded, 60*time.Second)
	as := d.Job.Status.Attempts
	if len(as) != 2 || as[0].Cause != api.CauseNodeFault || as[0].Charged || d.Job.Status.Restarts != 0 ||
		!strings.Contains(as[0].Reason, "does not answer") || as[1].Placement[0].Node != "n2" {
		t.Errorf("attempts = %+v, restarts %d; want the first a node-fault on n1 that used up no restart, the second on n2", as, d.Job.Status.Restarts)
	}
	if !slices.Contains(d.Job.Status.Avoid, "n1") {
		t.Errorf("avoid = %v; want n1", d.Job.Status.Avoid)
	}
}

// TestPreemptedContainerJobCheckpointsAndResumes: the checkpoint signal of
// a preemption reaches the trainer inside the container (through the shim
// and the engine), which checkpoints and stops; the job resumes from that
// checkpoint once the higher-priority job is done, and no container of it
// is left.
func TestPreemptedContainerJobCheckpointsAndResumes(t *testing.T) {
	cli, cl, low := containerJob(t, `
name: low-boxed
priority: 0
ranks: 2
image: IMAGE
imagePullPolicy: Never
checkpointSignal: SIGUSR1
preemptionGracePeriod: 20s
restartBackoff: 100ms
command: [/train, --steps, "200", --checkpoint-every, "0", --step-delay, 20ms]
`)
	cl.wait(60*time.Second, "the boxed trainer making progress", func() bool {
		d := cl.detail(low)
		return d.Progress != nil && d.Progress.Latest.Step >= 20
	})
	high := cl.submitYAML("name: high\npriority: 10\nranks: 2\ncommand: [sh, -c, 'sleep 1']\n")
	cl.waitPhase(high, api.JobSucceeded, 60*time.Second)
	ld := cl.waitPhase(low, api.JobSucceeded, 90*time.Second)
	atts := ld.Job.Status.Attempts
	if len(atts) != 2 || atts[0].Outcome != api.OutcomePreempted || !strings.Contains(atts[0].Reason, "after checkpointing") {
		t.Fatalf("low's attempts: %+v; want the first preempted after its checkpoint", atts)
	}
	if atts[1].ResumeFrom == nil || atts[1].ResumeFrom.Step < 20 || ld.Job.Status.Restarts != 0 {
		t.Errorf("attempt 2 resumed from %+v with %d restarts used; want the SIGUSR1 checkpoint and none", atts[1].ResumeFrom, ld.Job.Status.Restarts)
	}
	cl.wait(10*time.Second, "no container of the job", func() bool { return len(containersOf(t, cli, cl, low)) == 0 })
}

// TestLogsFollowsContainerRank: `gangway logs -f` follows a container
// rank's output as it comes (the shim copies the container's to the
// supervisor's pipes) and ends with the rank, having printed every line
// once.
func TestLogsFollowsContainerRank(t *testing.T) {
	_, cl, id := containerJob(t, `
name: boxed-logs
ranks: 1
image: IMAGE
imagePullPolicy: Never
command: [/train, --steps, "100", --checkpoint-every, "0", --log-every, "10", --step-delay, 30ms]
`)
	cl.wait(60*time.Second, "the rank running", func() bool {
		d := cl.detail(id)
		return len(d.Ranks) > 0 && d.Ranks[0].State == api.RankRunning
	})
	followed := cl.runAsync("logs", id, "--rank", "0", "-f")
	var r runResult
	select {
	case r = <-followed:
	case <-time.After(60 * time.Second):
		t.Fatal("gangway logs -f did not end with the container rank")
	}
	all, _, _ := cl.run("logs", id, "--rank", "0")
	if r.code != 0 || r.out != all || strings.Count(all, "\n") < 5 {
		t.Errorf("logs -f: code %d, stderr %q, stdout:\n%s\nwant the rank's whole log:\n%s", r.code, r.errOut, r.out, all)
	}
	if d := cl.detail(id); d.Job.Status.Phase != api.JobSucceeded {
		t.Errorf("job %s; want Succeeded", d.Job.Status.Phase)
	}
}
