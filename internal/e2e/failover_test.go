package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
)

// failMode is how a host fails.
type failMode int

const (
	// killHost: the machine dies; every process on it gets SIGKILL at once.
	killHost failMode = iota
	// unplugHost: the host's cable is pulled; everything on it keeps
	// running but reaches no one, so its agent must fence itself.
	unplugHost
)

func (m failMode) String() string {
	if m == killHost {
		return "killed"
	}
	return "unplugged"
}

// failover is one failure scenario: a job is submitted, and once it has
// made progress and reported a checkpoint the host of one of its ranks
// fails.
type failover struct {
	spec string // job spec, YAML
	mode failMode
	// victimRank picks the failing host: the one that runs this rank.
	victimRank int
	// failAtStep: fail once the job reported this step (and a checkpoint
	// past step 0).
	failAtStep int64
	// timeout bounds the whole scenario.
	timeout time.Duration
}

// failoverResult is what a scenario measured.
type failoverResult struct {
	killedAtStep, resumedFrom int64
	// detection: failure → node marked lost; recovery: failure → every
	// rank of the new attempt running; fence: cable pulled → the last of
	// the cut-off host's ranks seen dead; gap: last old rank dead → first
	// new rank started.
	detection, recovery, fence, gap time.Duration
}

func (r failoverResult) String() string {
	s := fmt.Sprintf("failed at step %d, resumed from step %d; node lost after %.2fs, gang running again after %.2fs, old ranks all dead %.2fs before the first new one started",
		r.killedAtStep, r.resumedFrom, r.detection.Seconds(), r.recovery.Seconds(), r.gap.Seconds())
	if r.fence > 0 {
		s += fmt.Sprintf("; the cut-off agent's ranks were dead %.2fs after the cable was pulled", r.fence.Seconds())
	}
	return s
}

// oldRank is a rank of the attempt that the failure ends.
type oldRank struct {
	rank int
	node string
	pgid int // the rank's pid, leader of its process group
}

