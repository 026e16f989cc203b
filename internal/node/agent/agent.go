// Package agent is the node agent: it registers the node and its GPUs,
// heartbeats, pulls the ranks assigned to it, runs each with the exec driver,
// watches checkpoints and progress files, and reports exits. It never decides
// placement. It fences itself (kills its ranks) when it cannot reach the
// server for the lease the server gave it, and re-attaches to its ranks after
// a restart.
//
// metrics.go reads the node's GPUs and serves them (in dcgm-exporter's
// names) and its ranks' progress as Prometheus metrics; heartbeats carry
// each new reading in short, for `gangway top`.
//
// It imports api, api/client (its one way to the server), base/adminhttp
// (the metrics and pprof listeners), base/pki (its node certificate,
// creds.go), launch, node/container (ranks in containers), node/driver,
// node/gpu, node/nic, golang.org/x/sys,
// prometheus/client_golang and the standard library.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/launch"
	"github.com/gangway/gangway/internal/node/driver"
	"github.com/gangway/gangway/internal/node/gpu"
	"github.com/gangway/gangway/internal/node/nic"
)

// Config configures an agent.
type Config struct {
	// Server is the control plane's base URL, or several replicas' URLs
	// separated by commas (the agent moves to the next when one cannot be
	// reached).
	Server string
	// Name is the node's name. Default: the host name.
	Name string
	// Address is the IP other nodes reach this one at. Default: the
	// local address of the route to the server.
	Address string
	// Listen is where the agent serves logs ("host:port"). Default
	// Address:0.
	Listen string
	// DataDir holds task directories (logs, state). Required.
	DataDir string
	Labels  map[string]string
	// GPUs discovers devices.
	GPUs gpu.Discoverer
	// Executable is the gangway binary; a rank command that starts with
	// "gangway" runs it. Default: this process's executable.
	Executable string
	// DockerHost is the Docker engine that runs container ranks
	// ("unix:///PATH", "tcp://HOST:PORT"); "": $DOCKER_HOST, else the
	// default socket.
	DockerHost string
	// RegistryAuth is a Docker client config (config.json, as docker
	// login writes it) whose credentials pulls of container ranks' images
	// use; "": anonymous pulls.
	RegistryAuth string
	// ShimPath is the binary that runs the node's rank supervisor
	// (`ShimPath supervise`): a small gangway-shim when installed, else
	// Executable.
	ShimPath string
	// Cgroups describes resource-limit support, reported to the server.
	Cgroups string
	// SysRoot is where sysfs is mounted, for NIC discovery ("/sys" by
	// default; "-" skips discovery).
	SysRoot string
	// ReleaseLimits removes a finished rank's cgroup; nil does nothing.
	ReleaseLimits func(cgroupName string) error
	// TaskRetention: the directory (logs, progress) of a rank that ended
	// this long ago is removed. 0 keeps them; otherwise at least
	// MinTaskRetention.
	TaskRetention time.Duration
	// JoinToken joins the node on its first start (a join token, or an
	// admin's token); CAFile is the cluster CA it trusts the server by
	// until it has joined. Neither is needed once DataDir/pki holds the
	// node's certificate.
	JoinToken string
	CAFile    string
	// Health runs the node's health checks (node/health's Runner); nil:
	// none. Run starts it and waits for it; its results travel in
	// heartbeats when they change, and a change is reported at once.
	Health HealthChecks
	// MetricsListen, if set, serves /metrics (GPUs in dcgm-exporter's
	// names, ranks' progress) in plain HTTP there; DebugListen, if set,
	// /metrics and pprof (metrics.go). GPUMetricsInterval is how often
	// the GPUs are read (for the metrics, and for the heartbeats, which
	// carry each new reading in short for `gangway top`); default
	// DefaultGPUMetricsInterval.
	MetricsListen, DebugListen string
	GPUMetricsInterval         time.Duration
	Log                        *slog.Logger
}

// HealthChecks is what the agent needs of a health-check runner.
type HealthChecks interface {
	// Run checks until ctx ends.
	Run(ctx context.Context) error
	// Results is every check's latest result.
	Results() []api.HealthCheck
	// Changed receives when a result changed status.
	Changed() <-chan struct{}
}

