// Package hbbench measures the control plane under many agents: a server
// in this process, and N protocol-faithful agents (register, a heartbeat
// every interval, a long-poll on their assignments, each over its own
// connections, as kubemark's hollow nodes stand in for kubelets) in a
// child process, so that the server's CPU and memory are its own. It is
// `gangway bench heartbeats` (BENCHMARKS.md §1: 5,000 agents heartbeating
// every 2 s, ≤ 1 core and ≤ 2 GiB for the server).
//
// It imports api, api/client (the emulated agents call the server through
// it, as real ones do), base/cmdkit, base/pki (each emulated agent joins for a certificate), base/stats, controlplane/server,
// node/gpu (fake inventories) and the standard library.
package hbbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/gpu"
)

// Config is one run.
type Config struct {
	Agents      int
	GPUsPerNode int
	Interval    time.Duration // heartbeat interval the server asks for
	Window      time.Duration // measured span, after every agent registered
	Dir         string        // data directory (default: a temporary one)
	// InProcess runs the agents in this process (tests: no gangway
	// binary to start); the server's CPU then includes theirs.
	InProcess bool
	Log       *slog.Logger // server log; nil discards
	Progress  io.Writer    // progress lines; nil discards
}

// Validate names the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Agents < 1:
		return fmt.Errorf("--agents %d: want at least 1", c.Agents)
	case c.GPUsPerNode < 0 || c.GPUsPerNode > 64:
		return fmt.Errorf("--gpus-per-node %d: want 0..64", c.GPUsPerNode)
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("--interval %v: want at least 10ms", c.Interval)
	case c.Window <= 0:
		return fmt.Errorf("--window %v: want a positive duration", c.Window)
	}
	return nil
}

// Result is what a run measured. Server figures cover the window only,
// except the peaks, which cover the whole run (registration included).
type Result struct {
	Agents      int     `json:"agents"`
	GPUsPerNode int     `json:"gpus_per_node"`
	IntervalS   float64 `json:"interval_s"`
	WindowS     float64 `json:"window_s"`
	RegisterS   float64 `json:"register_s"` // until every agent was registered
	// ServerCores is the server process's CPU seconds per second of the
	// window (embedded etcd included).
	ServerCores        float64 `json:"server_cores"`
	ServerPeakRSSBytes int64   `json:"server_peak_rss_bytes"`
	ServerPeakHeap     uint64  `json:"server_peak_heap_bytes"`
	Heartbeats         int     `json:"heartbeats"`
	HeartbeatsPerS     float64 `json:"heartbeats_per_s"`
	HeartbeatP50Ms     float64 `json:"heartbeat_p50_ms"`
	HeartbeatP99Ms     float64 `json:"heartbeat_p99_ms"`
	HeartbeatMaxMs     float64 `json:"heartbeat_max_ms"`
	HeartbeatErrors    int     `json:"heartbeat_errors"`
	NodesReady         int     `json:"nodes_ready"`
	NodesLost          int     `json:"nodes_lost"`
	InProcess          bool    `json:"in_process,omitempty"`
}

