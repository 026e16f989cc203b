package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
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

// replicaProc is one `gangway server` replica of the demo.
type replicaProc struct {
	name, url string
	args      []string
	log       string
	cmd       *exec.Cmd
	done      chan struct{}
	health    *client.Client // this replica alone, set once the admin token exists
}

func (r *replicaProc) start(exe string) error {
	f, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	r.cmd = exec.Command(exe, r.args...)
	r.cmd.Stdout, r.cmd.Stderr = f, f
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start replica %s: %w", r.name, err)
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	return nil
}

func (r *replicaProc) signal(sig syscall.Signal, grace time.Duration) {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// leads says whether the replica answers that it leads.
func (r *replicaProc) leads(ctx context.Context) bool {
	if r.health == nil {
		return false
	}
	h, err := r.health.Health(ctx)
	return err == nil && h.Leader
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
	caDir := filepath.Join(dir, "ca")
	if _, _, err := pki.LoadOrCreateCA(caDir); err != nil {
		return nil, err
	}
	caFile, caKey := filepath.Join(caDir, pki.CAFile), filepath.Join(caDir, pki.CAKeyFile)

	// Three replicas on loopback, each an etcd member.
	ports, err := chaos.FreePorts(slices.Repeat([]string{"127.0.0.1"}, 9)...)
	if err != nil {
		return nil, err
	}
	var members, urls []string
	for i := range 3 {
		members = append(members, fmt.Sprintf("s%d=https://%s", i+1, ports[3+i]))
		urls = append(urls, "https://"+ports[i])
	}
	rs := make([]*replicaProc, 3)
	for i := range rs {
		name := fmt.Sprintf("s%d", i+1)
		rs[i] = &replicaProc{name: name, url: urls[i], log: filepath.Join(dir, name+".log"), args: []string{"server",
			"--data-dir", filepath.Join(dir, name), "--listen", ports[i], "--etcd-name", name,
			"--etcd-peer-addr", ports[3+i], "--etcd-client-addr", ports[6+i], "--initial-cluster", strings.Join(members, ","),
			"--tls-ca", caFile, "--tls-ca-key", caKey, "--client-config", "", "--log-level", "info"}}
		if err := rs[i].start(exe); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, r := range rs {
			r.signal(syscall.SIGTERM, 15*time.Second)
		}
	}()
	// The first replica to start the cluster writes the admin's config.
	var admin client.Config
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		for _, r := range rs {
			if cc, err := client.ConfigFor(filepath.Join(dir, r.name, server.AdminConfigFile), client.Resolve{}); err == nil && cc.Token != "" {
				admin = cc
				return true, nil
			}
			select {
			case <-r.done:
				return false, fmt.Errorf("replica %s exited; see %s", r.name, r.log)
			default:
			}
		}
		return false, nil
	}); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	for _, r := range rs {
		if r.health, err = client.New(client.Config{Server: r.url, Token: admin.Token, CAFile: caFile, Timeout: time.Second, Retries: -1}); err != nil {
			return nil, err
		}
		defer r.health.CloseIdleConnections()
	}
	admin.Server, admin.CAFile = strings.Join(urls, ","), caFile
	c, err := client.New(admin)
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	leaderOf := func() *replicaProc {
		for _, r := range rs {
			if r.leads(ctx) {
				return r
			}
		}
		return nil
	}
	var leader *replicaProc
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) { leader = leaderOf(); return leader != nil, nil }); err != nil {
		return nil, fmt.Errorf("no replica leads: %w", err)
	}
	say("three replicas up (%s), each with an embedded etcd member, sharing one CA; %s leads", strings.Join(urls, ", "), leader.name)

	jt, err := c.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: cfg.nodes, TTL: api.Duration(10 * time.Minute), Description: "demo agents"})
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	agents, err := startDemoAgents(exe, dir, admin.Server, caFile, jt.Secret, cfg)
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
		killedR            *replicaProc
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
			if killedR = leaderOf(); killedR == nil {
				return false, nil
			}
			killed, sum.KilledAtStep, sum.KilledReplica = true, lastStep, killedR.name
			say("killing the leader %s (SIGKILL: its API, controller and etcd member) at step %d", killedR.name, lastStep)
			killAt = time.Now()
			killedR.signal(syscall.SIGKILL, time.Second)
			return false, nil
		}
		if killed && failoverAt.IsZero() {
			for _, r := range rs {
				if r != killedR && r.leads(ctx) {
					failoverAt = time.Now()
					sum.FailoverS, sum.NewLeader = failoverAt.Sub(killAt).Seconds(), r.name
					say("%s leads after %.2fs; %d rank processes alive", r.name, sum.FailoverS, aliveRanks(rankLog, j.ID))
				}
			}
		}
		if !failoverAt.IsZero() && !restartedReplica {
			restartedReplica = true
			if err := killedR.start(exe); err != nil {
				return false, err
			}
			say("%s started again on its data directory: it rejoins the etcd cluster as a follower", killedR.name)
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
