package e2ebench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/container"
)

// Config is the shape of one run. Zero fields take the defaults Main uses
// (the BENCHMARKS.md mix: 16 nodes × 8 GPUs, 1,000 one-GPU jobs, then 100
// gangs of 2 nodes × 8 GPUs).
type Config struct {
	// Nodes is how many agents (emulated nodes) run. Default 16.
	Nodes int
	// GPUsPerNode is each agent's fake GPU count. Default 8.
	GPUsPerNode int
	// Jobs is the number of one-GPU, one-rank jobs in the first phase.
	// Zero skips the phase only if Gangs is set; Default fills 1,000 when
	// both are zero.
	Jobs int
	// Gangs is the number of gangs in the second phase: GangNodes ranks,
	// one per node, each holding all of its node's GPUs.
	Gangs int
	// GangNodes is how many nodes a gang spans. Default 2.
	GangNodes int
	// Warmup one-GPU jobs run to completion before anything is measured.
	Warmup int
	// Submitters is how many clients submit concurrently. Default 1, as
	// the Slurm script's one sbatch after another.
	Submitters int
	// Array adds a phase of Jobs one-GPU jobs submitted as one job array
	// (as `sbatch --array` is for Slurm), after the one-at-a-time phase.
	Array bool
	// Output is every job's spec.output: "keep" (default: log files per
	// rank) or "discard" (as the Slurm script's sbatch -o /dev/null).
	Output string
	// Command is what every rank runs. Default ["true"]; with Driver
	// docker, ["/gangway", "version"] (the image has no true).
	Command []string
	// Driver runs the ranks: "exec" (default: bare processes) or
	// "docker" (every rank in a Docker container of an image made from
	// Exe, container.ProgramImage).
	Driver string
	// Exe is the gangway executable; agents run as `Exe agent ...` and
	// ranks under `Exe supervise`. Default: this process's executable.
	Exe string
	// Dir holds etcd's data and the agents' task directories. Default: a
	// temporary directory, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Timeout bounds the whole run. Default 10m.
	Timeout time.Duration
	// Poll is how often completion is checked. It does not affect the
	// figures (they come from server and agent timestamps), only how soon
	// the run notices the end. Default 100ms.
	Poll time.Duration
	// NodeNice is the nice value the agents (and so their supervisors and
	// ranks) run at. The emulated nodes stand in for machines of their
	// own, which would not take CPU from the control plane; the script
	// beside Slurm renices Slurm's slurmd daemons the same. Default 0.
	NodeNice int
	// Log receives the server's log. Default: discarded.
	Log *slog.Logger
}

// Default fills the zero fields of c.
func (c *Config) Default() {
	if c.Nodes == 0 {
		c.Nodes = 16
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 8
	}
	if c.Jobs == 0 && c.Gangs == 0 {
		c.Jobs, c.Gangs = 1000, 100
	}
	if c.GangNodes == 0 {
		c.GangNodes = 2
	}
	if c.Submitters == 0 {
		c.Submitters = 1
	}
	if len(c.Command) == 0 {
		c.Command = []string{"true"}
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Poll == 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field that cannot work, by its flag name.
func (c *Config) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("--nodes %d: want at least 1", c.Nodes)
	case c.GPUsPerNode < 1:
		return fmt.Errorf("--gpus-per-node %d: want at least 1", c.GPUsPerNode)
	case c.Jobs < 0:
		return fmt.Errorf("--jobs %d: want 0 or more", c.Jobs)
	case c.Gangs < 0:
		return fmt.Errorf("--gangs %d: want 0 or more", c.Gangs)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup %d: want 0 or more", c.Warmup)
	case c.Gangs > 0 && (c.GangNodes < 1 || c.GangNodes > c.Nodes):
		return fmt.Errorf("--gang-nodes %d: want 1..%d (the number of nodes)", c.GangNodes, c.Nodes)
	case c.Submitters < 1:
		return fmt.Errorf("--submitters %d: want at least 1", c.Submitters)
	case c.NodeNice < 0 || c.NodeNice > 19:
		return fmt.Errorf("--node-nice %d: want 0..19", c.NodeNice)
	case c.Timeout < 0:
		return fmt.Errorf("--timeout %s: want a positive duration", c.Timeout)
	case c.Output != "" && c.Output != api.OutputKeep && c.Output != api.OutputDiscard:
		return fmt.Errorf("--output %q: want keep or discard", c.Output)
	}
	return nil
}

