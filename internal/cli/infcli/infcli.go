// Package infcli holds the inference subcommands of the gangway binary:
// engine-sim (a simulated vLLM server), gateway (the OpenAI gateway) and
// bench inference (the inference benchmarks). cmd/gangway calls Main.
//
// It imports the standard library, internal/hardware,
// internal/inference/enginesim, internal/inference/gateway,
// internal/bench/infbench, internal/base/cpuprof,
// internal/base/adminhttp, internal/base/cmdkit and
// prometheus/client_golang.
package infcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/base/adminhttp"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/base/cpuprof"
	"github.com/gangway/gangway/internal/bench/infbench"
	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// Main runs one subcommand: args[0] is engine-sim, gateway or bench
// (followed by inference). It returns the process exit code: 0 on
// success, 1 on failure, 2 on bad usage. It blocks until the command
// ends or ctx is cancelled (servers then shut down and it returns 0).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: gangway engine-sim|gateway|bench inference [flags]")
		return 2
	}
	switch args[0] {
	case "engine-sim":
		return EngineSim(ctx, args[1:], stdout, stderr)
	case "gateway":
		return Gateway(ctx, args[1:], stdout, stderr)
	case "bench":
		if len(args) < 2 || args[1] != "inference" {
			fmt.Fprintln(stderr, "usage: gangway bench inference [flags]")
			return 2
		}
		return BenchInference(ctx, args[2:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "unknown command %q (want engine-sim, gateway or bench inference)\n", args[0])
	return 2
}

// EngineSim is `gangway engine-sim`: a simulated vLLM OpenAI server.
func EngineSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "engine-sim", "[flags]")
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on")
	replicas := fs.Int("replicas", 1, "serve this many independent engines, on --listen's port and the ones after it (port 0: free ports)")
	model := fs.String("model", "Qwen3-32B", "model: "+strings.Join(hardware.ModelNames(), ", "))
	served := fs.String("served-model-name", "", "model name clients send (default: --model)")
	gpu := fs.String("gpu", "H100", "GPU: "+strings.Join(hardware.GPUNames(), ", "))
	tp := fs.Int("tp", 0, "tensor-parallel size (0: the smallest that fits)")
	quant := fs.String("quant", "bf16", "quantization: bf16, fp8, int8, int4")
	timeMode := fs.String("time", "real", "real: steps take their roofline time; zero: answer at once")
	scale := fs.Float64("time-scale", 1, "run engine time this many times faster than the wall clock")
	util := fs.Float64("gpu-memory-utilization", 0.9, "share of GPU memory vLLM may use")
	maxSeqs := fs.Int("max-num-seqs", 256, "sequences per step")
	maxTokens := fs.Int("max-num-batched-tokens", 8192, "token budget per step")
	maxLen := fs.Int("max-model-len", 0, "longest prompt + output (0: the model's)")
	prof := profileFlags(fs)
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	cfg, err := hardware.NewConfig(*model, *gpu, max(*tp, 1), *quant)
	if err != nil {
		fmt.Fprintf(stderr, "engine-sim: %v\n", err)
		return 2
	}
	cfg.GPUMemoryUtilization, cfg.MaxNumSeqs, cfg.MaxNumBatchedTokens, cfg.MaxModelLen = *util, *maxSeqs, *maxTokens, *maxLen
	cfg = cfg.WithDefaults()
	if *tp == 0 {
		n, cp, ok := hardware.MinTP(cfg)
		if !ok {
			fmt.Fprintf(stderr, "engine-sim: %s does not fit on 8 × %s: %s\n", cfg.Model.Name, cfg.GPU.Name, cp.Reason)
			return 1
		}
		cfg.TP = n
	}
	if *replicas < 1 {
		fmt.Fprintf(stderr, "engine-sim: --replicas %d: want at least 1\n", *replicas)
		return 2
	}
	addrs, err := replicaAddrs(*listen, *replicas)
	if err != nil {
		fmt.Fprintf(stderr, "engine-sim: --listen %q: %v\n", *listen, err)
		return 2
	}
	var srvs []server
	for range *replicas {
		srv, err := enginesim.NewServer(enginesim.ServerConfig{
			Engine: cfg, ServedModelName: *served, Time: enginesim.TimeMode(*timeMode), TimeScale: *scale,
			Logger: slog.New(slog.NewTextHandler(stderr, nil)),
		})
		if err != nil {
			fmt.Fprintf(stderr, "engine-sim: %v\n", err)
			return 2
		}
		srvs = append(srvs, server{srv, srv.Run})
	}
	c := srvs[0].h.(*enginesim.Server).Config().Engine
	cp := c.Capacity()
	fmt.Fprintf(stderr, "engine-sim: %s on %d × %s (%s): weights %.1f GiB/GPU, KV cache %d tokens (%d blocks of %d), prefill ≈ %.0f tokens/s, decode step ≈ %v\n",
		c.Model.Name, c.TP, c.GPU.Name, c.Quant, float64(cp.WeightBytesPerGPU)/(1<<30), cp.KVTokens, cp.KVBlocks, c.BlockSize,
		float64(c.MaxNumBatchedTokens)/c.PrefillTime(0, c.MaxNumBatchedTokens).Seconds(), c.DecodeStepTime(1, 1000).Round(time.Microsecond))
	return serve(ctx, addrs, srvs, "engine-sim", prof, stdout, stderr)
}

