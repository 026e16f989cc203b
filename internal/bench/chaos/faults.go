package chaos

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Fault is one fault as it happened.
type Fault struct {
	Kind Kind `json:"kind"`
	// Node is the node it hit; "" for the server.
	Node string `json:"node,omitempty"`
	// At is when it began; Healed when the harness undid it (the agent
	// or server started again, the cable back, the agent thawed) and, for
	// the server, answered again.
	At     time.Time `json:"at"`
	Healed time.Time `json:"healed"`
	// RanksAlive is how many ranks were alive on the node (on every node,
	// for the server) as the fault began, by the ranks' records.
	RanksAlive int `json:"ranks_alive"`
	// Note says what was done, for people.
	Note string `json:"note,omitempty"`
	// Err is set when the fault could not be injected as planned.
	Err string `json:"error,omitempty"`
}

// inject carries out one planned fault and undoes it. It returns once the
// fault is healed (for the server: once it answers again).
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
		c.server.Kill()
		f.Note = fmt.Sprintf("server killed, started again after %s", s.For.Round(time.Millisecond))
		sleep(s.For)
		if err := c.server.Start(context.WithoutCancel(ctx)); err != nil {
			return fail(err)
		}
	case ServerRestart:
		t := time.Now()
		c.server.Stop(30 * time.Second)
		f.Note = fmt.Sprintf("server stopped with SIGTERM in %s and started again", time.Since(t).Round(time.Millisecond))
		if err := c.server.Start(context.WithoutCancel(ctx)); err != nil {
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