// Result is what a run measured; `gangway bench e2e -o json` prints it.
type Result struct {
	System      string  `json:"system"`
	Driver      string  `json:"driver"`
	Output      string  `json:"output"`
	Nodes       int     `json:"nodes"`
	GPUsPerNode int     `json:"gpus_per_node"`
	Submitters  int     `json:"submitters"`
	Warmup      int     `json:"warmup_jobs"`
	NodeNice    int     `json:"node_nice"`
	Phases      []Phase `json:"phases"`
	// SetupS is server start to every agent registered.
	SetupS float64 `json:"setup_s"`
}

// Phase is one measured batch of identical jobs.
type Phase struct {
	// Name is "single" (one-GPU jobs) or "gang".
	Name        string `json:"name"`
	Jobs        int    `json:"jobs"`
	RanksPerJob int    `json:"ranks_per_job"`
	GPUsPerRank int    `json:"gpus_per_rank"`
	Succeeded   int    `json:"succeeded"`
	// Failed counts jobs that ended in any phase but Succeeded.
	Failed int `json:"failed"`
	// SubmitS: first submit request sent → last one answered.
	SubmitS    float64 `json:"submit_s"`
	SubmitPerS float64 `json:"submit_per_s"`
	// WallS: first submit request sent → last job finished (its
	// FinishedAt in the store).
	WallS    float64 `json:"wall_s"`
	JobsPerS float64 `json:"jobs_per_s"`
	// Submit→start: submit request sent → the job's last rank process
	// started, in milliseconds (nearest-rank percentiles).
	SubmitToStartP50Ms float64 `json:"submit_to_start_p50_ms"`
	SubmitToStartP90Ms float64 `json:"submit_to_start_p90_ms"`
	SubmitToStartP99Ms float64 `json:"submit_to_start_p99_ms"`
	SubmitToStartMaxMs float64 `json:"submit_to_start_max_ms"`
	// Where the time goes, medians in milliseconds: submit sent → the
	// controller created the attempt; attempt created → last rank
	// started; last rank exited → job Succeeded in the store.
	SubmitToPlacedP50Ms float64 `json:"submit_to_placed_p50_ms"`
	PlacedToStartP50Ms  float64 `json:"placed_to_start_p50_ms"`
	ExitToDoneP50Ms     float64 `json:"exit_to_done_p50_ms"`
	// CPU seconds spent during the phase by this process (server,
	// embedded etcd and the benchmark's own client) and by the agents
	// (with their rank supervisors and the ranks those reaped).
	ServerCPUS float64 `json:"server_cpu_s"`
	AgentsCPUS float64 `json:"agents_cpu_s"`
	// StoreWrites is how far the store's revision moved during the phase:
	// the number of etcd write transactions the phase cost.
	StoreWrites int64 `json:"store_writes"`
}

// phaseSpec is what one phase submits.
type phaseSpec struct {
	name string
	n    int
	spec api.JobSpec
	// array: spec is one array of n tasks, submitted in one request.
	array bool
}

