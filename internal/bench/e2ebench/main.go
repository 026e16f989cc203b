package e2ebench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/base/cpuprof"
)

// Main is `gangway bench e2e [-o json] [--jobs 1000] [--gangs 100] [--nodes
// 16] ...`: it runs the benchmark and prints the result, a table or JSON, on
// stdout; progress goes to stderr. It returns the exit status: 0 when every
// job succeeded, 1 when the run failed, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: gangway bench e2e [-o json] [--jobs 1000] [--gangs 100] [--nodes 16] [flags]\n\n"+
			"Starts a server in this process and NODES agents with fake GPUs as subprocesses, runs\n"+
			"JOBS one-GPU jobs and then GANGS gangs of GANG-NODES nodes × GPUS-PER-NODE GPUs, and prints\n"+
			"jobs/s and submit→start latency per phase.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var cfg Config
	out := cmdkit.OutputFlag(fs)
	fs.IntVar(&cfg.Nodes, "nodes", 16, "emulated nodes (one agent process each)")
	fs.IntVar(&cfg.GPUsPerNode, "gpus-per-node", 8, "fake GPUs per node")
	fs.IntVar(&cfg.Jobs, "jobs", 1000, "one-GPU jobs in the first phase (0 skips it)")
	fs.IntVar(&cfg.Gangs, "gangs", 100, "gangs in the second phase (0 skips it)")
	fs.IntVar(&cfg.GangNodes, "gang-nodes", 2, "nodes per gang; each rank holds a whole node")
	fs.IntVar(&cfg.Warmup, "warmup", 20, "one-GPU jobs run before measuring")
	fs.IntVar(&cfg.Submitters, "submitters", 1, "concurrent submit clients")
	fs.IntVar(&cfg.NodeNice, "node-nice", 0, "nice value of the agents, their supervisors and ranks (the emulated nodes), 0..19")
	fs.BoolVar(&cfg.Array, "array", false, "also submit the one-GPU jobs as one job array (sbatch --array's equivalent)")
	fs.StringVar(&cfg.Output, "output", "keep", "ranks' output: keep (log files) or discard (as sbatch -o /dev/null)")
	command := fs.String("command", "true", "what each rank runs (split on spaces); with --driver docker, true means /gangway version")
	fs.StringVar(&cfg.Driver, "driver", DriverExec, "run the ranks as bare processes (exec) or each in a Docker container of an image made from this gangway (docker)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory (default: a temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the working directory (agent logs, etcd data)")
	tracefile := fs.String("trace", "", "write an execution trace of this process over the run to `file` (go tool trace)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this process (server, etcd, client) over the run to `file`")
	memprofile := fs.String("memprofile", "", "write an allocation profile of this process (what the run allocated, by call site) to `file`")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	cfg.Command = strings.Fields(*command)
	if len(cfg.Command) == 0 {
		fmt.Fprintln(stderr, "gangway bench e2e: --command is empty")
		return 2
	}
	if cfg.Driver != DriverExec && cfg.Driver != DriverDocker {
		fmt.Fprintf(stderr, "gangway bench e2e: --driver %q: want exec or docker\n", cfg.Driver)
		return 2
	}
	if cfg.Jobs == 0 && cfg.Gangs == 0 {
		fmt.Fprintln(stderr, "gangway bench e2e: --jobs and --gangs are both 0: nothing to measure")
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gangway bench e2e: %v\n", err)
		return 2
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "gangway bench e2e: --cpuprofile: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "gangway bench e2e: --cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *tracefile != "" {
		f, err := os.Create(*tracefile)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "gangway bench e2e: --trace: %v\n", err)
			return 1
		}
		defer f.Close()
		defer trace.Stop()
	}
	res, err := Run(ctx, cfg, stderr)
	if *memprofile != "" {
		if perr := cpuprof.WriteAllocs(*memprofile); perr != nil {
			fmt.Fprintf(stderr, "gangway bench e2e: --memprofile: %v\n", perr)
		}
	}
	if res != nil {
		_ = cmdkit.Print(stdout, *out, res, func(w io.Writer) error { PrintTable(w, res); return nil })
	}
	if err != nil {
		fmt.Fprintf(stderr, "gangway bench e2e: FAILED: %v\n", err)
		return 1
	}
	return 0
}

// PrintTable writes r for a person.
func PrintTable(w io.Writer, r *Result) {
	fmt.Fprintf(w, "gangway end to end: %d nodes × %d GPUs, %d submitter(s), %d warm-up jobs, setup %.1fs\n\n",
		r.Nodes, r.GPUsPerNode, r.Submitters, r.Warmup, r.SetupS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tjobs\tranks×GPUs\tok\tsubmit/s\twall s\tjobs/s\tstart p50 ms\tp90\tp99\tmax\tserver CPU s\tagents CPU s\tstore writes/job\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%d×%d\t%d\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			p.Name, p.Jobs, p.RanksPerJob, p.GPUsPerRank, p.Succeeded, p.SubmitPerS, p.WallS, p.JobsPerS,
			p.SubmitToStartP50Ms, p.SubmitToStartP90Ms, p.SubmitToStartP99Ms, p.SubmitToStartMaxMs, p.ServerCPUS, p.AgentsCPUS, float64(p.StoreWrites)/float64(max(p.Jobs, 1)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nmedians (ms): submit→placed, placed→last rank started, last rank exited→job done")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  %-7s %8.1f %8.1f %8.1f\n", p.Name, p.SubmitToPlacedP50Ms, p.PlacedToStartP50Ms, p.ExitToDoneP50Ms)
	}
}