// callTimeout bounds one call to the server (a long poll gets its wait on
// top).
const callTimeout = 10 * time.Second

// Agent is one node's agent.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	server *client.Client     // the API of the control plane; set by Run
	peerHC *http.Client       // asks witnesses (witness.go); set by Run
	creds  *pki.KeyPair       // the node's certificate; set by Run
	drv    *driver.Supervisor // set by Run before its loops start

	kick chan struct{}  // asks the heartbeat loop to report now
	bg   sync.WaitGroup // goroutines watching ranks' exits and stopping ranks; Run waits for them

	// self is the agent's own account, which decides whether a rank's
	// run-as account needs a switch and whether it may have one; nil: the
	// process's effective uid and gid (tests set another). Never changed
	// once Run starts.
	self *driver.Account

	// dirMu orders making a task directory against the sweep that
	// removes old ones (and their emptied buckets).
	dirMu      sync.Mutex
	mu         sync.Mutex       // guards the fields below
	tasks      map[string]*task // by task key
	desiredRev int64            // revision of the newest assignment list applied
	ackRev     int64
	lease      api.RegisterResponse
	lastOK     time.Time // last successful heartbeat
	fenced     bool
	// registrations counts successful registrations: the assignment loop
	// fetches the whole list after each.
	registrations int
	fences        int // times fenced: a list asked for before one is dropped
	// leaseUntil is when the ranks' lease lapses (witness.go); witnesses
	// are the nodes asked while the server is silent; outage: they said
	// it is down, and the lease runs on their word.
	leaseUntil time.Time
	witnesses  []api.Witness
	outage     bool
	noWord     string // why the witnesses did not keep the ranks, last time asked
	registered bool
	ckptSent   map[string]int64     // newest checkpoint step reported per job
	ran        map[string]time.Time // task keys run and forgotten, when
	ranSwept   time.Time
	pendingCk  []api.CheckpointReport
	pendingPr  []api.Progress
	listenURL  string
	instance   string // the data directory's instance ID; set by Run
	// healthSent is the health report the server acknowledged last, under
	// registration healthReg: a new registration is sent the report again.
	healthSent []api.HealthCheck
	healthReg  int
	// telemetrySent is when the GPU readings an answered heartbeat carried
	// last were read: newer ones go in the next heartbeat.
	telemetrySent time.Time

	gm gpuMetrics // the metrics' GPU readings and listeners (metrics.go)
	// realGPUs: the GPUs are NVML's, and gpuUUID names them by index, for
	// containers (containers.go); set at each registration.
	realGPUs bool
	gpuUUID  map[int]string
}

// Validate reports the first setting that cannot work, named by the flag
// of `gangway agent` that sets it. An empty Name is read as the host name,
// which New fills in.
func (c Config) Validate() error {
	if c.Server == "" {
		return errors.New("agent: --server is required")
	}
	for _, srv := range strings.Split(c.Server, ",") {
		if u, err := url.Parse(strings.TrimSpace(srv)); err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("agent: --server %q: want https://host:port (the server speaks TLS only), or several separated by commas", srv)
		}
	}
	if c.DataDir == "" {
		return errors.New("agent: --data-dir is required")
	}
	if c.Name != "" && !api.ValidNodeName(c.Name) {
		return fmt.Errorf("agent: --name %q: use letters, digits, '-', '_' and '.' (at most 63)", c.Name)
	}
	if c.TaskRetention < 0 || (c.TaskRetention > 0 && c.TaskRetention < MinTaskRetention) {
		return fmt.Errorf("agent: --task-retention %s: want 0 (keep) or at least %s", c.TaskRetention, MinTaskRetention)
	}
	return nil
}