// Run starts the cluster, runs the warm-up and the phases, stops
// everything and returns what it measured. progress gets a line per step.
// A run in which some job did not succeed returns the result and an error
// naming the failures.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Result, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(progress, "[%6.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	exe := cfg.Exe
	if exe == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the gangway executable: %w", err)
		}
		exe = p
	}
	image, err := benchImage(ctx, &cfg, exe, say)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("make working directory: %w", err)
		}
	} else {
		d, err := os.MkdirTemp("", "gangway-bench-e2e-")
		if err != nil {
			return nil, fmt.Errorf("make working directory: %w", err)
		}
		dir = d
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	}

	lb, err := server.StartLoopback(server.Config{DataDir: filepath.Join(dir, "server"), Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer lb.Stop()
	base := lb.URL
	c, err := newClient(lb.Admin, cfg.Submitters)
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	say("server at %s, data in %s", base, dir)

	// The agents join as on a real fleet: one join token for all of them.
	jt, err := c.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: cfg.Nodes, Description: "bench e2e agents"})
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	agents, err := startAgents(exe, base, lb.Admin.CAFile, jt.Secret, dir, cfg.Nodes, cfg.GPUsPerNode, cfg.NodeNice)
	defer stopAgents(agents)
	if err != nil {
		return nil, err
	}
	if err := c.waitNodes(ctx, cfg.Nodes, cfg.GPUsPerNode, cfg.Poll); err != nil {
		return nil, fmt.Errorf("waiting for %d agents to register (logs in %s): %w", cfg.Nodes, dir, err)
	}
	res := &Result{System: "gangway", Driver: cmp.Or(cfg.Driver, DriverExec), Output: cmp.Or(cfg.Output, api.OutputKeep), Nodes: cfg.Nodes, GPUsPerNode: cfg.GPUsPerNode,
		Submitters: cfg.Submitters, Warmup: cfg.Warmup, NodeNice: cfg.NodeNice, SetupS: time.Since(start).Seconds()}
	say("%d agents ready with %d fake GPUs each", cfg.Nodes, cfg.GPUsPerNode)

	zero := 0
	single := api.JobSpec{Name: "bench-single", Ranks: 1, GPUsPerRank: 1, Command: cfg.Command, MaxRestarts: &zero, Output: cfg.Output}
	gang := api.JobSpec{Name: "bench-gang", Ranks: cfg.GangNodes, GPUsPerRank: cfg.GPUsPerNode, RanksPerNode: 1,
		Command: cfg.Command, MaxRestarts: &zero, Output: cfg.Output}
	single.Image, gang.Image = image, image
	if image != "" {
		single.ImagePullPolicy, gang.ImagePullPolicy = api.PullNever, api.PullNever
	}
	if cfg.Warmup > 0 {
		w := single
		w.Name = "bench-warmup"
		if _, err := runPhase(ctx, c, phaseSpec{name: "warmup", n: cfg.Warmup, spec: w}, cfg, agents); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		say("warm-up: %d jobs done", cfg.Warmup)
	}
	var phases []phaseSpec
	if cfg.Jobs > 0 {
		phases = append(phases, phaseSpec{name: "single", n: cfg.Jobs, spec: single})
		if cfg.Array {
			arr := single
			arr.Name = "bench-array"
			arr.Array = fmt.Sprintf("0-%d", cfg.Jobs-1)
			phases = append(phases, phaseSpec{name: "array", n: cfg.Jobs, spec: arr, array: true})
		}
	}
	if cfg.Gangs > 0 {
		phases = append(phases, phaseSpec{name: "gang", n: cfg.Gangs, spec: gang})
	}
	var errs []error
	for _, ps := range phases {
		say("%s: submitting %d jobs of %d rank(s) × %d GPU(s) running %q", ps.name, ps.n, ps.spec.Ranks, ps.spec.GPUsPerRank, cfg.Command)
		ph, err := runPhase(ctx, c, ps, cfg, agents)
		if ph != nil {
			res.Phases = append(res.Phases, *ph)
			say("%s: %d/%d succeeded, %.1f jobs/s, submit→start p50 %.1f ms p99 %.1f ms",
				ps.name, ph.Succeeded, ph.Jobs, ph.JobsPerS, ph.SubmitToStartP50Ms, ph.SubmitToStartP99Ms)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ps.name, err))
			if ph == nil {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// submitted is one job as the benchmark saw it.
type submitted struct {
	id     string
	sentAt time.Time
}

func runPhase(ctx context.Context, c benchClient, ps phaseSpec, cfg Config, agents []*agentProc) (*Phase, error) {
	body, err := json.Marshal(ps.spec)
	if err != nil {
		return nil, fmt.Errorf("encode job spec: %w", err)
	}
	rev0, err := c.revision(ctx)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuNow(agents)
	t0 := time.Now()
	var subs []submitted
	if ps.array {
		subs, err = c.submitArray(ctx, body)
	} else {
		subs, err = c.submitAll(ctx, body, ps.n, cfg.Submitters)
	}
	if err != nil {
		return nil, err
	}
	submitS := time.Since(t0).Seconds()
	if err := c.waitFinal(ctx, subs, cfg.Poll); err != nil {
		err = fmt.Errorf("waiting for %d jobs to finish: %w%s", len(subs), err, c.stuck(subs))
		c.cancelUnfinished(subs, cfg.Poll)
		return nil, err
	}
	cpu1 := cpuNow(agents)
	rev1, err := c.revision(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := c.details(ctx, subs, cfg.Submitters+3)
	if err != nil {
		return nil, err
	}
	ph := summarize(ps, t0, subs, jobs)
	ph.SubmitS = submitS
	if submitS > 0 {
		ph.SubmitPerS = float64(ps.n) / submitS
	}
	ph.ServerCPUS = cpu1.self - cpu0.self
	ph.AgentsCPUS = cpu1.agents - cpu0.agents
	ph.StoreWrites = rev1 - rev0
	if ph.Failed > 0 {
		return ph, fmt.Errorf("%d of %d jobs did not succeed (first: %s)", ph.Failed, ph.Jobs, firstFailure(jobs))
	}
	return ph, nil
}

func firstFailure(jobs []*api.JobDetail) string {
	for _, d := range jobs {
		if d.Job.Status.Phase != api.JobSucceeded {
			return fmt.Sprintf("job %s %s: %s", d.Job.ID, d.Job.Status.Phase, d.Job.Status.Reason)
		}
	}
	return "none"
}

// summarize computes a phase's figures from the submissions and the final
// job details (same order).
func summarize(ps phaseSpec, t0 time.Time, subs []submitted, jobs []*api.JobDetail) *Phase {
	ph := &Phase{Name: ps.name, Jobs: ps.n, RanksPerJob: ps.spec.Ranks, GPUsPerRank: ps.spec.GPUsPerRank}
	var toStart, toPlaced, placedToStart, exitToDone []float64
	var end time.Time
	for i, d := range jobs {
		st := &d.Job.Status
		if st.FinishedAt.After(end) {
			end = st.FinishedAt
		}
		if st.Phase != api.JobSucceeded {
			ph.Failed++
			continue
		}
		ph.Succeeded++
		a := st.Current()
		if a == nil {
			continue
		}
		var started, exited time.Time
		n := 0
		for _, r := range d.Ranks {
			if r.Attempt != a.Number {
				continue
			}
			n++
			if r.StartedAt.After(started) {
				started = r.StartedAt
			}
			if r.FinishedAt.After(exited) {
				exited = r.FinishedAt
			}
		}
		if n != ps.spec.Ranks || started.IsZero() {
			continue
		}
		sent := subs[i].sentAt
		toStart = append(toStart, ms(started.Sub(sent)))
		toPlaced = append(toPlaced, ms(a.CreatedAt.Sub(sent)))
		placedToStart = append(placedToStart, ms(started.Sub(a.CreatedAt)))
		if !exited.IsZero() {
			exitToDone = append(exitToDone, ms(st.FinishedAt.Sub(exited)))
		}
	}
	if !end.IsZero() {
		ph.WallS = end.Sub(t0).Seconds()
		if ph.WallS > 0 {
			ph.JobsPerS = float64(ph.Succeeded) / ph.WallS
		}
	}
	sort.Float64s(toStart)
	ph.SubmitToStartP50Ms = stats.Quantile(toStart, 0.50)
	ph.SubmitToStartP90Ms = stats.Quantile(toStart, 0.90)
	ph.SubmitToStartP99Ms = stats.Quantile(toStart, 0.99)
	ph.SubmitToStartMaxMs = stats.Quantile(toStart, 1)
	for _, xs := range [][]float64{toPlaced, placedToStart, exitToDone} {
		sort.Float64s(xs)
	}
	ph.SubmitToPlacedP50Ms = stats.Quantile(toPlaced, 0.5)
	ph.PlacedToStartP50Ms = stats.Quantile(placedToStart, 0.5)
	ph.ExitToDoneP50Ms = stats.Quantile(exitToDone, 0.5)
	return ph
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ---- agents ----

// agentProc is one `gangway agent` subprocess.
type agentProc struct {
	name string
	dir  string // its data directory
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when cmd.Wait returned
}

func startAgents(exe, base, caFile, joinToken, dir string, nodes, gpus, nice int) ([]*agentProc, error) {
	var out []*agentProc
	for i := 1; i <= nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		logf, err := os.Create(filepath.Join(dir, "agent-"+name+".log"))
		if err != nil {
			return out, fmt.Errorf("agent %s log: %w", name, err)
		}
		adir := filepath.Join(dir, "agent-"+name)
		args := []string{exe, "agent", "--server", base, "--ca-file", caFile, "--name", name, "--address", "127.0.0.1",
			"--fake-gpus", strconv.Itoa(gpus), "--data-dir", adir, "--log-level", "warn"}
		if nice > 0 {
			// Through nice(1), so the agent is reniced before it starts
			// its supervisor, which and whose ranks inherit it.
			args = append([]string{"nice", "-n", strconv.Itoa(nice)}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "GANGWAY_JOIN_TOKEN="+joinToken) // not in the process list
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return out, fmt.Errorf("start agent %s (%s agent): %w", name, exe, err)
		}
		a := &agentProc{name: name, dir: adir, cmd: cmd, log: logf, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(a.done) }()
		out = append(out, a)
	}
	return out, nil
}

// stopAgents sends SIGTERM to every agent, waits up to 5s, then kills the
// stragglers. Ranks are all finished by then; any left are killed with
// their agent's process group by the agent's own fencing, not here.
func stopAgents(agents []*agentProc) {
	for _, a := range agents {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(5 * time.Second)
	for _, a := range agents {
		select {
		case <-a.done:
		case <-deadline:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		a.log.Close()
	}
}

// cpuSample is CPU seconds used so far.
type cpuSample struct{ self, agents float64 }

func cpuNow(agents []*agentProc) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = tv(ru.Utime) + tv(ru.Stime)
	}
	for _, a := range agents {
		// The agent, and its node's rank supervisor: not the agent's child
		// (it outlives agent restarts), but the parent that reaps every
		// rank, so its children's time is the ranks'.
		pids := []int{a.cmd.Process.Pid}
		if b, err := os.ReadFile(filepath.Join(a.dir, "supervisor.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pids = append(pids, pid)
			}
		}
		for _, pid := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			if st, err := parseProcStat(b); err == nil {
				// Its threads' own time in nanoseconds where the kernel
				// keeps it (a small phase can stay under one 10 ms tick),
				// and its reaped children's in ticks.
				if ns, ok := threadsCPU(pid); ok {
					s.agents += ns/1e9 + float64(st.cutime+st.cstime)/userHZ
				} else {
					s.agents += st.total()
				}
			}
		}
	}
	return s
}

// threadsCPU sums the time on CPU of pid's threads from
// /proc/PID/task/*/schedstat (first field, nanoseconds).
func threadsCPU(pid int) (float64, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false
	}
	var ns float64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return ns, true
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// ---- HTTP ----

// benchClient is the benchmark's side of the /v1 API.
type benchClient struct{ *client.Client }

// newClient is a client keeping a connection per submitter (and a few for
// the pollers).
func newClient(cfg client.Config, conns int) (benchClient, error) {
	cfg.MaxIdleConnsPerHost, cfg.Timeout = conns+4, time.Minute
	c, err := client.New(cfg)
	return benchClient{c}, err
}

func (c benchClient) waitNodes(ctx context.Context, nodes, gpus int, poll time.Duration) error {
	return wait.Until(ctx, poll, func() (bool, error) {
		l, err := c.Nodes(ctx)
		if err != nil {
			return false, nil // the server may still be starting
		}
		ready := 0
		for _, n := range l.Nodes {
			if n.Status.State == api.NodeReady && len(n.GPUs) == gpus {
				ready++
			}
		}
		return ready == nodes, nil
	})
}

// revision returns the store's current revision, which every write
// transaction advances by one.
func (c benchClient) revision(ctx context.Context) (int64, error) {
	l, err := c.Nodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the store revision: %w", err)
	}
	return l.Index, nil
}

