package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/agent"
	"github.com/gangway/gangway/internal/node/gpu"
	"github.com/gangway/gangway/internal/node/health"
	"go.uber.org/goleak"
)

// TestMain lets the test binary stand in for the gangway executable: the
// agent runs ranks through `<exe> supervise`, and the demo starts agents
// and trainers as `<exe> agent` and `<exe> train-example` (and, in the
// server-restart scenario, the server as `<exe> server` and each rank
// under `<exe> chaos-rank`).
func TestMain(m *testing.M) {
	testenv.QuickRaceExit()
	if name := SlurmShimName(os.Args[0]); name != "" {
		os.Exit(Shim(name, os.Args[1:], &Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "agent", "supervise", "cg-exec", "container-rank", "container-reap", "train-example", "engine-sim", "server", "chaos-rank", "preflight-rank", "__complete":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := Main(ctx, os.Args[1:], &Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
			stop()
			os.Exit(code)
		}
	}
	code := m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(testenv.EtcdLeaks()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cluster is a server and agents in this process, with real etcd, real
// HTTP on loopback and real rank processes.
type cluster struct {
	t   *testing.T
	url string
	// config is the client config file the CLI commands read (the
	// admin's context); admin is its context.
	config string
	admin  client.Config
	c      *client.Client
	dir    string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	done   map[string]chan struct{}
	// fakes, when not nil, gives every agent started from then on health
	// checks over fake GPUs, kept here by node for tests to inject into.
	fakes map[string]*health.Fake
	// adjustAgent, when not nil, adjusts the configuration of every
	// agent started from then on; handles are the agents by node.
	adjustAgent func(*agent.Config)
	handles     map[string]*agent.Agent
	// srv is the server.
	srv *server.Server
}

func startCluster(t *testing.T, nodes, gpus int) *cluster {
	t.Helper()
	return startClusterWith(t, nodes, gpus, nil)
}

// startClusterWith lets a test adjust the server's configuration.
func startClusterWith(t *testing.T, nodes, gpus int, adjust func(*server.Config)) *cluster {
	t.Helper()
	return startClusterWrapped(t, nodes, gpus, adjust, nil)
}

// startClusterWrapped also lets a test wrap the server's listener (to
// stall it); nil wraps nothing.
func startClusterWrapped(t *testing.T, nodes, gpus int, adjust func(*server.Config), wrap func(net.Listener) net.Listener) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster; skipped with -short")
	}
	dir := t.TempDir()
	cfg := server.Config{DataDir: filepath.Join(dir, "server"), Log: testLogger(t, "server")}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{t: t, url: "http://" + ln.Addr().String(), dir: dir, cancel: cancel, srv: srv,
		agents: map[string]context.CancelFunc{}, done: map[string]chan struct{}{}}
	cl.url = "https://" + ln.Addr().String()
	cl.config = filepath.Join(dir, "client-config")
	cl.wg.Add(1)
	go func() { defer cl.wg.Done(); _ = srv.Run(ctx, ln) }()
	t.Cleanup(cl.stop)
	<-srv.Ready()
	admin, err := srv.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.SaveContext(cl.config, client.Context{Name: "test", Server: admin.Server, Token: admin.Token, CAFile: admin.CAFile}, true); err != nil {
		t.Fatal(err)
	}
	cl.useAdmin(admin)
	for i := 1; i <= nodes; i++ {
		cl.startAgent(fmt.Sprintf("n%d", i), gpus)
	}
	cl.waitNodes(nodes)
	return cl
}

// useAdmin makes admin the cluster's credentials for its client and
// agents.
func (cl *cluster) useAdmin(admin client.Config) {
	cl.admin = admin
	cl.c = newTestClient(cl.t, admin)
}

// newTestClient is a client for cfg, its connections closed when the test
// ends.
func newTestClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := newClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func testLogger(t *testing.T, who string) *slog.Logger {
	if os.Getenv("GANGWAY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
}

func (cl *cluster) startAgent(name string, gpus int) {
	cl.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		cl.t.Fatal(err)
	}
	disc, err := gpu.NewFake(gpus, "H100-SXM-80GB", gpu.WithSeed(name))
	if err != nil {
		cl.t.Fatal(err)
	}
	var checks agent.HealthChecks
	if cl.fakes != nil {
		f := health.NewFake(gpus, "")
		hc, _, err := health.DefaultChecks(health.NodeOptions{GPUs: gpus, GPUHealth: true, Fake: f, IBRoot: cl.t.TempDir()})
		if err != nil {
			cl.t.Fatal(err)
		}
		checks = health.NewRunner(hc, health.Options{Interval: 100 * time.Millisecond})
		cl.mu.Lock()
		cl.fakes[name] = f
		cl.mu.Unlock()
	}
	acfg := agent.Config{Server: cl.url, JoinToken: cl.admin.Token, CAFile: cl.admin.CAFile, Name: name, Address: "127.0.0.1", DataDir: cl.agentDir(name),
		GPUs: disc, ShimPath: exe, Log: testLogger(cl.t, name), Health: checks}
	if cl.adjustAgent != nil {
		cl.adjustAgent(&acfg)
	}
	a, err := agent.New(acfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cl.mu.Lock()
	if cl.handles == nil {
		cl.handles = map[string]*agent.Agent{} // a cluster made without startClusterWrapped
	}
	cl.agents[name], cl.done[name], cl.handles[name] = cancel, done, a
	cl.mu.Unlock()
	go func() { defer close(done); _ = a.Run(ctx) }()
}

func (cl *cluster) agentDir(name string) string { return filepath.Join(cl.dir, "agent-"+name) }

// stopAgent stops an agent's process loop; its ranks keep running.
func (cl *cluster) stopAgent(name string) {
	cl.mu.Lock()
	cancel, done := cl.agents[name], cl.done[name]
	delete(cl.agents, name)
	cl.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (cl *cluster) stop() {
	cl.mu.Lock()
	names := make([]string, 0, len(cl.agents))
	for n := range cl.agents {
		names = append(names, n)
	}
	cl.mu.Unlock()
	for _, n := range names {
		cl.stopAgent(n)
		KillRanks(cl.agentDir(n))
	}
	cl.cancel()
	cl.wg.Wait()
}

func (cl *cluster) waitNodes(n int) {
	cl.t.Helper()
	cl.wait(10*time.Second, fmt.Sprintf("%d ready nodes", n), func() bool {
		l, err := cl.c.Nodes(context.Background())
		if err != nil {
			return false
		}
		ready := 0
		for _, nd := range l.Nodes {
			if nd.Status.State == api.NodeReady {
				ready++
			}
		}
		return ready == n
	})
}

func (cl *cluster) wait(timeout time.Duration, what string, cond func() bool) {
	cl.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			cl.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a gangway command against the cluster.
func (cl *cluster) run(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = Main(context.Background(), args, cl.env(&o, &e))
	return o.String(), e.String(), code
}

// env is the environment of a command run against the cluster: the
// admin's client config, nothing else.
func (cl *cluster) env(stdout, stderr io.Writer) *Env {
	return &Env{Stdout: stdout, Stderr: stderr, Getenv: func(k string) string {
		if k == "GANGWAY_CONFIG" {
			return cl.config
		}
		return ""
	}}
}

// runResult is what a gangway command printed and its exit code.
type runResult struct {
	out, errOut string
	code        int
}

// runAsync runs a gangway command against the cluster in the background
// (`logs -f`); its one result comes on the channel.
func (cl *cluster) runAsync(args ...string) <-chan runResult {
	c := make(chan runResult, 1)
	go func() {
		out, errOut, code := cl.run(args...)
		c <- runResult{out, errOut, code}
	}()
	return c
}

func (cl *cluster) submitYAML(spec string) string {
	cl.t.Helper()
	f := filepath.Join(cl.t.TempDir(), "job.yaml")
	if err := os.WriteFile(f, []byte(spec), 0o644); err != nil {
		cl.t.Fatal(err)
	}
	out, errOut, code := cl.run("submit", f, "-o", "json")
	if code != 0 {
		cl.t.Fatalf("submit: code %d: %s", code, errOut)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		cl.t.Fatalf("submit output %q: %v", out, err)
	}
	return j.ID
}

func (cl *cluster) detail(id string) *api.JobDetail {
	cl.t.Helper()
	d, err := cl.c.Job(context.Background(), id)
	if err != nil {
		cl.t.Fatalf("get job %s: %v", id, err)
	}
	return d
}

func (cl *cluster) waitPhase(id string, phase api.JobPhase, timeout time.Duration) *api.JobDetail {
	cl.t.Helper()
	var d *api.JobDetail
	cl.wait(timeout, fmt.Sprintf("job %s %s", id, phase), func() bool {
		d = cl.detail(id)
		if d.Job.Status.Phase.Final() && d.Job.Status.Phase != phase {
			cl.t.Fatalf("job %s ended %s (%s), want %s", id, d.Job.Status.Phase, d.Job.Status.Reason, phase)
		}
		return d.Job.Status.Phase == phase
	})
	return d
}

func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestClusterRunsGangAndServesLogs(t *testing.T) {
	cl := startCluster(t, 2, 8)
	id := cl.submitYAML(`
name: hello
ranks: 4
ranksPerNode: 2
gpusPerRank: 2
command: [sh, -c, 'echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE node_rank=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES pet=$PET_NNODES"; echo oops >&2']
`)
	d := cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	a := d.Job.Status.Current()
	if len(a.Nodes()) != 2 || a.Outcome != api.OutcomeSucceeded {
		t.Fatalf("attempt = %+v", a)
	}
	seen := map[string]bool{}
	for _, p := range a.Placement {
		for _, g := range p.GPUs {
			k := fmt.Sprintf("%s/%d", p.Node, g)
			if seen[k] {
				t.Fatalf("GPU %s given to two ranks", k)
			}
			seen[k] = true
		}
	}
	out, errOut, code := cl.run("logs", id, "--rank", "3")
	if code != 0 {
		t.Fatalf("logs: %s", errOut)
	}
	want := fmt.Sprintf("rank=3 local=1 world=4 node_rank=1 master=127.0.0.1:%d gpus=2,3 pet=2", a.MasterPort)
	if out != want+"\n[stderr] oops\n" {
		t.Errorf("rank 3 output = %q, want its stdout %q and its stderr, marked", out, want)
	}
	if out, _, _ := cl.run("logs", id, "--rank", "3", "--stdout"); strings.TrimSpace(out) != want {
		t.Errorf("rank 3 stdout = %q, want %q", out, want)
	}
	if out, _, _ := cl.run("logs", id, "--rank", "0", "--stderr"); out != "oops\n" {
		t.Errorf("rank 0 stderr = %q", out)
	}
	if _, errOut, code := cl.run("logs", id, "--rank", "9"); code == 0 || !strings.Contains(errOut, "rank") {
		t.Errorf("logs --rank 9: code %d, %q", code, errOut)
	}
	out, _, _ = cl.run("get", "jobs")
	if !strings.Contains(out, "hello") || !strings.Contains(out, "Succeeded") {
		t.Errorf("get jobs:\n%s", out)
	}
	out, _, _ = cl.run("describe", "job", id)
	for _, s := range []string{"Phase:     Succeeded", "Attempt 1: Ended (succeeded)", "exited  0"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe job lacks %q:\n%s", s, out)
		}
	}
	out, _, _ = cl.run("get", "nodes", "-o", "yaml")
	if !strings.Contains(out, "name: n1") || !strings.Contains(out, "H100-SXM-80GB") {
		t.Errorf("get nodes -o yaml:\n%s", out)
	}
	// Integers stay integers in YAML (no 2.0, no 8.5e+10), in the JSON's
	// field order.
	if !regexp.MustCompile(`(?m)^\s+cpus: [0-9]+$`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+memoryBytes: [0-9]+$`).MatchString(out) ||
		strings.Contains(out, "e+") || strings.Index(out, "name: n1") > strings.Index(out, "cpus:") {
		t.Errorf("get nodes -o yaml: want integer cpus and memoryBytes after the name:\n%s", out)
	}
}

func TestClusterRejectsBadInputAndStoresNothing(t *testing.T) {
	cl := startCluster(t, 2, 8)
	tests := []struct {
		name, body, field string
		code              int
	}{
		{"unknown field", "ranks: 1\ncommand: [x]\ngpu: 1\n", "gpu", 400},
		{"zero gpus", "ranks: 1\ngpusPerRank: 0\ncommand: [x]\n", "spec.gpusPerRank", 400},
		{"negative ranks", "ranks: -1\ncommand: [x]\n", "spec.ranks", 400},
		{"missing command", "ranks: 1\n", "spec.command", 400},
		{"malformed yaml", "ranks: [1\ncommand: x\n", "", 400},
		{"more gpus per rank than any node", "ranks: 1\ngpusPerRank: 9\ncommand: [x]\n", "spec.gpusPerRank", 422},
		{"more gpus than the cluster", "ranks: 3\ngpusPerRank: 8\ncommand: [x]\n", "spec.ranks", 422},
		{"node shape too big", "ranks: 4\nranksPerNode: 4\ngpusPerRank: 4\ncommand: [x]\n", "spec.ranksPerNode", 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cl.c.Submit(context.Background(), []byte(tt.body))
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != tt.code || ae.Message == "" {
				t.Fatalf("err = %#v; want a %d with an error", err, tt.code)
			}
			if tt.field != "" {
				found := false
				for _, f := range ae.Fields {
					found = found || f.Field == tt.field
				}
				if !found {
					t.Errorf("no field %q in %+v", tt.field, ae.Fields)
				}
			}
		})
	}
	l, err := cl.c.Jobs(context.Background(), client.JobQuery{})
	if err != nil || len(l.Jobs) != 0 {
		t.Fatalf("jobs after rejected submissions = %d, %v; want none", len(l.Jobs), err)
	}
	_, errOut, code := cl.run("submit", "--ranks", "0", "--", "true")
	if code == 0 || !strings.Contains(errOut, "spec.ranks") {
		t.Errorf("CLI submit --ranks 0: code %d, stderr %q", code, errOut)
	}
}

func TestClusterCancelKillsRanks(t *testing.T) {
	cl := startCluster(t, 1, 8)
	id := cl.submitYAML("ranks: 2\nterminationGracePeriod: 2s\ncommand: [sh, -c, 'trap \"echo term; exit 0\" TERM; echo ready; while true; do sleep 0.1; done']\n")
	var pids []int
	cl.wait(15*time.Second, "both ranks running with their TERM trap set", func() bool {
		d := cl.detail(id)
		pids = pids[:0]
		for _, r := range d.Ranks {
			if out, _, _ := cl.run("logs", id, "--rank", fmt.Sprint(r.Rank)); r.State == api.RankRunning && out == "ready\n" {
				pids = append(pids, r.PID)
			}
		}
		return len(pids) == 2
	})
	if _, errOut, code := cl.run("cancel", id); code != 0 {
		t.Fatalf("cancel: %s", errOut)
	}
	d := cl.waitPhase(id, api.JobCancelled, 15*time.Second)
	for _, pid := range pids {
		if pidAlive(pid) {
			t.Errorf("rank pid %d still alive after cancel", pid)
		}
	}
	if a := d.Job.Status.Current(); a.Outcome != api.OutcomeCancelled || a.Phase != api.AttemptEnded {
		t.Errorf("attempt = %+v", a)
	}
	if out, _, _ := cl.run("logs", id, "--stdout"); out != "ready\nterm\n" {
		t.Errorf("ranks did not get SIGTERM first: stdout %q", out)
	}
	if _, errOut, code := cl.run("cancel", id); code == 0 || !strings.Contains(errOut, "already Cancelled") {
		t.Errorf("second cancel: code %d %q", code, errOut)
	}
}

func TestClusterRestartsFailedRank(t *testing.T) {
	cl := startCluster(t, 2, 8)
	// Rank 1 fails on the first attempt only.
	id := cl.submitYAML(`
ranks: 2
ranksPerNode: 1
restartBackoff: 100ms
command: [sh, -c, 'if [ "$GANGWAY_ATTEMPT" = 1 ] && [ "$RANK" = 1 ]; then exit 3; fi; sleep 0.3']
`)
	d := cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	st := d.Job.Status
	if len(st.Attempts) != 2 || st.Restarts != 1 {
		t.Fatalf("attempts %d restarts %d; want 2 and 1", len(st.Attempts), st.Restarts)
	}
	if a := st.Attempts[0]; a.Outcome != api.OutcomeFailed || !strings.Contains(a.Reason, "rank 1") || !strings.Contains(a.Reason, "code 3") {
		t.Errorf("attempt 1 = %s %q", a.Outcome, a.Reason)
	}
	// Always failing: gives up after maxRestarts.
	id = cl.submitYAML("ranks: 1\nmaxRestarts: 1\nrestartBackoff: 50ms\ncommand: [sh, -c, 'exit 1']\n")
	d = cl.waitPhase(id, api.JobFailed, 30*time.Second)
	if n := len(d.Job.Status.Attempts); n != 2 || !strings.Contains(d.Job.Status.Reason, "no restarts left") {
		t.Errorf("failed job: %d attempts, reason %q", n, d.Job.Status.Reason)
	}
	// A command that does not exist fails to start and is reported so.
	id = cl.submitYAML("ranks: 1\nmaxRestarts: 0\ncommand: [/nonexistent/trainer]\n")
	d = cl.waitPhase(id, api.JobFailed, 30*time.Second)
	if !strings.Contains(d.Job.Status.Reason, "could not start") {
		t.Errorf("missing binary: reason %q", d.Job.Status.Reason)
	}
}

func TestAgentRestartReattachesToRanks(t *testing.T) {
	cl := startCluster(t, 1, 8)
	marker := filepath.Join(t.TempDir(), "go")
	// The rank waits for a marker file, so it is surely alive while the
	// agent is away, then exits 0.
	id := cl.submitYAML(fmt.Sprintf("ranks: 1\ncommand: [sh, -c, 'while [ ! -e %s ]; do sleep 0.05; done; echo done']\n", marker))
	var pid int
	cl.wait(15*time.Second, "rank running", func() bool {
		d := cl.detail(id)
		if len(d.Ranks) == 1 && d.Ranks[0].State == api.RankRunning {
			pid = d.Ranks[0].PID
			return true
		}
		return false
	})
	cl.stopAgent("n1")
	if !pidAlive(pid) {
		t.Fatal("stopping the agent killed its rank")
	}
	cl.startAgent("n1", 8)
	time.Sleep(300 * time.Millisecond) // let it adopt before the rank ends
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	if n := len(d.Job.Status.Attempts); n != 1 {
		t.Errorf("%d attempts; the restart should not have cost one", n)
	}
	if out, _, _ := cl.run("logs", id); strings.TrimSpace(out) != "done" {
		t.Errorf("logs after re-attach = %q", out)
	}
}

func TestDrainMovesGangWithoutUsingRestarts(t *testing.T) {
	cl := startCluster(t, 2, 8)
	id := cl.submitYAML("ranks: 2\nmaxRestarts: 0\nterminationGracePeriod: 1s\ncommand: [sh, -c, 'sleep 30']\n")
	var first string
	cl.wait(15*time.Second, "attempt 1 placed", func() bool {
		if a := cl.detail(id).Job.Status.Current(); a != nil && a.Phase == api.AttemptRunning {
			first = a.Placement[0].Node
			return true
		}
		return false
	})
	if _, errOut, code := cl.run("drain", "--now", first); code != 0 {
		t.Fatal(errOut)
	}
	cl.wait(20*time.Second, "attempt 2 on the other node", func() bool {
		a := cl.detail(id).Job.Status.Current()
		return a.Number == 2 && a.Phase == api.AttemptRunning
	})
	d := cl.detail(id)
	if a := d.Job.Status.Current(); a.Placement[0].Node == first {
		t.Errorf("attempt 2 placed on the drained node %s", first)
	}
	if d.Job.Status.Restarts != 0 || d.Job.Status.Attempts[0].Outcome != api.OutcomeInterrupted {
		t.Errorf("restarts %d, attempt 1 outcome %s", d.Job.Status.Restarts, d.Job.Status.Attempts[0].Outcome)
	}
	out, _, _ := cl.run("get", "nodes")
	if !strings.Contains(out, "Ready,Draining") {
		t.Errorf("get nodes does not show the drain:\n%s", out)
	}
	cl.run("cancel", id)
	cl.waitPhase(id, api.JobCancelled, 15*time.Second)
}

// TestDemo runs a shrunk demo: a real node loss, detection, restart from
// the newest checkpoint and a final loss equal to an uninterrupted run's.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo; skipped with -short")
	}
	var buf syncBuffer
	// Once the summary is made, the cluster is still up and its
	// dashboard answers at the URL the demo printed.
	dashboard := 0
	report := func(*DemoSummary) {
		m := regexp.MustCompile(`dashboard: (https://\S+/ui/)#token=\S+`).FindStringSubmatch(buf.String())
		if m == nil {
			t.Errorf("the demo printed no dashboard URL")
			return
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the demo's own CA
		resp, err := hc.Get(m[1])
		if err != nil {
			t.Errorf("dashboard: %v", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		dashboard = resp.StatusCode
		if !strings.Contains(string(b), "<html") {
			t.Errorf("dashboard %s: %d %.200s", m[1], resp.StatusCode, b)
		}
	}
	sum, err := demo(context.Background(), demoConfig{nodes: 3, gpus: 4, ranks: 4, perNode: 2, steps: 160, killAtStep: 60,
		stepDelay: 20 * time.Millisecond, timeout: 100 * time.Second, linger: time.Millisecond, report: report}, &buf, false)
	t.Log(buf.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if dashboard != http.StatusOK {
		t.Errorf("the dashboard answered %d at the end of the demo", dashboard)
	}
	if !sum.OK || sum.DetectionS <= 0 || sum.RecoveryS < sum.DetectionS || sum.ResumedFromStep <= 0 || sum.Attempts != 2 {
		t.Errorf("summary = %+v", sum)
	}
	if sum.FinalLoss != sum.ReferenceFinalLoss {
		t.Logf("losses differ by %g (within tolerance)", sum.LossRelDiff)
	}
}

// TestDemoHealthFaults runs the gpu-fault and straggler scenarios shrunk.
// gpu-fault: an Xid 79 injected into the fake GPUs of a node holding ranks
// must take that node out of service through its agent's health checks
// and the server. straggler: one node's ranks start working 20 ms longer
// per step, and the server must find the straggler from the ranks' own
// timing lines, no sooner than its window. Either way the gang must resume
// from its checkpoint without that node and without using a restart.
func TestDemoHealthFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo; skipped with -short")
	}
	for _, tt := range []struct {
		name      string
		cfg       demoConfig
		fault     string  // the summary's fault starts so
		detectMin float64 // seconds
	}{
		{"gpu-fault", demoConfig{steps: 160, gpuFault: true}, "xid 79 on GPU ", 0},
		{"straggler", demoConfig{steps: 300, straggler: true}, "straggler: ", demoStragglerWindow.Seconds()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.nodes, cfg.gpus, cfg.ranks, cfg.perNode, cfg.killAtStep = 3, 4, 4, 2, 60
			cfg.stepDelay, cfg.timeout = 20*time.Millisecond, 100*time.Second
			var buf bytes.Buffer
			sum, err := demo(context.Background(), cfg, &buf, false)
			t.Log(buf.String())
			if err != nil {
				t.Fatalf("demo: %v", err)
			}
			b, _ := json.Marshal(sum)
			t.Logf("summary: %s", b)
			if !sum.OK || sum.DetectionS <= tt.detectMin || sum.RecoveryS < sum.DetectionS || sum.ResumedFromStep <= 0 ||
				sum.Attempts != 2 || sum.Restarts != 0 || sum.KilledNode == "" {
				t.Errorf("summary = %+v; want the fault found, the gang moved from its node, no restart used", sum)
			}
			if !strings.HasPrefix(sum.Fault, tt.fault) {
				t.Errorf("fault = %q, want %q...", sum.Fault, tt.fault)
			}
		})
	}
}

// TestDemoServerRestart runs the server-restart scenario shrunk: the
// server, a process of its own, is killed for several node timeouts while
// the job trains and started again on the same data directory. No rank
// process may die of the outage (the agents' witnesses confirm it), and
// the job finishes in its first attempt with the reference's final loss.
func TestDemoServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo; skipped with -short")
	}
	var buf bytes.Buffer
	sum, err := demoServerRestart(context.Background(), demoConfig{nodes: 3, gpus: 4, ranks: 4, perNode: 2, steps: 200, killAtStep: 60,
		stepDelay: 30 * time.Millisecond, timeout: 150 * time.Second, downtime: 15 * time.Second}, &buf, false)
	t.Log(buf.String())
	if sum == nil {
		t.Fatalf("demo: %v", err)
	}
	b, _ := json.Marshal(sum)
	t.Logf("summary: %s", b)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if sum.DowntimeS < 15 || sum.KilledAtStep < 60 || sum.Attempts < 1 || sum.FinalLoss == 0 || sum.LossRelDiff > sum.Tolerance {
		t.Errorf("summary = %+v", sum)
	}
	if sum.RanksKilled != 0 {
		t.Errorf("%d rank processes died while the server was down %.1fs; want 0 (their witnesses confirm the outage)", sum.RanksKilled, sum.DowntimeS)
	}
	if !sum.OK || sum.Attempts != 1 {
		t.Errorf("no rank killed, yet ok %v after %d attempts: %+v", sum.OK, sum.Attempts, sum)
	}
}

// TestPerNodeTorchrunLaunch runs a stand-in torchrun (a script that prints
// its arguments) once per node with the node-level arguments inserted.
func TestPerNodeTorchrunLaunch(t *testing.T) {
	cl := startCluster(t, 2, 8)
	bin := t.TempDir()
	// As torchrun --tee 1 does: the workers' stdout lines marked with
	// their local rank, their stderr unmarked.
	script := "#!/bin/sh\necho \"$@\" gpus=$CUDA_VISIBLE_DEVICES rank=${RANK:-unset} tp=$GANGWAY_TP_SIZE\n" +
		"for i in 0 1 2 3; do echo \"[default$i]:local $i\"; done; echo \"[default1]:oops\" >&2\n"
	if err := os.WriteFile(filepath.Join(bin, "torchrun"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	id := cl.submitYAML(fmt.Sprintf(`
ranks: 8
ranksPerNode: 4
launch: torchrun
parallelism: {tp: 4}
command: [%s/torchrun, train.py, --lr, "0.1"]
`, bin))
	d := cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	a := d.Job.Status.Current()
	if len(d.Ranks) != 2 {
		t.Fatalf("%d processes ran; want one per node", len(d.Ranks))
	}
	if a.Grid == nil || a.Grid.TP != 4 || a.Grid.DP != 2 || a.Grid.TPGroupsCrossingDomain != 0 {
		t.Errorf("grid = %+v", a.Grid)
	}
	second := -1
	for _, p := range a.Placement {
		if p.NodeRank == 1 && p.LocalRank == 0 {
			second = p.Rank
		}
	}
	out, errOut, code := cl.run("logs", id, "--rank", fmt.Sprint(second))
	if code != 0 {
		t.Fatal(errOut)
	}
	args := fmt.Sprintf("--nnodes=2 --node_rank=1 --nproc_per_node=4 --master_addr=127.0.0.1 --master_port=%d train.py --lr 0.1 gpus=0,1,2,3 rank=unset tp=4", a.MasterPort)
	if want := args + "\nlocal 0\n"; out != want {
		t.Errorf("rank %d (node 1's local rank 0) got\n  %q\nwant the launcher's line and its own\n  %q", second, out, want)
	}
	// A rank without a process of its own: its lines of its node's torchrun.
	out, errOut, code = cl.run("logs", id, "--rank", fmt.Sprint(second+1))
	if want := args + "\nlocal 1\n[stderr] oops\n"; code != 0 || out != want {
		t.Errorf("rank %d (node 1's local rank 1) got\n  %q %s\nwant\n  %q", second+1, out, errOut, want)
	}
	out, _, _ = cl.run("logs", id, "--rank", fmt.Sprint(second+1), "--whole-node", "--stdout")
	if want := args + "\n[default0]:local 0\n[default1]:local 1\n[default2]:local 2\n[default3]:local 3\n"; out != want {
		t.Errorf("--whole-node got\n  %q\nwant node 1's torchrun output\n  %q", out, want)
	}
}

// TestTorchrunCrashExplained: the crash of Debian's torchrun (torch 1.13)
// without --redirects and --tee, captured from it, is explained by
// gangway logs.
func TestTorchrunCrashExplained(t *testing.T) {
	cl := startCluster(t, 1, 8)
	crash, err := filepath.Abs("testdata/torchrun-1.13-no-tee.stderr")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "torchrun"), []byte("#!/bin/sh\ncat "+crash+" >&2; exit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := cl.submitYAML(fmt.Sprintf("ranks: 2\nlaunch: torchrun\nmaxRestarts: 0\ncommand: [%s/torchrun, train.py]\n", bin))
	cl.waitPhase(id, api.JobFailed, 20*time.Second)
	out, errOut, _ := cl.run("logs", id, "--rank", "1")
	if !strings.Contains(out, "AttributeError: 'NoneType' object has no attribute 'get'") {
		t.Fatalf("logs --rank 1 lacks the crash:\n%s", out)
	}
	if !strings.Contains(errOut, `"--redirects 1 --tee 1" right after torchrun`) {
		t.Errorf("logs does not say what to do; stderr:\n%s", errOut)
	}
}

// TestLogsFollowsAcrossAttempts: logs -f follows the rank through a
// failed attempt into the next, to the job's end.
func TestLogsFollowsAcrossAttempts(t *testing.T) {
	cl := startCluster(t, 1, 8)
	gate := filepath.Join(t.TempDir(), "go")
	id := cl.submitYAML(fmt.Sprintf(`
ranks: 1
restartBackoff: 100ms
command: [sh, -c, 'echo "attempt $GANGWAY_ATTEMPT"; if [ "$GANGWAY_ATTEMPT" = 1 ]; then while [ ! -e %s ]; do sleep 0.05; done; exit 3; fi']
`, gate))
	// logs -f follows from the newest attempt when it starts, so the gate
	// opens only once it has shown attempt 1's line: under load it could
	// otherwise start after attempt 2 had, and rightly show only that.
	var stdout, stderr lockedBuffer
	followed := cl.start(context.Background(), &stdout, &stderr, "logs", id, "-f")
	cl.wait(60*time.Second, "logs -f to show attempt 1", func() bool {
		return strings.Contains(stdout.String(), "attempt 1\n")
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var r struct {
		out, errOut string
		code        int
	}
	select {
	case r.code = <-followed:
		r.out, r.errOut = stdout.String(), stderr.String()
	case <-time.After(60 * time.Second):
		t.Fatal("gangway logs -f did not end with the job")
	}
	if r.code != 0 || r.out != "attempt 1\nattempt 2\n" || !strings.Contains(r.errOut, "attempt 1 ended (failed") || !strings.Contains(r.errOut, "following attempt 2") {
		t.Errorf("logs -f: code %d, stdout %q, stderr %q; want both attempts' output and a line between them", r.code, r.out, r.errOut)
	}
	if d := cl.detail(id); d.Job.Status.Phase != api.JobSucceeded {
		t.Errorf("job %s; want Succeeded", d.Job.Status.Phase)
	}
}

// TestAutoParallelismAndThroughput: the planner fills in the grid at
// admission, and describe shows the measured token rate beside the
// prediction.
func TestAutoParallelismAndThroughput(t *testing.T) {
	cl := startCluster(t, 2, 8)
	id := cl.submitYAML(`
ranks: 16
ranksPerNode: 8
parallelism: auto
model: {name: llama3-8b, seq: 8192, globalBatch: 128}
command: [sh, -c, 'if [ "$RANK" = 0 ]; then for t in 0 16000 32000; do echo "{\"step\":$t,\"tokens\":$t}" >> $GANGWAY_PROGRESS_FILE; sleep 0.5; done; fi']
`)
	d := cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	par := d.Job.Spec.Parallelism
	if par == nil || par.Predicted == nil || par.TP*max(par.PP, 1)*par.DP != 16 {
		t.Fatalf("parallelism after admission = %+v", par)
	}
	if g := d.Job.Status.Current().Grid; g == nil || g.TP != par.TP || g.TPGroupsCrossingDomain != 0 {
		t.Errorf("attempt grid = %+v, spec %+v", g, par)
	}
	out, _, _ := cl.run("describe", "job", id)
	for _, s := range []string{"(chosen by the planner)", "per GPU measured", "predicted (tp="} {
		if !strings.Contains(out, s) {
			t.Errorf("describe lacks %q:\n%s", s, out)
		}
	}
	// An explicit grid that cannot fit is rejected with the planner's reason.
	f := filepath.Join(t.TempDir(), "big.yaml")
	os.WriteFile(f, []byte("ranks: 8\nparallelism: {tp: 1}\nmodel: {name: llama3-70b, seq: 8192}\ncommand: [x]\n"), 0o644)
	_, errOut, code := cl.run("submit", f)
	if code == 0 || !strings.Contains(errOut, "spec.parallelism") || !strings.Contains(errOut, "memory") {
		t.Errorf("submit 70B on 8 GPUs with tp=1: code %d, %q", code, errOut)
	}
}

func TestQueuesAndPriority(t *testing.T) {
	cl := startCluster(t, 1, 8)
	out, errOut, code := cl.run("queue", "set", "team-a", "--guarantee", "4", "--borrow-limit", "2", "--weight", "2", "--cohort", "research", "--policy", "las")
	if code != 0 {
		t.Fatal(errOut)
	}
	if want := "queue team-a: guarantee 4 GPUs, borrow limit 2 GPUs, weight 2, cohort research, policy las (overdue after 4h0m0s, level base 1h0m0s of a GPU, min run 2m0s)\n"; out != want {
		t.Errorf("queue set said %q; want every setting: %q", out, want)
	}
	if _, errOut, code := cl.run("queue", "set", "bad name", "--guarantee", "-1"); code == 0 || !strings.Contains(errOut, "name") || !strings.Contains(errOut, "guaranteeGPUs") {
		t.Errorf("bad queue: code %d %q", code, errOut)
	}
	if _, errOut, code := cl.run("queue", "set", "team-c", "--policy", "sjf"); code == 0 || !strings.Contains(errOut, "policy") || !strings.Contains(errOut, `"sjf"`) || !strings.Contains(errOut, "backfill") {
		t.Errorf("queue with an unknown policy: code %d %q; want the field, the value and the known policies", code, errOut)
	}
	out, errOut, code = cl.run("queue", "set", "team-d", "--policy", "gangway", "--lane-share", "0.3", "--overdue-after", "2h", "--level-base", "30m", "--min-run", "5m", "--lane-turn", "6h")
	if want := "policy gangway (lane share 0.3, overdue after 2h0m0s, level base 30m0s of a GPU, min run 5m0s, lane turn 6h0m0s)\n"; code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("queue set with settings: code %d, %q %q; want it to end %q", code, out, errOut, want)
	}
	if _, errOut, code := cl.run("queue", "set", "team-e", "--policy", "backfill", "--lane-share", "0.3"); code == 0 || !strings.Contains(errOut, "laneShare") || !strings.Contains(errOut, "policy backfill does not use it") {
		t.Errorf("lane share on a backfill queue: code %d %q; want the field and why", code, errOut)
	}
	if _, errOut, code := cl.run("queue", "set", "team-e", "--policy", "las", "--lane-turn", "1h"); code == 0 || !strings.Contains(errOut, "laneTurn") || !strings.Contains(errOut, "policy las does not use it") {
		t.Errorf("lane turn on a las queue: code %d %q; want the field and why", code, errOut)
	}
	if _, errOut, code := cl.run("queue", "set", "team-e", "--policy", "gangway", "--lane-share", "2"); code == 0 || !strings.Contains(errOut, "laneShare") || !strings.Contains(errOut, "(0, 1]") {
		t.Errorf("lane share 2: code %d %q; want the field and the range", code, errOut)
	}
	if out, _, _ := cl.run("get", "queues", "-o", "wide"); !strings.Contains(out, "SETTINGS") || !strings.Contains(out, "lane share 0.3, overdue after 2h0m0s") {
		t.Errorf("get queues -o wide lacks the settings:\n%s", out)
	}
	_, errOut, code = cl.run("submit", "--queue", "team-b", "--ranks", "1", "--", "true")
	if code == 0 || !strings.Contains(errOut, "spec.queue") {
		t.Errorf("submit to a missing queue: code %d %q", code, errOut)
	}
	id := cl.submitYAML("queue: team-a\nranks: 2\ncommand: [sh, -c, 'sleep 30']\n")
	cl.waitPhase(id, api.JobRunning, 15*time.Second)
	out, _, _ = cl.run("get", "queues")
	fields := func(name string) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				return f
			}
		}
		return nil
	}
	// NAME COHORT GUARANTEE BORROW-LIMIT WEIGHT USED BORROWED RUNNING PENDING POLICY
	if f := fields("team-a"); len(f) < 8 || f[1] != "research" || f[2] != "4" || f[3] != "2" || f[4] != "2" || f[5] != "2" || f[6] != "0" || f[7] != "1" || f[len(f)-1] != "las" {
		t.Errorf("get queues row for team-a = %v\n%s", f, out)
	}
	if fields("default") == nil {
		t.Errorf("the default queue is not listed:\n%s", out)
	}
	if _, errOut, code := cl.run("queue", "delete", "team-a"); code == 0 || !strings.Contains(errOut, "still has job") {
		t.Errorf("deleting a busy queue: code %d %q", code, errOut)
	}
	if _, errOut, code := cl.run("priority", id, "7"); code != 0 {
		t.Fatal(errOut)
	}
	if p := cl.detail(id).Job.Spec.Priority; p != 7 {
		t.Errorf("priority = %d after 'gangway priority %s 7'", p, id)
	}
	cl.run("cancel", id)
	cl.waitPhase(id, api.JobCancelled, 15*time.Second)
	if _, errOut, code := cl.run("queue", "delete", "team-a"); code != 0 {
		t.Errorf("deleting an idle queue: %s", errOut)
	}
}

// TestPreemptionCheckpointsAndResumes: a high-priority gang preempts a
// low-priority trainer, which checkpoints on SIGUSR1, is requeued, and
// later resumes from that checkpoint and finishes.
func TestPreemptionCheckpointsAndResumes(t *testing.T) {
	cl := startCluster(t, 1, 4)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	low := cl.submitYAML(fmt.Sprintf(`
name: low
priority: 0
ranks: 4
checkpointSignal: SIGUSR1
preemptionGracePeriod: 20s
restartBackoff: 100ms
command: [%s, train-example, --steps, "150", --checkpoint-every, "0", --step-delay, 20ms]
`, exe))
	cl.wait(30*time.Second, "the low-priority trainer making progress", func() bool {
		d := cl.detail(low)
		return d.Progress != nil && d.Progress.Latest.Step >= 20
	})
	high := cl.submitYAML("name: high\npriority: 10\nranks: 4\ncommand: [sh, -c, 'sleep 1']\n")
	d := cl.waitPhase(high, api.JobSucceeded, 60*time.Second)
	_ = d
	ld := cl.waitPhase(low, api.JobSucceeded, 90*time.Second)
	atts := ld.Job.Status.Attempts
	if len(atts) != 2 || atts[0].Outcome != api.OutcomePreempted || atts[0].PreemptedFor != high {
		t.Fatalf("low's attempts: %+v", atts)
	}
	if !strings.Contains(atts[0].Reason, "after checkpointing") {
		t.Errorf("attempt 1 was not stopped by its checkpoint: %q", atts[0].Reason)
	}
	if atts[1].ResumeFrom == nil || atts[1].ResumeFrom.Step < 20 {
		t.Errorf("attempt 2 resumed from %+v; want the SIGUSR1 checkpoint", atts[1].ResumeFrom)
	}
	if ld.Job.Status.Restarts != 0 {
		t.Errorf("a preemption used up %d restarts", ld.Job.Status.Restarts)
	}
	hd := cl.detail(high)
	if !hd.Job.Status.Current().CreatedAt.After(atts[0].PreemptedAt) || atts[1].CreatedAt.Before(hd.Job.Status.Current().CreatedAt) {
		t.Errorf("order wrong: preempted %s, high started %s, low resumed %s", atts[0].PreemptedAt, hd.Job.Status.Current().CreatedAt, atts[1].CreatedAt)
	}
	want := []string{api.ReasonScheduled, api.ReasonStarted, api.ReasonPreempting, api.ReasonCheckpoint, api.ReasonPreempted, api.ReasonRestarted, api.ReasonSucceeded}
	cl.wait(10*time.Second, "low's events: preempted after its checkpoint, restarted", func() bool { return inOrder(cl.reasonsOf(low), want) })
}

// A gang of more ranks than etcd takes operations in one transaction by
// default (128) starts: its attempt and every assignment are one write.
func TestClusterStartsGangOf160Ranks(t *testing.T) {
	cl := startCluster(t, 4, 8)
	id := cl.submitYAML(`
name: wide
ranks: 160
gpuMilli: 200
command: [sh, -c, 'test "$WORLD_SIZE" = 160']
`)
	d := cl.waitPhase(id, api.JobSucceeded, 60*time.Second)
	a := d.Job.Status.Current()
	if len(a.Placement) != 160 || len(a.Nodes()) != 4 {
		t.Fatalf("attempt placed %d ranks on %v", len(a.Placement), a.Nodes())
	}
}

func TestClusterRunsJobArrayWithLimitAndCancelsIt(t *testing.T) {
	cl := startCluster(t, 2, 8)
	out := t.TempDir()
	// Each task records its index, the array size and when it ran.
	script := `echo "$GANGWAY_ARRAY_TASK_ID $GANGWAY_ARRAY_TASK_COUNT $GANGWAY_ARRAY_JOB_ID $(date +%s.%N)" > ` + out + `/$GANGWAY_ARRAY_TASK_ID.start; sleep 0.3; date +%s.%N > ` + out + `/$GANGWAY_ARRAY_TASK_ID.end`
	so, errOut, code := cl.run("submit", "--array", "0-19%3", "--name", "sweep", "--ranks", "1", "-o", "json", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("submit --array: %s", errOut)
	}
	var a api.ArraySubmission
	if err := json.Unmarshal([]byte(so), &a); err != nil || a.Count != 20 || len(a.Jobs) != 20 || a.ArrayID != a.Jobs[0] {
		t.Fatalf("array submission = %+v, %v", a, err)
	}
	for _, id := range a.Jobs {
		cl.waitPhase(id, api.JobSucceeded, 60*time.Second)
	}
	type span struct{ start, end float64 }
	var spans []span
	for i := range 20 {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("%d.start", i)))
		if err != nil {
			t.Fatal(err)
		}
		var idx, count int
		var arrayID string
		var st float64
		if _, err := fmt.Sscan(string(b), &idx, &count, &arrayID, &st); err != nil || idx != i || count != 20 || arrayID != a.ArrayID {
			t.Fatalf("task %d saw %q", i, b)
		}
		e, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("%d.end", i)))
		if err != nil {
			t.Fatal(err)
		}
		var en float64
		fmt.Sscan(string(e), &en)
		spans = append(spans, span{st, en})
	}
	// At most 3 ran at once, and more than one did.
	most := 0
	for _, s := range spans {
		n := 0
		for _, o := range spans {
			if o.start <= s.start && s.start < o.end {
				n++
			}
		}
		most = max(most, n)
	}
	if most > 3 || most < 2 {
		t.Errorf("at most %d tasks ran at once; want 2..3 (limit %%3)", most)
	}
	lst, _, _ := cl.run("get", "jobs")
	if !strings.Contains(lst, "sweep[19]") {
		t.Errorf("get jobs lacks the task index:\n%s", lst)
	}

	// Cancelling one task's array cancels all of them.
	so, errOut, code = cl.run("submit", "--array", "0-9%2", "--ranks", "1", "-o", "json", "--", "sleep", "60")
	if code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	if err := json.Unmarshal([]byte(so), &a); err != nil {
		t.Fatal(err)
	}
	cl.waitPhase(a.Jobs[0], api.JobRunning, 20*time.Second)
	// A task the limit holds back says so, not "waiting for the scheduler".
	cl.wait(20*time.Second, "a held task's reason to name the array's limit", func() bool {
		return strings.Contains(cl.detail(a.Jobs[9]).Job.Status.Reason, "array "+a.ArrayID+" runs at most 2 tasks at once (%2)")
	})
	if so, errOut, code = cl.run("cancel", "--array", a.Jobs[5]); code != 0 || !strings.Contains(so, "cancel requested for 10 jobs") {
		t.Fatalf("cancel --array: %q %q", so, errOut)
	}
	for _, id := range a.Jobs {
		cl.waitPhase(id, api.JobCancelled, 30*time.Second)
	}

	// A bad array is refused with its field and stores nothing.
	before, _ := cl.c.Jobs(context.Background(), client.JobQuery{})
	_, errOut, code = cl.run("submit", "--array", "5-3", "--ranks", "1", "--", "true")
	if code == 0 || !strings.Contains(errOut, "spec.array") || !strings.Contains(errOut, "ends before it starts") {
		t.Fatalf("bad array: code %d, %q", code, errOut)
	}
	after, _ := cl.c.Jobs(context.Background(), client.JobQuery{})
	if len(after.Jobs) != len(before.Jobs) {
		t.Fatalf("a refused array stored %d jobs", len(after.Jobs)-len(before.Jobs))
	}
}