// Run starts the server, the agents, waits until all registered, measures
// one window and stops everything.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	say := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gangway-bench-heartbeats-")
		if err != nil {
			return nil, fmt.Errorf("make working directory: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	// The default ratio of node timeout to heartbeat (4.5 s to 1 s), so
	// that every node gets witnesses and each heartbeat tends them.
	lb, err := server.StartLoopback(server.Config{DataDir: filepath.Join(dir, "server"), Log: lg,
		HeartbeatInterval: cfg.Interval, NodeTimeout: cfg.Interval * 9 / 2})
	if err != nil {
		return nil, err
	}
	defer lb.Stop()
	base := lb.URL
	peaks := startPeaks()
	defer peaks.stop()

	start := time.Now()
	ld, err := startLoad(ctx, cfg, lb.Admin)
	if err != nil {
		return nil, err
	}
	defer ld.close()
	say("server at %s; %d agents registering, heartbeat every %v", base, cfg.Agents, cfg.Interval)
	c, err := client.New(lb.Admin)
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	for {
		ready, _, err := countNodes(ctx, c)
		if err == nil && ready == cfg.Agents {
			break
		}
		if err := ld.failed(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d agents to register (%d ready; last count: %v): %w", cfg.Agents, ready, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	res := &Result{Agents: cfg.Agents, GPUsPerNode: cfg.GPUsPerNode, IntervalS: cfg.Interval.Seconds(),
		RegisterS: time.Since(start).Seconds(), InProcess: cfg.InProcess}
	say("%d agents registered in %.1fs; measuring %v", cfg.Agents, res.RegisterS, cfg.Window)
	// One interval for the first heartbeats after registration to spread.
	sleepCtx(ctx, cfg.Interval)
	if err := ld.mark("start"); err != nil {
		return nil, err
	}
	cpu0, t0 := processCPU(), time.Now()
	sleepCtx(ctx, cfg.Window)
	cpu1, t1 := processCPU(), time.Now()
	measured, err := ld.finish()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.WindowS = t1.Sub(t0).Seconds()
	res.ServerCores = (cpu1 - cpu0).Seconds() / res.WindowS
	res.ServerPeakRSSBytes, res.ServerPeakHeap = peaks.stop()
	res.Heartbeats, res.HeartbeatErrors = len(measured.LatenciesMs), measured.Errors
	res.HeartbeatsPerS = float64(res.Heartbeats) / res.WindowS
	slices.Sort(measured.LatenciesMs)
	res.HeartbeatP50Ms = stats.Quantile(measured.LatenciesMs, 0.5)
	res.HeartbeatP99Ms = stats.Quantile(measured.LatenciesMs, 0.99)
	res.HeartbeatMaxMs = stats.Quantile(measured.LatenciesMs, 1)
	res.NodesReady, res.NodesLost, err = countNodes(ctx, c)
	if err != nil {
		return res, fmt.Errorf("count nodes after the window: %w", err)
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// countNodes counts the registered nodes that are ready and lost.
// It decodes only the states: the run measures this process's memory.
func countNodes(ctx context.Context, c *client.Client) (ready, lost int, err error) {
	var list struct {
		Nodes []struct {
			Status struct {
				State api.NodeState `json:"state"`
			} `json:"status"`
		} `json:"nodes"`
	}
	if err := c.Get(ctx, "/v1/nodes", &list); err != nil {
		return 0, 0, fmt.Errorf("GET /v1/nodes: %w", err)
	}
	for _, n := range list.Nodes {
		switch n.Status.State {
		case api.NodeReady:
			ready++
		case api.NodeLost:
			lost++
		}
	}
	return ready, lost, nil
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peaks samples this process's resident set and Go heap.
type peaks struct {
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	rss  atomic.Int64
	heap atomic.Uint64
}

func startPeaks() *peaks {
	p := &peaks{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			p.sample()
			select {
			case <-p.done:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peaks) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if h := ms.HeapInuse; h > p.heap.Load() {
		p.heap.Store(h)
	}
	if r := peakRSS(); r > p.rss.Load() {
		p.rss.Store(r)
	}
}

// stop ends the sampling and returns the peaks.
func (p *peaks) stop() (rss int64, heap uint64) {
	p.once.Do(func() {
		close(p.done)
		p.wg.Wait()
		p.sample()
	})
	return p.rss.Load(), p.heap.Load()
}

// peakRSS is the kernel's high-water mark of this process's resident set
// (VmHWM), in bytes.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// loadStats is what the agents measured between the "start" and "stop"
// marks.
type loadStats struct {
	LatenciesMs []float64 `json:"latencies_ms"`
	Errors      int       `json:"errors"`
	Err         string    `json:"err,omitempty"`
}

// load is the running agents: in a child process (marks on its stdin,
// stats on its stdout) or in this one.
type load struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	exited chan struct{} // closed when the child has been waited for

	inproc *agents
	cancel context.CancelFunc
	done   chan struct{}
}

func startLoad(ctx context.Context, cfg Config, join client.Config) (*load, error) {
	if cfg.InProcess {
		lctx, cancel := context.WithCancel(ctx)
		a := newAgents(cfg.Agents, cfg.GPUsPerNode, join)
		l := &load{inproc: a, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(l.done); a.run(lctx) }()
		return l, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the gangway binary: %w", err)
	}
	cmd := exec.Command(exe, "bench", "heartbeats", "--load", join.Server,
		"--agents", strconv.Itoa(cfg.Agents), "--gpus-per-node", strconv.Itoa(cfg.GPUsPerNode))
	cmd.Env = append(os.Environ(), "GANGWAY_TOKEN="+join.Token, "GANGWAY_CA_FILE="+join.CAFile)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the agents' process: %w", err)
	}
	l := &load{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), exited: make(chan struct{})}
	go func() { cmd.Wait(); close(l.exited) }()
	return l, nil
}

// failed reports whether the agents' process has died.
func (l *load) failed() error {
	if l.cmd == nil {
		return nil
	}
	select {
	case <-l.exited:
		return fmt.Errorf("the agents' process exited: %s", l.cmd.ProcessState)
	default:
		return nil
	}
}

func (l *load) mark(m string) error {
	if l.inproc != nil {
		l.inproc.mark(m)
		return nil
	}
	_, err := io.WriteString(l.stdin, m+"\n")
	return err
}

// finish ends the window and returns its stats.
func (l *load) finish() (loadStats, error) {
	if l.inproc != nil {
		return l.inproc.stats(), nil
	}
	if err := l.mark("stop"); err != nil {
		return loadStats{}, fmt.Errorf("stop the agents: %w", err)
	}
	var st loadStats
	if err := json.NewDecoder(l.stdout).Decode(&st); err != nil {
		return st, fmt.Errorf("read the agents' figures: %w", err)
	}
	if st.Err != "" {
		return st, errors.New("agents: " + st.Err)
	}
	return st, nil
}

func (l *load) close() {
	if l.inproc != nil {
		l.cancel()
		<-l.done
		return
	}
	l.stdin.Close() // EOF: the child exits
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		l.cmd.Process.Kill()
		<-l.exited
	}
}

// RunLoad is the child process: agents against base until stdin ends,
// "start" and "stop" lines on stdin bounding the window whose stats go
// to stdout as one JSON object.
func RunLoad(ctx context.Context, join client.Config, n, gpus int, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := newAgents(n, gpus, join)
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx) }()
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "start":
			a.mark("start")
		case "stop":
			if err := json.NewEncoder(stdout).Encode(a.stats()); err != nil {
				return err
			}
		}
	}
	cancel()
	<-done
	return nil
}

