package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Tolerance is the relative difference allowed between the final losses of
// two runs with the same flags and the same WORLD_SIZE, one of them killed
// and resumed from a checkpoint any number of times. Checkpoints store
// every float bit for bit and the all-reduce adds in a fixed order, so in
// practice the two are bitwise equal; the slack only covers a platform
// whose math library rounds differently between the two processes.
const Tolerance = 1e-9

// WorldSizeTolerance is the relative difference allowed between the final
// losses of runs that differ only in WORLD_SIZE. Each rank sums its shard
// of the global batch and the ring adds the partial sums, so another world
// size adds the same numbers in another order; the rounding differences
// (an ulp or so per step) can grow through training. Measured with the
// default flags: at most 3e-16 after 300 steps for W = 2, 3, 4, 8 and
// 8e-16 after 2000 steps for W = 3; the bound leaves six orders of
// magnitude for other flags.
const WorldSizeTolerance = 1e-9

// Exit codes of Main.
const (
	ExitOK     = 0 // training finished
	ExitFailed = 1 // training failed or was stopped (SIGTERM, ctx cancelled, peer lost)
	ExitUsage  = 2 // bad flags or a bad launch environment
)

// Main runs one rank of the example trainer. args are the flags (without
// the program name, see the package README), env reads the launch
// contract's variables (os.Getenv in production). It writes human-readable
// lines to stdout (every rank: "resumed from step N"; rank 0: periodic
// losses, checkpoints and a final "final_loss=<value>") and errors to stderr, and returns an exit
// code: ExitOK, ExitFailed or ExitUsage.
//
// Main blocks until training ends or ctx is cancelled; cancellation (the
// caller's SIGTERM handler) aborts even a blocked all-reduce and returns
// ExitFailed. While it runs, SIGUSR1 makes rank 0 write a checkpoint at the
// next step boundary.
func Main(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "train-example: %v\n", err)
		return ExitUsage
	}
	l, err := parseLaunch(env)
	if err != nil {
		fmt.Fprintf(stderr, "train-example: %v\n", err)
		return ExitUsage
	}
	if cfg.Batch < l.WorldSize {
		fmt.Fprintf(stderr, "train-example: --batch %d is smaller than WORLD_SIZE=%d; every rank needs at least one example per step\n", cfg.Batch, l.WorldSize)
		return ExitUsage
	}
	ckptReq := make(chan struct{}, 1)
	stop := notifyCheckpoint(ckptReq)
	defer stop()
	if err := train(ctx, cfg, l, stdout, ckptReq); err != nil {
		fmt.Fprintf(stderr, "train-example: rank %d: %v\n", l.Rank, err)
		return ExitFailed
	}
	return ExitOK
}

// progressLine is one line of $GANGWAY_PROGRESS_FILE.
type progressLine struct {
	Step   int      `json:"step"`
	Loss   *float64 `json:"loss,omitempty"`
	Tokens int64    `json:"tokens,omitempty"` // examples seen so far by all ranks
	Final  bool     `json:"final,omitempty"`
	// ComputeS is this rank's own work per step (its share of the batch,
	// before the all-reduce) since its previous line, in seconds.
	ComputeS float64 `json:"computeS,omitempty"`
}