// submitAll posts body n times from par concurrent clients and returns the
// submissions in job-ID order.
// submitArray submits one array; every task counts as sent when the
// request was.
func (c benchClient) submitArray(ctx context.Context, body []byte) ([]submitted, error) {
	sent := time.Now()
	_, a, err := c.SubmitAny(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("submit array: %w", err)
	}
	if a == nil {
		return nil, errors.New("submit array: the server stored one job, not an array")
	}
	out := make([]submitted, len(a.Jobs))
	for i, id := range a.Jobs {
		out[i] = submitted{id: id, sentAt: sent}
	}
	return out, nil
}

func (c benchClient) submitAll(ctx context.Context, body []byte, n, par int) ([]submitted, error) {
	out := make([]submitted, n)
	// Workers take the next index from a counter, not a channel: with one
	// submitter a hand-off per job would add a goroutine switch to every
	// submission the benchmark times.
	var next atomic.Int64
	var failed atomic.Bool
	var mu sync.Mutex
	var firstErr error
	work := func() {
		for !failed.Load() && ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			sent := time.Now()
			// The ID is all the benchmark needs now (as sbatch --parsable
			// prints); the details come after the phase.
			id, err := c.SubmitID(ctx, body)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("submit job %d of %d: %w", i+1, n, err)
				}
				mu.Unlock()
				failed.Store(true)
				return
			}
			out[i] = submitted{id: id, sentAt: sent}
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < min(par, n); w++ {
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(a, b int) bool { return idLess(out[a].id, out[b].id) })
	return out, nil
}