// agents are the emulated agents.
type agents struct {
	// join is how an agent joins: the server, the CA and an admin's token.
	join  client.Config
	nodes []api.Node
	mu    sync.Mutex
	on    bool // inside the window
	lat   []float64
	errs  int
}

func newAgents(n, gpus int, join client.Config) *agents {
	a := &agents{join: join}
	for i := range n {
		name := fmt.Sprintf("hb-%05d", i)
		node := api.Node{Name: name, Address: "127.0.0.1", CPUs: 128, MemoryBytes: 2 << 40,
			Labels: map[string]string{"leaf": fmt.Sprintf("leaf-%03d", i/32)}}
		if d, err := gpu.NewFake(gpus, "H100", gpu.WithSeed(name)); err == nil {
			if inv, err := d.Discover(context.Background()); err == nil {
				node.GPUSource = inv.Source
				for _, g := range inv.Devices {
					node.GPUs = append(node.GPUs, api.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryBytes: g.MemoryBytes,
						Health: g.Health, NUMANode: g.NUMANode, NVLinkPeers: g.NVLinkPeers, Rail: g.Index})
				}
			}
		}
		a.nodes = append(a.nodes, node)
	}
	return a
}

func (a *agents) mark(m string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m == "start" {
		a.on, a.lat, a.errs = true, a.lat[:0], 0
	}
}

func (a *agents) stats() loadStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.on = false
	return loadStats{LatenciesMs: append([]float64{}, a.lat...), Errors: a.errs}
}