// run carries the scenario out on c and checks what DESIGN.md's failure
// model promises: the node is marked lost, a second attempt is placed
// away from it and resumes from the newest checkpoint, every rank of the
// first attempt is dead before any rank of the second starts, and the job
// succeeds.
func (f failover) run(t *testing.T, c *cluster) failoverResult {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	var res failoverResult
	id := c.submit(ctx, f.spec)

	// 1. Wait for progress and a checkpoint to resume from.
	var d *api.JobDetail
	err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		st := d.Job.Status
		if st.Phase.Final() || st.Restarts > 0 {
			return false, fmt.Errorf("job %s %s before any failure was injected: %s", id, st.Phase, st.Reason)
		}
		a := st.Current()
		return a != nil && !a.RunningAt.IsZero() &&
			newestCheckpoint(d.Checkpoints) > 0 &&
			d.Progress != nil && d.Progress.Latest.Step >= f.failAtStep, nil
	})
	if err != nil {
		t.Fatalf("waiting for job %s to reach step %d with a checkpoint: %v", id, f.failAtStep, err)
	}
	att1 := *d.Job.Status.Current()
	if att1.Number != 1 {
		t.Fatalf("job %s is on attempt %d before any failure", id, att1.Number)
	}
	ckBefore := newestCheckpoint(d.Checkpoints)
	victimNode := att1.Placement[f.victimRank].Node
	victim := c.agentByNode(victimNode)

	// The first attempt's rank processes, from the shims' state files on
	// each host, checked against what the agents reported.
	var old []oldRank
	var pgids []int
	for _, p := range att1.Placement {
		st, err := c.agentByNode(p.Node).readRankState(id, 1, p.Rank)
		if err != nil {
			t.Fatalf("rank %d of attempt 1 on %s: %v", p.Rank, p.Node, err)
		}
		if rs := rankStatus(d.Ranks, 1, p.Rank); rs == nil || rs.PID != st.PID {
			t.Fatalf("rank %d of attempt 1: the supervisor's journal says pid %d, the agent reported %+v", p.Rank, st.PID, rs)
		}
		if gone, _ := groupGone(st.PID); gone {
			t.Fatalf("rank %d of attempt 1 (process group %d on %s) is not running before the failure", p.Rank, st.PID, p.Node)
		}
		old = append(old, oldRank{rank: p.Rank, node: p.Node, pgid: st.PID})
		pgids = append(pgids, st.PID)
	}
	watch := watchGroups(pgids, 25*time.Millisecond)
	defer watch.stop()

	// 2. Fail the host.
	res.killedAtStep = d.Progress.Latest.Step
	failAt := time.Now()
	var killDone time.Time
	switch f.mode {
	case killHost:
		pids, err := c.net.KillHost(ctx, victim.host)
		if err != nil {
			t.Fatalf("kill host %s: %v", victimNode, err)
		}
		killDone = time.Now()
		t.Logf("at step %d: killed host %s (SIGKILL to its %d processes: the agent, its rank supervisor and %d rank(s)) in %s",
			res.killedAtStep, victimNode, len(pids), ranksOn(old, victimNode), killDone.Sub(failAt).Round(time.Millisecond))
		select {
		case <-victim.done:
		case <-ctx.Done():
			t.Fatalf("agent %s survived SIGKILL", victimNode)
		}
	case unplugHost:
		if err := c.net.Unplug(ctx, victim.host); err != nil {
			t.Fatal(err)
		}
		t.Logf("at step %d: pulled the cable of host %s (its agent and %d ranks keep running, unreachable)",
			res.killedAtStep, victimNode, ranksOn(old, victimNode))
	}

	// 3. Wait for the node to be lost and a new attempt to run.
	var lostAt time.Time
	err = wait.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		if lostAt.IsZero() {
			if n, err := c.api.Node(ctx, victimNode); err == nil && n.Status.State == api.NodeLost {
				lostAt = n.Status.LostAt
				t.Logf("node %s marked lost: %s", victimNode, n.Status.Reason)
			}
		}
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		if d.Job.Status.Phase.Final() {
			return false, fmt.Errorf("job %s %s without a running second attempt: %s", id, d.Job.Status.Phase, d.Job.Status.Reason)
		}
		a := d.Job.Status.Current()
		return a.Number >= 2 && !a.RunningAt.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("waiting for a second attempt of job %s to run: %v", id, err)
	}
	att2 := *d.Job.Status.Current()
	t.Logf("attempt %d running on %s, resuming from %+v; attempt 1 ended %s: %s",
		att2.Number, strings.Join(att2.Nodes(), ", "), att2.ResumeFrom, d.Job.Status.Attempts[0].Outcome, d.Job.Status.Attempts[0].Reason)
	if f.mode == unplugHost {
		// The agent fenced itself; it did not die.
		if victim.exited() {
			t.Fatalf("the agent of the cut-off host %s exited (%v) instead of fencing itself", victimNode, victim.err)
		}
		for _, o := range old {
			if o.node != victimNode {
				continue
			}
			at, ok := watch.deadAt(o.pgid)
			if !ok {
				t.Fatalf("rank %d (process group %d) on the cut-off host %s is still alive while attempt %d runs: the agent did not fence",
					o.rank, o.pgid, victimNode, att2.Number)
			}
			res.fence = max(res.fence, at.Sub(failAt))
		}
		if err := c.net.Plug(ctx, victim.host); err != nil {
			t.Fatal(err)
		}
		t.Logf("cable of host %s plugged back in", victimNode)
	}

	// 4. Wait for the job to end.
	err = wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		return d.Job.Status.Phase.Final(), nil
	})
	if err != nil {
		t.Fatalf("waiting for job %s to finish: %v", id, err)
	}
	d = c.describe(ctx, id)
	st := d.Job.Status

	// 5. Check.
	if st.Phase != api.JobSucceeded {
		t.Fatalf("job %s ended %s: %s", id, st.Phase, st.Reason)
	}
	if len(st.Attempts) != 2 {
		t.Errorf("job %s took %d attempts, want 2 (one failure): %s", id, len(st.Attempts), attemptSummary(st.Attempts))
	}
	a1, a2 := st.Attempts[0], st.Attempts[1]
	if a1.Phase != api.AttemptEnded || a1.Outcome != api.OutcomeFailed {
		t.Errorf("attempt 1: phase %s outcome %q (%s), want Ended failed", a1.Phase, a1.Outcome, a1.Reason)
	}
	if lostAt.IsZero() {
		t.Errorf("node %s was never seen lost", victimNode)
	} else {
		res.detection = lostAt.Sub(failAt)
		if !lostAt.After(failAt) {
			t.Errorf("node %s lost at %s, before it failed at %s", victimNode, lostAt, failAt)
		}
		if !a2.CreatedAt.After(lostAt) {
			t.Errorf("attempt 2 was placed at %s, before node %s was marked lost at %s", a2.CreatedAt, victimNode, lostAt)
		}
	}
	if slices.Contains(a2.Nodes(), victimNode) {
		t.Errorf("attempt 2 was placed on the failed node %s: %v", victimNode, a2.Nodes())
	}
	if a2.ResumeFrom == nil || a2.ResumeFrom.Step <= 0 {
		t.Errorf("attempt 2 resumes from %+v, want a checkpoint past step 0", a2.ResumeFrom)
	} else {
		res.resumedFrom = a2.ResumeFrom.Step
		// The newest checkpoint the server knew of: at least the one
		// reported before the failure (rank 0's host may have died
		// between committing a newer one and reporting it).
		if a2.ResumeFrom.Step < ckBefore {
			t.Errorf("attempt 2 resumes from step %d, older than checkpoint %d reported before the failure", a2.ResumeFrom.Step, ckBefore)
		}
		if _, err := os.Stat(filepath.Join(a2.ResumeFrom.Path, "COMMITTED")); err != nil {
			t.Errorf("attempt 2 resumes from %s, which is not a committed checkpoint: %v", a2.ResumeFrom.Path, err)
		}
		// And the trainer did resume there.
		p0 := a2.Placement[0]
		out := filepath.Join(c.agentByNode(p0.Node).dir, "tasks", "0", id+".2.0", "stdout.log")
		if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), fmt.Sprintf("resumed from step %d", a2.ResumeFrom.Step)) {
			t.Errorf("rank 0 of attempt 2 did not print \"resumed from step %d\" (%v):\n%s", a2.ResumeFrom.Step, err, b)
		}
	}
	if d.Progress == nil || !d.Progress.Latest.Final || d.Progress.Latest.Attempt != 2 {
		t.Errorf("last progress line %+v, want attempt 2's final line", d.Progress)
	}
	if !a2.RunningAt.IsZero() {
		res.recovery = a2.RunningAt.Sub(failAt)
	}

	// No gang ran twice at once: the newest death of an attempt-1 rank
	// precedes the first start of an attempt-2 rank.
	var firstStart time.Time
	for _, p := range a2.Placement {
		rs := rankStatus(d.Ranks, 2, p.Rank)
		if rs == nil || rs.StartedAt.IsZero() {
			t.Fatalf("rank %d of attempt 2 on %s: no start reported (%+v)", p.Rank, p.Node, rs)
		}
		if firstStart.IsZero() || rs.StartedAt.Before(firstStart) {
			firstStart = rs.StartedAt
		}
	}
	var lastDeath time.Time
	for _, o := range old {
		var diedBy time.Time
		var how string
		rs := rankStatus(d.Ranks, 1, o.rank)
		seen, seenOK := watch.deadAt(o.pgid)
		switch {
		case o.node == victimNode && f.mode == killHost:
			// Its host is gone; the time the namespace was empty bounds it.
			diedBy, how = killDone, "killed with its host"
		case o.node == victimNode:
			// Fenced while unreachable: the test saw it die, and the
			// agent reported it once back.
			if !seenOK {
				t.Errorf("rank %d on %s: never seen dead", o.rank, o.node)
				continue
			}
			diedBy, how = seen, "fenced by its agent, seen dead by the test"
		default:
			// Stopped by its (healthy) agent, which reported the exit.
			if rs == nil || !rs.State.Terminal() || rs.FinishedAt.IsZero() {
				t.Errorf("rank %d on %s: reported %+v, want an exit", o.rank, o.node, rs)
				continue
			}
			diedBy, how = rs.FinishedAt, fmt.Sprintf("stopped by its agent (exit %d %s)", rs.ExitCode, rs.Signal)
			if !seenOK {
				t.Errorf("rank %d on %s: reported ended at %s but never seen dead", o.rank, o.node, rs.FinishedAt)
			}
		}
		if !diedBy.Before(firstStart) {
			t.Errorf("rank %d of attempt 1 on %s (%s) was alive until %s, after rank of attempt 2 started at %s: the gang ran twice at once",
				o.rank, o.node, how, diedBy.Format(time.RFC3339Nano), firstStart.Format(time.RFC3339Nano))
		}
		if diedBy.After(lastDeath) {
			lastDeath = diedBy
		}
		if gone, why := groupGone(o.pgid); !gone || processAlive(o.pgid) {
			t.Errorf("rank %d of attempt 1 on %s: %s", o.rank, o.node, why)
		}
	}
	res.gap = firstStart.Sub(lastDeath)
	if f.mode == unplugHost {
		t.Run("reconnected agent reports its fenced ranks", func(t *testing.T) {
			checkFencedReports(ctx, t, c, id, victimNode, old, firstStart)
		})
	}
	return res
}

