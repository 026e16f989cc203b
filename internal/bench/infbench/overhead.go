package infbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/inference/openai"
)

// The overhead scenario measures what the gateway adds to a request: the
// same load goes straight to eight zero-latency engines (round-robin) and
// through the gateway in front of them, in alternating rounds, and the
// latency percentiles of the two are subtracted. With a gangway binary
// (Options.Exe) the engines and the gateway run as processes of their own,
// the deployment's shape, and the benchmark's process is only the load
// generator, so no process's garbage collection pauses another; each
// process's CPU time is read per round from /proc. Without one (tests)
// all of it runs in this process.

// overheadCase is one load shape of the overhead scenario.
type overheadCase struct {
	name        string
	rate        float64 // open loop when > 0
	concurrency int     // closed loop when > 0
	requests    int     // per path, over all rounds
	rounds      int     // alternations of direct and gateway; default 10
	promptBytes int
	limitMS     float64 // the target for added p99; 0 when none
}

func overheadCases(quick bool) []overheadCase {
	if quick {
		return []overheadCase{
			{name: "one at a time, ~1 KB prompts", concurrency: 1, requests: 500, promptBytes: 1000},
			{name: "open-loop 1000 req/s, ~1 KB prompts", rate: 1000, requests: 2000, promptBytes: 1000},
			{name: "closed-loop 20 concurrent, 220 KB prompts", concurrency: 20, requests: 200, promptBytes: 220_000},
		}
	}
	return []overheadCase{
		// Without load: what the gateway adds to one request.
		{name: "one at a time, ~1 KB prompts", concurrency: 1, requests: 2000, promptBytes: 1000},
		{name: "one at a time, 220 KB prompts", concurrency: 1, requests: 300, promptBytes: 220_000},
		// The targets.
		{name: "open-loop 5000 req/s, ~1 KB prompts", rate: 5000, requests: 30_000, promptBytes: 1000, limitMS: 1},
		{name: "open-loop 1000 req/s, ~1 KB prompts", rate: 1000, requests: 10_000, promptBytes: 1000},
		{name: "closed-loop 150 concurrent, 220 KB prompts", concurrency: 150, requests: 1500, promptBytes: 220_000, limitMS: 20},
	}
}

// connsPerTarget is the load generator's connections per target in an
// open loop: 16 to each of 8 engines, or 128 to the gateway.
const connsPerEngine = 16

// engineEnv runs the engines' process on one P: eight zero-latency
// engines do almost no work, and a second P only adds the runtime's
// thread wake-ups and spinning to the machine's load (about 20% of the
// engines' CPU per request here). The gateway runs as deployed, with the
// runtime's defaults.
var engineEnv = []string{"GOMAXPROCS=1"}

// rig is the servers under test.
type rig struct {
	engines    []string // base URLs
	gateway    string
	enginesPID int // 0 when in process
	gatewayPID int
	stop       func()
}

// cpu reads each process's CPU time: the load generator (this process),
// the gateway and the engines (zero when in process: all in self).
func (r *rig) cpu() (self, gw, engines time.Duration, ok bool) {
	self, ok = selfCPU()
	if r.gatewayPID == 0 {
		return self, 0, 0, ok
	}
	g, ok1 := processCPU(r.gatewayPID)
	e, ok2 := processCPU(r.enginesPID)
	return self, g, e, ok && ok1 && ok2
}

func engineConfigForOverhead() (hardware.Config, error) {
	cfg, err := hardware.NewConfig("Qwen3-8B", "H100", 1, "bf16")
	cfg.MaxModelLen = 131072 // room for 220 KB prompts
	return cfg, err
}