// profiles are the --cpuprofile and --memprofile files of a server.
type profiles struct{ cpu, mem *string }

func profileFlags(fs *flag.FlagSet) profiles {
	return profiles{
		cpu: fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file"),
		mem: fs.String("memprofile", "", "write an allocation profile to this file at shutdown"),
	}
}

// start begins the CPU profile; the returned func ends it and writes the
// allocation profile.
func (p profiles) start() (stop func() error, err error) {
	var cpu *os.File
	if *p.cpu != "" {
		if cpu, err = os.Create(*p.cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	return func() error {
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				return err
			}
		}
		if *p.mem == "" {
			return nil
		}
		return cpuprof.WriteAllocs(*p.mem)
	}, nil
}

// server is one handler and its loop.
type server struct {
	h   http.Handler
	run func(context.Context) error
}

// serve runs each server on its address until ctx ends (or one fails),
// printing a "listening on" line for each.
func serve(ctx context.Context, addrs []string, srvs []server, name string, prof profiles, stdout, stderr io.Writer) int {
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		lns = append(lns, ln)
	}
	stopProf, err := prof.start()
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		fmt.Fprintf(stderr, "%s: profile: %v\n", name, err)
		return 1
	}
	defer func() {
		if err := stopProf(); err != nil {
			fmt.Fprintf(stderr, "%s: profile: %v\n", name, err)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(srvs))
	hss := make([]*http.Server, len(srvs))
	for i, s := range srvs {
		hss[i] = &http.Server{Handler: s.h, ReadHeaderTimeout: 30 * time.Second}
		fmt.Fprintf(stdout, "%s: listening on http://%s\n", name, lns[i].Addr())
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.run(ctx)
		}()
		go func() {
			defer wg.Done()
			if err := hss[i].Serve(lns[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	code := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		code = 1
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	for _, hs := range hss {
		hs.Shutdown(sctx)
	}
	cancel()
	wg.Wait()
	return code
}

// replicaAddrs are the addresses of n replicas from one --listen: the
// same host, port and the ports after it (port 0: a free port each).
func replicaAddrs(listen string, n int) ([]string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n-1 > 65535 {
		return nil, fmt.Errorf("port %q: want 0..65535, room for %d replicas", port, n)
	}
	out := make([]string, n)
	for i := range out {
		q := p
		if p != 0 {
			q = p + i
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(q))
	}
	return out, nil
}

// Gateway is `gangway gateway`: the OpenAI gateway in front of engines.
func Gateway(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "gateway", "[flags]")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	endpoints := fs.String("endpoints", "", "comma-separated engine base URLs (required)")
	policy := fs.String("policy", gateway.PolicyPrefixAffinity, "routing policy: "+strings.Join(gateway.PolicyNames(), ", "))
	model := fs.String("engine-model", "", "model the engines run, for sizing (default: learn from their /metrics)")
	gpu := fs.String("gpu", "H100", "GPU of the engines, with --engine-model")
	tp := fs.Int("tp", 1, "tensor-parallel size of the engines, with --engine-model")
	quant := fs.String("quant", "bf16", "quantization of the engines, with --engine-model")
	refresh := fs.Duration("refresh", 100*time.Millisecond, "how often to read the endpoints' metrics")
	attempts := fs.Int("max-attempts", 3, "replicas to try when connecting fails")
	seed := fs.Uint64("seed", 1, "seed of the policies' randomness")
	maxQueued := fs.Int("max-queued", 1024, "requests held per model while every replica is saturated or none is ready (then 429); -1: hold none")
	queueTimeout := fs.Duration("queue-timeout", 60*time.Second, "how long a request may be held (then 503)")
	maxPrefill := fs.Duration("max-pending-prefill", 5*time.Second, "a replica with this much prefill queued counts as saturated; -1s: only KV cache and sequence slots count")
	streamHdr := fs.Duration("stream-header-timeout", 60*time.Second, "a replica that sends no response headers for a streamed request this long counts as failed and the next is tried (0: no bound)")
	hdr := fs.Duration("header-timeout", 0, "the same for requests not streamed, whose headers come with the whole completion (0: no bound)")
	apiKeys := fs.String("api-keys", "", "YAML or JSON file of API keys (name, sha256 or key, requestsPerMinute, tokensPerMinute, models): callers must then send one as Authorization: Bearer or x-api-key; without it anyone may call the gateway")
	newKey := fs.String("new-api-key", "", "print a new API key for `NAME` and its key-file entry (the key's SHA-256), then exit")
	debugListen := fs.String("debug-listen", "127.0.0.1:0", "serve /metrics (the gateway's, Go's and the process's) and Go's pprof (/debug/pprof/) in plain HTTP here; loopback by default, on a port printed at start (\"\": none)")
	prof := profileFlags(fs)
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	if *newKey != "" {
		secret, hash := gateway.NewKey()
		entry := fmt.Sprintf("  - name: %s\n    sha256: %s\n", *newKey, hash)
		if _, err := gateway.ParseKeyFile([]byte("keys:\n" + entry)); err != nil {
			fmt.Fprintf(stderr, "gateway: --new-api-key: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "# the key, for the client (the file keeps only its SHA-256):\n#   %s\n# its entry under keys: in the --api-keys file:\n%s", secret, entry)
		return 0
	}
	if *streamHdr < 0 || *hdr < 0 {
		fmt.Fprintln(stderr, "gateway: --stream-header-timeout and --header-timeout must not be negative (0: no bound)")
		return 2
	}
	if *endpoints == "" {
		fmt.Fprintln(stderr, "gateway: --endpoints is required")
		return 2
	}
	eps, err := gateway.ParseEndpoints(*endpoints)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: --endpoints: %v\n", err)
		return 2
	}
	if *model != "" {
		cfg, err := hardware.NewConfig(*model, *gpu, *tp, *quant)
		if err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 2
		}
		for i := range eps {
			eps[i].Engine = &cfg
		}
	}
	var keys gateway.Keys
	if *apiKeys != "" {
		kf, err := gateway.LoadKeyFile(*apiKeys)
		if err != nil {
			fmt.Fprintf(stderr, "gateway: --api-keys: %v\n", err)
			return 2
		}
		keys = kf
		fmt.Fprintf(stderr, "gateway: %d API keys from %s\n", len(kf.Names()), *apiKeys)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	g, err := gateway.New(gateway.Config{
		Keys:   keys,
		Source: eps, Policy: *policy, Seed: *seed, RefreshInterval: *refresh, MaxAttempts: *attempts,
		MaxQueued: *maxQueued, QueueTimeout: *queueTimeout, MaxPendingPrefill: *maxPrefill,
		StreamHeaderTimeout: gateway.TimeoutFromFlag(*streamHdr), HeaderTimeout: gateway.TimeoutFromFlag(*hdr),
		Logger: log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "gateway: policy %s over %d endpoints\n", *policy, len(eps))
	run := g.Run
	if *debugListen != "" {
		dbg, err := adminhttp.Listen(*debugListen, prometheus.Gatherers{adminhttp.NewRegistry(), g.Gatherer()}, true, log)
		if err != nil {
			fmt.Fprintf(stderr, "gateway: --debug-listen: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "gateway: debug (metrics, pprof) on http://%s\n", dbg.Addr())
		run = func(ctx context.Context) error {
			var wg sync.WaitGroup
			wg.Go(func() { dbg.Run(ctx) }) // ends with ctx, as g.Run does
			err := g.Run(ctx)
			wg.Wait()
			return err
		}
	}
	return serve(ctx, []string{*listen}, []server{{g, run}}, "gateway", prof, stdout, stderr)
}

// BenchInference is `gangway bench inference`.
func BenchInference(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "bench inference", "[flags]")
	output := cmdkit.OutputFlag(fs)
	scenarios := fs.String("scenario", "", "comma-separated scenarios (default all): "+strings.Join(infbench.ScenarioNames(), ", "))
	policies := fs.String("policy", "", "comma-separated policies (default each scenario's)")
	quick := fs.Bool("quick", false, "smaller runs: noisier, faster")
	seed := fs.Uint64("seed", 1, "workload seed")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	failOnCheck := fs.Bool("fail-on-check", false, "exit 1 when a target is missed")
	inProcess := fs.Bool("overhead-in-process", false, "run the overhead scenario's engines and gateway in this process, not as their own")
	profileDir := fs.String("profile-dir", "", "write CPU and allocation profiles of the overhead scenario's processes here")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	opts := infbench.Options{Quick: *quick, Seed: *seed, ProfileDir: *profileDir}
	if !*inProcess {
		if exe, err := os.Executable(); err == nil {
			opts.Exe = exe
		}
	}
	if *scenarios != "" {
		opts.Scenarios = strings.Split(*scenarios, ",")
	}
	if *policies != "" {
		opts.Policies = strings.Split(*policies, ",")
	}
	if *output == cmdkit.Table {
		opts.Progress = stderr
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep, err := infbench.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "bench inference: %v\n", err)
		return 1
	}
	if err := cmdkit.Print(stdout, *output, rep, func(w io.Writer) error { writeText(w, rep); return nil }); err != nil {
		fmt.Fprintf(stderr, "bench inference: %v\n", err)
		return 1
	}
	if *failOnCheck {
		for _, c := range rep.Checks {
			if !c.Pass {
				return 1
			}
		}
	}
	return 0
}

func writeText(w io.Writer, rep infbench.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\trequests\tttft p50 ms\tttft p90 ms\tttft p99 ms\ttpot p50 ms\te2e p99 ms\tgoodput/s\tslo\tcache hit\tadded p99 ms\t")
	for _, r := range rep.Results {
		name := r.Scenario
		if r.Load != "" {
			name += " (" + r.Load + ")"
		}
		added := ""
		if r.Scenario == infbench.ScenarioOverhead {
			added = fmt.Sprintf("%.3f", r.AddedP99ms)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.2f\t%.0f%%\t%.0f%%\t%s\t\n",
			name, r.Policy, r.Requests, r.TTFTp50ms, r.TTFTp90ms, r.TTFTp99ms, r.TPOTp50ms, r.E2Ep99ms, r.Goodput, 100*r.SLOAttainment, 100*r.PrefixHitRate, added)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, c := range rep.Checks {
		mark := "PASS"
		if !c.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s  %s\n      %s\n", mark, c.Name, c.Detail)
	}
}
