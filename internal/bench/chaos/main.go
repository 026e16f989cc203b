package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gangway/gangway/internal/base/cmdkit"
)

// spanFlag is a MIN-MAX duration flag.
type spanFlag struct{ s *Span }

func (f spanFlag) String() string {
	if f.s == nil {
		return ""
	}
	return f.s.String()
}

func (f spanFlag) Set(v string) error {
	s, err := ParseSpan(v)
	if err != nil {
		return err
	}
	*f.s = s
	return nil
}

// Main is `gangway chaos [flags]`: it runs the harness and prints the
// result on stdout, a table or JSON; progress goes to stderr. It returns
// 0 when the run was ok, 1 when not, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, out, code, ok := parseFlags(args, stderr)
	if !ok {
		return code
	}
	if cfg.Bin == "" {
		var err error
		if cfg.Bin, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "gangway chaos: find own executable: %v\n", err)
			return 1
		}
	}
	if cfg.Netns && os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "gangway chaos: network namespaces need root; run as root, or with --netns=false (no partitions)")
		return 2
	}
	res, err := Run(ctx, cfg, stderr)
	if res != nil {
		_ = cmdkit.Print(stdout, out, res, func(w io.Writer) error { PrintTable(w, res); return nil })
	}
	if err != nil {
		fmt.Fprintf(stderr, "gangway chaos: %v\n", err)
		return 1
	}
	if !res.OK {
		return 1
	}
	return 0
}

// parseFlags reads `gangway chaos`'s flags into a configuration, defaults
// filled and checked (but for Bin, which "" leaves to Main: this
// executable), and the output format. When !ok, code is the exit status
// and what was wrong has gone to stderr.
func parseFlags(args []string, stderr io.Writer) (cfg Config, out cmdkit.Format, code int, ok bool) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: gangway chaos [--faults 20] [--seed 1] [--replicas 3] [-o json] [flags]

Starts gangway's control plane as child processes (REPLICAS server
replicas, each with an embedded etcd member of one cluster, or one server),
AGENTS agents with fake GPUs, each in a network namespace of its own, and,
with ENGINES, an inference deployment of the engine simulator that a
client sends requests to through the replicas' gateways all along, each
retried within REQUEST-BUDGET. It runs a mix of jobs (the example Go
trainer with checkpoints, gangs of several sizes, arrays of short tasks,
bursts of submissions as the control plane is hit), every rank wrapped so
that it records its own start and exit, and meanwhile injects FAULTS faults
drawn from SEED: agent kill -9, agent and supervisor kill -9, host
partition, frozen agent; with one server, server kill -9 (down 2-30 s) and
server restart; with replicas, leader kill -9 (down 2-15 s), a follower's
kill -9 (its etcd member with it), the loss of a majority for 2-6 s, and a
rolling restart. Then it checks, from the ranks' records, that no
acknowledged job was lost or duplicated, no job ran in two attempts at once,
no rank of an attempt started twice, no rank died of a control-plane
fault, every job completed, every trainer's final loss equals an
uninterrupted run's, and no inference request failed within its budget;
and it measures detection (fault → node lost), recovery (fault → gang
running again) and failover (leader killed → another leads and takes a
write). Progress goes to stderr. Exit status 1 when any of that failed.
Needs root (or --netns=false).

Flags:
`)
		fs.PrintDefaults()
	}
	cfg.Plan = DefaultPlan
	outFlag := cmdkit.OutputFlag(fs)
	fs.IntVar(&cfg.Faults, "faults", 20, "faults to inject")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault plan and the job mix")
	fs.IntVar(&cfg.Replicas, "replicas", 3, "server replicas, each with an embedded etcd member: 1, 3 or 5")
	kinds := fs.String("kinds", "all", "comma-separated fault kinds: agent-kill, agent-supervisor-kill, partition, freeze, gpu-fault, server-kill, server-restart, leader-kill, etcd-member-kill, quorum-loss (all: what the replicas and --netns allow, server-kill only with one server)")
	fs.IntVar(&cfg.Agents, "agents", 4, "nodes (one agent process each)")
	fs.IntVar(&cfg.GPUs, "gpus", 8, "fake GPUs per node")
	engines := fs.Int("engines", -1, "replicas of an inference deployment a client sends requests to all along (-1: 2 with several server replicas, none with one; 0: none)")
	fs.DurationVar(&cfg.RequestBudget, "request-budget", 30*time.Second, "how long an inference request may be retried before it counts as failed")
	fs.BoolVar(&cfg.Netns, "netns", true, "run each agent in a network namespace host of its own (root and ip needed); false: all on loopback, no partitions")
	fs.DurationVar(&cfg.Duration, "duration", 0, "bound on the fault phase (default: sized to the plan)")
	fs.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "bound on the wait for every job to finish after the last fault")
	fs.Var(spanFlag{&cfg.Plan.Gap}, "gap", "pause before each fault, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.ServerDown}, "server-down", "how long a killed server stays down, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.ReplicaDown}, "replica-down", "how long a replica killed by leader-kill or etcd-member-kill stays down, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.QuorumLoss}, "quorum-loss", "how long quorum-loss keeps a majority of the replicas down, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.AgentDown}, "agent-down", "how long a killed agent stays down, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.Partition}, "partition", "how long a host stays cut off, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.Freeze}, "freeze", "how long an agent stays frozen, MIN-MAX")
	fs.DurationVar(&cfg.NodeTimeout, "node-timeout", 4500*time.Millisecond, "the server's --node-timeout (its default)")
	fs.DurationVar(&cfg.WaveEvery, "wave-every", 10*time.Second, "submit a wave of jobs this often during the fault phase")
	fs.IntVar(&cfg.TrainSteps, "steps", 300, "steps of each trainer job")
	fs.DurationVar(&cfg.StepDelay, "step-delay", 50*time.Millisecond, "the trainer's --step-delay")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory, kept (default: a temporary one, removed unless --keep)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary working directory")
	fs.StringVar(&cfg.Bin, "bin", "", "the gangway executable to run (default: this one)")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return cfg, "", code, false
	}
	if *kinds != "all" {
		k, err := ParseKinds(*kinds)
		if err != nil {
			fmt.Fprintf(stderr, "gangway chaos: --kinds: %v\n", err)
			return cfg, "", 2, false
		}
		cfg.Kinds = k
	}
	// Checked before Defaults, which reads 0 as one server.
	if err := checkReplicas(cfg.Replicas); err != nil {
		fmt.Fprintf(stderr, "gangway chaos: %v\n", err)
		return cfg, "", 2, false
	}
	cfg.Engines = *engines
	if cfg.Engines < 0 {
		cfg.Engines = 0
		if cfg.Replicas > 1 {
			cfg.Engines = 2
		}
	}
	cfg.Defaults()
	bin := cfg.Bin
	if bin == "" {
		cfg.Bin = "gangway" // for Validate; Main puts this executable's path
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gangway chaos: %v\n", err)
		return cfg, "", 2, false
	}
	cfg.Bin = bin
	return cfg, *outFlag, 0, true
}