// New checks cfg and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("agent: node name: %w", err)
		}
		cfg.Name = h
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The supervisor, started elsewhere, and the ranks, in their task
	// directories, must find the same files: a relative --data-dir would
	// resolve against each one's own working directory.
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("agent: --data-dir %s: %w", cfg.DataDir, err)
	}
	cfg.DataDir = abs
	if cfg.GPUs == nil {
		cfg.GPUs = gpu.NewNVML()
	}
	if cfg.Executable == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("agent: find own executable: %w", err)
		}
		cfg.Executable = p
	}
	if cfg.ShimPath == "" {
		cfg.ShimPath = cfg.Executable
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.GPUMetricsInterval <= 0 {
		cfg.GPUMetricsInterval = DefaultGPUMetricsInterval
	}
	return &Agent{
		cfg: cfg, log: cfg.Log.With("node", cfg.Name),
		kick: make(chan struct{}, 1), tasks: map[string]*task{}, ckptSent: map[string]int64{}, ran: map[string]time.Time{},
	}, nil
}

// task is one rank this agent runs or ran.
type task struct {
	asg api.Assignment
	// hasAsg: asg is the server's full assignment (a re-attached rank
	// knows only its key until the first assignment list).
	hasAsg  bool
	dir     string
	h       *driver.Handle // nil if it never started
	status  api.RankStatus
	stopped bool // a stop was requested
	// progress file tail state
	progOff int64
	// reportedFinal: the terminal status reached the server.
	reportedFinal bool
	// signalSeq is the newest Assignment.SignalSeq delivered.
	signalSeq int
	// fence is set when this agent's fence killed the rank: what it
	// reports as the exit's message.
	fence string
	// prog is what the metrics keep of its progress lines; nil: none.
	prog *rankProgress
}

// Run works until ctx ends, or until serving logs fails, and returns
// only after its goroutines have exited: nil when ctx ended, else what
// failed. Ranks keep running after Run returns (a new agent re-attaches to
// them) unless the agent fenced itself.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Address == "" {
		first, _, _ := strings.Cut(a.cfg.Server, ",")
		addr, err := routeAddr(strings.TrimSpace(first))
		if err != nil {
			return err
		}
		a.cfg.Address = addr
	}
	if err := os.MkdirAll(a.tasksDir(), 0o755); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	release, err := a.lockDataDir()
	if err != nil {
		return err
	}
	defer release()
	if a.instance, err = a.instanceID(); err != nil {
		return err
	}
	creds, pool, err := a.credentials(ctx)
	if err != nil {
		return err
	}
	a.creds = creds
	if a.server, err = client.New(client.Config{Server: a.cfg.Server, Timeout: callTimeout,
		TLS: pki.ClientTLS(pool, creds)}); err != nil {
		return fmt.Errorf("agent: --server: %w", err)
	}
	a.peerHC = pki.AgentClient(pool, creds)
	defer a.peerHC.CloseIdleConnections()
	listen := a.cfg.Listen
	if listen == "" {
		listen = net.JoinHostPort(a.cfg.Address, "0")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("agent: listen for logs on %s: %w", listen, err)
	}
	a.listenURL = "https://" + ln.Addr().String()
	ln = tls.NewListener(ln, pki.ServerTLS(creds, pool, true))
	drv, err := driver.Connect(ctx, a.cfg.DataDir, a.cfg.ShimPath, a.log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("agent: %w", err)
	}
	a.drv = drv
	defer drv.Close()
	defer a.server.CloseIdleConnections()
	defer a.bg.Wait()
	// stop ends the loops (and the rank watchers) when serving fails.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	a.adopt(ctx)
	a.sweepContainers(ctx)

	srv := &http.Server{Handler: peersOrServer(a.handler()), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)}
	serveErr := make(chan error, 2) // serving logs failed, or the node's name is another agent's
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("agent: serve logs on %s: %w", ln.Addr(), err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := a.heartbeatLoop(ctx); err != nil {
			serveErr <- err
		}
	}()
	go func() { defer wg.Done(); a.assignmentLoop(ctx) }()
	go func() { defer wg.Done(); a.watchLoop(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); a.renewLoop(ctx) }()
	if a.cfg.TaskRetention > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); a.gcLoop(ctx) }()
	}
	if err := a.serveMetrics(ctx, &wg); err != nil {
		stop()
		srv.Close()
		wg.Wait()
		return err
	}
	if a.cfg.Health != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.cfg.Health.Run(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("health checks stopped", "err", err)
			}
		}()
	}
	err = nil
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	wg.Wait()
	return err
}

