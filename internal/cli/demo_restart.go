package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/bench/chaos"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// ServerRestartSummary is what `gangway demo --scenario server-restart -o
// json` prints.
type ServerRestartSummary struct {
	// RanksKilled counts the job's rank processes that ended otherwise
	// than by finishing, from the ranks' own records: what the outage
	// cost. DESIGN.md's failure model promises 0.
	RanksKilled int `json:"ranks_killed"`
	// DowntimeS: server killed → answering again.
	DowntimeS          float64 `json:"downtime_s"`
	KilledAtStep       int64   `json:"killed_at_step"`
	FinalLoss          float64 `json:"final_loss"`
	ReferenceFinalLoss float64 `json:"reference_final_loss"`
	LossRelDiff        float64 `json:"loss_rel_diff"`
	Tolerance          float64 `json:"tolerance"`
	Attempts           int     `json:"attempts"`
	TotalS             float64 `json:"total_s"`
	OK                 bool    `json:"ok"`
}

// errRanksKilled is the server-restart scenario's failure when ranks died
// of the outage; its other failures are other errors.
var errRanksKilled = errors.New("rank processes died while the server was down")

func printRestartSummary(w io.Writer, s *ServerRestartSummary) {
	verdict := "OK"
	if !s.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, `
Summary (%s)
  server down for           %.2f s   (SIGKILL → answering again on the same data directory)
  killed at step            %d
  rank processes killed     %d       (from the ranks' own records; want 0: ranks outlive the control plane)
  attempts                  %d
  final loss                %.12g
  reference final loss      %.12g   (same job, no failure)
  relative difference       %.3g     (trainer tolerance %.0g)
  total                     %.1f s
`, verdict, s.DowntimeS, s.KilledAtStep, s.RanksKilled, s.Attempts, s.FinalLoss, s.ReferenceFinalLoss, s.LossRelDiff, s.Tolerance, s.TotalS)
}