// train runs the training loop; ckptReq carries "checkpoint now" requests.
func train(ctx context.Context, cfg config, l launch, stdout io.Writer, ckptReq <-chan struct{}) error {
	leader := l.Rank == 0
	say := func(format string, a ...any) {
		if leader {
			fmt.Fprintf(stdout, format+"\n", a...)
		}
	}
	m := mlp{hidden: cfg.Hidden}
	st := state{Seed: cfg.Seed, Params: m.init(cfg.Seed), Velocity: make([]float64, m.numParams())}
	if l.ResumeFrom != "" {
		r, err := readCheckpoint(l.ResumeFrom)
		if err != nil {
			return fmt.Errorf("resume (GANGWAY_RESUME_FROM): %w", err)
		}
		if r.Seed != cfg.Seed {
			return fmt.Errorf("resume from %s: it was written with --seed %d, this run has --seed %d", l.ResumeFrom, r.Seed, cfg.Seed)
		}
		if len(r.Params) != m.numParams() {
			return fmt.Errorf("resume from %s: it holds %d parameters, --hidden %d needs %d", l.ResumeFrom, len(r.Params), cfg.Hidden, m.numParams())
		}
		if r.Step > cfg.Steps {
			return fmt.Errorf("resume from %s: its step %d is past --steps %d", l.ResumeFrom, r.Step, cfg.Steps)
		}
		st = r
		fmt.Fprintf(stdout, "resumed from step %d (%s)\n", st.Step, l.ResumeFrom) // every rank says so
	}
	if leader && l.CheckpointDir == "" {
		say("GANGWAY_CHECKPOINT_DIR is not set: no checkpoints will be written")
	}

	var progress *os.File
	if (leader || cfg.TimingEvery > 0) && l.ProgressFile != "" {
		f, err := os.OpenFile(l.ProgressFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("open GANGWAY_PROGRESS_FILE: %w", err)
		}
		defer f.Close()
		progress = f
	}

	start := time.Now()
	rg, err := rendezvous(ctx, l, cfg.RendezvousTimeout, cfg.IOTimeout)
	if err != nil {
		return err
	}
	defer rg.close()
	say("rank 0 of %d: ring ready after %v; %d parameters, global batch %d, steps %d..%d",
		l.WorldSize, time.Since(start).Round(time.Millisecond), m.numParams(), cfg.Batch, st.Step+1, cfg.Steps)

	d := newDataset(cfg.Seed)
	order := &batchOrder{seed: cfg.Seed}
	scratch := m.scratch()
	buf := make([]float64, m.numParams()+1) // gradient, then loss
	checkpoint := func() error {
		if l.CheckpointDir == "" {
			say("checkpoint requested at step %d, but GANGWAY_CHECKPOINT_DIR is not set", st.Step)
			return nil
		}
		dir, already, err := writeCheckpoint(l.CheckpointDir, st, checkpointMeta{
			Format: "gangway-train-example/1", Step: st.Step, Loss: st.Loss, Seed: st.Seed,
			Params: len(st.Params), WorldSize: l.WorldSize, JobID: l.JobID, Attempt: l.Attempt,
		})
		if err != nil {
			return err
		}
		if already {
			say("checkpoint step %d already committed at %s", st.Step, dir)
		} else {
			say("checkpoint step %d committed at %s", st.Step, dir)
		}
		return nil
	}
	var work time.Duration // own work since the last line
	workSteps := 0
	writeProgress := func(final bool) error {
		if progress == nil {
			return nil
		}
		line := progressLine{Step: st.Step}
		if workSteps > 0 {
			line.ComputeS = work.Seconds() / float64(workSteps)
			work, workSteps = 0, 0
		}
		if leader {
			loss := st.Loss
			line.Loss, line.Tokens, line.Final = &loss, int64(st.Step)*int64(cfg.Batch), final
		}
		b, err := json.Marshal(line)
		if err != nil {
			return err
		}
		if _, err := progress.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("write GANGWAY_PROGRESS_FILE: %w", err)
		}
		return nil
	}

	resumedAtEnd := st.Step == cfg.Steps
	for st.Step < cfg.Steps {
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("stopped after step %d: %w", st.Step, err)
		}
		step := st.Step + 1
		began := time.Now()
		m.localGrad(st.Params, buf, d, order, step, cfg.Batch, l.Rank, l.WorldSize, scratch)
		if cfg.SlowBy > 0 && slowNode(cfg.SlowFile, l.Node) {
			time.Sleep(cfg.SlowBy)
		}
		work += time.Since(began)
		workSteps++
		if err := rg.allReduce(ctx, buf); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		sgdMomentum(st.Params, st.Velocity, buf[:m.numParams()], cfg.LR, cfg.Momentum)
		st.Step, st.Loss = step, buf[m.numParams()]

		last := step == cfg.Steps
		if leader {
			requested := false
			select {
			case <-ckptReq:
				requested = true
			default:
			}
			if requested || last || (cfg.CheckpointEvery > 0 && step%cfg.CheckpointEvery == 0) {
				if err := checkpoint(); err != nil {
					return err
				}
			}
			if err := writeProgress(last); err != nil {
				return err
			}
			if step%cfg.LogEvery == 0 || last {
				say("step %d/%d loss %.6f", step, cfg.Steps, st.Loss)
			}
		} else if cfg.TimingEvery > 0 && step%cfg.TimingEvery == 0 {
			if err := writeProgress(false); err != nil {
				return err
			}
		}
		if cfg.StepDelay > 0 && !last {
			t := time.NewTimer(cfg.StepDelay)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
	if resumedAtEnd {
		// Nothing was left to train, but the run still ends with a final
		// progress line.
		if err := writeProgress(true); err != nil {
			return err
		}
	}
	say("final_loss=%s", strconv.FormatFloat(st.Loss, 'g', -1, 64))
	return nil
}

// slowNode reports whether file names node on one of its lines.
func slowNode(file, node string) bool {
	b, err := os.ReadFile(file)
	if err != nil || node == "" {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == node {
			return true
		}
	}
	return false
}
