package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// lockedBuffer is a bytes.Buffer several goroutines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServerCommand runs `gangway server ARGS` in this process, as a user
// would start it, and agents n1..nN against it.
func startServerCommand(t *testing.T, nodes, gpus int, args ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster; skipped with -short")
	}
	dir := t.TempDir()
	var stderr lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{t: t, dir: dir, cancel: cancel, agents: map[string]context.CancelFunc{}, done: map[string]chan struct{}{},
		config: filepath.Join(dir, "client-config")}
	code := make(chan int, 1)
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		args := append([]string{"server", "--data-dir", filepath.Join(dir, "server"), "--listen", "127.0.0.1:0", "--log-level", "info"}, args...)
		// The first start writes the admin's context into the client
		// config, as it would into ~/.config/gangway/config.
		code <- Main(ctx, args, &Env{Stdout: &stderr, Stderr: &stderr, Getenv: func(k string) string {
			if k == "GANGWAY_CONFIG" {
				return cl.config
			}
			return ""
		}})
	}()
	t.Cleanup(cl.stop)
	addr := regexp.MustCompile(`gangway server listening"? addr=(\S+)`)
	for deadline := time.Now().Add(10 * time.Second); cl.url == ""; {
		select {
		case c := <-code:
			t.Fatalf("gangway server exited %d:\n%s", c, stderr.String())
		default:
		}
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			cl.url = "https://" + m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gangway server did not say where it listens:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "client config updated"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gangway server wrote no client config:\n%s", stderr.String())
		}
	}
	admin, err := client.ConfigFor(cl.config, client.Resolve{})
	if err != nil {
		t.Fatal(err)
	}
	cl.useAdmin(admin)
	for i := 1; i <= nodes; i++ {
		cl.startAgent(fmt.Sprintf("n%d", i), gpus)
	}
	cl.waitNodes(nodes)
	return cl
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The server command must hand every flag to the server it runs: a
// topology file that puts both nodes under one leaf lets a gang that must
// stay inside a leaf span them (nodes the file does not name are each a
// leaf of their own), and --gateway-listen serves the OpenAI API.
func TestServerCommandAppliesTopologyFileAndGateway(t *testing.T) {
	topo := filepath.Join(t.TempDir(), "topology.conf")
	conf := "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n3\nSwitchName=spine Switches=leaf[1-2]\n"
	if err := os.WriteFile(topo, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := freeAddr(t)
	cl := startServerCommand(t, 2, 8, "--topology-file", topo, "--gateway-listen", gw)

	id := cl.submitYAML("name: one-leaf\nranks: 2\ngpusPerRank: 8\ntopology: {required: leaf}\ncommand: [\"true\"]\n")
	cl.waitPhase(id, api.JobSucceeded, 20*time.Second)

	resp, err := http.Get("http://" + gw + "/v1/models")
	if err != nil {
		t.Fatalf("gateway on --gateway-listen %s: %v", gw, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/models on the gateway: %s; want 200", resp.Status)
	}
}

func TestServerCommandNamesBadFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "topology.conf")
	if err := os.WriteFile(bad, []byte("SwitchName=leaf1 Nodez=n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--topology-file", bad}, []string{"--topology-file", bad}},
		{[]string{"--job-retention", "-1h"}, []string{"--job-retention", "negative"}},
		{[]string{"--max-finished-jobs", "-5"}, []string{"--max-finished-jobs", "negative"}},
		{[]string{"--checkpoint-dir-root", "shared/ckpt"}, []string{"--checkpoint-dir-root", "absolute"}},
		{[]string{"--job-archive", filepath.Join(bad, "jobs.jsonl")}, []string{"--job-archive", "not a directory"}},
		{[]string{"--job-archive-max-size", "1X"}, []string{"job-archive-max-size", "such as \"64G\""}},
		{[]string{"--job-archive", filepath.Join(t.TempDir(), "jobs.jsonl"), "--job-archive-keep", "-1"}, []string{"--job-archive-keep", "negative"}},
		{[]string{"--job-archive-max-size", "1G"}, []string{"--job-archive-max-size", "need --job-archive"}},
	} {
		var out bytes.Buffer
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, c.args...)
		code := Main(context.Background(), args, &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
		if code == 0 {
			t.Errorf("gangway server %v: exit 0; want an error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("gangway server %v: %q; want it to say %q", c.args, out.String(), w)
			}
		}
	}
}

