package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/bench/chaos"
	"github.com/gangway/gangway/internal/cli/simcli"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/driver"
)

// DemoSummary is what `gangway demo -o json` prints for the node-loss and
// gpu-fault scenarios.
type DemoSummary struct {
	// Driver runs the ranks: "exec" (bare processes) or "docker" (in
	// containers of an image the demo made).
	Driver string `json:"driver"`
	// Fault is what was done to the node: "node-loss" (the machine died),
	// or "xid 79 on GPU N" (injected into its health checks).
	Fault string `json:"fault"`
	// DetectionS: node killed → node marked lost; Xid injected → the GPU
	// or node out of service.
	DetectionS float64 `json:"detection_s"`
	// RecoveryS: fault → every rank of the new attempt running.
	RecoveryS          float64 `json:"recovery_s"`
	ResumedFromStep    int64   `json:"resumed_from_step"`
	KilledAtStep       int64   `json:"killed_at_step"`
	FinalLoss          float64 `json:"final_loss"`
	ReferenceFinalLoss float64 `json:"reference_final_loss"`
	LossRelDiff        float64 `json:"loss_rel_diff"`
	Tolerance          float64 `json:"tolerance"`
	KilledNode         string  `json:"killed_node"`
	Attempts           int     `json:"attempts"`
	// Restarts is the job's restart count at the end: a health fault
	// must not use any up.
	Restarts int     `json:"restarts"`
	TotalS   float64 `json:"total_s"`
	OK       bool    `json:"ok"`
}

// demoConfig is the demo's shape; tests shrink it.
type demoConfig struct {
	nodes, gpus       int
	ranks, perNode    int
	steps, killAtStep int
	stepDelay         time.Duration
	timeout           time.Duration
	// downtime is how long the server-restart scenario keeps the server
	// down.
	downtime time.Duration
	// gpuFault: inject an Xid 79 into a node's health checks instead of
	// killing it (the gpu-fault scenario).
	gpuFault bool
	// straggler: slow one node's ranks instead (the straggler scenario),
	// by naming it in slowFile, which the trainer reads every step.
	straggler bool
	slowFile  string
	// driver is driverExec or driverDocker; docker runs the ranks in
	// containers of image (made by demo).
	driver string
	image  string
	// linger keeps the cluster, and its dashboard, up this long after
	// the summary; hold until the context ends (Ctrl-C). report, when
	// set, prints the summary first.
	linger time.Duration
	hold   bool
	report func(*DemoSummary)
}

// lingerForDashboard keeps the demo's cluster up after its summary, as
// cfg says, for the dashboard at ui; outer is the command's context,
// which Ctrl-C ends.
func lingerForDashboard(outer context.Context, cfg demoConfig, say func(string, ...any), ui string, sum *DemoSummary) {
	if cfg.report == nil || (cfg.linger <= 0 && !cfg.hold) {
		return
	}
	cfg.report(sum)
	if cfg.hold {
		say("the cluster stays up for the dashboard at %s until Ctrl-C", ui)
		<-outer.Done()
		return
	}
	say("the dashboard stays up %s more at %s (--keep: until Ctrl-C)", cfg.linger, ui)
	select {
	case <-outer.Done():
	case <-time.After(cfg.linger):
	}
}

// demoStragglerWindow is the straggler scenario's --straggler-window: the
// default minute would make the demo long.
const demoStragglerWindow = 3 * time.Second

// healthFault reports whether the scenario's fault is one the server
// answers by taking the node out of service, rather than losing it.
func (c demoConfig) healthFault() bool { return c.gpuFault || c.straggler }

// demoSlowBy is how much longer the straggler scenario's slow ranks work
// per step.
const demoSlowBy = 20 * time.Millisecond

// demoXid is the Xid the gpu-fault scenario injects: 79, the GPU has
// fallen off the bus, the commonest fatal Xid in large fleets.
const demoXid = 79

// demoScenarios are the capabilities the demo can show, the default first:
// node-loss kills a node mid-training and watches the gang resume from its
// checkpoint elsewhere; server-restart kills the control plane (a process
// of its own) for --downtime while the job trains and starts it again on
// the same data directory, counting the rank processes that died of it;
// leader-failover runs three replicas and kills the leading one;
// gpu-fault injects an Xid 79 on a GPU holding a rank, which the node's
// health checks report and the server answers by taking the node out of
// service and restarting the gang elsewhere; straggler slows one node's
// ranks, which the server finds from their own work per step and answers
// the same way.
var demoScenarios = []string{"node-loss", "server-restart", "leader-failover", "gpu-fault", "straggler"}