func TestClusterDiscardsOutputWhenAsked(t *testing.T) {
	cl := startCluster(t, 1, 8)
	id := cl.submitYAML(`
name: quiet
ranks: 2
output: discard
command: [sh, -c, 'echo out; echo err >&2']
`)
	d := cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	a := d.Job.Status.Current()
	dir := cl.agentDir(a.Placement[0].Node)
	logs, _ := filepath.Glob(filepath.Join(dir, "tasks", "*", id+".*", "*.log"))
	if len(logs) != 0 {
		t.Fatalf("output: discard left log files: %v", logs)
	}
	if _, errOut, code := cl.run("logs", id, "--rank", "0"); code == 0 || !strings.Contains(errOut, "output: discard") {
		t.Errorf("logs of a discarded rank: code %d, %q; want an error saying it was discarded", code, errOut)
	}
	_, errOut, code := cl.run("submit", "--ranks", "1", "--", "true")
	if code != 0 {
		t.Fatal(errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("ranks: 1\noutput: nowhere\ncommand: [true]\n"), 0o644)
	if _, errOut, code = cl.run("submit", bad); code == 0 || !strings.Contains(errOut, "spec.output") {
		t.Errorf("output: nowhere: code %d, %q", code, errOut)
	}
	// The same submission twice with one --idempotency-key is one job.
	var ids []string
	for range 2 {
		out, errOut, code := cl.run("submit", "--idempotency-key", "sweep-1", "-o", "json", "--ranks", "1", "--", "true")
		var j api.Job
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
			t.Fatalf("submit --idempotency-key: code %d, %q %q", code, out, errOut)
		}
		ids = append(ids, j.ID)
	}
	if ids[0] != ids[1] {
		t.Errorf("two submissions with one key made jobs %v; want one", ids)
	}
}

