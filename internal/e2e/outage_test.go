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

// TestServerOutageKeepsRanks: the server is killed (kill -9) while a gang
// trains across two hosts and comes back only after several node timeouts.
// The agents cannot reach it, but neither can their witnesses, so they
// keep their ranks: not one rank dies, the job finishes in its first
// attempt, and no node is declared lost when the server returns.
func TestServerOutageKeepsRanks(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	id, d := c.submitRunning(ctx, fmt.Sprintf(`name: e2e-server-outage
ranks: 2
ranksPerNode: 1
command: [%s, train-example, --steps, "600", --checkpoint-every, "50", --log-every, "100", --step-delay, 30ms]
`, strconv.Quote(gangwayBin)), 20)
	att := *d.Job.Status.Current()
	var pids []int
	for _, p := range att.Placement {
		st, err := c.agentByNode(p.Node).readRankState(id, att.Number, p.Rank)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, st.PID)
	}

	// Every node has its witnesses (given within a heartbeat or two of
	// joining).
	if err := wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := c.api.Nodes(ctx)
		if err != nil {
			return false, nil
		}
		for _, n := range l.Nodes {
			if len(n.Status.Witnesses) < 2 || len(n.Status.PrevWitnesses) > 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("nodes never all got their witnesses: %v", err)
	}
	// Several node timeouts, so that an agent fencing on silence alone
	// would have killed everything.
	const outage = 3 * nodeTimeout
	down := time.Now()
	c.server.stop(syscall.SIGKILL, 0)
	time.Sleep(outage)
	for i, pid := range pids {
		if gone, _ := groupGone(pid); gone {
			t.Fatalf("rank %d (pid %d) died while the server was down %s; agent log:\n%s", att.Placement[i].Rank, pid,
				time.Since(down).Round(time.Second), tail(c.agentByNode(att.Placement[i].Node).log, 8))
		}
	}
	if err := c.startServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server down %s; both ranks alive; restarted", time.Since(down).Round(100*time.Millisecond))

	if err := wait.Until(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		if d, err = c.api.Job(ctx, id); err != nil {
			return false, nil
		}
		return d.Job.Status.Phase.Final(), nil
	}); err != nil {
		t.Fatalf("waiting for job %s to finish after the outage: %v", id, err)
	}
	if d.Job.Status.Phase != api.JobSucceeded || len(d.Job.Status.Attempts) != 1 {
		t.Fatalf("job %s ended %s after %d attempts (want succeeded in 1): %s", id, d.Job.Status.Phase,
			len(d.Job.Status.Attempts), attemptSummary(d.Job.Status.Attempts))
	}
	nodes, err := c.api.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.Status.State != api.NodeReady {
			t.Errorf("node %s is %s after the outage: %s", n.Name, n.Status.State, n.Status.Reason)
		}
	}
}