// demoShape is the demo's job and cluster; tests that run the command
// shrink it.
var demoShape = demoConfig{nodes: 4, gpus: 8, ranks: 8, perNode: 4, steps: 400, killAtStep: 150,
	stepDelay: 30 * time.Millisecond, timeout: 110 * time.Second}

func runDemo(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "demo", "[--scenario NAME] [--driver exec|docker] [-o json]")
	out := cmdkit.OutputFlag(fs)
	scenario := fs.String("scenario", demoScenarios[0], "what to show: "+strings.Join(demoScenarios, ", "))
	keep := fs.Bool("keep", false, "keep the demo's temporary directory (logs, etcd data) and its cluster up, for the dashboard, until Ctrl-C")
	linger := fs.Duration("linger", 5*time.Second, "keep the cluster up this long after the summary, for the dashboard (default 5s; 0 with -o json)")
	downtime := fs.Duration("downtime", 30*time.Second, "server-restart: how long the server stays down")
	driver := fs.String("driver", driverExec, "node-loss: run the ranks as bare processes (exec) or in Docker containers of an image made from this gangway (docker)")
	if _, code, ok := cmdkit.ParseArgs(fs, args); !ok {
		return code
	}
	if !slices.Contains(demoScenarios, *scenario) {
		fmt.Fprintf(e.Stderr, "gangway demo: --scenario %q: want one of %s\n", *scenario, strings.Join(demoScenarios, ", "))
		return 2
	}
	switch {
	case *driver != driverExec && *driver != driverDocker:
		fmt.Fprintf(e.Stderr, "gangway demo: --driver %q: want exec or docker\n", *driver)
		return 2
	case *driver == driverDocker && *scenario != "node-loss":
		fmt.Fprintf(e.Stderr, "gangway demo: --driver docker runs the node-loss scenario only, not %s\n", *scenario)
		return 2
	}
	progress := e.Stdout
	if *out != cmdkit.Table {
		progress = e.Stderr // stdout carries the summary alone
	}
	cfg := demoShape
	if *scenario == "server-restart" {
		cfg.downtime = *downtime
		cfg.timeout += 2 * *downtime
		sum, err := demoServerRestart(ctx, cfg, progress, *keep)
		if *out != cmdkit.Table || sum != nil {
			_ = cmdkit.Print(e.Stdout, *out, sum, func(w io.Writer) error { printRestartSummary(w, sum); return nil })
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "gangway demo: FAILED: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
			return 1
		}
		return 0
	}
	if *scenario == "leader-failover" {
		cfg.timeout += 60 * time.Second
		sum, err := demoLeaderFailover(ctx, cfg, progress, *keep)
		if *out != cmdkit.Table || sum != nil {
			_ = cmdkit.Print(e.Stdout, *out, sum, func(w io.Writer) error { printFailoverSummary(w, sum); return nil })
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "gangway demo: FAILED: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
			return 1
		}
		return 0
	}
	cfg.gpuFault = *scenario == "gpu-fault"
	cfg.straggler = *scenario == "straggler"
	cfg.driver = *driver
	cfg.linger, cfg.hold = *linger, *keep
	if *out != cmdkit.Table && !flagSet(fs, "linger") {
		cfg.linger = 0 // a program reads the summary: do not keep it waiting
	}
	printed := false
	report := func(sum *DemoSummary) {
		_ = cmdkit.Print(e.Stdout, *out, sum, func(w io.Writer) error { printSummary(w, sum); return nil })
		printed = true
	}
	cfg.report = report
	sum, err := demo(ctx, cfg, progress, *keep)
	if !printed && (*out != cmdkit.Table || sum != nil) {
		report(sum)
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway demo: FAILED: %v\n", err)
		return 1
	}
	return 0
}