// Two blocked gangs both hold a backfill reservation (Slurm reserves for
// every job its backfill tests), so neither waits without a promise. They
// are in a team queue set to backfill on a cluster whose default queue
// runs gangway (greedy): a queue's mode is its own.
func TestClusterReservesForSeveralBlockedGangs(t *testing.T) {
	cl := startCluster(t, 4, 8)
	if _, errOut, code := cl.run("queue", "set", "batch", "--policy", "backfill"); code != 0 {
		t.Fatal(errOut)
	}
	long := func(name string, gpus int) string {
		return cl.submitYAML(fmt.Sprintf("name: %s\nranks: 1\ngpusPerRank: %d\ntimeLimit: 1h\npreemptible: false\ncommand: [sleep, '300']\n", name, gpus))
	}
	var ids []string
	for i, g := range []int{8, 8, 4, 4} {
		id := long(fmt.Sprintf("long%d", i), g)
		cl.waitPhase(id, api.JobRunning, 20*time.Second)
		ids = append(ids, id)
	}
	gang := func(name string) string {
		return cl.submitYAML(fmt.Sprintf("name: %s\nqueue: batch\nranks: 2\nranksPerNode: 1\ngpusPerRank: 8\ntimeLimit: 1h\ncommand: [sleep, '300']\n", name))
	}
	a, b := gang("big-a"), gang("big-b")
	// Each gang's own reservation ("reserved 2 nodes that are free in
	// 1h"), not merely a mention of the other's.
	own := func(id string) bool { return strings.Contains(cl.detail(id).Job.Status.Reason, "reserved 2 nodes") }
	cl.wait(20*time.Second, "both gangs reserved", func() bool { return own(a) && own(b) })
	for _, id := range append(ids, a, b) {
		cl.run("cancel", id)
	}
}

// TestDemoLeaderFailover runs the leader-failover scenario shrunk: three
// replicas, each an etcd member; the leading one is killed while the job
// trains. Another replica must lead, no rank process may die, and the job
// must finish in its first attempt with the reference's final loss.
func TestDemoLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo; skipped with -short")
	}
	var buf bytes.Buffer
	sum, err := demoLeaderFailover(context.Background(), demoConfig{nodes: 3, gpus: 4, ranks: 4, perNode: 2, steps: 200, killAtStep: 60,
		stepDelay: 30 * time.Millisecond, timeout: 150 * time.Second}, &buf, false)
	t.Log(buf.String())
	if sum == nil {
		t.Fatalf("demo: %v", err)
	}
	b, _ := json.Marshal(sum)
	t.Logf("summary: %s", b)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !sum.OK || sum.RanksKilled != 0 || sum.Attempts != 1 || sum.FailoverS <= 0 || sum.NewLeader == "" ||
		sum.NewLeader == sum.KilledReplica || sum.LossRelDiff > sum.Tolerance {
		t.Errorf("summary = %+v", sum)
	}
}

// syncBuffer is a bytes.Buffer safe to read while another goroutine
// writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