// checkFencedReports: once the cut-off host is back on the network its
// agent registers again and reports how its fenced ranks ended: killed,
// before the new attempt started.
func checkFencedReports(ctx context.Context, t *testing.T, c *cluster, id, node string, old []oldRank, firstStart time.Time) {
	var readyAt time.Time
	var d *api.JobDetail
	err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		if readyAt.IsZero() {
			n, err := c.api.Node(ctx, node)
			if err != nil || n.Status.State != api.NodeReady {
				return false, nil
			}
			readyAt = time.Now()
		}
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		for _, o := range old {
			if rs := rankStatus(d.Ranks, 1, o.rank); o.node == node && (rs == nil || !rs.State.Terminal()) {
				// Heartbeats come every second; five is plenty.
				return time.Since(readyAt) > 5*time.Second, nil
			}
		}
		return true, nil
	})
	if readyAt.IsZero() {
		t.Fatalf("%s never came back Ready after its cable was plugged back in: %v", node, err)
	}
	if err != nil {
		t.Fatalf("waiting for %s to report its fenced ranks: %v", node, err)
	}
	for _, o := range old {
		if o.node != node {
			continue
		}
		rs := rankStatus(d.Ranks, 1, o.rank)
		if rs == nil || !rs.State.Terminal() {
			// A reconnected agent must deliver its fenced ranks' exits.
			t.Fatalf("%s is Ready again but the server still has rank %d of attempt 1 as %+v; the agent's fenced ranks' exits were lost", node, o.rank, rs)
		}
		if rs.State != api.RankExited || rs.Signal != syscall.SIGKILL.String() {
			t.Errorf("rank %d on the cut-off %s: reported %+v, want exited by SIGKILL (fencing)", o.rank, node, rs)
		}
		if !rs.FinishedAt.Before(firstStart) {
			t.Errorf("rank %d on the cut-off %s: its agent saw it end at %s, after attempt 2's first rank started at %s",
				o.rank, node, rs.FinishedAt.Format(time.RFC3339Nano), firstStart.Format(time.RFC3339Nano))
		}
	}
}