func printSummary(w io.Writer, s *DemoSummary) {
	verdict := "OK"
	if !s.OK {
		verdict = "FAILED"
	}
	detected := "node lost detected in     %.2f s   (node killed → marked lost; Slurm default 300 s)"
	again := "gang running again after  %.2f s   (node killed → every rank of attempt 2 running)"
	switch {
	case strings.HasPrefix(s.Fault, "straggler"):
		detected = "straggler found in        %.2f s   (" + s.Fault + " → out of service; a 3 s window)"
		again = "gang running again after  %.2f s   (slowed → every rank of attempt 2 running, no restart used)"
	case s.Fault != "node-loss":
		detected = "fault detected in         %.2f s   (" + s.Fault + " injected → out of service; Slurm's health check runs every HealthCheckInterval)"
		again = "gang running again after  %.2f s   (fault → every rank of attempt 2 running, no restart used)"
	}
	fmt.Fprintf(w, `
Summary (%s)
  `+detected+`
  `+again+`
  last step seen at kill    %d       (newest progress line or checkpoint; ranks may commit one more as it dies)
  resumed from step         %d       (newest committed checkpoint)
  final loss                %.12g
  reference final loss      %.12g   (same job, no failure)
  relative difference       %.3g     (trainer tolerance %.0g)
  attempts                  %d
  total                     %.1f s
`, verdict, s.DetectionS, s.RecoveryS, s.KilledAtStep, s.ResumedFromStep, s.FinalLoss, s.ReferenceFinalLoss,
		s.LossRelDiff, s.Tolerance, s.Attempts, s.TotalS)
}

