package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/bench/netns"
)

// Cluster timing. The server's node timeout is gangway's default; agents
// learn the heartbeat interval (1s) and their fencing lease (timeout minus
// one interval) from it when they register.
const (
	nodeTimeout = 4500 * time.Millisecond // server.DefaultNodeTimeout
	fakeGPUs    = 8
)

// cluster is a gangway server in the root namespace and one agent per host
// of a Network, all real processes of the binary TestMain built.
type cluster struct {
	t      *testing.T
	net    *netns.Network
	dir    string
	url    string
	listen string // the server's address
	api    *client.Client
	admin  client.Config // the admin's (api's) configuration
	config string        // the client config the server wrote
	server *proc
	agents []*agentProc
	jobs   []string // submitted, for the failure dump
}

// submitRunning submits a job and waits until its attempt runs and it has
// reported step minStep.
func (c *cluster) submitRunning(ctx context.Context, specYAML string, minStep int64) (string, *api.JobDetail) {
	c.t.Helper()
	id := c.submit(ctx, specYAML)
	var d *api.JobDetail
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		if d.Job.Status.Phase.Final() {
			return false, fmt.Errorf("job ended %s: %s", d.Job.Status.Phase, d.Job.Status.Reason)
		}
		a := d.Job.Status.Current()
		return a != nil && !a.RunningAt.IsZero() && d.Progress != nil && d.Progress.Latest.Step >= minStep, nil
	}); err != nil {
		c.t.Fatalf("waiting for job %s to run: %v", id, err)
	}
	return id, d
}

// startServer starts (or starts again, on the same data dir and address)
// the server; its log is appended to.
func (c *cluster) startServer() error {
	cmd := exec.Command(gangwayBin, "server", "--data-dir", filepath.Join(c.dir, "server"),
		"--listen", c.listen, "--node-timeout", nodeTimeout.String(), "--client-config", c.config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := startProc("server", cmd, filepath.Join(c.dir, "server.log"))
	if err != nil {
		return err
	}
	c.server = p
	return nil
}

// proc is a process the test started and waits for.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // combined stdout and stderr
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result; read after done
}

func startProc(name string, cmd *exec.Cmd, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to grace, then SIGKILLs and waits.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

type agentProc struct {
	host int // index into cluster.net.Hosts
	name string
	dir  string // --data-dir
	*proc
}

// startCluster builds a network of hosts namespaces, starts the server
// and one agent per host, and waits until every node is Ready. Everything
// is torn down when t ends; on failure the logs are printed first.
func startCluster(t *testing.T, hosts int) *cluster {
	t.Helper()
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &cluster{t: t, dir: t.TempDir()}

	n, err := netns.NewNetwork(ctx, hosts)
	if err != nil {
		t.Fatal(err)
	}
	c.net = n
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Close(cctx); err != nil {
			t.Errorf("tear down the network: %v", err)
		}
	})
	t.Logf("network %s: %s, server at %s, hosts %s", n.Name, n.Subnet, n.Gateway, hostList(n))

	// The server, on the segment's root-namespace address.
	port, err := freePort(n.Gateway.String())
	if err != nil {
		t.Fatal(err)
	}
	c.listen = net.JoinHostPort(n.Gateway.String(), strconv.Itoa(port))
	c.url = "https://" + c.listen
	c.config = filepath.Join(c.dir, "client-config")
	if err := c.startServer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.server.stop(syscall.SIGTERM, 10*time.Second) })
	// Registered last, so it runs first: the logs while everything is
	// still there.
	defer t.Cleanup(func() {
		if t.Failed() {
			c.dump()
		}
	})
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		if c.server.exited() {
			return false, fmt.Errorf("server exited: %v", c.server.err)
		}
		// The first start writes the admin's context (token, CA) there.
		if c.api == nil {
			cfg, err := client.ConfigFor(c.config, client.Resolve{})
			if err != nil || cfg.Token == "" {
				return false, nil
			}
			cfg.Timeout = 5 * time.Second
			if c.api, err = client.New(cfg); err != nil {
				return false, err
			}
			c.admin = cfg
			t.Cleanup(c.api.CloseIdleConnections)
		}
		_, err := c.api.Health(ctx)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("waiting for the server at %s: %v", c.url, err)
	}
	// The agents join with one join token, as a fleet's would.
	jt, err := c.api.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: hosts})
	if err != nil {
		t.Fatalf("join token: %v", err)
	}

	// One agent per host, inside the host's namespace.
	for i, h := range n.Hosts {
		a := &agentProc{host: i, name: fmt.Sprintf("host%d", i+1), dir: filepath.Join(c.dir, fmt.Sprintf("agent-host%d", i+1))}
		cmd := n.Command(i, gangwayBin, "agent", "--server", c.url, "--ca-file", c.admin.CAFile, "--join", jt.Secret, "--name", a.name,
			"--address", h.IP.String(), "--fake-gpus", strconv.Itoa(fakeGPUs), "--data-dir", a.dir)
		if a.proc, err = startProc("agent "+a.name, cmd, filepath.Join(c.dir, a.name+".log")); err != nil {
			t.Fatal(err)
		}
		c.agents = append(c.agents, a)
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// The agent and every rank it started die with the host.
			if _, err := n.KillHost(cctx, a.host); err != nil {
				t.Errorf("stop %s: %v", a.name, err)
			}
			select {
			case <-a.done:
			case <-cctx.Done():
				t.Errorf("agent %s (pid %d) did not exit after SIGKILL", a.name, a.cmd.Process.Pid)
			}
		})
	}
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := c.api.Nodes(ctx)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, nd := range l.Nodes {
			if nd.Status.State == api.NodeReady && len(nd.GPUs) == fakeGPUs {
				ready++
			}
		}
		for _, a := range c.agents {
			if a.exited() {
				return false, fmt.Errorf("agent %s exited: %v", a.name, a.err)
			}
		}
		return ready == hosts, nil
	}); err != nil {
		t.Fatalf("waiting for %d agents to register: %v", hosts, err)
	}
	return c
}

