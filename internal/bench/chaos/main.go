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
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: gangway chaos [--faults 20] [--seed 1] [-o json] [flags]

Starts a gangway server (a child process with its own data directory) and
AGENTS agents with fake GPUs, each in a network namespace of its own, runs a
mix of jobs (the example Go trainer with checkpoints, gangs of several sizes,
arrays of short tasks, bursts of submissions as the server stops), every
rank wrapped so that it records its own start and exit, and meanwhile
injects FAULTS faults drawn from SEED: agent kill -9, agent and supervisor
kill -9, host partition, frozen agent, server kill -9 (down 2-30 s) and
server restart. Then it checks, from the ranks' records, that no
acknowledged job was lost or duplicated, no job ran in two attempts at once,
no rank of an attempt started twice, no rank died of a server outage, every
job completed, and every trainer's final loss equals an uninterrupted run's;
and it measures detection (fault → node lost) and recovery (fault → gang
running again). Progress goes to stderr. Exit status 1 when any of that
failed. Needs root (or --netns=false).

Flags:
`)
		fs.PrintDefaults()
	}
	var cfg Config
	cfg.Plan = DefaultPlan
	out := cmdkit.OutputFlag(fs)
	fs.IntVar(&cfg.Faults, "faults", 20, "faults to inject")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault plan and the job mix")
	kinds := fs.String("kinds", "all", "comma-separated fault kinds: agent-kill, agent-supervisor-kill, partition, freeze, server-kill, server-restart")
	fs.IntVar(&cfg.Agents, "agents", 4, "nodes (one agent process each)")
	fs.IntVar(&cfg.GPUs, "gpus", 8, "fake GPUs per node")
	fs.BoolVar(&cfg.Netns, "netns", true, "run each agent in a network namespace host of its own (root and ip needed); false: all on loopback, no partitions")
	fs.DurationVar(&cfg.Duration, "duration", 0, "bound on the fault phase (default: sized to the plan)")
	fs.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "bound on the wait for every job to finish after the last fault")
	fs.Var(spanFlag{&cfg.Plan.Gap}, "gap", "pause before each fault, MIN-MAX")
	fs.Var(spanFlag{&cfg.Plan.ServerDown}, "server-down", "how long a killed server stays down, MIN-MAX")
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
		return code
	}
	k, err := ParseKinds(*kinds)
	if err != nil {
		fmt.Fprintf(stderr, "gangway chaos: --kinds: %v\n", err)
		return 2
	}
	cfg.Kinds = k
	if !cfg.Netns && *kinds == "all" {
		cfg.Kinds = without(cfg.Kinds, Partition)
	}
	if cfg.Bin == "" {
		if cfg.Bin, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "gangway chaos: find own executable: %v\n", err)
			return 1
		}
	}
	if cfg.Netns && os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "gangway chaos: network namespaces need root; run as root, or with --netns=false (no partitions)")
		return 2
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gangway chaos: %v\n", err)
		return 2
	}
	res, err := Run(ctx, cfg, stderr)
	if res != nil {
		_ = cmdkit.Print(stdout, *out, res, func(w io.Writer) error { PrintTable(w, res); return nil })
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

func without(ks []Kind, k Kind) []Kind {
	var out []Kind
	for _, x := range ks {
		if x != k {
			out = append(out, x)
		}
	}
	return out
}