// demo runs the whole scenario and returns its summary; err says what did
// not happen.
func demo(ctx context.Context, cfg demoConfig, w io.Writer, keep bool) (*DemoSummary, error) {
	run, err := newDemoRun(w, keep)
	if err != nil {
		return nil, err
	}
	defer run.close()
	start, say, exe, dir := run.start, run.say, run.exe, run.dir
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.driver == driverDocker {
		if cfg.image, err = demoImage(ctx, exe, say); err != nil {
			return nil, err
		}
	}

	// Control plane, in this process.
	scfg := server.Config{DataDir: filepath.Join(dir, "server"), Simulator: simcli.Service{}}
	slowFile := filepath.Join(dir, "slow-nodes")
	if cfg.straggler {
		scfg.StragglerAction, scfg.StragglerWindow = server.StragglerCordon, demoStragglerWindow
		cfg.slowFile = slowFile
	}
	srv, err := server.New(scfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	url := "https://" + ln.Addr().String()
	sctx, scancel := context.WithCancel(context.Background())
	var swg sync.WaitGroup
	swg.Add(1)
	runErr := make(chan error, 1)
	go func() { defer swg.Done(); runErr <- srv.Run(sctx, ln) }()
	defer func() { scancel(); swg.Wait() }()
	select {
	case <-srv.Ready():
	case err := <-runErr:
		return nil, fmt.Errorf("control plane: %w", err)
	}
	// TLS and tokens as everywhere: the admin's token and the cluster CA
	// the server wrote on its first start.
	admin, err := srv.AdminConfig()
	if err != nil {
		return nil, err
	}
	c, err := newClient(admin)
	if err != nil {
		return nil, err
	}
	say("control plane up at %s (embedded etcd in %s; TLS with a CA made at start, admin token in %s)",
		url, filepath.Join(dir, "server"), filepath.Join(dir, "server", server.AdminConfigFile))
	// The token in the fragment signs the browser in; the fragment never
	// reaches the server. The CA is the demo's own: the browser warns.
	ui := url + "/ui/#token=" + neturl.QueryEscape(admin.Token)
	say("dashboard: %s (the browser will warn: the demo's CA is %s)", ui, admin.CAFile)
	jt, err := c.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: cfg.nodes, TTL: api.Duration(10 * time.Minute), Description: "demo agents"})
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}

	// Agents, as real processes.
	agents, err := startDemoAgents(exe, dir, url, admin.CAFile, jt.Secret, cfg)
	defer func() {
		for _, a := range agents {
			a.stop()
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := waitDemoNodes(ctx, c, cfg); err != nil {
		return nil, err
	}
	say("%d nodes ready, each with %d fake H100-SXM-80GB GPUs (agents are separate processes)", cfg.nodes, cfg.gpus)

	spec := func(name string, delay time.Duration) []byte { return demoTrainSpec(exe, name, cfg, delay, "") }
	j, err := c.Submit(ctx, spec("demo-train", cfg.stepDelay))
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	in := ""
	if cfg.image != "" {
		in = ", each in a Docker container of image " + cfg.image
	}
	say("submitted job %s: the example Go trainer (data-parallel MLP, ring all-reduce over TCP), %d ranks, %d per node%s, %d steps, checkpoint every 20",
		j.ID, cfg.ranks, cfg.perNode, in, cfg.steps)

	sum := &DemoSummary{Driver: cfg.driver, Tolerance: trainer.Tolerance, Fault: "node-loss"}
	if sum.Driver == "" {
		sum.Driver = driverExec
	}
	var (
		killAt     time.Time
		victim     *demoAgent
		lastStep   int64 = -1
		lastCk     int64 = -1
		seenAtt    int
		lostSeen   bool
		finalLoss  *float64
		finalPhase api.JobPhase
	)
	err = wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		d, err := c.Job(ctx, j.ID)
		if err != nil {
			return false, nil
		}
		job := &d.Job
		if a := job.Status.Current(); a != nil && a.Number > seenAtt && !a.RunningAt.IsZero() {
			seenAtt = a.Number
			resume := "from scratch"
			if a.ResumeFrom != nil {
				resume = fmt.Sprintf("resuming from the checkpoint of step %d", a.ResumeFrom.Step)
			}
			say("attempt %d running on %s (%s)", a.Number, strings.Join(a.Nodes(), ", "), resume)
			if a.Number > 1 && !killAt.IsZero() {
				sum.RecoveryS = a.RunningAt.Sub(killAt).Seconds()
				if a.ResumeFrom != nil {
					sum.ResumedFromStep = a.ResumeFrom.Step
				}
				what := "the node died"
				if cfg.gpuFault {
					what = "the Xid"
				}
				if cfg.straggler {
					what = "the node slowed"
				}
				say("gang running again %.2fs after %s", sum.RecoveryS, what)
			}
		}
		if n := len(d.Checkpoints); n > 0 && d.Checkpoints[n-1].Step > lastCk {
			lastCk = d.Checkpoints[n-1].Step
		}
		if p := d.Progress; p != nil && p.Latest.Step != lastStep && p.Latest.Loss != nil {
			if p.Latest.Step/50 != lastStep/50 || p.Latest.Final {
				say("  attempt %d  step %4d  loss %.6f  newest checkpoint: step %d", p.Latest.Attempt, p.Latest.Step, *p.Latest.Loss, lastCk)
			}
			lastStep = p.Latest.Step
			if p.Latest.Final {
				l := *p.Latest.Loss
				finalLoss = &l
			}
		}
		// Kill a node part-way, once a checkpoint exists to resume from.
		if killAt.IsZero() && lastStep >= int64(cfg.killAtStep) && lastCk > 0 {
			a := job.Status.Current()
			node := a.Placement[len(a.Placement)-1].Node
			for _, ag := range agents {
				if ag.name == node {
					victim = ag
				}
			}
			killAt = time.Now()
			// The ranks are at least as far as the newest checkpoint,
			// which may be newer than the last progress line seen.
			sum.KilledAtStep = max(lastStep, lastCk)
			sum.KilledNode = node
			switch {
			case cfg.straggler:
				sum.Fault = fmt.Sprintf("straggler: ranks on %s work %s longer per step", node, demoSlowBy)
				if err := os.WriteFile(slowFile, []byte(node+"\n"), 0o644); err != nil {
					return false, err
				}
				say("slowing %s: its ranks now work %s longer per step than the others (a throttled GPU, a noisy neighbour)", node, demoSlowBy)
			case cfg.gpuFault:
				g := a.Placement[len(a.Placement)-1].GPUs[0]
				sum.Fault = fmt.Sprintf("xid %d on GPU %d", demoXid, g)
				if err := victim.injectHealth(fmt.Sprintf(`{"gpu":%d,"xid":%d}`, g, demoXid)); err != nil {
					return false, err
				}
				say("injecting Xid %d (GPU has fallen off the bus) on GPU %d of %s, which holds rank %d", demoXid, g, node, a.Placement[len(a.Placement)-1].Rank)
			default:
				if n := victim.kill(); cfg.image != "" {
					// The supervisor's death ends the shims, which stop
					// their containers; whichever they had not yet go too.
					sweepContainers(victim.dir)
					say("killing %s: SIGKILL to its agent and its rank supervisor, and its ranks' containers gone (as if the machine died)", node)
				} else {
					say("killing %s: SIGKILL to its agent and its %d rank processes (as if the machine died)", node, n)
				}
			}
		}
		if victim != nil && !lostSeen && cfg.healthFault() {
			if n, err := c.Node(ctx, victim.name); err == nil && !n.Status.FaultAt.IsZero() {
				lostSeen = true
				sum.DetectionS = n.Status.FaultAt.Sub(killAt).Seconds()
				say("%s out of service (%s), %.2fs after the fault", victim.name, n.Status.Fault, sum.DetectionS)
			}
		}
		if victim != nil && !lostSeen && !cfg.healthFault() {
			if n, err := c.Node(ctx, victim.name); err == nil && n.Status.State == api.NodeLost {
				lostSeen = true
				sum.DetectionS = n.Status.LostAt.Sub(killAt).Seconds()
				say("%s marked lost (%s), %.2fs after it died", victim.name, n.Status.Reason, sum.DetectionS)
			}
		}
		if job.Status.Phase.Final() {
			finalPhase = job.Status.Phase
			sum.Attempts = len(job.Status.Attempts)
			sum.Restarts = job.Status.Restarts
			say("job %s %s after %d attempts", job.ID, strings.ToLower(string(job.Status.Phase)), sum.Attempts)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return sum, fmt.Errorf("waiting for the job: %w", err)
	}
	if finalPhase != api.JobSucceeded {
		return sum, fmt.Errorf("job ended %s", finalPhase)
	}
	if finalLoss == nil {
		return sum, errors.New("the trainer reported no final loss")
	}
	sum.FinalLoss = *finalLoss

	// The same job again, uninterrupted and without the step delay.
	ref, err := c.Submit(ctx, spec("demo-reference", 0))
	if err != nil {
		return sum, fmt.Errorf("submit reference: %w", err)
	}
	say("reference: the same job again (job %s) without a failure", ref.ID)
	var refLoss *float64
	err = wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		d, err := c.Job(ctx, ref.ID)
		if err != nil || !d.Job.Status.Phase.Final() {
			return false, nil
		}
		if d.Job.Status.Phase != api.JobSucceeded {
			return false, fmt.Errorf("reference job ended %s: %s", d.Job.Status.Phase, d.Job.Status.Reason)
		}
		if d.Progress != nil && d.Progress.Latest.Final && d.Progress.Latest.Loss != nil {
			l := *d.Progress.Latest.Loss
			refLoss = &l
		}
		return true, nil
	})
	if err != nil {
		return sum, err
	}
	if refLoss == nil {
		return sum, errors.New("the reference run reported no final loss")
	}
	sum.ReferenceFinalLoss = *refLoss
	say("reference final loss %.12g", *refLoss)
	sum.TotalS = time.Since(start).Seconds()
	sum.LossRelDiff = math.Abs(sum.FinalLoss-sum.ReferenceFinalLoss) / math.Max(math.Abs(sum.ReferenceFinalLoss), 1e-300)
	var problems []string
	if victim == nil {
		problems = append(problems, "no node was killed")
	}
	switch {
	case !lostSeen && cfg.healthFault():
		problems = append(problems, "the faulty node was never taken out of service")
	case !lostSeen:
		problems = append(problems, "the killed node was never marked lost")
	case cfg.healthFault() && sum.Restarts > 0:
		problems = append(problems, fmt.Sprintf("the fault used up %d of the job's restarts", sum.Restarts))
	}
	if sum.Attempts < 2 || sum.RecoveryS <= 0 {
		problems = append(problems, "the gang did not restart")
	}
	if sum.ResumedFromStep <= 0 {
		problems = append(problems, "the new attempt did not resume from a checkpoint")
	}
	if sum.LossRelDiff > sum.Tolerance {
		problems = append(problems, fmt.Sprintf("final loss %.12g differs from the reference %.12g by %.3g (tolerance %.0g)",
			sum.FinalLoss, sum.ReferenceFinalLoss, sum.LossRelDiff, sum.Tolerance))
	}
	var failed error
	if len(problems) > 0 {
		failed = errors.New(strings.Join(problems, "; "))
	} else {
		sum.OK = true
	}
	lingerForDashboard(outer, cfg, say, ui, sum)
	return sum, failed
}