func (a *Agent) tasksDir() string { return filepath.Join(a.cfg.DataDir, "tasks") }

// taskDir is one directory per rank, <job>.<attempt>.<rank>, in a bucket
// per hundred job ids (launch.IDBucket): big flat directories make every
// create slow.
func (a *Agent) taskDir(k string) string {
	job, att, rank, _ := api.ParseTaskKey(k)
	return filepath.Join(a.tasksDir(), launch.IDBucket(job, 100), job+"."+strconv.Itoa(att)+"."+strconv.Itoa(rank))
}

// routeAddr finds the local IP used to reach the server.
func routeAddr(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("agent: --server: %w", err)
	}
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = "80"
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("agent: find the address that reaches %s (set --address): %w", host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// adopt re-attaches to the ranks the supervisor runs (or ran and still
// remembers) for an earlier agent process. Their assignments come with the
// first assignment list.
func (a *Agent) adopt(ctx context.Context) {
	hs, err := a.drv.Tasks(ctx)
	if err != nil {
		a.log.Warn("cannot list the supervisor's ranks", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hs {
		job, att, rank, err := api.ParseTaskKey(h.Key())
		if err != nil {
			continue
		}
		asg := api.Assignment{JobID: job, Attempt: att, Rank: rank, Node: a.cfg.Name}
		t := &task{asg: asg, dir: a.taskDir(h.Key()), h: h}
		t.status = a.baseStatus(&asg)
		t.status.State = api.RankRunning
		t.status.PID = h.PID()
		t.status.StartedAt = h.StartedAt()
		if fi, err := os.Stat(filepath.Join(t.dir, "progress.jsonl")); err == nil {
			t.progOff = fi.Size()
		}
		a.tasks[h.Key()] = t
		a.goAwait(ctx, t)
		a.log.Info("re-attached to rank", "task", h.Key(), "pid", h.PID())
	}
}

func (a *Agent) baseStatus(asg *api.Assignment) api.RankStatus {
	return api.RankStatus{JobID: asg.JobID, Attempt: asg.Attempt, Rank: asg.Rank, Node: a.cfg.Name}
}

func (a *Agent) registerOnce(ctx context.Context) error {
	inv, err := a.cfg.GPUs.Discover(ctx)
	if err != nil {
		return fmt.Errorf("discover GPUs: %w", err)
	}
	n := api.Node{
		Name: a.cfg.Name, Address: a.cfg.Address, AgentURL: a.listenURL, Instance: a.instance,
		Labels: a.cfg.Labels, CPUs: runtime.NumCPU(), MemoryBytes: memTotal(),
		GPUSource: inv.Source, GPUReason: inv.Reason, Cgroups: a.cfg.Cgroups,
	}
	nics, ncclEnv, rails := a.discoverNICs()
	n.NICs, n.LaunchEnv = nics, ncclEnv
	numa := make([]int, len(inv.Devices))
	for i, d := range inv.Devices {
		numa[i] = d.NUMANode
	}
	gpuRail := nic.GPURails(numa, rails)
	for i, d := range inv.Devices {
		g := api.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryBytes: d.MemoryBytes, Health: d.Health,
			NUMANode: d.NUMANode, NVLinkPeers: d.NVLinkPeers, Rail: -1}
		if i < len(gpuRail) {
			g.Rail = gpuRail[i]
		}
		n.GPUs = append(n.GPUs, g)
	}
	uuids := make(map[int]string, len(inv.Devices))
	for _, d := range inv.Devices {
		uuids[d.Index] = d.UUID
	}
	a.mu.Lock()
	a.realGPUs, a.gpuUUID = inv.Source == gpu.SourceNVML, uuids
	a.mu.Unlock()
	if len(n.GPUs) == 0 && inv.Reason != "" {
		a.log.Warn("no GPUs", "reason", inv.Reason)
	}
	// Whatever witnesses this agent had may not be the server's any more:
	// it holds none until the registration answers.
	a.mu.Lock()
	a.witnesses = nil
	a.mu.Unlock()
	sent := time.Now()
	resp, err := a.server.Register(ctx, &api.RegisterRequest{Node: n})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	a.mu.Lock()
	a.lease = resp
	a.witnesses = resp.Witnesses
	a.registered = true
	a.registrations++
	a.lastOK = sent
	a.fenced, a.outage = false, false
	d := a.grantLocked(sent.Add(resp.FenceAfter.D()))
	a.mu.Unlock()
	a.passLease(d)
	a.log.Info("registered", "server", a.cfg.Server, "gpus", len(n.GPUs), "address", a.cfg.Address)
	return nil
}

// discoverNICs reads the node's NICs and derives NCCL's settings: the
// socket interface is the one carrying the address this agent advertises,
// the IB HCAs are the compute-fabric rails.
func (a *Agent) discoverNICs() ([]api.NIC, map[string]string, []nic.Rail) {
	if a.cfg.SysRoot == "-" {
		return nil, nil, nil
	}
	found, err := nic.Discover(a.cfg.SysRoot)
	if err != nil {
		a.log.Warn("NIC discovery failed; no NCCL settings derived", "err", err)
		return nil, nil, nil
	}
	nccl := nic.DeriveNCCL(found)
	railOf := map[string]int{}
	for _, r := range nccl.Rails {
		railOf[r.HCAPort()] = r.Index
	}
	var out []api.NIC
	for _, f := range found {
		rail := -1
		if f.HCA != "" {
			if i, ok := railOf[f.HCA+":"+strconv.Itoa(f.Port)]; ok {
				rail = i
			}
		}
		out = append(out, api.NIC{Name: f.Name, Kind: string(f.Kind), HCA: f.HCA, Port: f.Port, SpeedMbps: f.SpeedMbps,
			NUMANode: f.NUMANode, Up: f.Up(), Rail: rail})
	}
	env := map[string]string{}
	if ifname := ifaceWithAddr(a.cfg.Address); ifname != "" {
		env["NCCL_SOCKET_IFNAME"] = "=" + ifname
		env["GLOO_SOCKET_IFNAME"] = ifname
	} else if nccl.SocketIfname != "" {
		env["NCCL_SOCKET_IFNAME"] = nccl.SocketIfname
	}
	if nccl.IBHCA != "" {
		env["NCCL_IB_HCA"] = nccl.IBHCA
	}
	return out, env, nccl.Rails
}

// ifaceWithAddr names the interface that holds ip, or "".
func ifaceWithAddr(ip string) string {
	want := net.ParseIP(ip)
	if want == nil || want.IsLoopback() {
		return ""
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.Equal(want) {
				return ifc.Name
			}
		}
	}
	return ""
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb int64
	if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err != nil {
		return 0
	}
	return kb * 1024
}

// heartbeatLoop registers, then reports every interval (and at once when a
// rank changes state), and fences the node when the server stays silent.
// It returns when ctx ends (nil), or with the server's refusal when this
// agent's first registration finds the node's name held by another live
// agent: a second agent started on one machine by mistake stops and says
// why, rather than retrying for ever.
func (a *Agent) heartbeatLoop(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := a.registerOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.mu.Lock()
			first := a.registrations == 0
			a.mu.Unlock()
			if first && isNameHeld(err) {
				return fmt.Errorf("agent: --name %s: %w", a.cfg.Name, err)
			}
			a.log.Warn("register failed; retrying", "err", err)
			a.checkFence()
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		a.beatUntilReregister(ctx)
	}
	return nil
}