func newestCheckpoint(cks []api.Checkpoint) int64 {
	var s int64
	for _, c := range cks {
		if c.Step > s {
			s = c.Step
		}
	}
	return s
}

func rankStatus(rs []api.RankStatus, attempt, rank int) *api.RankStatus {
	for i := range rs {
		if rs[i].Attempt == attempt && rs[i].Rank == rank {
			return &rs[i]
		}
	}
	return nil
}

func ranksOn(old []oldRank, node string) int {
	n := 0
	for _, o := range old {
		if o.node == node {
			n++
		}
	}
	return n
}

func attemptSummary(as []api.Attempt) string {
	var s []string
	for _, a := range as {
		s = append(s, fmt.Sprintf("#%d on %v %s %s (%s)", a.Number, a.Nodes(), a.Phase, a.Outcome, a.Reason))
	}
	return strings.Join(s, "; ")
}

// goTrainerSpec is the example Go trainer as 2 nodes × 2 ranks.
func goTrainerSpec(name string) string {
	return fmt.Sprintf(`name: %s
ranks: 4
ranksPerNode: 2
gpusPerRank: 1
maxRestarts: 2
restartBackoff: 200ms
terminationGracePeriod: 5s
command: [%s, train-example, --steps, "240", --checkpoint-every, "20", --log-every, "40", --step-delay, 30ms]
`, name, strconv.Quote(gangwayBin))
}

// TestKillHost: one host of a 2-node gang dies outright (the one running
// rank 0, the rendezvous master and checkpoint writer); a spare host takes
// its place.
func TestKillHost(t *testing.T) {
	c := startCluster(t, 3)
	res := failover{
		spec:       goTrainerSpec("e2e-kill-host"),
		mode:       killHost,
		victimRank: 0,
		failAtStep: 60,
		timeout:    90 * time.Second,
	}.run(t, c)
	t.Logf("RESULT kill host, Go trainer 2x2: %s", res)
}

// TestUnplugHost: one host of a 2-node gang loses its network while its
// processes keep running; its agent must kill its ranks before the server
// restarts the gang elsewhere.
func TestUnplugHost(t *testing.T) {
	c := startCluster(t, 3)
	res := failover{
		spec:       goTrainerSpec("e2e-unplug-host"),
		mode:       unplugHost,
		victimRank: 3, // the second node: the rendezvous master keeps its network
		failAtStep: 60,
		timeout:    90 * time.Second,
	}.run(t, c)
	t.Logf("RESULT unplug host, Go trainer 2x2: %s", res)
}
