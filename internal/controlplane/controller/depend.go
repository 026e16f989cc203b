package controller

import (
	"fmt"

	"github.com/gangway/gangway/internal/api"
)

// PendingDependency: the job's dependency holds it back.
const PendingDependency = "dependency"

// dependency says whether j's spec.dependency holds it back: why, in its
// reason's words, and never when it can no longer hold (an afterok on a
// job that failed), in which case j is to be cancelled.
func (p *pass) dependency(j *api.Job) (why string, never bool) {
	deps, err := api.ParseDependency(j.Spec.Dependency)
	if err != nil || len(deps) == 0 {
		return "", false // validated at submission
	}
	for _, d := range deps {
		if d.Kind == api.DepSingleton {
			for _, o := range p.v.Jobs {
				if o.ID != j.ID && !o.Status.Phase.Final() && o.Spec.Name == j.Spec.Name && o.Spec.User == j.Spec.User && earlier(o, j) {
					return fmt.Sprintf("singleton: waits for job %s, of the same name and user, to end", o.ID), false
				}
			}
			continue
		}
		for _, id := range d.Jobs {
			var phase api.JobPhase
			var started bool
			if o := p.v.Jobs[id]; o != nil {
				phase, started = o.Status.Phase, len(o.Status.Attempts) > 0
			} else if f, ok := p.c.cache.Finished(id); ok {
				phase, started = f.Phase, f.Started
			} else {
				// Gone: retention deleted it long after it ended.
				if d.Kind == api.DepAfter || d.Kind == api.DepAfterAny {
					continue
				}
				return fmt.Sprintf("dependency %s:%s can no longer hold: job %s is gone, and how it ended with it", d.Kind, id, id), true
			}
			switch d.Holds(phase, started) {
			case api.DepWaiting:
				return fmt.Sprintf("waits for job %s to %s (dependency %s)", id, depWords[d.Kind], j.Spec.Dependency), false
			case api.DepNever:
				return fmt.Sprintf("dependency %s:%s can no longer hold: job %s ended %s", d.Kind, id, id, phase), true
			}
		}
	}
	return "", false
}

var depWords = map[string]string{
	api.DepAfter:      "start",
	api.DepAfterAny:   "end",
	api.DepAfterOK:    "succeed",
	api.DepAfterNotOK: "fail",
}

// earlier reports whether a was submitted before b.
func earlier(a, b *api.Job) bool {
	if !a.SubmittedAt.Equal(b.SubmittedAt) {
		return a.SubmittedAt.Before(b.SubmittedAt)
	}
	return len(a.ID) < len(b.ID) || (len(a.ID) == len(b.ID) && a.ID < b.ID)
}

// heldByDependency cancels j when its dependency can no longer hold, and
// otherwise says in its reason what it waits for.
func (p *pass) heldByDependency(j *api.Job, why string, never bool) {
	p.kinds[j.ID] = PendingDependency
	if p.fresh[j.ID] != nil {
		return // not stored yet: the pass stores it waiting, the next says why
	}
	if never {
		p.apply(p.life.finish(j.Clone(), api.JobCancelled, why))
		return
	}
	if j.Status.Phase == api.JobRestarting {
		why = "restarting: " + why
	}
	if j.Status.Reason == why || !p.c.reasonDue(j.ID, j.Status.Reason, p.now) {
		return
	}
	m := j.Clone()
	m.Status.Reason = why
	p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
}

// PendingHeld: a user holds the job (gangway hold, or spec.hold).
const PendingHeld = "held"

// heldByUser says in a held job's reason that it is held and how to let
// it go.
func (p *pass) heldByUser(j *api.Job) {
	p.kinds[j.ID] = PendingHeld
	why := fmt.Sprintf("held: nothing places it until gangway release %s", j.ID)
	if p.fresh[j.ID] != nil || j.Status.Reason == why || !p.c.reasonDue(j.ID, j.Status.Reason, p.now) {
		return
	}
	m := j.Clone()
	m.Status.Reason = why
	p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
}
