package schedbench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/scheduler"
)

// Main implements `gangway bench scheduler [flags]`. Figures are wall
// time; on Linux the same figures in the scheduling thread's CPU time
// follow, which a busy machine does not inflate. args excludes the
// command words. It returns the exit status: 0 on success, 2 for bad
// flags, 1 when the run fails.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("bench scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := cmdkit.OutputFlag(fs)
	trace := fs.String("trace", "", "Philly CSV to draw job sizes and durations from (default: shared/"+PhillyPath+" found above the working directory)")
	mode := fs.String("mode", cfg.Mode.String(), "scheduling mode: greedy, strict or backfill")
	strategy := fs.String("strategy", cfg.Strategy.String(), "placement strategy: topology, bestfit or consolidate")
	procs := fs.Int("procs", 1, "GOMAXPROCS during the run (the target is for one core)")
	compare := fs.Bool("compare", false, "also run the bestfit strategy on the same backlog and print both")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes in the cluster")
	fs.IntVar(&cfg.GPUsPerNode, "gpus-per-node", cfg.GPUsPerNode, "GPUs per node")
	fs.IntVar(&cfg.NodesPerLeaf, "nodes-per-leaf", cfg.NodesPerLeaf, "nodes under each leaf switch")
	fs.IntVar(&cfg.LeavesPerSpine, "leaves-per-spine", cfg.LeavesPerSpine, "leaves under each spine")
	fs.IntVar(&cfg.Rails, "rails", cfg.Rails, "network rails")
	fs.IntVar(&cfg.Backlog, "backlog", cfg.Backlog, "jobs waiting at the start")
	fs.Float64Var(&cfg.GangShare, "gang-share", cfg.GangShare, "share of the backlog that are gangs of 64-1,024 GPUs")
	fs.IntVar(&cfg.Queues, "queues", cfg.Queues, "tenant queues")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed for the backlog")
	fs.IntVar(&cfg.BatchGPUs, "batch-gpus", cfg.BatchGPUs, "GPUs freed between passes (0: 2% of the cluster)")
	fs.IntVar(&cfg.MaxPasses, "max-passes", cfg.MaxPasses, "stop after this many passes (0: until every job has started)")
	fs.BoolVar(&cfg.GangLevels, "gang-levels", cfg.GangLevels, "gangs that fit a leaf require one leaf, bigger ones one spine")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	var err error
	if cfg.Mode, err = scheduler.ParseMode(*mode); err != nil {
		fmt.Fprintf(stderr, "gangway bench scheduler: -mode: %v\n", err)
		return 2
	}
	if cfg.Strategy, err = scheduler.ParseStrategy(*strategy); err != nil {
		fmt.Fprintf(stderr, "gangway bench scheduler: -strategy: %v\n", err)
		return 2
	}
	path := *trace
	if path == "" {
		wd, err := os.Getwd()
		if err == nil {
			path, err = FindPhilly(wd)
		}
		if err != nil {
			fmt.Fprintf(stderr, "gangway bench scheduler: %v\n", err)
			return 1
		}
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "gangway bench scheduler: %v\n", err)
		return 1
	}
	cfg.Trace, err = LoadTrace(f, filepath.Base(path))
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "gangway bench scheduler: %v\n", err)
		return 1
	}
	cfg.TraceName = filepath.Base(path)

	prev := runtime.GOMAXPROCS(*procs)
	defer runtime.GOMAXPROCS(prev)
	results := map[string]Result{}
	names := []string{cfg.Strategy.String()}
	if *compare && cfg.Strategy != scheduler.BestFit {
		names = append(names, scheduler.BestFit.String())
	}
	for _, name := range names {
		c := cfg
		c.Strategy, _ = scheduler.ParseStrategy(name)
		runtime.GC()
		res, err := Run(ctx, c)
		if err != nil {
			fmt.Fprintf(stderr, "gangway bench scheduler: %v\n", err)
			return 1
		}
		results[name] = res
	}
	var v any = results[names[0]]
	if len(names) > 1 {
		v = results
	}
	err = cmdkit.Print(stdout, *out, v, func(w io.Writer) error {
		for _, name := range names {
			writeText(w, results[name])
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "gangway bench scheduler: %v\n", err)
		return 1
	}
	return 0
}

