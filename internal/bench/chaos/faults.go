package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Fault is one fault as it happened.
type Fault struct {
	Kind Kind `json:"kind"`
	// Node is the node it hit; "" for the control plane.
	Node string `json:"node,omitempty"`
	// Replicas names the server replicas a control-plane fault hit
	// ("server" when there is one).
	Replicas []string `json:"replicas,omitempty"`
	// At is when it began; Healed when the harness undid it (the agent
	// or server started again, the cable back, the agent thawed) and, for
	// the server, answered again.
	At     time.Time `json:"at"`
	Healed time.Time `json:"healed"`
	// RanksAlive is how many ranks were alive on the node (on every node,
	// for the server) as the fault began, by the ranks' records.
	RanksAlive int `json:"ranks_alive"`
	// FailoverS is, for a leader-kill, the seconds from the kill to
	// another replica (or the one killed, started again) leading and the
	// store taking a write through it: leading, its controller schedules.
	// NewLeader names that replica.
	FailoverS float64 `json:"failover_s,omitempty"`
	NewLeader string  `json:"new_leader,omitempty"`
	// OutOfServiceS is, for a gpu-fault, the seconds from the injection
	// to the server having the node out of service.
	OutOfServiceS float64 `json:"out_of_service_s,omitempty"`
	// Note says what was done, for people.
	Note string `json:"note,omitempty"`
	// Err is set when the fault could not be injected as planned.
	Err string `json:"error,omitempty"`
}