func hostList(n *netns.Network) string {
	var s []string
	for i, h := range n.Hosts {
		s = append(s, fmt.Sprintf("host%d=%s", i+1, h.IP))
	}
	return strings.Join(s, " ")
}

// env is the environment of a CLI command run as the admin: the client
// config the server wrote.
func (c *cluster) env() []string {
	return append(os.Environ(), "GANGWAY_CONFIG="+c.config)
}

// freePort asks the kernel for a free TCP port on addr. The address is the
// test network's own, which nothing else binds, so the port stays free.
func freePort(addr string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", addr, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// agentByNode returns the agent of the named node.
func (c *cluster) agentByNode(name string) *agentProc {
	for _, a := range c.agents {
		if a.name == name {
			return a
		}
	}
	c.t.Fatalf("no agent for node %q", name)
	return nil
}

// submit sends spec, written as YAML, through `gangway submit -o json`,
// as a user would.
func (c *cluster) submit(ctx context.Context, specYAML string) string {
	c.t.Helper()
	path := filepath.Join(c.dir, fmt.Sprintf("job-%d.yaml", len(c.jobs)+1))
	if err := os.WriteFile(path, []byte(specYAML), 0o644); err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, gangwayBin, "submit", "--server", c.url, "-o", "json", path)
	cmd.Env = c.env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("gangway submit %s: %v\n%s\nspec:\n%s", path, err, stderr.Bytes(), specYAML)
	}
	var j api.Job
	if err := json.Unmarshal(out, &j); err != nil || j.ID == "" {
		c.t.Fatalf("gangway submit printed no job: %v\n%s", err, out)
	}
	c.jobs = append(c.jobs, j.ID)
	return j.ID
}

// describe runs `gangway describe job ID -o json`, as a user would.
func (c *cluster) describe(ctx context.Context, id string) *api.JobDetail {
	c.t.Helper()
	cmd := exec.CommandContext(ctx, gangwayBin, "describe", "job", id, "--server", c.url, "-o", "json")
	cmd.Env = c.env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("gangway describe job %s: %v\n%s", id, err, stderr.Bytes())
	}
	var d api.JobDetail
	if err := json.Unmarshal(out, &d); err != nil {
		c.t.Fatalf("gangway describe job %s -o json: %v\n%s", id, err, out)
	}
	return &d
}

// rankState is what the agent's rank supervisor recorded for one rank: its
// pid is the rank's process group.
type rankState struct {
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
}

// readRankState reads a rank's start record from the supervisor's journal
// in the agent's data directory (JSON lines: {"k": task key, "s": state}),
// an independent record of what the agent reports.
func (a *agentProc) readRankState(job string, attempt, rank int) (rankState, error) {
	p := filepath.Join(a.dir, "supervisor.journal")
	b, err := os.ReadFile(p)
	if err != nil {
		return rankState{}, err
	}
	key := fmt.Sprintf("%s/%d/%d", job, attempt, rank)
	var st rankState
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Key   string     `json:"k"`
			State *rankState `json:"s"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Key == key && e.State != nil {
			st = *e.State
		}
	}
	if st.PID <= 0 {
		return st, fmt.Errorf("%s: no start of %s", p, key)
	}
	return st, nil
}

// dump prints what a person needs to see why a test failed: the jobs as
// the server has them, the nodes, the server's and agents' logs and every
// rank's output.
func (c *cluster) dump() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range c.jobs {
		d, err := c.api.Job(ctx, id)
		if err != nil {
			t.Logf("--- job %s: %v", id, err)
			continue
		}
		d.Progress = nil // hundreds of lines of no interest here
		b, _ := json.MarshalIndent(d, "", "  ")
		t.Logf("--- job %s as the server has it:\n%s", id, b)
	}
	if l, err := c.api.Nodes(ctx); err == nil {
		var s []string
		for _, n := range l.Nodes {
			s = append(s, fmt.Sprintf("%s %s %s lastHeartbeat=%s %s", n.Name, n.Address, n.Status.State,
				n.Status.LastHeartbeat.Format(time.RFC3339Nano), n.Status.Reason))
		}
		t.Logf("--- nodes:\n%s", strings.Join(s, "\n"))
	}
	t.Logf("--- server log (%s):\n%s", c.server.log, tail(c.server.log, 80))
	for _, a := range c.agents {
		t.Logf("--- agent %s log (%s):\n%s", a.name, a.log, tail(a.log, 60))
	}
	logs, _ := filepath.Glob(filepath.Join(c.dir, "agent-*", "tasks", "*", "*", "std*.log"))
	sort.Strings(logs)
	for _, l := range logs {
		if s := tail(l, 15); s != "" {
			t.Logf("--- %s:\n%s", strings.TrimPrefix(l, c.dir+"/"), s)
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
