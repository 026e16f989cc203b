package trainer

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// config is the trainer's command line after validation.
type config struct {
	Steps             int           // total optimizer steps; a resumed run stops at the same step
	Batch             int           // global batch, split across ranks
	Hidden            int           // hidden units of the MLP
	LR                float64       // learning rate
	Momentum          float64       // SGD momentum coefficient
	Seed              uint64        // data set, initial weights and batch order
	CheckpointEvery   int           // checkpoint every K steps; 0 disables periodic checkpoints
	LogEvery          int           // print a stdout line every K steps
	StepDelay         time.Duration // sleep after each step, so demos run long enough to kill
	RendezvousTimeout time.Duration // give up rendezvous after this long
	IOTimeout         time.Duration // a ring peer silent this long fails the step
	TimingEvery       int           // every rank writes a timing progress line every K steps
	SlowFile          string        // ranks on a node named in this file do SlowBy more work per step
	SlowBy            time.Duration
}

// parseFlags parses args (without the program name). Errors name the flag;
// flag.ErrHelp is returned for -h.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("train-example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Steps, "steps", 300, "total number of training steps")
	fs.IntVar(&c.Batch, "batch", 256, "global batch size (examples per step, summed over all ranks)")
	fs.IntVar(&c.Hidden, "hidden", 128, "hidden units of the two-layer MLP")
	fs.Float64Var(&c.LR, "lr", 0.05, "learning rate")
	fs.Float64Var(&c.Momentum, "momentum", 0.9, "SGD momentum in [0, 1)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the synthetic data set, initial weights and batch order")
	fs.IntVar(&c.CheckpointEvery, "checkpoint-every", 20, "write a checkpoint every K steps (rank 0; 0 = only at the end and on SIGUSR1)")
	fs.IntVar(&c.LogEvery, "log-every", 10, "print a progress line on stdout every K steps (rank 0)")
	fs.DurationVar(&c.StepDelay, "step-delay", 0, "sleep this long after every step (for demos)")
	fs.IntVar(&c.TimingEvery, "timing-every", 10, "every rank writes its own work per step (computeS, for the straggler check) to its progress file every K steps; 0: none")
	fs.StringVar(&c.SlowFile, "slow-file", "", "ranks whose node (GANGWAY_NODE) this file names, once it exists, work --slow-by longer per step: a straggler made at run time, for demos")
	fs.DurationVar(&c.SlowBy, "slow-by", 0, "see --slow-file")
	fs.DurationVar(&c.RendezvousTimeout, "rendezvous-timeout", 60*time.Second, "give up if the ranks have not all met within this time")
	fs.DurationVar(&c.IOTimeout, "io-timeout", 30*time.Second, "fail a step when a ring peer sends nothing for this long")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: the trainer takes only flags", fs.Arg(0))
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.Steps <= 0 {
		errs = append(errs, fmt.Errorf("--steps must be positive, got %d", c.Steps))
	}
	if c.Batch <= 0 {
		errs = append(errs, fmt.Errorf("--batch must be positive, got %d", c.Batch))
	}
	if c.Hidden <= 0 || c.Hidden > 4096 {
		errs = append(errs, fmt.Errorf("--hidden must be in [1, 4096], got %d", c.Hidden))
	}
	if !(c.LR > 0) || c.LR > 10 {
		errs = append(errs, fmt.Errorf("--lr must be in (0, 10], got %v", c.LR))
	}
	if !(c.Momentum >= 0 && c.Momentum < 1) {
		errs = append(errs, fmt.Errorf("--momentum must be in [0, 1), got %v", c.Momentum))
	}
	if c.TimingEvery < 0 {
		errs = append(errs, fmt.Errorf("--timing-every must be >= 0, got %d", c.TimingEvery))
	}
	if c.SlowBy < 0 || (c.SlowBy > 0) != (c.SlowFile != "") {
		errs = append(errs, fmt.Errorf("--slow-file and --slow-by go together, with a positive --slow-by (got %q, %s)", c.SlowFile, c.SlowBy))
	}
	if c.CheckpointEvery < 0 {
		errs = append(errs, fmt.Errorf("--checkpoint-every must be >= 0, got %d", c.CheckpointEvery))
	}
	if c.LogEvery <= 0 {
		errs = append(errs, fmt.Errorf("--log-every must be positive, got %d", c.LogEvery))
	}
	if c.StepDelay < 0 {
		errs = append(errs, fmt.Errorf("--step-delay must be >= 0, got %v", c.StepDelay))
	}
	if c.RendezvousTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--rendezvous-timeout must be positive, got %v", c.RendezvousTimeout))
	}
	if c.IOTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--io-timeout must be positive, got %v", c.IOTimeout))
	}
	return errors.Join(errs...)
}

// launch is what gangway's launch contract tells this rank.
type launch struct {
	Rank, WorldSize int
	LocalRank       int
	MasterAddr      string // host of rank 0's rendezvous listener
	MasterPort      string
	NodeAddr        string // this node's address that other ranks can reach
	JobID           string
	Attempt         int
	CheckpointDir   string // "" disables checkpoints
	ResumeFrom      string // "" starts from scratch
	ProgressFile    string // "" disables progress lines
	Node            string // the node's name (GANGWAY_NODE)
}

// parseLaunch reads the launch contract. Unset RANK and WORLD_SIZE mean a
// single-process run, so the trainer also runs by hand.
func parseLaunch(env func(string) string) (launch, error) {
	l := launch{
		MasterAddr:    env("MASTER_ADDR"),
		MasterPort:    env("MASTER_PORT"),
		NodeAddr:      env("GANGWAY_NODE_ADDR"),
		JobID:         env("GANGWAY_JOB_ID"),
		CheckpointDir: env("GANGWAY_CHECKPOINT_DIR"),
		ResumeFrom:    env("GANGWAY_RESUME_FROM"),
		ProgressFile:  env("GANGWAY_PROGRESS_FILE"),
		Node:          env("GANGWAY_NODE"),
	}
	if l.NodeAddr == "" {
		l.NodeAddr = "127.0.0.1"
	}
	var errs []error
	intVar := func(name string, dst *int, def, min int) {
		v := env(name)
		if v == "" {
			*dst = def
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			errs = append(errs, fmt.Errorf("environment %s=%q: want an integer >= %d", name, v, min))
			return
		}
		*dst = n
	}
	intVar("RANK", &l.Rank, 0, 0)
	intVar("WORLD_SIZE", &l.WorldSize, 1, 1)
	intVar("LOCAL_RANK", &l.LocalRank, 0, 0)
	intVar("GANGWAY_ATTEMPT", &l.Attempt, 1, 1)
	if len(errs) == 0 && l.Rank >= l.WorldSize {
		errs = append(errs, fmt.Errorf("environment RANK=%d is not below WORLD_SIZE=%d", l.Rank, l.WorldSize))
	}
	if l.WorldSize > 1 {
		if l.MasterAddr == "" {
			errs = append(errs, fmt.Errorf("environment MASTER_ADDR is empty; it is required when WORLD_SIZE=%d > 1", l.WorldSize))
		}
		if p, err := strconv.Atoi(l.MasterPort); err != nil || p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("environment MASTER_PORT=%q: want a TCP port in [1, 65535]", l.MasterPort))
		}
		if ip := net.ParseIP(l.NodeAddr); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("environment GANGWAY_NODE_ADDR=%q: want an IP address other ranks can reach", l.NodeAddr))
		}
	}
	return l, errors.Join(errs...)
}

// masterHostPort is rank 0's rendezvous address.
func (l launch) masterHostPort() string { return net.JoinHostPort(l.MasterAddr, l.MasterPort) }