func (a *Agent) beatUntilReregister(ctx context.Context) {
	a.mu.Lock()
	interval := a.lease.HeartbeatInterval.D()
	a.mu.Unlock()
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var healthChanged <-chan struct{} // nil: never
	if a.cfg.Health != nil {
		healthChanged = a.cfg.Health.Changed()
	}
	for {
		hb := a.snapshotReport()
		a.mu.Lock()
		timeout := max(a.lease.FenceAfter.D(), interval)
		a.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := a.server.Heartbeat(cctx, &hb)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case isForbidden(err):
			// Another agent holds this node's registration (it claimed
			// the name while this node was lost): register again, which
			// the server refuses until that one is lost in turn; the
			// fence meanwhile kills what this agent runs.
			a.log.Warn("server refuses this agent's node secret; registering again", "err", err)
			a.checkFence()
			return
		case err != nil:
			a.log.Debug("heartbeat failed", "err", err)
			a.checkFence()
		case resp.Reregister:
			// The server has this node lost (or not at all): it has ended
			// the attempts of whatever runs here, so nothing may run on.
			// Nothing in this report was stored: keep it for the next one.
			a.log.Info("server asks to register again")
			a.fenceNow("the server has this node lost")
			return
		default:
			if resp.Refused > 0 {
				// Not ours to store (another node's rank, a job gone, a
				// checkpoint outside its directory): say so where the
				// node's operator looks.
				a.log.Warn("the server refused reports of this heartbeat", "refused", resp.Refused)
			}
			a.reported(hb, resp)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
			// A rank started or exited: report it, together with what
			// changes right after (a short rank's exit, the rest of a
			// burst of starts).
			sleepCtx(ctx, kickCoalesce)
		case <-healthChanged:
			// A check changed status: a fatal finding should take its GPU
			// out of service now, not a heartbeat later.
		}
	}
}