// get jobs --live shows what squeue would (not finished), --limit the
// newest N; both read little however many finished jobs the store keeps.
func TestGetJobsLiveAndLimit(t *testing.T) {
	cl := startCluster(t, 1, 8)
	done := cl.submitYAML("name: done\nranks: 1\ngpusPerRank: 1\ncommand: [\"true\"]\n")
	cl.waitPhase(done, api.JobSucceeded, 20*time.Second)
	running := cl.submitYAML("name: running\nranks: 1\ngpusPerRank: 8\ncommand: [sleep, \"60\"]\n")
	cl.waitPhase(running, api.JobRunning, 20*time.Second)
	waiting := cl.submitYAML("name: waiting\nranks: 1\ngpusPerRank: 8\ncommand: [\"true\"]\n")
	t.Cleanup(func() { cl.run("cancel", running); cl.run("cancel", waiting) })

	ids := func(args ...string) []string {
		t.Helper()
		out, errOut, code := cl.run(append([]string{"get", "jobs", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("get jobs %v: code %d: %s", args, code, errOut)
		}
		var js []*api.Job
		if err := json.Unmarshal([]byte(out), &js); err != nil {
			t.Fatalf("get jobs %v output %q: %v", args, out, err)
		}
		var got []string
		for _, j := range js {
			got = append(got, j.ID)
		}
		return got
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{done, running, waiting}},
		{[]string{"--live"}, []string{running, waiting}},
		{[]string{"--limit", "2"}, []string{running, waiting}},
		{[]string{"--limit", "5"}, []string{done, running, waiting}},
		{[]string{"--live", "--limit", "1"}, []string{waiting}},
	} {
		if got := ids(c.args...); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("get jobs %v: %v; want %v", c.args, got, c.want)
		}
	}
	for _, args := range [][]string{{"get", "jobs", "--limit", "-1"}, {"get", "nodes", "--live"}} {
		if _, errOut, code := cl.run(args...); code != 2 || !strings.Contains(errOut, "--") {
			t.Errorf("%v: code %d, %q; want usage error 2 naming the flag", args, code, errOut)
		}
	}
	err := cl.c.Get(context.Background(), "/v1/jobs?limit=x&live=maybe", nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || len(ae.Fields) != 2 || ae.Fields[0].Field != "live" || ae.Fields[1].Field != "limit" {
		t.Errorf("GET /v1/jobs?limit=x&live=maybe: %v; want 400 naming live and limit", err)
	}
}

// cancel --array still finds an array whose first task, the one that names
// it, finished and was deleted by retention while the others run or wait.
func TestCancelArrayAfterRetentionDeletedItsFirstTask(t *testing.T) {
	cl := startClusterWith(t, 1, 8, func(c *server.Config) {
		c.MaxFinishedJobs, c.RetentionTick = 2, 50*time.Millisecond
	})
	so, errOut, code := cl.run("submit", "--array", "0-2%1", "--ranks", "1", "-o", "json", "--",
		"sh", "-c", `test "$GANGWAY_ARRAY_TASK_ID" = 0 || exec sleep 60`)
	if code != 0 {
		t.Fatalf("submit --array: %s", errOut)
	}
	var a api.ArraySubmission
	if err := json.Unmarshal([]byte(so), &a); err != nil || len(a.Jobs) != 3 {
		t.Fatalf("array submission %q: %v", so, err)
	}
	cl.waitPhase(a.Jobs[0], api.JobSucceeded, 20*time.Second)
	cl.waitPhase(a.Jobs[1], api.JobRunning, 20*time.Second)
	// Two more finished jobs put the first task beyond the two kept; the
	// two tasks cancelled below will be the newest two.
	for range 2 {
		cl.waitPhase(cl.submitYAML("name: other\nranks: 1\ngpusPerRank: 1\ncommand: [\"true\"]\n"), api.JobSucceeded, 20*time.Second)
	}
	cl.wait(20*time.Second, "the array's first task to be deleted", func() bool {
		_, err := cl.c.Job(context.Background(), a.Jobs[0])
		return err != nil && strings.Contains(err.Error(), "not found")
	})
	for _, cmd := range [][]string{{"describe", "job", a.Jobs[0]}, {"logs", a.Jobs[0]}} {
		if _, errOut, code := cl.run(cmd...); code == 0 || !strings.Contains(errOut, "--job-retention") {
			t.Errorf("%v after retention deleted it: code %d, %q; want an error saying retention may have", cmd, code, errOut)
		}
	}
	if out, errOut, code := cl.run("cancel", "--array", a.ArrayID); code != 0 {
		t.Fatalf("cancel --array %s after its first task was deleted: code %d: %s%s", a.ArrayID, code, out, errOut)
	}
	for _, id := range a.Jobs[1:] {
		cl.waitPhase(id, api.JobCancelled, 20*time.Second)
	}
}

// A job retention deleted is still there for describe and logs when the
// server keeps a job archive, as sacct still finds a job Slurm forgot.
func TestArchivedJobStaysDescribable(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "jobs.jsonl")
	cl := startClusterWith(t, 1, 8, func(c *server.Config) {
		c.MaxFinishedJobs, c.RetentionTick, c.JobArchive.Path = 1, 50*time.Millisecond, archive
	})
	old := cl.submitYAML("name: old\nranks: 1\ncommand: [sh, -c, 'echo from the old job']\n")
	cl.waitPhase(old, api.JobSucceeded, 20*time.Second)
	cl.waitPhase(cl.submitYAML("name: newer\nranks: 1\ncommand: [\"true\"]\n"), api.JobSucceeded, 20*time.Second)
	cl.wait(20*time.Second, "the old job to move to the archive", func() bool {
		return cl.detail(old).Archived
	})
	l, err := cl.c.Jobs(context.Background(), client.JobQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range l.Jobs {
		if j.ID == old {
			t.Errorf("the job list still holds archived job %s", old)
		}
	}
	d := cl.detail(old)
	if d.Job.Status.Phase != api.JobSucceeded || d.Job.Spec.Name != "old" || len(d.Ranks) != 1 {
		t.Errorf("archived job = %s %q with %d ranks; want the Succeeded job 'old' with its rank", d.Job.Status.Phase, d.Job.Spec.Name, len(d.Ranks))
	}
	out, errOut, code := cl.run("describe", "job", old)
	if code != 0 || !strings.Contains(out, "Archived:") || !strings.Contains(out, "Succeeded") {
		t.Errorf("describe job %s (archived): code %d, %q %q", old, code, out, errOut)
	}
	if out, errOut, code := cl.run("logs", old); code != 0 || strings.TrimSpace(out) != "from the old job" {
		t.Errorf("logs %s (archived): code %d, %q %q; want its output, still on its node", old, code, out, errOut)
	}
	// A job neither the store nor this archive holds says where else to look.
	if err := os.WriteFile(archive, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cl.run("describe", "job", old); code == 0 || !strings.Contains(errOut, "does not hold it") {
		t.Errorf("describe job %s once the archive lost it: code %d, %q", old, code, errOut)
	}
}