func (a *agents) record(d time.Duration, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.on {
		return
	}
	if err != nil {
		a.errs++
		return
	}
	a.lat = append(a.lat, float64(d)/1e6)
}

// run registers every agent (64 at a time, as a fleet's agents come up
// over a while) and keeps each one's heartbeat and long-poll going.
func (a *agents) run(ctx context.Context) {
	var wg sync.WaitGroup
	gate := make(chan struct{}, 64)
	for i := range a.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.agent(ctx, &a.nodes[i], gate)
		}()
	}
	wg.Wait()
}

// agent is one node's agent: its own connections, as on its own machine.
func (a *agents) agent(ctx context.Context, n *api.Node, gate chan struct{}) {
	var c *client.Client
	reg := &api.RegisterRequest{Node: *n}
	var lease api.RegisterResponse
	var err error
	for {
		select {
		case gate <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if c == nil {
			// Join as a real agent does (a key, a request, a certificate),
			// then speak mutual TLS on connections of its own.
			if c, err = a.joinOne(ctx, n.Name); err == nil {
				defer c.CloseIdleConnections()
			}
		}
		if c != nil {
			lease, err = c.Register(ctx, reg)
		}
		<-gate
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		sleepCtx(ctx, time.Second)
	}
	var rev atomic.Int64
	var polling sync.WaitGroup
	defer polling.Wait() // the poll ends with ctx, as the loop below does
	polling.Go(func() { a.poll(ctx, c, n.Name, &rev) })
	every := lease.HeartbeatInterval.D()
	if every <= 0 {
		every = time.Second
	}
	// Agents start at different times: spread the beats over the
	// interval.
	sleepCtx(ctx, rand.N(every))
	t := time.NewTicker(every)
	defer t.Stop()
	held := witnessNames(lease.Witnesses)
	for ctx.Err() == nil {
		// As an agent: the witnesses it holds travel with each beat.
		hb := api.Heartbeat{Node: n.Name, AckRevision: rev.Load(), SentAt: time.Now(), Witnesses: held}
		t0 := time.Now()
		resp, err := c.Heartbeat(ctx, &hb)
		if ctx.Err() != nil {
			return
		}
		a.record(time.Since(t0), err)
		if err == nil {
			held = witnessNames(resp.Witnesses)
		}
		if err == nil && resp.Reregister {
			lease, _ = c.Register(ctx, reg)
			held = witnessNames(lease.Witnesses)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll long-polls the node's assignments as the agent does, acknowledging
// each revision with the next heartbeat.
func (a *agents) poll(ctx context.Context, c *client.Client, node string, rev *atomic.Int64) {
	for ctx.Err() == nil {
		q := client.AssignmentQuery{Node: node}
		if r := rev.Load(); r > 0 {
			q.Index, q.Wait, q.Delta = r, 10*time.Second, true
		}
		l, err := c.Assignments(ctx, q)
		if err != nil {
			sleepCtx(ctx, 300*time.Millisecond)
			continue
		}
		rev.Store(l.Revision)
	}
}

// joinOne joins node name with the admin's token and returns a client that
// presents its certificate, on connections of its own as on its own
// machine, with no timeout but the run's.
func (a *agents) joinOne(ctx context.Context, name string) (*client.Client, error) {
	jc, err := client.New(a.join)
	if err != nil {
		return nil, err
	}
	defer jc.CloseIdleConnections()
	csr, key, err := pki.NewCSR(name)
	if err != nil {
		return nil, err
	}
	ans, err := jc.Join(ctx, &api.JoinRequest{Node: name, CSR: string(csr)})
	if err != nil {
		return nil, err
	}
	kp, err := pki.NewKeyPair([]byte(ans.Certificate), key)
	if err != nil {
		return nil, err
	}
	pool, err := pki.PoolFromPEM([]byte(ans.CA))
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, DisableCompression: true,
		TLSClientConfig: pki.ClientTLS(pool, kp), ForceAttemptHTTP2: false}
	return client.New(client.Config{Server: a.join.Server, Transport: tr, Timeout: -1})
}

func witnessNames(ws []api.Witness) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Node
	}
	return out
}