// round1 rounds x to one decimal, for logs a person reads.
func round1(x float64) float64 { return math.Round(x*10) / 10 }

// kickCoalesce is how long a heartbeat prompted by a rank's change waits
// for more changes to carry.
const kickCoalesce = 3 * time.Millisecond

// checkFence kills every rank once their lease has lapsed (witness.go):
// the server will declare this node lost and restart its gangs
// elsewhere, and the old ranks must be dead by then. The supervisor holds
// the same lease and does the same if this agent cannot.
func (a *Agent) checkFence() {
	a.mu.Lock()
	if a.lease.FenceAfter <= 0 || a.lastOK.IsZero() || a.fenced || time.Now().Before(a.leaseUntil) {
		a.mu.Unlock()
		return
	}
	silent := time.Since(a.lastOK)
	why := fmt.Sprintf("no answer from the server for %.1f s", silent.Seconds())
	if a.noWord != "" {
		why += " (" + a.noWord + ")"
	}
	a.mu.Unlock()
	a.fenceNow(why)
}

// fenceNow kills every rank and follows no assignment until a heartbeat
// succeeds again. why says what the agent heard, or did not, in words that
// follow "node N fenced itself: "; it travels with each killed rank's exit
// (RankStatus.Fenced), so that the attempt says it was the fence.
func (a *Agent) fenceNow(why string) {
	a.mu.Lock()
	if a.fenced {
		a.mu.Unlock()
		return
	}
	fence := a.lease.FenceAfter.D()
	silent := time.Since(a.lastOK)
	a.fenced, a.outage = true, false
	a.fences++
	msg := fmt.Sprintf("node %s fenced itself: %s", a.cfg.Name, why)
	var live []*driver.Handle
	for _, t := range a.tasks {
		// Not marked stopped: a rank still in the assignment list stays
		// known (and is never started again) until the list drops it.
		if t.h != nil && !t.status.State.Terminal() {
			live = append(live, t.h)
			t.fence = msg
		}
	}
	a.mu.Unlock()
	if len(live) == 0 {
		a.log.Warn("fenced, with no rank to kill", "why", why, "silent_s", round1(silent.Seconds()), "lease_s", round1(fence.Seconds()))
		return
	}
	a.log.Warn("fencing: killing all ranks", "why", why, "silent_s", round1(silent.Seconds()), "lease_s", round1(fence.Seconds()), "ranks", len(live))
	// Stop every rank's group first, then kill them all: killed one after
	// another, a rank could see its node-mate die and exit on its own
	// before its own SIGKILL, and its end would not read as the fence's.
	for _, h := range live {
		_ = h.Signal(syscall.SIGSTOP)
	}
	for _, h := range live {
		_ = h.Signal(syscall.SIGKILL)
	}
}

