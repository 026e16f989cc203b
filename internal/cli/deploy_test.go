package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

const pyHTTP = "/usr/bin/python3"

// TestDeploymentLifecycle runs a deployment of plain HTTP servers (Python's
// http.server, so it needs no GPU or engine) through the real scheduler and
// agents: replicas become ready, scale up and down, roll to a new
// generation, come back after their process dies, and go away on delete.
func TestDeploymentLifecycle(t *testing.T) {
	if _, err := os.Stat(pyHTTP); err != nil {
		t.Skip("needs Debian's python3 at /usr/bin/python3 (apt-get install python3)")
	}
	cl := startCluster(t, 2, 4)
	ctx := context.Background()
	spec := func(version string, replicas int) string {
		return fmt.Sprintf(`
name: web
model: demo
gpusPerReplica: 2
replicas: %d
readinessPath: /
env: {VERSION: %q}
command: [%s, -m, http.server, "${MASTER_PORT}", --bind, "${GANGWAY_NODE_ADDR}"]
`, replicas, version, pyHTTP)
	}
	apply := func(y string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "d.yaml")
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := cl.run("deploy", f); code != 0 {
			t.Fatalf("deploy: %s", errOut)
		}
	}
	waitReady := func(n int, gen int64) *api.Deployment {
		t.Helper()
		var d *api.Deployment
		cl.wait(40*time.Second, fmt.Sprintf("%d ready replicas of generation %d", n, gen), func() bool {
			var err error
			if d, err = cl.c.Deployment(ctx, "web"); err != nil {
				return false
			}
			ready := 0
			for _, r := range d.Status.Replicas {
				if r.Ready && r.Generation == gen && !r.Retiring {
					ready++
				}
			}
			return ready == n && len(d.Status.Replicas) == n
		})
		for _, r := range d.Status.Replicas {
			resp, err := http.Get(r.Endpoint + "/")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("replica %s at %s does not serve: %v", r.JobID, r.Endpoint, err)
			}
			resp.Body.Close()
		}
		return d
	}

	apply(spec("v1", 2))
	d := waitReady(2, 1)
	out, _, _ := cl.run("get", "deployments")
	if !strings.Contains(out, "web") || !strings.Contains(out, "2/2") {
		t.Errorf("get deployments:\n%s", out)
	}
	// Four GPUs per node, two per replica: scaling to 4 fills the cluster.
	if _, errOut, code := cl.run("scale", "web", "4"); code != 0 {
		t.Fatal(errOut)
	}
	waitReady(4, 1)
	if _, errOut, code := cl.run("scale", "web", "1"); code != 0 {
		t.Fatal(errOut)
	}
	d = waitReady(1, 1)

	// A new spec rolls the replica over to generation 2.
	apply(spec("v2", 1))
	d = waitReady(1, 2)
	if d.Generation != 2 {
		t.Fatalf("generation %d after a spec change", d.Generation)
	}

	// The replica's process dies: its job restarts and the deployment heals.
	id := d.Status.Replicas[0].JobID
	jd := cl.detail(id)
	pid := jd.Ranks[len(jd.Ranks)-1].PID
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill replica: %v", err)
	}
	cl.wait(40*time.Second, "the replica back on a new attempt", func() bool {
		j := cl.detail(id)
		d, err := cl.c.Deployment(ctx, "web")
		return err == nil && len(j.Job.Status.Attempts) >= 2 && d.Status.Ready == 1
	})

	if _, errOut, code := cl.run("delete", "deployment", "web"); code != 0 {
		t.Fatal(errOut)
	}
	cl.wait(30*time.Second, "the deployment gone", func() bool {
		_, err := cl.c.Deployment(ctx, "web")
		var ae *client.APIError
		return errors.As(err, &ae) && ae.Status == http.StatusNotFound
	})
	if j := cl.detail(id); j.Job.Status.Phase != api.JobCancelled {
		t.Errorf("replica job %s is %s after delete", id, j.Job.Status.Phase)
	}
	// Its life, told as events.
	var reasons []string
	want := []string{api.ReasonCreated, api.ReasonScaled, api.ReasonScaled, api.ReasonScaled, api.ReasonChanged, api.ReasonDeleting, api.ReasonDeleted}
	cl.wait(10*time.Second, "the deployment's events", func() bool {
		l, err := cl.c.Events(ctx, client.EventQuery{Deployment: "web"})
		reasons = reasons[:0]
		for _, e := range l.Events {
			reasons = append(reasons, e.Reason)
		}
		return err == nil && inOrder(reasons, want)
	})
	if out, _, _ := cl.run("events", "--deployment", "web"); !strings.Contains(out, "scaled from 2 to 4 replicas") {
		t.Errorf("events --deployment web (%q):\n%s", reasons, out)
	}
}

