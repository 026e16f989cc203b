package infbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/autoscale"
	"github.com/gangway/gangway/internal/inference/gateway"
)

// Scenario names.
const (
	ScenarioRouting   = "routing"
	ScenarioNoReuse   = "noreuse"
	ScenarioBurst     = "burst"
	ScenarioAutoscale = "autoscale"
	// ScenarioAutoscaleNoQueue is the autoscale scenario without the
	// gateway's admission queue: what it is judged against.
	ScenarioAutoscaleNoQueue = "autoscale-noqueue"
	ScenarioOverhead         = "overhead"
)

// ScenarioNames lists the scenarios in the order Run runs them.
func ScenarioNames() []string {
	return []string{ScenarioRouting, ScenarioNoReuse, ScenarioBurst, ScenarioAutoscale, ScenarioAutoscaleNoQueue, ScenarioOverhead}
}

// Options selects what Run runs.
type Options struct {
	Scenarios []string // default: all
	Policies  []string // default: each scenario's own list
	// Quick shrinks every scenario (fewer requests, shorter overhead
	// runs) for tests; the figures are noisier but the same shape.
	Quick    bool
	Seed     uint64    // workload seed; default 1
	Progress io.Writer // nil: silent
	// Exe is a gangway binary to run the overhead scenario's engines and
	// gateway as processes of their own (`gangway engine-sim`, `gangway
	// gateway`); empty runs them in this process.
	Exe string
	// ProfileDir, with Exe, gets CPU and allocation profiles of the
	// overhead scenario's gateway, first engine and load generator.
	ProfileDir string
}

// Check is one of the targets, evaluated on the results.
type Check struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// Report is the output of Run.
type Report struct {
	Results []Summary `json:"results"`
	Checks  []Check   `json:"checks"`
}

// virtualScenario is a virtual-time scenario described as data.
type virtualScenario struct {
	name     string
	about    string
	replicas int
	workload Workload
	policies []string
	slo      SLO
	// autoscaling
	scale     *autoscale.Config
	startup   time.Duration
	initial   int
	stepAt    time.Duration
	window    time.Duration // TTFT p99 is judged per window of arrivals
	drainTime time.Duration // how long after the last arrival the run may go on
	admission *Admission    // the gateway's admission queue; nil: none
}

// gatewayAdmission is the gateway's default admission queue
// (gateway.Config.MaxQueued, QueueTimeout and MaxPendingPrefill).
var gatewayAdmission = &Admission{MaxQueued: 1024, Timeout: 60 * time.Second, MaxPendingPrefill: 5 * time.Second}

var routingPolicies = []string{
	gateway.PolicyPrecisePrefix, gateway.PolicyApproxPrefix, gateway.PolicyLoad, gateway.PolicyRandom,
	gateway.PolicyRoundRobin, gateway.PolicyLeastRequest, gateway.PolicyPowerOfTwo, gateway.PolicyPrefixAffinity,
}

// engineConfig is every scenario's replica: Qwen3-32B on 2 × H100.
func engineConfig() hardware.Config {
	c, err := hardware.NewConfig("Qwen3-32B", "H100", 2, "bf16")
	if err != nil {
		panic(err)
	}
	return c
}

// llmdWorkload mirrors llm-d's precise-prefix benchmark: 150 customers
// with a 6,000-token system prompt each, 5 users per customer holding
// 3-turn conversations of ~1,200-token questions and ~400-token answers.
func llmdWorkload(requests int, rate float64) Workload {
	return Workload{
		Requests: requests, Rate: rate,
		Prefixes: 150, PrefixTokens: 6000, Users: 5, Turns: 3,
		SuffixTokens: 1200, OutputTokens: 400,
	}
}

var defaultSLO = SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond}