func (a *Agent) snapshotReport() api.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	hb := api.Heartbeat{Node: a.cfg.Name, SentAt: time.Now()}
	keys := make([]string, 0, len(a.tasks))
	for k := range a.tasks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hb.Ranks = append(hb.Ranks, a.tasks[k].status)
	}
	hb.Witnesses = witnessNames(a.witnesses)
	if t := a.gm.telemetry(); t != nil && t.At.After(a.telemetrySent) {
		hb.Telemetry = t
	}
	hb.Checkpoints = append(hb.Checkpoints, a.pendingCk...)
	hb.Progress = append(hb.Progress, a.pendingPr...)
	if a.cfg.Health != nil {
		if cur := a.cfg.Health.Results(); len(cur) > 0 && (a.healthReg != a.registrations || !api.SameHealth(cur, a.healthSent)) {
			hb.Health = cur
		}
	}
	// Ack the newest list once nothing outside it is alive.
	ack := a.desiredRev
	for _, t := range a.tasks {
		if !t.status.State.Terminal() && t.stopped {
			ack = a.ackRev
			break
		}
	}
	a.ackRev = ack
	hb.AckRevision = ack
	return hb
}

// reported drops what a successful heartbeat delivered, and renews the
// ranks' lease from when it was sent.
func (a *Agent) reported(hb api.Heartbeat, resp api.HeartbeatResponse) {
	a.mu.Lock()
	d := a.reportedLocked(hb, resp)
	a.mu.Unlock()
	a.passLease(d)
}

func (a *Agent) reportedLocked(hb api.Heartbeat, resp api.HeartbeatResponse) time.Duration {
	// The server heard from us no earlier than we sent; fencing counts from
	// there, so a slow answer cannot make the fence late.
	a.lastOK = hb.SentAt
	if a.lease.WitnessDown > 0 && !resp.Unstored {
		a.witnesses = resp.Witnesses
	}
	a.noWord = ""
	if a.outage {
		a.outage = false
		a.log.Info("the server answers again after an outage; ranks kept")
	}
	d := a.grantLocked(hb.SentAt.Add(a.lease.FenceAfter.D()))
	if hb.Telemetry != nil {
		a.telemetrySent = hb.Telemetry.At // heard, even when not stored: readings are not
	}
	if resp.Unstored {
		// Heard, not stored: keep every report for the next beat.
		return d
	}
	if a.fenced {
		// The server never declared us lost (we fenced on a stall). The
		// killed ranks are reported as exited and the controller restarts
		// their gangs; follow assignments again.
		a.fenced = false
		a.log.Warn("server reachable again after fencing; following assignments again")
	}
	a.pendingCk = a.pendingCk[len(hb.Checkpoints):]
	a.pendingPr = a.pendingPr[len(hb.Progress):]
	if hb.Health != nil {
		a.healthSent, a.healthReg = hb.Health, a.registrations
	}
	for _, rs := range hb.Ranks {
		t := a.tasks[api.TaskKey(rs.JobID, rs.Attempt, rs.Rank)]
		if t != nil && rs.State.Terminal() {
			t.reportedFinal = true
		}
	}
	// Forget finished ranks the server no longer wants and has heard of:
	// no longer in the newest assignment list, which no later list can
	// bring back (a key names one attempt). A key forgotten is remembered
	// a while longer, against a list answered from a stale view.
	now := time.Now()
	for k, t := range a.tasks {
		if t.stopped && t.reportedFinal && t.status.State.Terminal() {
			delete(a.tasks, k)
			a.ran[k] = now
			if t.h != nil {
				a.drv.Forget(k)
			}
		}
	}
	if len(a.ran) > 0 && now.Sub(a.ranSwept) > time.Minute {
		a.ranSwept = now
		for k, at := range a.ran {
			if now.Sub(at) > ranMemory {
				delete(a.ran, k)
			}
		}
	}
	return d
}

// ranMemory is how long the agent refuses to start a rank again after it
// forgot it.
const ranMemory = 10 * time.Minute

func (a *Agent) kickNow() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