// startDemoAgents starts cfg.nodes agents, node-1 to node-N, as processes
// of exe on loopback, each joining the server at url with the join token;
// their logs and data directories go under dir. It returns the agents it
// started, also on error: the caller stops them.
func startDemoAgents(exe, dir, url, caFile, join string, cfg demoConfig) ([]*demoAgent, error) {
	var agents []*demoAgent
	for i := range cfg.nodes {
		a := &demoAgent{name: fmt.Sprintf("node-%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("agent-%d", i+1)), containers: cfg.driver == driverDocker}
		logf, err := os.Create(filepath.Join(dir, a.name+".log"))
		if err != nil {
			return agents, err
		}
		args := []string{"agent", "--server", url, "--ca-file", caFile, "--name", a.name, "--address", "127.0.0.1",
			"--fake-gpus", strconv.Itoa(cfg.gpus), "--gpu-model", "H100-SXM-80GB", "--data-dir", a.dir, "--log-level", "warn"}
		if cfg.gpuFault {
			a.inject = filepath.Join(dir, a.name+"-inject.jsonl")
			args = append(args, "--health-inject", a.inject)
		}
		a.cmd = exec.Command(exe, args...)
		a.cmd.Env = append(os.Environ(), "GANGWAY_JOIN_TOKEN="+join)
		a.cmd.Stdout, a.cmd.Stderr = logf, logf
		err = a.cmd.Start()
		logf.Close() // the agent has its own descriptor
		if err != nil {
			return agents, fmt.Errorf("start agent %s: %w", a.name, err)
		}
		agents = append(agents, a)
	}
	return agents, nil
}

// waitDemoNodes waits until cfg.nodes nodes are ready with cfg.gpus GPUs
// each.
func waitDemoNodes(ctx context.Context, c *client.Client, cfg demoConfig) error {
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := c.Nodes(ctx)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range l.Nodes {
			if n.Status.State == api.NodeReady && len(n.GPUs) == cfg.gpus {
				ready++
			}
		}
		return ready == cfg.nodes, nil
	}); err != nil {
		return fmt.Errorf("waiting for %d agents to register: %w", cfg.nodes, err)
	}
	return nil
}