func virtualScenarios(quick bool) []virtualScenario {
	stepAt := 120 * time.Second
	if quick {
		stepAt = 60 * time.Second
	}
	n := func(full, small int) int {
		if quick {
			return small
		}
		return full
	}
	autoscaled := virtualScenario{
		name:  ScenarioAutoscale,
		about: "the routing workload at 2 req/s stepping 10× to 20 req/s (at 120 s; 60 s with --quick); 1 replica at first, autoscaled to at most 16, 30 s engine start-up",
		workload: func() Workload {
			w := llmdWorkload(n(5000, 1800), 2)
			w.StepAt, w.StepFactor = stepAt, 10
			return w
		}(),
		policies: []string{gateway.PolicyPrefixAffinity},
		slo:      defaultSLO,
		scale:    &autoscale.Config{Min: 1, Max: 16},
		startup:  30 * time.Second, initial: 1, stepAt: stepAt, window: 10 * time.Second,
		drainTime: 10 * time.Minute, admission: gatewayAdmission,
	}
	noQueue := autoscaled
	noQueue.name, noQueue.admission = ScenarioAutoscaleNoQueue, nil
	noQueue.about = "the autoscale scenario with the gateway's admission queue off: requests that find every replica full go to one anyway"
	return []virtualScenario{
		{
			name:     ScenarioRouting,
			about:    "8 × Qwen3-32B on 2×H100; 150 shared 6,000-token prefixes, 5 users × 3-turn conversations; Poisson 20 req/s",
			replicas: 8, workload: llmdWorkload(n(2500, 1200), 20), policies: routingPolicies, slo: defaultSLO,
			drainTime: 10 * time.Minute,
		},
		{
			name:     ScenarioNoReuse,
			about:    "8 × Qwen3-32B on 2×H100; unique ~4,000-token prompts, ~400-token answers; Poisson 14 req/s",
			replicas: 8,
			workload: Workload{Requests: n(2500, 800), Rate: 14, SuffixTokens: 4000, OutputTokens: 400},
			policies: []string{gateway.PolicyRoundRobin, gateway.PolicyRandom, gateway.PolicyLeastRequest, gateway.PolicyPowerOfTwo, gateway.PolicyPrefixAffinity},
			slo:      defaultSLO, drainTime: 10 * time.Minute,
		},
		{
			name:     ScenarioBurst,
			about:    "the routing workload at a mean 14 req/s arriving in 5-s bursts at 3× every 20 s",
			replicas: 8,
			workload: func() Workload {
				w := llmdWorkload(n(2500, 1000), 14)
				w.Burst, w.BurstOn, w.BurstPeriod = 3, 5*time.Second, 20*time.Second
				return w
			}(),
			policies: []string{gateway.PolicyLeastRequest, gateway.PolicyRoundRobin, gateway.PolicyPowerOfTwo, gateway.PolicyPrecisePrefix, gateway.PolicyPrefixAffinity},
			slo:      defaultSLO, drainTime: 10 * time.Minute,
		},
		autoscaled,
		noQueue,
	}
}

// Run runs the selected scenarios and evaluates the checks. Virtual
// scenarios are deterministic for a seed; the overhead scenario measures
// real HTTP on 127.0.0.1 and is bounded in requests and time.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	want := opts.Scenarios
	if len(want) == 0 {
		want = ScenarioNames()
	}
	for _, s := range want {
		if !slices.Contains(ScenarioNames(), s) {
			return Report{}, fmt.Errorf("unknown scenario %q (want one of %v)", s, ScenarioNames())
		}
	}
	for _, p := range opts.Policies {
		if _, err := gateway.NewPolicy(p); err != nil {
			return Report{}, err
		}
	}
	var rep Report
	progress := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	for _, sc := range virtualScenarios(opts.Quick) {
		if !slices.Contains(want, sc.name) {
			continue
		}
		sc.workload.Seed = opts.Seed
		arrivals := sc.workload.Generate(gateway.BlockSize)
		policies := sc.policies
		if len(opts.Policies) > 0 {
			policies = opts.Policies
		}
		progress("%s: %s", sc.name, sc.about)
		for _, pol := range policies {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			start := time.Now()
			s, err := runVirtual(sc, pol, opts.Seed, arrivals)
			if err != nil {
				return rep, fmt.Errorf("scenario %s policy %s: %w", sc.name, pol, err)
			}
			rep.Results = append(rep.Results, s)
			progress("  %-16s ttft p50 %8.0f ms  p99 %8.0f ms  tpot p50 %5.1f ms  goodput %5.2f/s  (%.1fs)", pol, s.TTFTp50ms, s.TTFTp99ms, s.TPOTp50ms, s.Goodput, time.Since(start).Seconds())
		}
	}
	if slices.Contains(want, ScenarioOverhead) {
		progress("overhead: 8 zero-latency engines on 127.0.0.1, straight vs through the gateway")
		res, err := runOverhead(ctx, overheadCases(opts.Quick), opts.Exe, opts.ProfileDir, progress)
		if err != nil {
			return rep, fmt.Errorf("scenario overhead: %w", err)
		}
		rep.Results = append(rep.Results, res...)
	}
	rep.Checks = checks(rep.Results)
	return rep, nil
}

