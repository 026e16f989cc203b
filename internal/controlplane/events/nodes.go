package events

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// node tells what happened between two versions of a node: old nil for a
// new one, n nil for one deleted.
func node(name string, old, n *api.Node, at time.Time) []api.Event {
	var out []api.Event
	add := func(t api.EventType, reason, msg string, args ...any) {
		out = append(out, api.Event{Time: at, Type: t, Reason: reason, Kind: api.KindNode, Name: name, Message: fmt.Sprintf(msg, args...)})
	}
	switch {
	case n == nil:
		if old != nil {
			add(api.EventNormal, api.ReasonDeleted, "removed from the store")
		}
		return out
	case old == nil || !n.Status.RegisteredAt.IsZero() && !n.Status.RegisteredAt.Equal(old.Status.RegisteredAt):
		model := "no GPUs"
		if len(n.GPUs) > 0 {
			model = fmt.Sprintf("%d × %s", len(n.GPUs), n.GPUs[0].Model)
		}
		again := ""
		if old != nil {
			again = " again (its agent restarted)"
		}
		add(api.EventNormal, api.ReasonRegistered, "registered%s: %s, address %s", again, model, dash(n.Address))
		if old == nil {
			old = &api.Node{Status: api.NodeStatus{State: api.NodeReady}}
		}
	}
	st, was := &n.Status, &old.Status
	switch {
	case st.State == api.NodeLost && was.State != api.NodeLost:
		why := st.Reason
		if why == "" {
			why = "no heartbeat"
		}
		add(api.EventWarning, api.ReasonNodeLost, "lost: %s", why)
	case st.State == api.NodeReady && was.State == api.NodeLost:
		add(api.EventNormal, api.ReasonReady, "ready again: its agent is heard")
	}
	switch {
	case st.Draining && !was.Draining:
		add(api.EventNormal, api.ReasonDraining, "draining: no new ranks, and its gangs move elsewhere")
	case st.Cordoned && !was.Cordoned:
		add(api.EventNormal, api.ReasonCordoned, "cordoned: no new ranks")
	case !st.Cordoned && !st.Draining && (was.Cordoned || was.Draining):
		add(api.EventNormal, api.ReasonUncordoned, "uncordoned: ranks may be placed on it again")
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		k := slices.IndexFunc(old.GPUs, func(o api.GPU) bool { return o.Index == g.Index })
		in := k < 0 || old.GPUs[k].InService()
		switch {
		case in && !g.InService():
			why := g.Fault
			if why == "" {
				why = "health " + g.Health
			}
			add(api.EventWarning, api.ReasonGPUFault, "GPU %d (%s) out of service: %s", g.Index, g.UUID, why)
		case !in && g.InService():
			add(api.EventNormal, api.ReasonGPURecovered, "GPU %d (%s) back in service", g.Index, g.UUID)
		}
	}
	switch {
	case st.Fault != "" && was.Fault == "":
		reason := api.ReasonNodeFault
		switch st.FaultCause {
		case api.CauseGPUFault:
			reason = api.ReasonGPUFault
		case api.CauseStraggler:
			reason = api.ReasonStraggler
		}
		add(api.EventWarning, reason, "out of service: %s", st.Fault)
	case st.Fault == "" && was.Fault != "":
		add(api.EventNormal, api.ReasonRecovered, "back in service after: %s", was.Fault)
	}
	if st.Lemon && !was.Lemon {
		add(api.EventWarning, api.ReasonLemon, "a lemon: %d faults recorded; kept out of gangs that span nodes until uncordoned", len(st.Faults))
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// deployment tells what happened between two versions of a deployment:
// old nil for a new one, d nil for one deleted.
func deployment(name string, old, d *api.Deployment, at time.Time) []api.Event {
	var out []api.Event
	add := func(reason, msg string, args ...any) {
		out = append(out, api.Event{Time: at, Type: api.EventNormal, Reason: reason, Kind: api.KindDeployment, Name: name, Message: fmt.Sprintf(msg, args...)})
	}
	switch {
	case d == nil:
		if old != nil {
			add(api.ReasonDeleted, "deleted")
		}
		return out
	case old == nil:
		add(api.ReasonCreated, "created: %s on %s, %d GPU(s) per replica", d.Spec.Model, d.Spec.Engine, max(d.Spec.GPUsPerReplica, 1))
		return out
	}
	if d.Generation != old.Generation {
		add(api.ReasonChanged, "spec changed (generation %d): replicas are replaced", d.Generation)
	}
	if d.Status.Desired != old.Status.Desired {
		msg := fmt.Sprintf("scaled from %d to %d replicas", old.Status.Desired, d.Status.Desired)
		if d.Status.Reason != "" {
			msg += ": " + d.Status.Reason
		}
		add(api.ReasonScaled, "%s", msg)
	}
	if d.Status.Ready != old.Status.Ready {
		add(api.ReasonReady, "%d of %d replicas ready", d.Status.Ready, d.Status.Desired)
	}
	if d.Status.Deleting && !old.Status.Deleting {
		add(api.ReasonDeleting, "deleting: its replicas stop")
	}
	return out
}

// queue tells what happened between two versions of a queue: old nil for
// a new one, q nil for one deleted. Its usage (status) tells nothing.
func queue(name string, old, q *api.Queue, at time.Time) []api.Event {
	var msg, reason string
	switch {
	case q == nil && old != nil:
		reason, msg = api.ReasonDeleted, "deleted"
	case q == nil:
		return nil
	case old == nil:
		reason, msg = api.ReasonCreated, "created: "+queueTerms(&q.Spec)
	default:
		if was, now := queueTerms(&old.Spec), queueTerms(&q.Spec); was != now || !slices.Equal(old.Spec.Users, q.Spec.Users) || !slices.Equal(old.Spec.Groups, q.Spec.Groups) {
			reason, msg = api.ReasonChanged, "changed: "+now
			if was != now {
				msg += " (was " + was + ")"
			}
		}
	}
	if reason == "" {
		return nil
	}
	return []api.Event{{Time: at, Type: api.EventNormal, Reason: reason, Kind: api.KindQueue, Name: name, Message: msg}}
}

// queueTerms says what a queue gives.
func queueTerms(s *api.QueueSpec) string {
	parts := []string{fmt.Sprintf("guarantee %d GPUs", s.GuaranteeGPUs)}
	if s.BorrowLimitGPUs != nil {
		parts = append(parts, fmt.Sprintf("borrow limit %d", *s.BorrowLimitGPUs))
	}
	if s.Weight != 0 {
		parts = append(parts, fmt.Sprintf("weight %g", s.Weight))
	}
	if s.Cohort != "" {
		parts = append(parts, "cohort "+s.Cohort)
	}
	return strings.Join(parts, ", ")
}
