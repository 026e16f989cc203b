package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// The health loop's server half: an agent's heartbeat carries its checks'
// results when one changed status; a fatal finding new since the last
// report takes its GPU (reset-gpu, cordon-gpu) or its whole node
// (cordon-node) out of service in the node's record, which the leader's
// lifecycle reads to stop every gang with a rank there and requeue it
// (restarts not counted), and the scheduler reads to place around it.
// Whatever is out returns once every check has passed for HealthReturn,
// unless the node is a lemon or the policy leaves it to an operator.

// DefaultHealthReturn is how long a GPU or node that faulted must pass its
// checks before it returns to service: long enough that a flapping link or
// an Xid storm does not bounce gangs on and off it, short against the
// hours an operator's ticket takes.
const DefaultHealthReturn = 10 * time.Minute

// healthPolicy is what nodeHealth decides by.
type healthPolicy struct {
	returnAfter time.Duration // < 0: never by itself
	lemonFaults int
	lemonWindow time.Duration
}

func (s *Server) healthPolicy() healthPolicy {
	return healthPolicy{returnAfter: s.cfg.HealthReturn, lemonFaults: s.cfg.LemonFaults, lemonWindow: s.cfg.LemonWindow}
}

// errNoChange aborts a node modification that turned out to change
// nothing.
var errNoChange = errors.New("no change")

// describeFinding is a finding as a node's or GPU's fault reason.
func describeFinding(h api.HealthCheck) string {
	where := "node"
	if h.GPU >= 0 {
		where = fmt.Sprintf("GPU %d", h.GPU)
	}
	msg := h.Message
	if h.Code != 0 && msg == "" {
		msg = fmt.Sprintf("code %d", h.Code)
	}
	return fmt.Sprintf("%s check on %s: %s (%s)", h.Check, where, msg, h.Action)
}

// faultOutstanding reports whether anything of n is out of service for
// its health.
func faultOutstanding(n *api.Node) bool {
	if n.Status.Fault != "" {
		return true
	}
	for i := range n.GPUs {
		if n.GPUs[i].Health == api.GPUFaulty {
			return true
		}
	}
	return false
}

// wasFatal reports whether prev held h's check, for h's GPU, fatal already.
func wasFatal(prev []api.HealthCheck, h api.HealthCheck) bool {
	for _, p := range prev {
		if p.Check == h.Check && p.GPU == h.GPU && p.Fatal() {
			return true
		}
	}
	return false
}

// nodeHealth applies a report of checks (nil: as before) to m in place at
// now, and reports whether it changed anything worth writing.
func nodeHealth(m *api.Node, checks []api.HealthCheck, now time.Time, pol healthPolicy) bool {
	changed := false
	prev := m.Status.Health
	if checks != nil && !api.SameHealth(prev, checks) {
		m.Status.Health = slices.Clone(checks)
		changed = true
	}
	fatal := false
	fault := func() {
		countFault(m, now, pol)
		changed = true
	}
	for _, h := range m.Status.Health {
		if !h.Fatal() {
			continue
		}
		fatal = true
		if wasFatal(prev, h) {
			continue // not new: an operator may have put it back
		}
		switch {
		case h.Action == api.ActionCordonNode || h.GPU < 0:
			if m.Status.Fault == "" {
				m.Status.Fault, m.Status.FaultAt = describeFinding(h), now
				m.Status.FaultCause = api.CauseNodeFault
				if h.GPU >= 0 {
					m.Status.FaultCause = api.CauseGPUFault
				}
				fault()
			}
		default:
			for i := range m.GPUs {
				g := &m.GPUs[i]
				if g.Index == h.GPU && g.Health != api.GPUFaulty && g.Health != api.GPULost {
					g.Health, g.Fault, g.FaultAt = api.GPUFaulty, describeFinding(h), now
					fault()
				}
			}
		}
	}
	switch {
	case fatal || !faultOutstanding(m):
		if !m.Status.HealthyAt.IsZero() {
			m.Status.HealthyAt = time.Time{}
			changed = true
		}
	case m.Status.HealthyAt.IsZero():
		m.Status.HealthyAt = now
		changed = true
	case pol.returnAfter > 0 && !m.Status.Lemon && now.Sub(m.Status.HealthyAt) >= pol.returnAfter:
		m.Status.Fault, m.Status.FaultAt, m.Status.FaultCause, m.Status.HealthyAt = "", time.Time{}, "", time.Time{}
		for i := range m.GPUs {
			if g := &m.GPUs[i]; g.Health == api.GPUFaulty {
				g.Health, g.Fault, g.FaultAt = api.GPUHealthy, "", time.Time{}
			}
		}
		changed = true
	}
	return changed
}