func runVirtual(sc virtualScenario, policy string, seed uint64, arrivals []Arrival) (Summary, error) {
	cfg := ClusterConfig{
		Engine: engineConfig(), Replicas: max(sc.replicas, 1), Policy: policy, Seed: seed,
		Deadline: arrivals[len(arrivals)-1].At + sc.drainTime, Admission: sc.admission,
	}
	if sc.scale != nil {
		a, err := autoscale.New(*sc.scale)
		if err != nil {
			return Summary{}, err
		}
		cfg.Scaler = AutoscalerScaler{A: a}
		cfg.StartupTime = sc.startup
		cfg.InitialReplicas = sc.initial
		cfg.Replicas = sc.scale.Max
	}
	outs, cl, err := simulate(cfg, arrivals)
	if err != nil {
		return Summary{}, err
	}
	var end time.Duration
	for _, o := range outs {
		end = max(end, o.Arrival+o.E2E)
	}
	end = max(end, arrivals[len(arrivals)-1].At)
	s := summarize(sc.name, policy, outs, sc.slo, end)
	if sc.scale != nil {
		s.PeakReplicas = cl.peak
		s.RecoveryS, s.Note = recovery(outs, sc.stepAt, sc.window, sc.slo.TTFT, end)
	}
	return s, nil
}