// startRig starts eight zero-latency engines and a gateway over them: as
// processes of exe when it is set, else in this process.
func startRig(ctx context.Context, exe, profileDir string) (*rig, error) {
	if exe != "" {
		return startRigProcs(ctx, exe, profileDir)
	}
	cfg, err := engineConfigForOverhead()
	if err != nil {
		return nil, err
	}
	r := &rig{}
	var stops []func()
	r.stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	for range 8 {
		s, err := enginesim.NewServer(enginesim.ServerConfig{Engine: cfg, Time: enginesim.TimeZero, ServedModelName: "sim"})
		if err != nil {
			r.stop()
			return nil, err
		}
		u, stop, err := loopback(s)
		if err != nil {
			r.stop()
			return nil, err
		}
		r.engines = append(r.engines, u)
		stops = append(stops, stop)
	}
	var eps gateway.Static
	for _, u := range r.engines {
		eps = append(eps, gateway.Endpoint{URL: u, Model: "sim", Engine: &cfg})
	}
	g, err := gateway.New(gateway.Config{Source: eps, Seed: 1})
	if err != nil {
		r.stop()
		return nil, err
	}
	gctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.Run(gctx) }()
	stops = append(stops, func() { cancel(); wg.Wait() })
	if err := g.Refresh(ctx); err != nil {
		r.stop()
		return nil, err
	}
	u, stop, err := loopback(g)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.gateway = u
	stops = append(stops, stop)
	return r, nil
}

// loopback serves h on a fresh 127.0.0.1 port until stop is called.
func loopback(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
	}, nil
}

func startRigProcs(ctx context.Context, exe, profileDir string) (*rig, error) {
	r := &rig{}
	var procs []*proc
	r.stop = func() {
		for _, p := range slices.Backward(procs) {
			p.stop()
		}
	}
	profile := func(name string) []string {
		if profileDir == "" {
			return nil
		}
		return []string{"--cpuprofile", filepath.Join(profileDir, name+".cpu.pprof"), "--memprofile", filepath.Join(profileDir, name+".allocs.pprof")}
	}
	p, err := startProc(ctx, exe, 8, engineEnv, append([]string{"engine-sim", "--replicas", "8", "--listen", "127.0.0.1:0", "--time", "zero",
		"--model", "Qwen3-8B", "--gpu", "H100", "--tp", "1", "--max-model-len", "131072", "--served-model-name", "sim"}, profile("engines")...)...)
	if err != nil {
		r.stop()
		return nil, err
	}
	procs = append(procs, p)
	r.engines, r.enginesPID = p.urls, p.cmd.Process.Pid
	p, err = startProc(ctx, exe, 1, nil, append([]string{"gateway", "--listen", "127.0.0.1:0", "--endpoints", strings.Join(r.engines, ","),
		"--engine-model", "Qwen3-8B", "--gpu", "H100", "--tp", "1"}, profile("gateway")...)...)
	if err != nil {
		r.stop()
		return nil, err
	}
	procs = append(procs, p)
	r.gateway, r.gatewayPID = p.urls[0], p.cmd.Process.Pid
	// The gateway routes once its first refresh has read every engine.
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(r.gateway + openai.PathHealth)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("gateway at %s not healthy after 10s (%v)", r.gateway, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
	return r, nil
}

// proc is a gangway subcommand serving on the ports it printed.
type proc struct {
	cmd  *exec.Cmd
	out  *watchWriter
	urls []string
}

// startProc runs exe args with env added and waits for n "listening on
// URL" lines.
func startProc(ctx context.Context, exe string, n int, env []string, args ...string) (*proc, error) {
	w := &watchWriter{found: make(chan string, n)}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", exe, args[0], err)
	}
	p := &proc{cmd: cmd, out: w}
	timeout := time.After(30 * time.Second)
	for len(p.urls) < n {
		select {
		case u := <-w.found:
			p.urls = append(p.urls, u)
			continue
		case <-timeout:
		case <-ctx.Done():
		}
		p.stop()
		return nil, fmt.Errorf("%s %s did not start listening: %s", exe, args[0], w.text())
	}
	return p, nil
}