// countFault records a fault of m (a GPU's or the node's) at now, and
// flags m a lemon when it faulted pol.lemonFaults times within
// pol.lemonWindow.
func countFault(m *api.Node, now time.Time, pol healthPolicy) {
	m.Status.Faults = append(m.Status.Faults, now)
	if len(m.Status.Faults) > api.MaxFaultHistory {
		m.Status.Faults = m.Status.Faults[len(m.Status.Faults)-api.MaxFaultHistory:]
	}
	recent := 0
	for _, at := range m.Status.Faults {
		if now.Sub(at) <= pol.lemonWindow {
			recent++
		}
	}
	if recent >= pol.lemonFaults {
		m.Status.Lemon = true
	}
}

// tendHealth writes what a heartbeat's health report (nil: none) and the
// time change in node n's record, n being the record as the cache had it.
// Most heartbeats change nothing and cost no write.
func (s *Server) tendHealth(ctx context.Context, n *api.Node, checks []api.HealthCheck) error {
	now := time.Now()
	pol := s.healthPolicy()
	if !nodeHealth(n.Clone(), checks, now, pol) {
		return nil
	}
	m, err := s.st.ModifyNode(ctx, n.Name, func(m *api.Node) error {
		if m.Status.State == api.NodeLost {
			return errNoChange
		}
		if !nodeHealth(m, checks, now, pol) {
			return errNoChange
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, errNoChange) {
			return nil
		}
		return fmt.Errorf("record node %s's health: %w", n.Name, err)
	}
	if m != nil && faultOutstanding(m) && !faultOutstanding(n) {
		s.log.Warn("node health: out of service", "node", n.Name, "fault", m.Status.Fault, "gpus", faultyGPUs(m))
	}
	return nil
}

func faultyGPUs(n *api.Node) []string {
	var out []string
	for _, g := range n.GPUs {
		if g.Health == api.GPUFaulty {
			out = append(out, fmt.Sprintf("%d: %s", g.Index, g.Fault))
		}
	}
	return out
}

// keepHealth carries into a node's new registration what its health
// history holds: an agent restart is no clean bill of health. A GPU keeps
// its fault while the same device (UUID) sits at its index.
func keepHealth(reg, old *api.Node) {
	st := &reg.Status
	st.Health, st.Fault, st.FaultAt, st.HealthyAt = old.Status.Health, old.Status.Fault, old.Status.FaultAt, old.Status.HealthyAt
	st.FaultCause = old.Status.FaultCause
	st.Faults, st.Lemon = old.Status.Faults, old.Status.Lemon
	for i := range reg.GPUs {
		g := &reg.GPUs[i]
		for _, o := range old.GPUs {
			if o.Index == g.Index && o.UUID == g.UUID && o.Health == api.GPUFaulty && g.InService() {
				g.Health, g.Fault, g.FaultAt = o.Health, o.Fault, o.FaultAt
			}
		}
	}
}

// clearHealth is an operator's uncordon: every health fault and the lemon
// flag go; the checks' results stay, and only a finding that turns fatal
// anew takes anything out again.
func clearHealth(n *api.Node) {
	st := &n.Status
	st.Fault, st.FaultAt, st.FaultCause, st.HealthyAt, st.Lemon = "", time.Time{}, "", time.Time{}, false
	for i := range n.GPUs {
		if g := &n.GPUs[i]; g.Health == api.GPUFaulty {
			g.Health, g.Fault, g.FaultAt = api.GPUHealthy, "", time.Time{}
		}
	}
}