// demoServerRestart runs the server-restart scenario: the server is a
// child process (`gangway server`), SIGKILLed for cfg.downtime while the
// job trains, then started again on the same data directory. It returns
// the summary; err joins what did not happen (errRanksKilled among them
// when ranks died).
func demoServerRestart(ctx context.Context, cfg demoConfig, w io.Writer, keep bool) (*ServerRestartSummary, error) {
	run, err := newDemoRun(w, keep)
	if err != nil {
		return nil, err
	}
	defer run.close()
	start, say, exe, dir := run.start, run.say, run.exe, run.dir
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rankLog := filepath.Join(dir, "ranks.jsonl")

	// Control plane, as a process of its own.
	srv, err := chaos.NewServerProc(exe, filepath.Join(dir, "server"), filepath.Join(dir, "server.log"), "127.0.0.1", server.DefaultNodeTimeout)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	defer srv.Stop(15 * time.Second)
	admin := srv.Admin()
	c := srv.Client()
	defer c.CloseIdleConnections()
	say("control plane up at %s: `gangway server` as a process of its own (pid %d), embedded etcd in %s",
		admin.Server, srv.PID(), filepath.Join(dir, "server"))
	jt, err := c.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: cfg.nodes, TTL: api.Duration(10 * time.Minute), Description: "demo agents"})
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	agents, err := startDemoAgents(exe, dir, admin.Server, admin.CAFile, jt.Secret, cfg)
	defer func() {
		for _, a := range agents {
			a.stop()
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := waitDemoNodes(ctx, c, cfg); err != nil {
		return nil, err
	}
	say("%d nodes ready, each with %d fake H100-SXM-80GB GPUs", cfg.nodes, cfg.gpus)

	j, err := c.Submit(ctx, demoTrainSpec(exe, "demo-train", cfg, cfg.stepDelay, rankLog))
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	say("submitted job %s: the example Go trainer, %d ranks, %d per node, %d steps, checkpoint every 20; each rank records its own start and exit",
		j.ID, cfg.ranks, cfg.perNode, cfg.steps)

	sum := &ServerRestartSummary{Tolerance: trainer.Tolerance}
	var (
		killed     bool
		lastStep   int64 = -1
		lastCk     int64 = -1
		seenAtt    int
		finalPhase api.JobPhase
		reason     string
	)
	err = wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		d, err := c.Job(ctx, j.ID)
		if err != nil {
			return false, nil
		}
		job := &d.Job
		if a := job.Status.Current(); a != nil && a.Number > seenAtt && !a.RunningAt.IsZero() {
			seenAtt = a.Number
			resume := "from scratch"
			if a.ResumeFrom != nil {
				resume = fmt.Sprintf("resuming from the checkpoint of step %d", a.ResumeFrom.Step)
			}
			say("attempt %d running on %s (%s)", a.Number, strings.Join(a.Nodes(), ", "), resume)
		}
		if n := len(d.Checkpoints); n > 0 && d.Checkpoints[n-1].Step > lastCk {
			lastCk = d.Checkpoints[n-1].Step
		}
		if p := d.Progress; p != nil && p.Latest.Step != lastStep && p.Latest.Loss != nil {
			if p.Latest.Step/50 != lastStep/50 || p.Latest.Final {
				say("  attempt %d  step %4d  loss %.6f  newest checkpoint: step %d", p.Latest.Attempt, p.Latest.Step, *p.Latest.Loss, lastCk)
			}
			lastStep = p.Latest.Step
		}
		// Kill the server part-way, once a checkpoint exists.
		if !killed && lastStep >= int64(cfg.killAtStep) && lastCk > 0 {
			killed = true
			sum.KilledAtStep = lastStep
			before := aliveRanks(rankLog, j.ID)
			say("killing the server (SIGKILL to pid %d) for %s at step %d; %d rank processes alive", srv.PID(), cfg.downtime, lastStep, before)
			killAt := time.Now()
			srv.Kill()
			// Watch the ranks while the server is away.
			tick := time.NewTicker(100 * time.Millisecond)
			for n := before; time.Since(killAt) < cfg.downtime; {
				select {
				case <-ctx.Done():
					tick.Stop()
					return false, ctx.Err()
				case <-tick.C:
				}
				if m := aliveRanks(rankLog, j.ID); m != n {
					say("  %.1fs into the outage: %d of %d rank processes alive", time.Since(killAt).Seconds(), m, before)
					n = m
				}
			}
			tick.Stop()
			if err := srv.Start(ctx); err != nil {
				return false, fmt.Errorf("start the server again: %w", err)
			}
			sum.DowntimeS = time.Since(killAt).Seconds()
			say("server answering again (pid %d, same data directory) after %.2fs", srv.PID(), sum.DowntimeS)
			return false, nil
		}
		if job.Status.Phase.Final() {
			finalPhase, reason = job.Status.Phase, job.Status.Reason
			sum.Attempts = len(job.Status.Attempts)
			say("job %s %s after %d attempts", job.ID, strings.ToLower(string(job.Status.Phase)), sum.Attempts)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return sum, fmt.Errorf("waiting for the job: %w", err)
	}
	if finalPhase != api.JobSucceeded {
		return sum, fmt.Errorf("job ended %s: %s", finalPhase, reason)
	}
	o, err := run.outcome(ctx, c, cfg, j.ID, rankLog)
	sum.RanksKilled, sum.FinalLoss, sum.ReferenceFinalLoss, sum.LossRelDiff = o.ranksKilled, o.final, o.ref, o.relDiff
	if err != nil {
		return sum, err
	}
	sum.TotalS = time.Since(start).Seconds()

	var problems []error
	if !killed {
		problems = append(problems, errors.New("the server was never killed"))
	}
	problems = append(problems, o.problems()...)
	if len(problems) > 0 {
		return sum, errors.Join(problems...)
	}
	sum.OK = true
	return sum, nil
}

// aliveRanks counts the job's rank processes that recorded a start and no
// exit and are still alive.
func aliveRanks(rankLog, job string) int {
	ended := map[int]bool{}
	recs := mustRecords(rankLog)
	for _, r := range recs {
		if r.Job == job && r.Ev == chaos.EvExit {
			ended[r.PID] = true
		}
	}
	n := 0
	for _, r := range recs {
		if r.Job == job && r.Ev == chaos.EvStart && !ended[r.PID] && syscall.Kill(r.PID, 0) == nil {
			n++
		}
	}
	return n
}

// mustRecords reads the ranks' records; a log not there yet has none.
func mustRecords(path string) []chaos.Record {
	recs, _ := chaos.ReadRecords(path)
	return recs
}
