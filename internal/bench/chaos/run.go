package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/base/wait"
)

// LossTolerance is the relative difference allowed between a resumed
// trainer's final loss and the reference's: the example trainer's own
// Tolerance (examples/train-go/trainer), which this package may not
// import; a test in internal/cli holds the two equal.
const LossTolerance = 1e-9

// Config is one chaos run.
type Config struct {
	// Bin is the gangway executable every process runs.
	Bin string
	// Dir is the working directory (server and agent data, logs, the
	// ranks' log); "" makes a temporary one, removed unless Keep.
	Dir  string
	Keep bool
	// Replicas is the control plane: 1 server, or 3 or 5 replicas each
	// with an embedded etcd member of one cluster. Default 1.
	Replicas int
	// Agents is the number of nodes, each with GPUs fake GPUs.
	Agents, GPUs int
	// Netns puts each agent in a network namespace host of its own (root
	// and iproute2's ip needed); without it they share loopback and
	// partitions cannot be injected.
	Netns bool
	// Faults is how many faults to inject, drawn from Seed among Kinds,
	// shaped by Plan.
	Faults int
	Seed   uint64
	Kinds  []Kind
	Plan   PlanConfig
	// Duration bounds the fault phase; 0 sizes it to the plan.
	Duration time.Duration
	// Settle bounds the wait for every job to finish after the last fault.
	Settle time.Duration
	// NodeTimeout is the server's --node-timeout.
	NodeTimeout time.Duration
	// WaveEvery is how often a wave of jobs is submitted during the fault
	// phase (one wave at its start in any case).
	WaveEvery time.Duration
	// TrainSteps and StepDelay shape the trainer jobs.
	TrainSteps int
	StepDelay  time.Duration
	// Engines is the number of replicas of an inference deployment (the
	// engine simulator) served through every replica's gateway while a
	// client sends it requests throughout the run, each retried within
	// RequestBudget; 0: none.
	Engines       int
	RequestBudget time.Duration
}

// Defaults fills c's zero fields.
func (c *Config) Defaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Agents == 0 {
		c.Agents = 4
	}
	if c.GPUs == 0 {
		c.GPUs = 8
	}
	if c.Kinds == nil {
		c.Kinds = KindsFor(c.Replicas, c.Netns)
	}
	if c.Plan == (PlanConfig{}) {
		c.Plan = DefaultPlan
	}
	if c.Plan.ReplicaDown == (Span{}) {
		c.Plan.ReplicaDown = DefaultPlan.ReplicaDown
	}
	if c.Plan.QuorumLoss == (Span{}) {
		c.Plan.QuorumLoss = DefaultPlan.QuorumLoss
	}
	if c.RequestBudget == 0 {
		c.RequestBudget = 30 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Minute
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = 4500 * time.Millisecond // the server's default
	}
	if c.WaveEvery == 0 {
		c.WaveEvery = 10 * time.Second
	}
	if c.TrainSteps == 0 {
		c.TrainSteps = 300
	}
	if c.StepDelay == 0 {
		c.StepDelay = 50 * time.Millisecond
	}
}

// Validate checks c after Defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.Bin == "" {
		errs = append(errs, errors.New("no gangway executable"))
	}
	if err := checkReplicas(c.Replicas); err != nil {
		errs = append(errs, err)
	}
	if c.Agents < 2 || c.Agents > 50 {
		errs = append(errs, fmt.Errorf("agents %d: want 2 to 50", c.Agents))
	}
	if c.GPUs < 6 {
		errs = append(errs, fmt.Errorf("gpus %d: want at least 6 per node (the biggest gang puts 6 ranks on a node)", c.GPUs))
	}
	if c.Faults < 0 {
		errs = append(errs, fmt.Errorf("faults %d: want 0 or more", c.Faults))
	}
	if len(c.Kinds) == 0 {
		errs = append(errs, errors.New("no fault kinds"))
	}
	for _, k := range c.Kinds {
		if k.onReplicas() && c.Replicas < 3 {
			errs = append(errs, fmt.Errorf("%s faults need several replicas: --replicas 3 or 5, or drop %s from --kinds", k, k))
		}
	}
	if c.Engines < 0 || c.Engines > c.Agents*c.GPUs/2 {
		errs = append(errs, fmt.Errorf("engines %d: want 0 to %d (half the GPUs)", c.Engines, c.Agents*c.GPUs/2))
	}
	if c.RequestBudget < 0 {
		errs = append(errs, fmt.Errorf("request budget %s: want more than 0", c.RequestBudget))
	}
	if !c.Netns {
		for _, k := range c.Kinds {
			if k == Partition {
				errs = append(errs, errors.New("partition faults need network namespaces: leave out --netns=false, or drop partition from --kinds"))
			}
		}
	}
	return errors.Join(errs...)
}