// inject carries out one planned fault and undoes it. It returns once the
// fault is healed (for the control plane: once every replica hit answers
// again, and, after a leader-kill, another leads).
func (c *cluster) inject(ctx context.Context, s Step, gpus int) Fault {
	f := Fault{Kind: s.Kind}
	var a *agentProc
	if s.Host >= 0 {
		a = c.agents[s.Host]
		f.Node = a.name
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	fail := func(err error) Fault {
		f.Err = err.Error()
		if f.Healed.IsZero() {
			f.Healed = time.Now()
		}
		return f
	}
	f.At = time.Now()
	switch s.Kind {
	case AgentKill:
		a.p.kill()
		f.Note = fmt.Sprintf("agent pid %d killed; its supervisor and ranks live on; agent started again after %s", a.p.pid(), s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := c.startAgent(a, gpus); err != nil {
			return fail(err)
		}
	case AgentSupervisorKill:
		spid, ok := supervisorPID(a)
		_ = a.p.cmd.Process.Signal(syscall.SIGKILL)
		if ok {
			_ = syscall.Kill(spid, syscall.SIGKILL)
		}
		<-a.p.done
		if ok {
			f.Note = fmt.Sprintf("agent pid %d and supervisor pid %d killed; the ranks live on, orphaned; agent started again after %s", a.p.pid(), spid, s.For.Round(time.Millisecond))
		} else {
			f.Note = fmt.Sprintf("agent pid %d killed; it had no live supervisor (no ranks); agent started again after %s", a.p.pid(), s.For.Round(time.Millisecond))
		}
		sleep(s.For)
		if err := c.startAgent(a, gpus); err != nil {
			return fail(err)
		}
	case GPUFault:
		if err := AppendLine(a.injectPath(), `{"gpu":0,"xid":79}`); err != nil {
			return fail(err)
		}
		for ctx.Err() == nil && time.Since(f.At) < gpuFaultBound {
			if n, err := c.api.Node(ctx, a.name); err == nil && n.Status.Fault != "" {
				f.OutOfServiceS = n.Status.FaultAt.Sub(f.At).Seconds()
				break
			}
			sleep(50 * time.Millisecond)
		}
		if f.OutOfServiceS == 0 {
			return fail(fmt.Errorf("node %s not out of service within %s of an Xid 79", a.name, gpuFaultBound))
		}
		f.Note = fmt.Sprintf("Xid 79 on GPU 0; out of service after %.2fs; cleared and uncordoned after %s", f.OutOfServiceS, s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := AppendLine(a.injectPath(), `{"clear":true}`); err != nil {
			return fail(err)
		}
		if _, err := c.api.NodeAction(context.WithoutCancel(ctx), a.name, "uncordon"); err != nil {
			return fail(fmt.Errorf("uncordon %s: %w", a.name, err))
		}
	case Partition:
		if c.net == nil {
			return fail(fmt.Errorf("partition needs network namespaces (--netns)"))
		}
		if err := c.net.Unplug(ctx, a.host); err != nil {
			return fail(err)
		}
		f.Note = fmt.Sprintf("cable pulled for %s", s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := c.net.Plug(context.WithoutCancel(ctx), a.host); err != nil {
			return fail(err)
		}
	case Freeze:
		pid := a.p.pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fail(fmt.Errorf("SIGSTOP agent %d: %w", pid, err))
		}
		f.Note = fmt.Sprintf("agent pid %d stopped for %s", pid, s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fail(fmt.Errorf("SIGCONT agent %d: %w", pid, err))
		}
	case ServerKill:
		all := victims(s.Kind, c.cp.N(), -1, 0)
		f.Replicas = c.cp.Names(all)
		c.cp.Kill(all...)
		f.Note = fmt.Sprintf("server killed, started again after %s", s.For.Round(time.Millisecond))
		if len(all) > 1 {
			f.Note = fmt.Sprintf("all %d replicas killed, started again after %s", len(all), s.For.Round(time.Millisecond))
		}
		sleep(s.For)
		if err := c.cp.Restart(context.WithoutCancel(ctx), all...); err != nil {
			return fail(err)
		}
	case ServerRestart:
		all := victims(s.Kind, c.cp.N(), -1, 0)
		f.Replicas = c.cp.Names(all)
		var took []string
		for _, i := range all {
			t := time.Now()
			c.cp.Member(i).Stop(30 * time.Second)
			took = append(took, time.Since(t).Round(time.Millisecond).String())
			if err := c.cp.Restart(context.WithoutCancel(ctx), i); err != nil {
				return fail(err)
			}
			// An operator upgrading replicas in turn waits for one to lead
			// before the next goes.
			if len(all) > 1 && c.waitLeader(ctx, leaderWait) < 0 {
				return fail(fmt.Errorf("no replica led within %s of %s's restart", leaderWait, c.cp.Member(i).Name()))
			}
		}
		f.Note = fmt.Sprintf("server stopped with SIGTERM in %s and started again", took[0])
		if len(all) > 1 {
			f.Note = fmt.Sprintf("replicas stopped with SIGTERM in turn (in %s) and each started again", strings.Join(took, ", "))
		}
	case LeaderKill:
		leader := c.waitLeader(ctx, leaderWait)
		if leader < 0 {
			return fail(fmt.Errorf("no replica led within %s", leaderWait))
		}
		f.Replicas = c.cp.Names([]int{leader})
		f.At = time.Now()
		c.cp.Kill(leader)
		f.Note = fmt.Sprintf("leader %s killed, started again after %s", f.Replicas[0], s.For.Round(time.Millisecond))
		// Watch for the next leader while the replica is down, then
		// after it is back (it may lead again itself) if none led yet.
		l, at := c.failover(ctx, f.At.Add(s.For))
		sleep(time.Until(f.At.Add(s.For)))
		if err := c.cp.Restart(context.WithoutCancel(ctx), leader); err != nil {
			return fail(err)
		}
		if l < 0 {
			l, at = c.failover(ctx, f.At.Add(failoverBound))
		}
		if l < 0 {
			return fail(fmt.Errorf("no replica led and took a write within %s of the kill", failoverBound))
		}
		f.FailoverS, f.NewLeader = at.Sub(f.At).Seconds(), c.cp.Member(l).Name()
		f.Note += fmt.Sprintf("; %s led after %.2fs", f.NewLeader, f.FailoverS)
	case EtcdMemberKill, QuorumLoss:
		leader := c.cp.Leader(ctx)
		hit := victims(s.Kind, c.cp.N(), leader, s.Pick)
		f.Replicas = c.cp.Names(hit)
		f.At = time.Now()
		c.cp.Kill(hit...)
		what := "replica " + f.Replicas[0] + " (not leading) and its etcd member"
		if s.Kind == QuorumLoss {
			what = fmt.Sprintf("%d of %d replicas (%s", len(hit), c.cp.N(), strings.Join(f.Replicas, ", "))
			if slices.Contains(hit, leader) {
				what += ", the leader among them)"
			} else {
				what += ", not the leader)"
			}
		}
		f.Note = fmt.Sprintf("%s killed, started again after %s", what, s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := c.cp.Restart(context.WithoutCancel(ctx), hit...); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown fault kind %q", s.Kind))
	}
	f.Healed = time.Now()
	return f
}

// reviveAgents starts again every agent that exited on its own (not by a
// fault the harness is injecting), returning the nodes it restarted.
func (c *cluster) reviveAgents(gpus int) []string {
	var out []string
	for _, a := range c.agents {
		if a.p.exited() {
			if err := c.startAgent(a, gpus); err == nil {
				out = append(out, a.name)
			}
		}
	}
	return out
}

// leaderWait bounds the wait for a replica to lead before a leader-kill
// and between the steps of a rolling restart; failoverBound the wait for a
// new leader after a leader-kill.
const (
	leaderWait    = 30 * time.Second
	failoverBound = time.Minute
)

// waitLeader polls, at most d, for a replica that leads; -1 if none did.
func (c *cluster) waitLeader(ctx context.Context, d time.Duration) int {
	end := time.Now().Add(d)
	for {
		if l := c.cp.Leader(ctx); l >= 0 || !time.Now().Before(end) || ctx.Err() != nil {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probeQueue is the queue the failover probe writes: a new leader is
// serving once the store takes a write through it.
var probeQueue = api.QueueSpec{Name: "chaos-failover-probe", Weight: 1}

// failover polls the running replicas until one leads and the store takes
// a write through it, or until end: that replica and when it first did;
// -1 if none did. The replica's controller runs from the moment it leads
// (server/election.go), so that is when it schedules again.
func (c *cluster) failover(ctx context.Context, end time.Time) (int, time.Time) {
	for {
		if l := c.cp.Leader(ctx); l >= 0 {
			at := time.Now()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.cp.Member(l).Client().SetQueue(pctx, probeQueue)
			cancel()
			if err == nil {
				return l, at
			}
		}
		if !time.Now().Before(end) || ctx.Err() != nil {
			return -1, time.Time{}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reviveReplicas starts again every replica that exited on its own (not
// by a fault the harness is injecting), returning their names.
func (c *cluster) reviveReplicas(ctx context.Context) []string {
	gone := c.cp.Exited()
	if len(gone) == 0 {
		return nil
	}
	if err := c.cp.Restart(ctx, gone...); err != nil {
		c.say("start replicas %v again: %v", c.cp.Names(gone), err)
	}
	return c.cp.Names(gone)
}

// gpuFaultBound bounds the wait for a gpu-fault's node to leave service:
// its health checks run every second.
const gpuFaultBound = 10 * time.Second

// AppendLine appends line and a newline to the file at path, creating
// it: how a fault is injected into an agent's fake GPUs
// (`gangway agent --health-inject`).
func AppendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