// idLess orders numeric job IDs.
func idLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// waitFinal waits until every submitted job is in a final phase. It polls
// the newest job alone (cheap) until that one is final, then the full list,
// so that polling barely loads the server while the phase runs.
func (c benchClient) waitFinal(ctx context.Context, subs []submitted, poll time.Duration) error {
	if len(subs) == 0 {
		return nil
	}
	last := subs[len(subs)-1].id
	err := wait.Until(ctx, poll, func() (bool, error) {
		d, err := c.Job(ctx, last)
		if err != nil {
			return false, err
		}
		return d.Job.Status.Phase.Final(), nil
	})
	if err != nil {
		return err
	}
	want := make(map[string]bool, len(subs))
	for _, s := range subs {
		want[s.id] = true
	}
	return wait.Until(ctx, poll, func() (bool, error) {
		l, err := c.Jobs(ctx, client.JobQuery{})
		if err != nil {
			return false, err
		}
		final := 0
		for _, j := range l.Jobs {
			if want[j.ID] && j.Status.Phase.Final() {
				final++
			}
		}
		return final == len(want), nil
	})
}

// stuck describes the submitted jobs that are not final, for an error
// message: how many, and the first few with their phase and reason.
func (c benchClient) stuck(subs []submitted) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Jobs(ctx, client.JobQuery{})
	if err != nil {
		return ""
	}
	want := make(map[string]bool, len(subs))
	for _, s := range subs {
		want[s.id] = true
	}
	var b strings.Builder
	n := 0
	for _, j := range l.Jobs {
		if !want[j.ID] || j.Status.Phase.Final() {
			continue
		}
		if n < 3 {
			fmt.Fprintf(&b, "; job %s %s: %s", j.ID, j.Status.Phase, j.Status.Reason)
		}
		n++
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d not finished%s)", n, b.String())
}

