package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/bench/netns"
	"github.com/gangway/gangway/internal/node/driver"
)

// proc is a process the harness started and reaps.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result; read after done
}

// startProc starts cmd with its output appended to logPath.
func startProc(cmd *exec.Cmd, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(cmd.Args, " "), err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends sig, waits up to grace, then kills.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// cluster is a gangway control plane (one server or several replicas) and
// K agents, all child processes of the harness: the agents each in a
// network namespace host of their own, or all on loopback.
type cluster struct {
	bin, dir string
	net      *netns.Network // nil: agents on loopback
	cp       *Replicas
	api      *client.Client // the admin's, of every replica
	admin    client.Config
	join     string
	agents   []*agentProc
	say      func(format string, a ...any)
}

type agentProc struct {
	host     int
	name, ip string
	dir      string
	p        *proc
}

// clusterConfig is what startCluster needs.
type clusterConfig struct {
	bin, dir    string
	replicas    int
	agents      int
	gpus        int
	useNetns    bool
	nodeTimeout time.Duration
	// gateway makes every replica serve the OpenAI gateway too.
	gateway bool
	say     func(format string, a ...any)
}

// gatewayHeaderTimeout is how long a replica's gateway waits for an
// engine's answer to begin before it tries another: an engine on a host cut
// off does not answer at all.
const gatewayHeaderTimeout = 5 * time.Second

// startCluster starts the control plane and the agents and waits until
// every node is ready. On error, what it started is stopped again.
func startCluster(ctx context.Context, cc clusterConfig) (_ *cluster, err error) {
	c := &cluster{bin: cc.bin, dir: cc.dir, say: cc.say}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	host := "127.0.0.1"
	if cc.useNetns {
		n, err := netns.NewNetwork(ctx, cc.agents)
		if err != nil {
			return nil, err
		}
		c.net = n
		host = n.Gateway.String()
		c.say("network %s: %s, server at %s", n.Name, n.Subnet, n.Gateway)
	}
	if c.cp, err = NewReplicas(ReplicasConfig{Bin: c.bin, Dir: c.dir, N: cc.replicas, Host: host, NodeTimeout: cc.nodeTimeout,
		Gateway: cc.gateway, GatewayHeaderTimeout: gatewayHeaderTimeout}); err != nil {
		return nil, err
	}
	if err := c.cp.Start(ctx); err != nil {
		return nil, err
	}
	c.api, c.admin = c.cp.Client(), c.cp.Admin()
	jt, err := c.api.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: cc.agents, TTL: api.Duration(48 * time.Hour), Description: "chaos agents"})
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	c.join = jt.Secret
	for i := range cc.agents {
		a := &agentProc{host: i, name: fmt.Sprintf("host%d", i+1), ip: "127.0.0.1", dir: filepath.Join(c.dir, fmt.Sprintf("agent-host%d", i+1))}
		if c.net != nil {
			a.ip = c.net.Hosts[i].IP.String()
		}
		c.agents = append(c.agents, a)
		if err := c.startAgent(a, cc.gpus); err != nil {
			return nil, err
		}
	}
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := c.api.Nodes(ctx)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range l.Nodes {
			if n.Status.State == api.NodeReady && len(n.GPUs) == cc.gpus {
				ready++
			}
		}
		for _, a := range c.agents {
			if a.p.exited() {
				return false, fmt.Errorf("agent %s exited: %v (log %s)", a.name, a.p.err, c.agentLog(a))
			}
		}
		return ready == cc.agents, nil
	}); err != nil {
		return nil, fmt.Errorf("waiting for %d agents: %w", cc.agents, err)
	}
	return c, nil
}

// FreePorts finds a free TCP port on each host: "host:port" each, free a
// moment ago.
func FreePorts(hosts ...string) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", h, err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// injectPath is the file a's fake GPUs read injected faults from.
func (a *agentProc) injectPath() string { return a.dir + "-inject.jsonl" }

// startAgent starts a's agent (again).
func (c *cluster) startAgent(a *agentProc, gpus int) error {
	args := []string{"agent", "--server", c.admin.Server, "--ca-file", c.admin.CAFile, "--join", c.join, "--name", a.name,
		"--address", a.ip, "--fake-gpus", strconv.Itoa(gpus), "--data-dir", a.dir, "--log-level", "warn",
		"--health-inject", a.injectPath()}
	var cmd *exec.Cmd
	if c.net != nil {
		cmd = c.net.Command(a.host, c.bin, args...)
	} else {
		cmd = exec.Command(c.bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	p, err := startProc(cmd, c.agentLog(a))
	if err != nil {
		return err
	}
	a.p = p
	return nil
}

func (c *cluster) agentLog(a *agentProc) string { return filepath.Join(c.dir, a.name+".log") }

// supervisorPID is the pid of the rank supervisor serving a's data
// directory, from its pid file, if that process is a supervisor.
func supervisorPID(a *agentProc) (int, bool) {
	b, err := os.ReadFile(filepath.Join(a.dir, "supervisor.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return pid, strings.Contains(string(cmdline), "supervise")
}

// close stops everything: the agents and every rank they started, the
// control plane, the network.
func (c *cluster) close() {
	for _, a := range c.agents {
		if a.p != nil && !a.p.exited() {
			_ = a.p.cmd.Process.Signal(syscall.SIGCONT) // a frozen one cannot die of SIGTERM
			a.p.stop(syscall.SIGTERM, 5*time.Second)
		}
		driver.KillAll(a.dir)
	}
	if c.cp != nil {
		c.cp.Stop(15 * time.Second)
	}
	if c.net != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.net.Close(ctx); err != nil {
			c.say("tear down the network: %v", err)
		}
	}
	if c.api != nil {
		c.api.CloseIdleConnections()
	}
}