func TestDeploymentValidation(t *testing.T) {
	for in, field := range map[string]string{
		"name: x\nmodel: m\nengine: tgi\n":                               "spec.engine",
		"name: x\nengine: vllm\n":                                        "spec.model",
		"name: x y\nmodel: m\nengine: vllm\n":                            "spec.name",
		"name: x\nmodel: m\nengine: vllm\nreplicas: 5\nmaxReplicas: 2\n": "spec.replicas",
		"name: x\nmodel: m\nengine: vllm\nquantization: fp4\n":           "spec.quantization",
		"name: x\nmodel: m\nengine: vllm\nreplica: 2\n":                  "replica",
	} {
		_, err := api.DecodeDeploymentSpec([]byte(in))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: err %v, want one naming %s", in, err, field)
		}
	}
}

// TestTrainingBorrowsInferenceQuotaAndIsPreemptedBack: a training job in a
// queue without a guarantee borrows the idle GPUs guaranteed to the
// inference queue; when a deployment in that queue needs them, the
// scheduler reclaims them by preempting the trainer, which is requeued.
func TestTrainingBorrowsInferenceQuotaAndIsPreemptedBack(t *testing.T) {
	if _, err := os.Stat(pyHTTP); err != nil {
		t.Skip("needs Debian's python3 at /usr/bin/python3 (apt-get install python3)")
	}
	cl := startCluster(t, 1, 4)
	for _, args := range [][]string{
		{"queue", "set", "serving", "--guarantee", "4", "--cohort", "org"},
		{"queue", "set", "research", "--guarantee", "0", "--cohort", "org"},
	} {
		if _, errOut, code := cl.run(args...); code != 0 {
			t.Fatal(errOut)
		}
	}
	train := cl.submitYAML("queue: research\nranks: 4\npreemptionGracePeriod: 1s\ncommand: [sh, -c, 'sleep 60']\n")
	cl.waitPhase(train, api.JobRunning, 15*time.Second)
	f := filepath.Join(t.TempDir(), "d.yaml")
	os.WriteFile(f, []byte(fmt.Sprintf("name: svc\nqueue: serving\nmodel: m\ngpusPerReplica: 2\nreplicas: 1\nreadinessPath: /\ncommand: [%s, -m, http.server, \"${MASTER_PORT}\", --bind, \"${GANGWAY_NODE_ADDR}\"]\n", pyHTTP)), 0o644)
	if _, errOut, code := cl.run("deploy", f); code != 0 {
		t.Fatal(errOut)
	}
	cl.wait(40*time.Second, "the replica serving", func() bool {
		d, err := cl.c.Deployment(context.Background(), "svc")
		return err == nil && d.Status.Ready == 1
	})
	d := cl.detail(train)
	a := d.Job.Status.Attempts[0]
	if a.Outcome != api.OutcomePreempted || a.PreemptedFor == "" {
		t.Fatalf("the borrowing trainer's first attempt: outcome %q, preempted for %q (%s)", a.Outcome, a.PreemptedFor, a.Reason)
	}
	if ph := d.Job.Status.Phase; ph != api.JobRestarting && ph != api.JobPending && ph != api.JobRunning {
		t.Errorf("trainer is %s after preemption; want it requeued", ph)
	}
	cl.run("delete", "deployment", "svc")
	cl.run("cancel", train)
}