// demoTrainSpec is the demo's job: the example Go trainer as cfg.ranks
// ranks, cfg.perNode per node, sleeping delay after each step. With
// rankLog, every rank runs under `gangway chaos-rank`, recording its own
// start and exit there.
func demoTrainSpec(exe, name string, cfg demoConfig, delay time.Duration, rankLog string) []byte {
	if cfg.image != "" {
		exe = demoInImage
	}
	cmd := []string{exe, "train-example", "--steps", strconv.Itoa(cfg.steps), "--checkpoint-every", "20", "--log-every", "50",
		"--step-delay", delay.String()}
	if cfg.slowFile != "" {
		cmd = append(cmd, "--slow-file", cfg.slowFile, "--slow-by", demoSlowBy.String())
	}
	if rankLog != "" {
		cmd = append([]string{exe, "chaos-rank", "--log", rankLog, "--"}, cmd...)
	}
	s := api.JobSpec{
		Name: name, Ranks: cfg.ranks, RanksPerNode: cfg.perNode, GPUsPerRank: 1, Command: cmd,
		// The default restartBackoff: a lost node, a fault or a
		// straggler restarts the gang at once without it, as for users.
		TerminationGracePeriod: api.Duration(5 * time.Second),
	}
	if cfg.image != "" {
		s.Image, s.ImagePullPolicy = cfg.image, api.PullNever
	}
	b, _ := json.Marshal(s)
	return b
}

type demoAgent struct {
	name, dir string
	cmd       *exec.Cmd
	killed    bool
	// inject is the file the agent's fake GPUs read injected faults from
	// ("" when it has none).
	inject string
	// containers: its ranks run in containers, which stop removes.
	containers bool
}

// injectHealth appends a fault (a line of node/health's injection format)
// to the agent's injection file.
func (a *demoAgent) injectHealth(line string) error {
	if a.inject == "" {
		return fmt.Errorf("agent %s takes no injected faults", a.name)
	}
	if err := chaos.AppendLine(a.inject, line); err != nil {
		return fmt.Errorf("inject a fault on %s: %w", a.name, err)
	}
	return nil
}

// kill simulates the machine dying: the agent and every rank process it
// started die at once. It returns how many rank groups it killed.
func (a *demoAgent) kill() int {
	a.killed = true
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
	return KillRanks(a.dir)
}