func writeText(w io.Writer, r Result) {
	c, b := r.Cluster, r.Backlog
	fmt.Fprintf(w, "scheduler benchmark (%s, %s, GOMAXPROCS %d)\n", r.Mode, r.Strategy, r.GoMaxProcs)
	fmt.Fprintf(w, "  cluster   %d nodes × %d GPUs = %d GPUs; %d leaves of %d nodes, %d spines, %d rails\n",
		c.Nodes, c.GPUsPerNode, c.GPUs, c.Leaves, c.NodesPerLeaf, c.Spines, c.Rails)
	sizes := make([]int, 0, len(b.Sizes))
	for s := range b.Sizes {
		sizes = append(sizes, s)
	}
	sort.Ints(sizes)
	var mix []string
	for _, s := range sizes {
		mix = append(mix, fmt.Sprintf("%d×%d", b.Sizes[s], s))
	}
	fmt.Fprintf(w, "  backlog   %d jobs from %s (%d rows), %d gangs, %d queues; jobs×GPUs: %s\n",
		b.Jobs, b.Trace, b.TraceJobs, b.Gangs, b.Queues, strings.Join(mix, " "))
	fmt.Fprintf(w, "  passes    %d (drained: %v), %d decisions, %d placements, %d preemptions, %d reservations, mean utilization %.1f%%\n",
		r.Passes, r.Drained, r.Decisions, r.Placements, r.Preemptions, r.Reserved, 100*r.MeanUtilization)
	fmt.Fprintf(w, "  speed     %.0f placements/s over %.2f s of scheduler time\n", r.PlacementsPerS, r.SchedulerS)
	fmt.Fprintf(w, "  decision  p50 %.4f ms, p99 %.4f ms, max %.3f ms; placed p50 %.4f ms, p99 %.4f ms\n",
		r.P50DecisionMs, r.P99DecisionMs, r.MaxDecisionMs, r.P50PlacedMs, r.P99PlacedMs)
	fmt.Fprintf(w, "  1024 GPUs p99 %.4f ms (placed: p99 %.4f ms, %d gangs)\n", r.P99Gang1024Ms, r.P99Gang1024PlacedMs, r.Gangs1024)
	if c := r.CPU; c != nil {
		fmt.Fprintf(w, "  cpu time  %.0f placements/s over %.2f s; decision p50 %.4f ms, p99 %.4f ms, max %.3f ms; placed p99 %.4f ms\n",
			c.PlacementsPerS, c.SchedulerS, c.P50DecisionMs, c.P99DecisionMs, c.MaxDecisionMs, c.P99PlacedMs)
		fmt.Fprintf(w, "            1024 GPUs p99 %.4f ms (placed: p99 %.4f ms)\n", c.P99Gang1024Ms, c.P99Gang1024PlacedMs)
	}
	fmt.Fprintf(w, "  new pass  p50 %.3f ms, p99 %.3f ms\n", r.P50SnapshotMs, r.P99SnapshotMs)
	fmt.Fprintf(w, "  heap      peak %.1f MiB\n", float64(r.PeakHeapBytes)/(1<<20))
	fmt.Fprintf(w, "  shape     multi-node gangs span %.2f leaves, %.2f spines on average\n", r.MeanLeaves, r.MeanSpines)
	fmt.Fprintf(w, "  fragmentation: head blocked with enough GPUs free in %.1f%% of passes; %d waiting decisions had GPUs in the wrong shape;\n",
		100*r.HeadBlockedShare, r.TopologyBlocked)
	fmt.Fprintf(w, "            after a pass on average %.0f idle nodes, %.1f idle leaves, %.1f%% of free GPUs on partly used nodes\n",
		r.MeanWholeFreeNodes, r.MeanWholeFreeLeaves, 100*r.MeanStrandedShare)
}