// checkReplicas refuses a replica count other than 1, 3 and 5.
func checkReplicas(n int) error {
	if !slices.Contains(ReplicaCounts, n) {
		return fmt.Errorf("--replicas: %d is not one of 1, 3, 5 (etcd needs an odd number)", n)
	}
	return nil
}

// Result is what `gangway chaos` reports. The fields up to OK are the
// headline; OK holds when lost, duplicated, ran_twice, rank_reruns, stuck,
// failed, rerun_after_outage, loss_mismatches,
// ranks_killed_by_server_outage and requests_failed are all 0,
// every submission was acknowledged and every fault injected.
type Result struct {
	Faults        int     `json:"faults"`
	Jobs          int     `json:"jobs"`
	Acknowledged  int     `json:"acknowledged"`
	Lost          int     `json:"lost"`
	Duplicated    int     `json:"duplicated"`
	RanTwice      int     `json:"ran_twice"`
	RankReruns    int     `json:"rank_reruns"`
	Stuck         int     `json:"stuck"`
	DetectionP50S float64 `json:"detection_p50_s"`
	DetectionP99S float64 `json:"detection_p99_s"`
	RecoveryP50S  float64 `json:"recovery_p50_s"`
	RecoveryP99S  float64 `json:"recovery_p99_s"`
	// Failover is measured for each leader-kill: the kill → a replica
	// leads (another, or the one killed once it is back) and the store
	// takes a write through it.
	FailoverP50S    float64 `json:"failover_p50_s"`
	FailoverP99S    float64 `json:"failover_p99_s"`
	FailoverSamples int     `json:"failover_samples"`
	// Requests counts the inference requests completed (each with its
	// retries), RequestsFailed those that failed every try within
	// RequestBudgetS, RequestRetries the tries after a first.
	Requests       int     `json:"requests"`
	RequestsFailed int     `json:"requests_failed"`
	RequestRetries int     `json:"request_retries"`
	RequestBudgetS float64 `json:"request_budget_s"`
	OK             bool    `json:"ok"`

	Failed           int `json:"failed"`
	RerunAfterOutage int `json:"rerun_after_outage"`
	// RerunAfterCompletion counts every job run again after completing,
	// reported but not judged but for the RerunAfterOutage among them
	// (see Verdict).
	RerunAfterCompletion      int `json:"rerun_after_completion"`
	LossMismatches            int `json:"loss_mismatches"`
	RanksStarted              int `json:"ranks_started"`
	RanksKilled               int `json:"ranks_killed"`
	RanksKilledByServerOutage int `json:"ranks_killed_by_server_outage"`
	DetectionSamples          int `json:"detection_samples"`
	RecoverySamples           int `json:"recovery_samples"`
	// Unrecovered counts gangs a fault interrupted that never ran again.
	Unrecovered int `json:"unrecovered"`
	// ByKind breaks the faults down by kind; FaultErrors counts those
	// that could not be injected as planned.
	ByKind      map[Kind]*KindStats `json:"by_kind"`
	FaultErrors int                 `json:"fault_errors"`
	// AgentRevivals counts agents that exited on their own and were
	// started again; ReplicaRevivals server replicas.
	AgentRevivals   int `json:"agent_revivals"`
	ReplicaRevivals int `json:"replica_revivals,omitempty"`
	// ReferenceLosses is the final loss of the uninterrupted run of each
	// trainer shape.
	ReferenceLosses map[string]float64 `json:"reference_losses"`
	Seed            uint64             `json:"seed"`
	Replicas        int                `json:"replicas"`
	Engines         int                `json:"engines"`
	Agents          int                `json:"agents"`
	Netns           bool               `json:"netns"`
	DurationS       float64            `json:"duration_s"`
	// Dir is the kept working directory: ranks.jsonl (the ranks' own
	// records), gone.jsonl (ranks seen dying without one), faults.json,
	// submissions.json, the server's and agents' logs.
	Dir string `json:"dir,omitempty"`
	// Problems names each violation (the first 40); Notes what is
	// reported but not judged.
	Problems []string `json:"problems,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// KindStats is what the faults of one kind did.
type KindStats struct {
	Faults int `json:"faults"`
	// RanksKilled counts the ranks that died (otherwise than by exiting
	// 0) between a fault of the kind and the next fault.
	RanksKilled      int     `json:"ranks_killed"`
	DetectionP50S    float64 `json:"detection_p50_s"`
	DetectionSamples int     `json:"detection_samples"`
	RecoveryP50S     float64 `json:"recovery_p50_s"`
	RecoverySamples  int     `json:"recovery_samples"`
}

// Run carries out one chaos run and judges it. Progress lines go to
// progress. It returns a result whenever the cluster came up, with err
// saying what kept the run from completing as planned (the result is then
// not ok). Cancelling ctx cuts the fault phase and the settling short; the
// result then judges what happened so far.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Result, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, begin: time.Now(), progress: progress}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gangway-chaos-")
		if err != nil {
			return nil, err
		}
		dir = d
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	// The ranks run as the jobs' owner (the admin: the agent's own user),
	// but the log is writable for any account all the same.
	rankLog := filepath.Join(dir, "ranks.jsonl")
	if err := os.WriteFile(rankLog, nil, 0o666); err != nil {
		return nil, err
	}
	_ = os.Chmod(rankLog, 0o666)

	plan := Plan(cfg.Seed, cfg.Faults, cfg.Kinds, cfg.Agents, cfg.Plan)
	duration := cfg.Duration
	if duration == 0 {
		duration = Length(plan)*6/5 + 30*time.Second
	}
	r.say("chaos: seed %d, %d faults of %v over at most %s, %d server replicas, %d agents (%s), %d engines, working directory %s",
		cfg.Seed, len(plan), cfg.Kinds, duration.Round(time.Second), cfg.Replicas, cfg.Agents,
		map[bool]string{true: "network namespaces", false: "loopback"}[cfg.Netns], cfg.Engines, dir)

	c, err := startCluster(ctx, clusterConfig{bin: cfg.Bin, dir: dir, replicas: cfg.Replicas, agents: cfg.Agents, gpus: cfg.GPUs,
		useNetns: cfg.Netns, nodeTimeout: cfg.NodeTimeout, gateway: cfg.Engines > 0, say: r.say})
	if err != nil {
		return nil, fmt.Errorf("start the cluster: %w", err)
	}
	defer c.close()
	r.c = c
	if cfg.Replicas == 1 {
		r.say("server (pid %d) at %s and %d agents ready", c.cp.Member(0).PID(), c.admin.Server, cfg.Agents)
	} else {
		leading := "none yet"
		if l := c.waitLeader(ctx, leaderWait); l >= 0 {
			leading = c.cp.Member(l).Name()
		}
		r.say("%d replicas at %s (leading: %s) and %d agents ready", cfg.Replicas, c.admin.Server, leading, cfg.Agents)
	}

	// Watchers: the ranks' processes and the nodes, until the judging.
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	r.rw = newRankWatch(rankLog, filepath.Join(dir, "gone.jsonl"))
	r.nw = newNodeWatch(c.api, r.say)
	wg.Add(2)
	go func() { defer wg.Done(); r.rw.run(wctx, 50*time.Millisecond) }()
	go func() { defer wg.Done(); r.nw.run(wctx, 200*time.Millisecond) }()
	stopWatch := func() { wcancel(); wg.Wait() }
	defer stopWatch()

	r.w = &workload{bin: cfg.Bin, rankLog: rankLog, api: c.api, steps: cfg.TrainSteps, stepDelay: cfg.StepDelay,
		rnd: rand.New(rand.NewPCG(cfg.Seed+1, 0x5eed)), say: r.say}
	r.res = &Result{ByKind: map[Kind]*KindStats{}, Seed: cfg.Seed, Replicas: cfg.Replicas, Engines: cfg.Engines, Agents: cfg.Agents,
		Netns: cfg.Netns, ReferenceLosses: map[string]float64{}}
	if cfg.Keep || cfg.Dir != "" {
		r.res.Dir = dir
	}

	// The inference client, from the deployment's first answer to the
	// end of the settling.
	var runErr error
	var q *requester
	qctx, qcancel := context.WithCancel(ctx)
	var qwg sync.WaitGroup
	stopRequests := func() { qcancel(); qwg.Wait() }
	defer stopRequests()
	if cfg.Engines > 0 {
		r.res.RequestBudgetS = cfg.RequestBudget.Seconds()
		if runErr = deploy(ctx, c.api, c.cp.Gateways(), cfg.Engines, 3*time.Minute); runErr == nil {
			r.say("deployment %s: %d engines serving %s through the gateways %v", inferDeployment, cfg.Engines, inferModel, c.cp.Gateways())
			q = &requester{gateways: c.cp.Gateways(), budget: cfg.RequestBudget, hc: &http.Client{}}
			qwg.Go(func() { q.run(qctx, requestWorkers, requestPause) })
		}
	}

	if runErr == nil {
		runErr = r.references(ctx)
	}
	if runErr == nil {
		runErr = r.faultPhase(ctx, plan, time.Now().Add(duration))
	}
	r.settle(ctx)
	end := time.Now()
	stopRequests()
	var failures []string
	if q != nil {
		r.res.Requests, r.res.RequestsFailed, r.res.RequestRetries, failures = q.counts()
	}
	serverJobs, err := r.serverJobs(ctx)
	if err != nil && runErr == nil {
		runErr = err
	}
	stopWatch()
	recs, err := r.rw.records()
	if err != nil && runErr == nil {
		runErr = err
	}
	subs := r.w.submissions()
	r.judge(Input{Records: recs, Submissions: subs, ServerJobs: serverJobs, Outages: outages(r.faults, outageGrace),
		End: end, References: r.res.ReferenceLosses, Tolerance: LossTolerance})
	for _, f := range failures {
		r.res.Problems = append(r.res.Problems, fmt.Sprintf("an inference request failed every try within %s: %s", cfg.RequestBudget, f))
	}
	r.res.OK = r.res.OK && runErr == nil
	writeJSON(filepath.Join(dir, "faults.json"), r.faults)
	writeJSON(filepath.Join(dir, "submissions.json"), subs)
	writeJSON(filepath.Join(dir, "plan.json"), plan)
	return r.res, runErr
}

// runner is one chaos run's state, its phases its methods. Only Run's
// goroutine uses it; the watchers and the workload guard their own.
type runner struct {
	cfg      Config
	begin    time.Time
	progress io.Writer
	sayMu    sync.Mutex // guards progress

	c      *cluster
	rw     *rankWatch
	nw     *nodeWatch
	w      *workload
	res    *Result
	faults []Fault
}

// say writes a progress line, stamped with the time since the start.
func (r *runner) say(format string, a ...any) {
	r.sayMu.Lock()
	defer r.sayMu.Unlock()
	fmt.Fprintf(r.progress, "[%6.1fs] %s\n", time.Since(r.begin).Seconds(), fmt.Sprintf(format, a...))
}

// references runs each trainer shape once with no fault and keeps its
// final loss, from the ranks' records.
func (r *runner) references(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	refs := r.w.references(ctx)
	r.say("reference runs submitted (%d trainer shapes, no faults)", len(refs))
	err := wait.Until(ctx, 200*time.Millisecond, func() (bool, error) {
		recs, _ := r.rw.records()
		for _, s := range refs {
			if len(s.IDs) == 0 {
				return false, fmt.Errorf("reference %s was not acknowledged", s.Name)
			}
			if _, ok := r.res.ReferenceLosses[s.Shape]; ok {
				continue
			}
			var mine []*run
			for _, x := range runs(recs, time.Now()) {
				if x.key.job == s.IDs[0] {
					mine = append(mine, x)
				}
			}
			if att, ok := completed(mine, s.Ranks); ok {
				if l := finalLoss(mine, att); l != nil {
					r.res.ReferenceLosses[s.Shape] = *l
					r.say("reference %s: final loss %.17g", s.Shape, *l)
				}
			}
		}
		return len(r.res.ReferenceLosses) == len(refs), nil
	})
	if err != nil {
		return fmt.Errorf("reference runs: %w", err)
	}
	return nil
}

// faultPhase submits a wave of jobs every WaveEvery while it injects the
// plan's faults one after another, until the plan or the phase (end) is
// over. It returns once the submitters are done (their retries bounded by
// Settle); an error says the cluster cannot go on (the server did not
// come back).
func (r *runner) faultPhase(ctx context.Context, plan []Step, end time.Time) error {
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var subs sync.WaitGroup
	stopWaves := make(chan struct{})
	subs.Add(1)
	go func() {
		defer subs.Done()
		t := time.NewTicker(r.cfg.WaveEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			r.w.wave(sctx, i)
			select {
			case <-stopWaves:
				return
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	burst := func(fault int) { r.w.burst(sctx, fault, burstSize, &subs) }
	err := r.runPlan(ctx, plan, end, burst)
	r.res.Faults = len(r.faults)
	close(stopWaves)
	// Submissions still being retried get the settle time.
	done := make(chan struct{})
	go func() { subs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.Settle):
		scancel()
		<-done
	}
	return err
}

// burstSize is how many jobs are submitted at once as the server is
// stopped, so that some are in flight when it goes.
const burstSize = 8

// runPlan carries the plan out. Before each server fault it calls burst
// and gives the requests a moment to be on their way.
func (r *runner) runPlan(ctx context.Context, plan []Step, end time.Time, burst func(fault int)) error {
	c := r.c
	for i, s := range plan {
		if ctx.Err() != nil || time.Now().Add(s.Gap+s.For).After(end) {
			r.say("fault phase over after %d of %d faults (%s)", i, len(plan), map[bool]string{true: "interrupted", false: "out of --duration"}[ctx.Err() != nil])
			return nil
		}
		select {
		case <-ctx.Done():
			continue
		case <-time.After(s.Gap):
		}
		if names := c.reviveAgents(r.cfg.GPUs); len(names) > 0 {
			r.res.AgentRevivals += len(names)
			r.say("agents %v had exited on their own; started again", names)
		}
		if names := c.reviveReplicas(context.WithoutCancel(ctx)); len(names) > 0 {
			r.res.ReplicaRevivals += len(names)
			r.say("server replicas %v had exited on their own; started again", names)
		}
		target, ranks := "the server", 0
		if c.cp.N() > 1 {
			target = fmt.Sprintf("the %d replicas", c.cp.N())
		}
		live := r.rw.liveByHost()
		if s.Host >= 0 {
			s.Host = busyHost(c.agents, live, s.Host)
			target, ranks = c.agents[s.Host].name, live[c.agents[s.Host].name]
		} else {
			for _, n := range live {
				ranks += n
			}
		}
		r.say("fault %d/%d at %s: %s on %s (%d ranks alive there)", i+1, len(plan), stamp(time.Now()), s.Kind, target, ranks)
		if s.Kind.onServer() {
			burst(i + 1)
			time.Sleep(15 * time.Millisecond)
		}
		f := c.inject(ctx, s, r.cfg.GPUs)
		f.RanksAlive = ranks
		r.faults = append(r.faults, f)
		if f.Err != "" {
			r.res.FaultErrors++
			r.say("  %s failed: %s", s.Kind, f.Err)
			if s.Kind.onServer() && !c.cp.Running() {
				return fmt.Errorf("the control plane did not come back: %s", f.Err)
			}
			continue
		}
		r.say("  %s; healed after %.1fs", f.Note, f.Healed.Sub(f.At).Seconds())
	}
	return nil
}

// settle waits, at most Settle, until the server has no job left to
// finish (but the engines) and no rank is alive.
func (r *runner) settle(ctx context.Context) {
	if names := r.c.reviveAgents(r.cfg.GPUs); len(names) > 0 {
		r.res.AgentRevivals += len(names)
	}
	r.say("waiting up to %s for every job to finish", r.cfg.Settle)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Settle)
	defer cancel()
	lastSay := time.Now()
	_ = wait.Until(ctx, time.Second, func() (bool, error) {
		l, err := r.c.api.Jobs(ctx, client.JobQuery{Live: true})
		if err != nil {
			return false, nil
		}
		live := 0
		for _, j := range l.Jobs {
			if j.Spec.Owner != inferOwner { // the engines run on
				live++
			}
		}
		if time.Since(lastSay) > 15*time.Second {
			lastSay = time.Now()
			r.say("  %d jobs not finished", live)
		}
		return live == 0 && len(r.rw.liveByHost()) == 0, nil
	})
}

// serverJobs lists every job the server has, trying for a minute.
func (r *runner) serverJobs(ctx context.Context) ([]*api.Job, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var jobs []*api.Job
	if err := wait.Until(ctx, time.Second, func() (bool, error) {
		l, err := r.c.api.Jobs(ctx, client.JobQuery{})
		if err != nil {
			return false, nil
		}
		jobs = l.Jobs
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("list the server's jobs at the end: %w", err)
	}
	return jobs, nil
}

// judge checks in and measures detection and recovery into the result.
func (r *runner) judge(in Input) {
	res := r.res
	v := Check(in)
	byID := map[string]*api.Job{}
	for _, j := range in.ServerJobs {
		byID[j.ID] = j
	}
	rs := runs(in.Records, in.End)
	detS := detections(r.faults, r.nw.lostTimes(), in.End)
	for i, f := range r.faults {
		if f.Kind == GPUFault && f.OutOfServiceS > 0 {
			detS = append(detS, sample{i, f.OutOfServiceS}) // Xid → out of service
		}
	}
	recS, unrec := recoveries(r.faults, rs, byID, in.End)
	det, rec := seconds(detS), seconds(recS)
	killed := killedAfter(r.faults, rs, in.End)
	for i, f := range r.faults {
		k := res.ByKind[f.Kind]
		if k == nil {
			k = &KindStats{}
			res.ByKind[f.Kind] = k
		}
		k.Faults++
		k.RanksKilled += killed[i]
	}
	for kind, k := range res.ByKind {
		of := func(ss []sample) []float64 {
			var mine []sample
			for _, x := range ss {
				if r.faults[x.fault].Kind == kind {
					mine = append(mine, x)
				}
			}
			return seconds(mine)
		}
		d, rc := of(detS), of(recS)
		k.DetectionP50S, k.DetectionSamples = stats.Quantile(d, 0.5), len(d)
		k.RecoveryP50S, k.RecoverySamples = stats.Quantile(rc, 0.5), len(rc)
	}

	res.Jobs, res.Acknowledged, res.Lost, res.Duplicated = v.Jobs, v.Acknowledged, v.Lost, v.Duplicated
	res.RanTwice, res.RankReruns, res.Stuck, res.Failed, res.LossMismatches = v.RanTwice, v.RankReruns, v.Stuck, v.Failed, v.LossMismatches
	res.RerunAfterCompletion, res.RerunAfterOutage = v.RerunAfterCompletion, v.RerunAfterOutage
	res.RanksStarted, res.RanksKilled, res.RanksKilledByServerOutage = v.RanksStarted, v.RanksKilled, v.RanksKilledByServerOutage
	res.DetectionP50S, res.DetectionP99S = stats.Quantile(det, 0.5), stats.Quantile(det, 0.99)
	res.RecoveryP50S, res.RecoveryP99S = stats.Quantile(rec, 0.5), stats.Quantile(rec, 0.99)
	res.DetectionSamples, res.RecoverySamples, res.Unrecovered = len(det), len(rec), unrec
	res.Problems, res.Notes = v.Problems, v.Notes
	res.DurationS = time.Since(r.begin).Seconds()
	var fo []float64
	for _, f := range r.faults {
		if f.Kind == LeaderKill && f.Err == "" {
			fo = append(fo, f.FailoverS)
		}
	}
	sort.Float64s(fo)
	res.FailoverP50S, res.FailoverP99S, res.FailoverSamples = stats.Quantile(fo, 0.5), stats.Quantile(fo, 0.99), len(fo)
	res.OK = v.OK() && res.FaultErrors == 0 && len(res.ReferenceLosses) == len(trainerShapes) && res.RequestsFailed == 0
}

// lastSeenSlack is four of the rank watch's polls (50 ms): a killed rank's
// end is when it was last seen alive.
const lastSeenSlack = 200 * time.Millisecond

// outageGrace is how long after the server answers again a rank's death
// or a job's completion still counts as during the outage: agents take a
// heartbeat or two to report what happened meanwhile.
const outageGrace = 5 * time.Second

// outages are the server faults' spans, each from the fault to grace after
// the server answered again, but no later than the next fault: what
// happens then may be the next fault's doing. A rank that fault kills is
// recorded as last seen alive up to a watch poll before it, so the window
// ends lastSeenSlack before the next fault.
func outages(faults []Fault, grace time.Duration) []Window {
	var out []Window
	for i, f := range faults {
		if !f.Kind.onServer() {
			continue
		}
		to := f.Healed.Add(grace)
		if i+1 < len(faults) && faults[i+1].At.Add(-lastSeenSlack).Before(to) {
			to = faults[i+1].At.Add(-lastSeenSlack)
		}
		out = append(out, Window{From: f.At, To: to})
	}
	return out
}

// busyHost maps a planned host index onto the hosts that run ranks now,
// so that faults hit work where there is any: the planned index picks
// among the busy hosts, in host order; with none busy it stands.
func busyHost(agents []*agentProc, live map[string]int, planned int) int {
	var busy []int
	for i, a := range agents {
		if live[a.name] > 0 {
			busy = append(busy, i)
		}
	}
	if len(busy) == 0 {
		return planned
	}
	return busy[planned%len(busy)]
}

func writeJSON(path string, v any) {
	if b, err := json.MarshalIndent(v, "", "  "); err == nil {
		_ = os.WriteFile(path, append(b, '\n'), 0o644)
	}
}

// PrintTable writes r for a person.
func PrintTable(w io.Writer, r *Result) {
	verdict := "OK"
	if !r.OK {
		verdict = "FAILED"
	}
	kinds := make([]string, 0, len(r.ByKind))
	for _, k := range Kinds {
		if s := r.ByKind[k]; s != nil {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, s.Faults))
		}
	}
	shapes := make([]string, 0, len(r.ReferenceLosses))
	for s, l := range r.ReferenceLosses {
		shapes = append(shapes, fmt.Sprintf("%s %.12g", s, l))
	}
	sort.Strings(shapes)
	fmt.Fprintf(w, `
Chaos (%s): seed %d, %d server replicas, %d agents, %.0f s
  faults                 %d   %v   (%d could not be injected)
  jobs                   %d submitted, %d acknowledged
  lost                   %d   (acknowledged, then unknown to the server)
  duplicated             %d   (one submission, several jobs)
  ran twice              %d   (attempts of one job alive at once, from the ranks' own records)
  rank reruns            %d   (a rank of one attempt started twice)
  rerun after completion %d   (an attempt started after one had completed; %d of them completed during a server outage: violations)
  stuck                  %d   (not finished by the end)
  failed                 %d   (given up by the server)
  loss mismatches        %d   (trainer final loss ≠ reference %v)
  ranks killed           %d of %d started, %d of them during a server outage (each a violation)
  detection              p50 %.2f s  p99 %.2f s   (%d samples: fault → node marked lost)
  recovery               p50 %.2f s  p99 %.2f s   (%d samples: fault → interrupted gang running again; %d never did)
`, verdict, r.Seed, r.Replicas, r.Agents, r.DurationS, r.Faults, kinds, r.FaultErrors, r.Jobs, r.Acknowledged, r.Lost, r.Duplicated,
		r.RanTwice, r.RankReruns, r.RerunAfterCompletion, r.RerunAfterOutage, r.Stuck, r.Failed, r.LossMismatches, shapes, r.RanksKilled, r.RanksStarted, r.RanksKilledByServerOutage,
		r.DetectionP50S, r.DetectionP99S, r.DetectionSamples, r.RecoveryP50S, r.RecoveryP99S, r.RecoverySamples, r.Unrecovered)
	if r.FailoverSamples > 0 {
		fmt.Fprintf(w, "  failover               p50 %.2f s  p99 %.2f s   (%d samples: leader killed → another leads and takes a write)\n",
			r.FailoverP50S, r.FailoverP99S, r.FailoverSamples)
	}
	if r.Engines > 0 {
		fmt.Fprintf(w, "  inference requests     %d, %d failed, %d retries   (%d engines behind the gateways; each request retried within %.0f s)\n",
			r.Requests, r.RequestsFailed, r.RequestRetries, r.Engines, r.RequestBudgetS)
	}
	if len(r.ByKind) > 0 {
		fmt.Fprintf(w, "\n  %-22s %6s %12s %14s %13s\n", "by kind", "faults", "ranks killed", "detection p50", "recovery p50")
		for _, k := range Kinds {
			if s := r.ByKind[k]; s != nil {
				fmt.Fprintf(w, "  %-22s %6d %12d %12.2fs %11.2fs   (%d, %d samples)\n", k, s.Faults, s.RanksKilled,
					s.DetectionP50S, s.RecoveryP50S, s.DetectionSamples, s.RecoverySamples)
			}
		}
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "\n  working directory      %s\n", r.Dir)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "\nProblems:")
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, p := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}