// cancelUnfinished cancels the submitted jobs that are not final and waits
// up to 10s for them to end, so that a failed run leaves no rank running.
func (c benchClient) cancelUnfinished(subs []submitted, poll time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range subs {
		// Final jobs answer 409; nothing to do for them.
		_, _ = c.Cancel(ctx, s.id)
	}
	_ = c.waitFinal(ctx, subs, poll)
}

// details fetches every submitted job's detail, in the order of subs.
func (c benchClient) details(ctx context.Context, subs []submitted, par int) ([]*api.JobDetail, error) {
	out := make([]*api.JobDetail, len(subs))
	errs := make([]error, len(subs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = c.Job(ctx, subs[i].id)
			}
		}()
	}
	for i := range subs {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("read job details: %w", err)
	}
	return out, nil
}

// The drivers the benchmark runs ranks with.
const (
	DriverExec   = "exec"
	DriverDocker = "docker"
)

// benchImage makes, for the docker driver, the image the ranks run in:
// exe and the libraries it links (container.ProgramImage, nothing
// pulled); it swaps the default command for one the image has. "" for the
// exec driver.
func benchImage(ctx context.Context, cfg *Config, exe string, say func(string, ...any)) (string, error) {
	if cfg.Driver != DriverDocker {
		return "", nil
	}
	if why := container.Available(ctx, ""); why != "" {
		return "", fmt.Errorf("--driver docker needs a Docker engine on this machine: %s", why)
	}
	ref, _, err := container.ProgramImage(ctx, exe, "/gangway", "gangway-bench")
	if err != nil {
		return "", err
	}
	if slices.Equal(cfg.Command, []string{"true"}) {
		cfg.Command = []string{"/gangway", "version"}
	}
	say("ranks run in Docker containers of image %s, running %q", ref, cfg.Command)
	return ref, nil
}