func (a *demoAgent) stop() {
	if !a.killed {
		a.killed = true
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = a.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = a.cmd.Process.Kill()
			<-done
		}
	}
	KillRanks(a.dir)
	if a.containers {
		sweepContainers(a.dir)
	}
}

// KillRanks is the machine dying for an agent with data directory dir:
// SIGKILL to its rank supervisor and to the process group of every rank
// still alive. It returns how many rank groups were alive.
func KillRanks(dir string) int { return driver.KillAll(dir) }

// demoRun is what every scenario starts with: its clock and progress
// lines, this executable, and a working directory.
type demoRun struct {
	start time.Time
	w     io.Writer
	exe   string
	dir   string
	keep  bool
}

// newDemoRun finds the executable and makes the working directory; close
// removes it unless keep.
func newDemoRun(w io.Writer, keep bool) (*demoRun, error) {
	r := &demoRun{start: time.Now(), w: w, keep: keep}
	var err error
	if r.exe, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	if r.dir, err = os.MkdirTemp("", "gangway-demo-"); err != nil {
		return nil, err
	}
	if keep {
		r.say("working directory %s (kept)", r.dir)
	}
	return r, nil
}

func (r *demoRun) say(format string, a ...any) {
	fmt.Fprintf(r.w, "[%5.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, a...))
}

func (r *demoRun) close() {
	if !r.keep {
		os.RemoveAll(r.dir)
	}
}

// referenceLoss runs the trainer's job again, uninterrupted and without
// the step delay, and returns the final loss its rank 0 recorded.
func (r *demoRun) referenceLoss(ctx context.Context, c *client.Client, cfg demoConfig, rankLog string) (float64, error) {
	ref, err := c.Submit(ctx, demoTrainSpec(r.exe, "demo-reference", cfg, 0, rankLog))
	if err != nil {
		return 0, fmt.Errorf("submit reference: %w", err)
	}
	r.say("reference: the same job again (job %s) without a failure", ref.ID)
	var loss *float64
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		d, err := c.Job(ctx, ref.ID)
		if err != nil || !d.Job.Status.Phase.Final() {
			return false, nil
		}
		if d.Job.Status.Phase != api.JobSucceeded {
			return false, fmt.Errorf("reference job ended %s: %s", d.Job.Status.Phase, d.Job.Status.Reason)
		}
		_, loss = chaos.JobRanks(mustRecords(rankLog), ref.ID, cfg.ranks)
		return true, nil
	}); err != nil {
		return 0, err
	}
	if loss == nil {
		return 0, errors.New("the reference run recorded no final loss")
	}
	r.say("reference final loss %.12g", *loss)
	return *loss, nil
}

// demoOutcome is what a scenario's job came to, from the ranks' own
// records, beside an uninterrupted run of the same job.
type demoOutcome struct {
	ranksKilled    int
	final, ref     float64
	relDiff, toler float64
}

// outcome reads the job's ranks (how many ended otherwise than by
// finishing, rank 0's final loss) and runs the reference.
func (r *demoRun) outcome(ctx context.Context, c *client.Client, cfg demoConfig, job, rankLog string) (demoOutcome, error) {
	o := demoOutcome{toler: trainer.Tolerance}
	killed, loss := chaos.JobRanks(mustRecords(rankLog), job, cfg.ranks)
	o.ranksKilled = killed
	if loss == nil {
		return o, errors.New("no attempt's rank 0 recorded a final loss")
	}
	o.final = *loss
	ref, err := r.referenceLoss(ctx, c, cfg, rankLog)
	if err != nil {
		return o, err
	}
	o.ref = ref
	o.relDiff = math.Abs(o.final-o.ref) / math.Max(math.Abs(o.ref), 1e-300)
	return o, nil
}

// problems are the outcome's breaches of the promise: a rank that died of
// the fault, a final loss off the reference's.
func (o demoOutcome) problems() []error {
	var p []error
	if o.ranksKilled > 0 {
		p = append(p, fmt.Errorf("%w: %d of the job's rank processes ended otherwise than by finishing", errRanksKilled, o.ranksKilled))
	}
	if o.relDiff > o.toler {
		p = append(p, fmt.Errorf("final loss %.12g differs from the reference %.12g by %.3g (tolerance %.0g)", o.final, o.ref, o.relDiff, o.toler))
	}
	return p
}

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