// stop interrupts the process (it shuts down cleanly on SIGINT) and
// waits for it, killing it after 10 s.
func (p *proc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { defer close(done); p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// watchWriter keeps the first 64 KiB a process writes and reports the
// URL of each "listening on" line in them, up to found's capacity.
type watchWriter struct {
	found chan string

	mu   sync.Mutex // guards buf and seen
	buf  []byte
	seen int // of buf, scanned for lines
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) < 64<<10 {
		w.buf = append(w.buf, p[:min(len(p), 64<<10-len(w.buf))]...)
	}
	for {
		line, _, ok := bytes.Cut(w.buf[w.seen:], []byte("\n"))
		if !ok {
			break
		}
		w.seen += len(line) + 1
		if _, u, ok := bytes.Cut(line, []byte("listening on ")); ok && len(w.found) < cap(w.found) {
			w.found <- string(bytes.TrimSpace(u))
		}
	}
	return len(p), nil
}

func (w *watchWriter) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// loadAvg is the 1-minute load average, or 0.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// runOverhead runs each case on one rig: direct and through the gateway
// alternately, warm first.
func runOverhead(ctx context.Context, cases []overheadCase, exe, profileDir string, progress func(string, ...any)) ([]Summary, error) {
	r, err := startRig(ctx, exe, profileDir)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	if profileDir != "" && exe != "" {
		f, err := os.Create(filepath.Join(profileDir, "loadgen.cpu.pprof"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	where := "in this process"
	if exe != "" {
		where = "engines, gateway and load generator in separate processes"
	}
	progress("  (%s)", where)
	var out []Summary
	for _, oc := range cases {
		s, err := runOverheadCase(ctx, r, oc)
		if err != nil {
			return out, fmt.Errorf("%s: %w", oc.name, err)
		}
		out = append(out, s)
		cpu := ""
		if c := s.CPU; c != nil {
			cpu = fmt.Sprintf("; CPU/request direct %.0f us (engines %.0f, loadgen %.0f), via %.0f us (gateway %.0f, engines %.0f, loadgen %.0f)",
				c.Direct.Total, c.Direct.Engines, c.Direct.LoadGen, c.Via.Total, c.Via.Gateway, c.Via.Engines, c.Via.LoadGen)
		}
		progress("  %-44s added p50 %.3f p99 %.3f p99.9 %.3f ms (direct p99 %.3f, via p99 %.3f)%s",
			oc.name, s.AddedP50ms, s.AddedP99ms, s.AddedP999ms, s.DirectP99ms, s.E2Ep99ms, cpu)
	}
	return out, nil
}

func runOverheadCase(ctx context.Context, r *rig, oc overheadCase) (Summary, error) {
	bodies := overheadBodies(oc.promptBytes, 64)
	var direct, via []loadTarget
	for _, u := range r.engines {
		t, err := newLoadTarget(u, openai.PathCompletions, bodies)
		if err != nil {
			return Summary{}, err
		}
		direct = append(direct, t)
	}
	t, err := newLoadTarget(r.gateway, openai.PathCompletions, bodies)
	if err != nil {
		return Summary{}, err
	}
	via = append(via, t)
	gens := [2]*loadGen{newLoadGen(direct, bodies), newLoadGen(via, bodies)}
	defer gens[0].close()
	defer gens[1].close()
	rounds := oc.rounds
	if rounds == 0 {
		rounds = 10
	}
	shape := func(path, requests int, seed uint64) loadShape {
		s := loadShape{rate: oc.rate, concurrency: oc.concurrency, requests: requests, seed: seed, conns: connsPerEngine}
		if path == 1 {
			s.conns = connsPerEngine * len(r.engines)
		}
		return s
	}
	// Warm both paths: connections dialed, pools and caches filled.
	for path, g := range gens {
		if err := g.dial(shape(path, 0, 0)); err != nil {
			return Summary{}, err
		}
		if res := g.run(ctx, shape(path, max(oc.requests/10, 100), 99)); res.errors > 0 {
			return Summary{}, fmt.Errorf("warm-up: %d of %d requests failed: %v", res.errors, res.errors+len(res.e2e), res.firstErr)
		}
	}
	var res [2]loadResult
	var added [3][]float64      // per round: gateway − direct at p50, p99, p99.9
	var cpu [2][3]time.Duration // path → self, gateway, engines
	cpuOK := true
	load0 := loadAvg()
	for round := range rounds {
		var pair [2]loadResult
		for k := range 2 {
			path := (round + k) % 2 // alternate which goes first
			s0, g0, e0, ok0 := r.cpu()
			rr := gens[path].run(ctx, shape(path, oc.requests/rounds, uint64(round+1)))
			s1, g1, e1, ok1 := r.cpu()
			if err := ctx.Err(); err != nil {
				return Summary{}, err
			}
			cpuOK = cpuOK && ok0 && ok1
			cpu[path][0] += s1 - s0
			cpu[path][1] += g1 - g0
			cpu[path][2] += e1 - e0
			res[path].merge(rr)
			pair[path] = rr
		}
		for q, at := range []float64{.5, .99, .999} {
			added[q] = append(added[q], stats.Quantile(pair[1].e2e, at)-stats.Quantile(pair[0].e2e, at))
		}
	}
	load1 := loadAvg()
	for path, rr := range res {
		if rr.errors > len(rr.e2e)/100 || len(rr.e2e) == 0 {
			return Summary{}, fmt.Errorf("%s: %d of %d requests failed: %v", [2]string{"direct", "through the gateway"}[path], rr.errors, rr.errors+len(rr.e2e), rr.firstErr)
		}
		slices.Sort(res[path].ttft)
		slices.Sort(res[path].e2e)
	}
	d, v := res[0], res[1]
	s := Summary{
		Scenario: ScenarioOverhead, Policy: gateway.PolicyPrefixAffinity, Requests: len(v.e2e), Dropped: v.errors,
		TTFTp50ms: stats.Quantile(v.ttft, .5), TTFTp90ms: stats.Quantile(v.ttft, .9), TTFTp99ms: stats.Quantile(v.ttft, .99), TTFTp999ms: stats.Quantile(v.ttft, .999),
		E2Ep50ms: stats.Quantile(v.e2e, .5), E2Ep99ms: stats.Quantile(v.e2e, .99), E2Ep999ms: stats.Quantile(v.e2e, .999),
		DirectP50ms: stats.Quantile(d.e2e, .5), DirectP99ms: stats.Quantile(d.e2e, .99), DirectP999ms: stats.Quantile(d.e2e, .999),
		LimitMS: oc.limitMS, Load: oc.name, Rate: oc.rate,
		Goodput: float64(len(v.e2e)) / v.wall.Seconds(), SLOAttainment: 1, DurationS: v.wall.Seconds(),
	}
	// What the gateway adds: the median over rounds of each round's
	// difference with the direct round beside it, so that a disturbance
	// of this shared machine during one round (it shows in the pooled
	// percentiles of whichever path ran then) does not decide the figure.
	for q := range added {
		slices.Sort(added[q])
	}
	s.AddedP50ms, s.AddedP99ms, s.AddedP999ms = stats.Quantile(added[0], .5), stats.Quantile(added[1], .5), stats.Quantile(added[2], .5)
	s.AddedP99PooledMS = s.E2Ep99ms - s.DirectP99ms
	if cpuOK {
		per := func(path int, x time.Duration) float64 {
			return float64(x) / float64(time.Microsecond) / float64(len(res[path].e2e)+res[path].errors)
		}
		c := &OverheadCPU{SendLateP99ms: max(d.lateP99, v.lateP99), LoadAvg: [2]float64{load0, load1}}
		for path, cc := range []*ComponentCPU{&c.Direct, &c.Via} {
			if r.gatewayPID == 0 {
				// One process: only the total is known.
				cc.Total = per(path, cpu[path][0])
				continue
			}
			cc.LoadGen, cc.Gateway, cc.Engines = per(path, cpu[path][0]), per(path, cpu[path][1]), per(path, cpu[path][2])
			cc.Total = cc.LoadGen + cc.Gateway + cc.Engines
		}
		s.CPU = c
	}
	return s, nil
}

// overheadBodies returns n streamed completion bodies of about size
// bytes: 8 shared documents with a distinct question each.
func overheadBodies(size, n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"cluster", "gpu", "token", "cache", "replica", "queue", "prefill", "decode", "batch", "kernel"}
	docs := make([]string, 8)
	for d := range docs {
		var b strings.Builder
		for b.Len() < size-64 {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		docs[d] = b.String()
	}
	out := make([][]byte, n)
	for i := range out {
		prompt := fmt.Sprintf("%sQuestion %d: what does replica %d do?", docs[i%len(docs)], i, rng.IntN(1000))
		out[i] = fmt.Appendf(nil, `{"model":"sim","prompt":%q,"max_tokens":16,"stream":true,"ignore_eos":true}`, prompt)
	}
	return out
}
