package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/bench/chaos"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// LeaderFailoverSummary is what `gangway demo --scenario leader-failover
// -o json` prints.
type LeaderFailoverSummary struct {
	// FailoverS: the leading replica killed → another replica leads.
	FailoverS float64 `json:"failover_s"`
	// RanksKilled counts the job's rank processes that ended otherwise
	// than by finishing, from the ranks' own records.
	RanksKilled        int     `json:"ranks_killed"`
	KilledReplica      string  `json:"killed_replica"`
	NewLeader          string  `json:"new_leader"`
	KilledAtStep       int64   `json:"killed_at_step"`
	FinalLoss          float64 `json:"final_loss"`
	ReferenceFinalLoss float64 `json:"reference_final_loss"`
	LossRelDiff        float64 `json:"loss_rel_diff"`
	Tolerance          float64 `json:"tolerance"`
	Attempts           int     `json:"attempts"`
	TotalS             float64 `json:"total_s"`
	OK                 bool    `json:"ok"`
}

func printFailoverSummary(w io.Writer, s *LeaderFailoverSummary) {
	verdict := "OK"
	if !s.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, `
Summary (%s)
  new leader after          %.2f s   (leader %s killed → %s leads; target 5 s)
  killed at step            %d
  rank processes killed     %d       (from the ranks' own records; want 0)
  attempts                  %d
  final loss                %.12g
  reference final loss      %.12g   (same job, no failure)
  relative difference       %.3g     (trainer tolerance %.0g)
  total                     %.1f s
`, verdict, s.FailoverS, s.KilledReplica, s.NewLeader, s.KilledAtStep, s.RanksKilled, s.Attempts, s.FinalLoss,
		s.ReferenceFinalLoss, s.LossRelDiff, s.Tolerance, s.TotalS)
}

// demoLeaderFailover runs the leader-failover scenario: three replicas,
// each with an embedded etcd member of one cluster and the shared CA; the
// agents and the client know all three. Once the job trains, the leading
// replica is killed (SIGKILL); another leads, the job goes on, and the
// killed replica is started again and rejoins as a follower.
func demoLeaderFailover(ctx context.Context, cfg demoConfig, w io.Writer, keep bool) (*LeaderFailoverSummary, error) {
	run, err := newDemoRun(w, keep)
	if err != nil {
		return nil, err
	}
	defer run.close()
	start, say, exe, dir := run.start, run.say, run.exe, run.dir
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rankLog := filepath.Join(dir, "ranks.jsonl")

	// Three replicas on loopback, each an etcd member.
	rs, err := chaos.NewReplicas(chaos.ReplicasConfig{Bin: exe, Dir: dir, N: 3, Host: "127.0.0.1",
		NodeTimeout: server.DefaultNodeTimeout, LogLevel: "info"})
	if err != nil {
		return nil, err
	}
	defer rs.Stop(15 * time.Second)
	if err := rs.Start(ctx); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	admin, c := rs.Admin(), rs.Client()
	var leader int
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) { leader = rs.Leader(ctx); return leader >= 0, nil }); err != nil {
		return nil, fmt.Errorf("no replica leads: %w", err)
	}
	say("three replicas up (%s), each with an embedded etcd member, sharing one CA; %s leads",
		strings.ReplaceAll(admin.Server, ",", ", "), rs.Member(leader).Name())

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
	say("%d nodes ready; their agents know all three replicas", cfg.nodes)
	j, err := c.Submit(ctx, demoTrainSpec(exe, "demo-train", cfg, cfg.stepDelay, rankLog))
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	say("submitted job %s: the example Go trainer, %d ranks, %d per node, %d steps", j.ID, cfg.ranks, cfg.perNode, cfg.steps)

	sum := &LeaderFailoverSummary{Tolerance: trainer.Tolerance}
	var (
		killed             bool
		lastStep, lastCk   int64 = -1, -1
		finalPhase         api.JobPhase
		reason             string
		restartedReplica   bool
		killedR            = -1
		killAt, failoverAt time.Time
	)
	err = wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		d, err := c.Job(ctx, j.ID)
		if err != nil {
			return false, nil // a failover under way
		}
		if n := len(d.Checkpoints); n > 0 && d.Checkpoints[n-1].Step > lastCk {
			lastCk = d.Checkpoints[n-1].Step
		}
		if p := d.Progress; p != nil && p.Latest.Step != lastStep && p.Latest.Loss != nil {
			if p.Latest.Step/50 != lastStep/50 || p.Latest.Final {
				say("  attempt %d  step %4d  loss %.6f", p.Latest.Attempt, p.Latest.Step, *p.Latest.Loss)
			}
			lastStep = p.Latest.Step
		}
		if !killed && lastStep >= int64(cfg.killAtStep) && lastCk > 0 {
			if killedR = rs.Leader(ctx); killedR < 0 {
				return false, nil
			}
			killed, sum.KilledAtStep, sum.KilledReplica = true, lastStep, rs.Member(killedR).Name()
			say("killing the leader %s (SIGKILL: its API, controller and etcd member) at step %d", sum.KilledReplica, lastStep)
			killAt = time.Now()
			rs.Kill(killedR)
			return false, nil
		}
		if killed && failoverAt.IsZero() {
			// The killed replica is not running, and is not asked.
			if l := rs.Leader(ctx); l >= 0 {
				failoverAt = time.Now()
				sum.FailoverS, sum.NewLeader = failoverAt.Sub(killAt).Seconds(), rs.Member(l).Name()
				say("%s leads after %.2fs; %d rank processes alive", sum.NewLeader, sum.FailoverS, aliveRanks(rankLog, j.ID))
			}
		}
		if !failoverAt.IsZero() && !restartedReplica {
			restartedReplica = true
			if err := rs.Restart(ctx, killedR); err != nil {
				return false, err
			}
			say("%s started again on its data directory: it rejoins the etcd cluster as a follower", sum.KilledReplica)
		}
		if d.Job.Status.Phase.Final() {
			finalPhase, reason = d.Job.Status.Phase, d.Job.Status.Reason
			sum.Attempts = len(d.Job.Status.Attempts)
			say("job %s %s after %d attempts", j.ID, strings.ToLower(string(finalPhase)), sum.Attempts)
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
	switch {
	case !killed:
		problems = append(problems, errors.New("the leader was never killed"))
	case failoverAt.IsZero():
		problems = append(problems, errors.New("no other replica took the lead"))
	}
	problems = append(problems, o.problems()...)
	if len(problems) > 0 {
		return sum, errors.Join(problems...)
	}
	sum.OK = true
	return sum, nil
}