// recovery finds when, after the step, the TTFT p99 of every later window
// of arrivals stays within slo: the seconds from the step to the start
// of the first such window.
func recovery(outs []Outcome, step, window, slo time.Duration, end time.Duration) (float64, string) {
	type win struct{ ttft []float64 }
	wins := map[int]*win{}
	for _, o := range outs {
		if o.Arrival < step {
			continue
		}
		k := int((o.Arrival - step) / window)
		if wins[k] == nil {
			wins[k] = &win{}
		}
		t := o.TTFT
		if o.Dropped || t == 0 {
			t = end - o.Arrival
		}
		wins[k].ttft = append(wins[k].ttft, ms(t))
	}
	keys := make([]int, 0, len(wins))
	for k := range wins {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	last := -1 // last window over the SLO
	var worst float64
	for _, k := range keys {
		slices.Sort(wins[k].ttft)
		p99 := stats.Quantile(wins[k].ttft, 0.99)
		worst = math.Max(worst, p99)
		if p99 > ms(slo) {
			last = k
		}
	}
	rec := float64(last+1) * window.Seconds()
	return rec, fmt.Sprintf("worst %v-window TTFT p99 after the step: %.0f ms; under %v from %.0f s after the step", window, worst, slo, rec)
}

func find(rs []Summary, scenario, policy string) (Summary, bool) {
	for _, r := range rs {
		if r.Scenario == scenario && r.Policy == policy {
			return r, true
		}
	}
	return Summary{}, false
}

// checks evaluates the targets on whatever results are present.
func checks(rs []Summary) []Check {
	var out []Check
	get := func(sc, p string) (Summary, bool) { return find(rs, sc, p) }
	if pr, ok1 := get(ScenarioRouting, gateway.PolicyPrecisePrefix); ok1 {
		ap, ok2 := get(ScenarioRouting, gateway.PolicyApproxPrefix)
		ld, ok3 := get(ScenarioRouting, gateway.PolicyLoad)
		rn, ok4 := get(ScenarioRouting, gateway.PolicyRandom)
		if ok2 && ok3 && ok4 {
			near := math.Abs(ld.TTFTp99ms-rn.TTFTp99ms) <= 0.25*math.Max(ld.TTFTp99ms, rn.TTFTp99ms)
			out = append(out, Check{
				Name: "simulator reproduces llm-d's ordering: precise < approximate < load ≈ random (TTFT p99)",
				Pass: pr.TTFTp99ms < ap.TTFTp99ms && ap.TTFTp99ms < math.Min(ld.TTFTp99ms, rn.TTFTp99ms) && near,
				Detail: fmt.Sprintf("precise %.0f ms < approximate %.0f ms < load %.0f ms ≈ random %.0f ms (p90: %.0f / %.0f / %.0f / %.0f; llm-d published p90 0.54 s / 31 s / 92.6 s random)",
					pr.TTFTp99ms, ap.TTFTp99ms, ld.TTFTp99ms, rn.TTFTp99ms, pr.TTFTp90ms, ap.TTFTp90ms, ld.TTFTp90ms, rn.TTFTp90ms),
			})
		}
	}
	if ours, ok := get(ScenarioRouting, gateway.PolicyPrefixAffinity); ok {
		if rr, ok := get(ScenarioRouting, gateway.PolicyRoundRobin); ok {
			out = append(out, Check{
				Name:   "routing: default TTFT p99 ≥ 10× better than round-robin",
				Pass:   rr.TTFTp99ms >= 10*ours.TTFTp99ms,
				Detail: fmt.Sprintf("prefix-affinity %.0f ms vs round-robin %.0f ms: %.1f×", ours.TTFTp99ms, rr.TTFTp99ms, rr.TTFTp99ms/ours.TTFTp99ms),
			})
		}
	}
	if ours, ok := get(ScenarioNoReuse, gateway.PolicyPrefixAffinity); ok {
		if rr, ok := get(ScenarioNoReuse, gateway.PolicyRoundRobin); ok {
			out = append(out, Check{
				Name:   "noreuse: default TTFT p99 never > 5% worse than round-robin",
				Pass:   ours.TTFTp99ms <= 1.05*rr.TTFTp99ms,
				Detail: fmt.Sprintf("prefix-affinity %.0f ms vs round-robin %.0f ms (%+.1f%%)", ours.TTFTp99ms, rr.TTFTp99ms, 100*(ours.TTFTp99ms/rr.TTFTp99ms-1)),
			})
		}
	}
	if ours, ok := get(ScenarioBurst, gateway.PolicyPrefixAffinity); ok {
		if lr, ok := get(ScenarioBurst, gateway.PolicyLeastRequest); ok {
			out = append(out, Check{
				Name:   "burst: default TTFT p99 better than least-request",
				Pass:   ours.TTFTp99ms < lr.TTFTp99ms,
				Detail: fmt.Sprintf("prefix-affinity %.0f ms vs least-request %.0f ms", ours.TTFTp99ms, lr.TTFTp99ms),
			})
		}
	}
	if a, ok := get(ScenarioAutoscale, gateway.PolicyPrefixAffinity); ok {
		out = append(out, Check{
			Name:   "autoscale: TTFT p99 back under its SLO within 60 s of a 10× step, start-up included",
			Pass:   a.RecoveryS <= 60,
			Detail: fmt.Sprintf("recovered %.0f s after the step, peak %d replicas; %s", a.RecoveryS, a.PeakReplicas, a.Note),
		})
	}
	if q, ok := get(ScenarioAutoscale, gateway.PolicyPrefixAffinity); ok {
		if nq, ok := get(ScenarioAutoscaleNoQueue, gateway.PolicyPrefixAffinity); ok {
			out = append(out, Check{
				Name: "admission queue: TTFT p99 of the 10× step lower than without it",
				Pass: q.TTFTp99ms < nq.TTFTp99ms,
				Detail: fmt.Sprintf("TTFT p99 %.0f ms vs %.0f ms without (%.1f×); goodput %.2f/s vs %.2f/s (%+.0f%%); %d rejected, held p99 %.0f ms",
					q.TTFTp99ms, nq.TTFTp99ms, nq.TTFTp99ms/q.TTFTp99ms, q.Goodput, nq.Goodput, 100*(q.Goodput/nq.Goodput-1), q.Rejected, q.HeldP99ms),
			})
		}
	}
	for _, r := range rs {
		if r.Scenario != ScenarioOverhead || r.LimitMS == 0 {
			continue
		}
		out = append(out, Check{
			Name:   fmt.Sprintf("overhead, %s: added p99 ≤ %.0f ms", r.Load, r.LimitMS),
			Pass:   r.AddedP99ms <= r.LimitMS,
			Detail: fmt.Sprintf("added p99 %.3f ms (p50 %.3f, p99.9 %.3f; median over rounds of gateway minus direct), pooled: gateway e2e p99 %.3f ms vs direct %.3f ms over %d requests each", r.AddedP99ms, r.AddedP50ms, r.AddedP999ms, r.E2Ep99ms, r.DirectP99ms, r.Requests),
		})
	}
	return out
}
