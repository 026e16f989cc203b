package e2e

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
)

// TestFrozenAgent: an agent stalls (SIGSTOP: a long GC pause, a starved
// CPU, or a server too slow to answer) for longer than its fencing lease but
// shorter than the node timeout. Its supervisor, whose lease the frozen
// agent cannot renew, kills its ranks, while the server never marks the
// node lost. The job must still finish: the killed ranks fail their
// attempt, and the agent, whose heartbeats succeed again, must go back to
// work.
func TestFrozenAgent(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, d := c.submitRunning(ctx, fmt.Sprintf(`name: e2e-frozen-agent
ranks: 2
ranksPerNode: 1
restartBackoff: 200ms
terminationGracePeriod: 5s
command: [%s, train-example, --steps, "500", --checkpoint-every, "20", --log-every, "100", --step-delay, 30ms]
`, strconv.Quote(gangwayBin)), 20)
	att := *d.Job.Status.Current()
	p := att.Placement[1]
	victim := c.agentByNode(p.Node)
	st, err := victim.readRankState(id, att.Number, p.Rank)
	if err != nil {
		t.Fatal(err)
	}

	// Freeze the agent (not its ranks) just after a heartbeat, for more
	// than the lease (node timeout − one heartbeat interval) and less than
	// the node timeout. The supervisor fences while the agent sleeps.
	const freeze = nodeTimeout - 600*time.Millisecond
	fenced := false
	for try := 1; try <= 5 && !fenced; try++ {
		n0, err := c.api.Node(ctx, p.Node)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait.Until(ctx, 10*time.Millisecond, func() (bool, error) {
			n, err := c.api.Node(ctx, p.Node)
			return err == nil && n.Status.LastHeartbeat.After(n0.Status.LastHeartbeat), nil
		}); err != nil {
			t.Fatal(err)
		}
		pid := victim.cmd.Process.Pid
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(freeze)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(1500 * time.Millisecond)
		for !fenced && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			fenced, _ = groupGone(st.PID)
		}
		n, _ := c.api.Node(ctx, p.Node)
		t.Logf("try %d: froze agent %s (pid %d) for %s; its rank %d fenced: %v; node now %s %s", try, p.Node, pid, freeze, p.Rank, fenced, n.Status.State, n.Status.Reason)
	}
	if !fenced {
		t.Skipf("the agent never fenced after %s frozen (its heartbeat won the race every time); nothing to check", freeze)
	}

	// A stop takes at most the grace period (5s) and a heartbeat; an
	// attempt Stopping for twice that on a Ready node is stuck.
	const stuck = 10 * time.Second
	err = wait.Until(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		st := d.Job.Status
		if cur := st.Current(); st.Phase == api.JobStopping && time.Since(cur.StoppingAt) > stuck {
			n, err := c.api.Node(ctx, p.Node)
			if err == nil && n.Status.State == api.NodeReady {
				// An agent that fenced on a stall must follow its
				// assignments again once its heartbeats succeed.
				return false, fmt.Errorf("%s fenced itself and stays fenced while Ready: attempt %d Stopping for %s (%s). Agent log:\n%s",
					p.Node, cur.Number, time.Since(cur.StoppingAt).Round(time.Second), st.Reason, tail(victim.log, 6))
			}
			return false, fmt.Errorf("attempt %d Stopping for %s: %s", cur.Number, time.Since(cur.StoppingAt).Round(time.Second), st.Reason)
		}
		return st.Phase.Final(), nil
	})
	if err != nil {
		t.Fatalf("waiting for job %s to finish after %s fenced itself: %v", id, p.Node, err)
	}
	if d.Job.Status.Phase != api.JobSucceeded {
		t.Fatalf("job %s ended %s: %s", id, d.Job.Status.Phase, d.Job.Status.Reason)
	}
	t.Logf("job %s succeeded after %d attempts: %s", id, len(d.Job.Status.Attempts), attemptSummary(d.Job.Status.Attempts))
}
