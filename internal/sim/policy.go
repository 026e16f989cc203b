package sim

import (
	"fmt"
	"math"
	"strings"

	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

// QueueMode is how a non-preemptive policy hands its queue to the
// scheduler.
type QueueMode uint8

const (
	// Strict stops at the first gang that does not fit (strict FIFO).
	Strict QueueMode = iota
	// Greedy lets later gangs start when an earlier one does not fit.
	Greedy
	// Backfill reserves room for the blocked head of the queue and lets
	// later gangs start only where they do not delay it.
	Backfill
)

// Policy decides which jobs should run and in what order; where they run
// is the scheduler's decision. Policies are chosen by name (ParsePolicy).
type Policy interface {
	// Name is the policy's name, as ParsePolicy takes it.
	Name() string
	// Oracle reports whether the policy reads job durations from the
	// trace, which no production scheduler knows.
	Oracle() bool
	preemptive() bool
	mode() QueueMode
	// key orders jobs: lower runs first. For a pending job it must not
	// change until nextRekey.
	key(j *job, now float64) key
	// nextRekey is when j's key next changes on its own; +Inf for never.
	nextRekey(j *job, now float64) float64
	// rekey applies what happens at that time (aging).
	rekey(j *job, now float64)
	// protected reports a running job that must not be preempted now.
	protected(j *job, now float64) bool
	// schedPreempt hands preemption to the scheduler: requests and
	// running jobs carry priority(), and the scheduler picks victims
	// (fewest, least work lost, topology-compatible), as in production.
	// Policies for which preemptive() is true instead preempt by GPU
	// count in policy order, as the Helios simulator does.
	schedPreempt() bool
	priority(j *job, now float64) int
	// stableKeys reports that a running job's key changes only at its
	// rekey events.
	stableKeys() bool
	// starving reports a pending job that has waited too long.
	starving(j *job, now float64) bool
}

// PolicyNames lists the policies ParsePolicy knows.
func PolicyNames() []string {
	return []string{"fifo", "fifo-backfill", "sjf", "srtf", "tiresias", "gangway", "live"}
}

// ParsePolicy returns the named policy with its default settings. "live"
// is the controller's default configuration (Live(nil)); the names of
// internal/scheduler/policy that are not the simulator's own run that
// package's policy.
func ParsePolicy(name string) (Policy, error) {
	switch n := strings.ToLower(strings.TrimSpace(name)); n {
	case "fifo", "strict-fifo":
		return FromPolicy(namedPolicy("fifo")), nil
	case "fifo-backfill", "backfill", "easy":
		return fifo{backfill: true}, nil
	case "sjf":
		return sjf{}, nil
	case "srtf":
		return srtf{}, nil
	case "tiresias", "2d-las":
		return Tiresias(3600), nil
	case "gangway", "default":
		return Gangway(), nil
	case "live", "server":
		return Live(nil), nil
	default:
		if q, ok := strings.CutPrefix(n, "live:"); ok {
			// The controller with a default queue of policy q.
			p, err := policy.New(q)
			if err != nil || q == "" {
				return nil, fmt.Errorf("policy %q: live:P takes a queue policy (%s)", name, strings.Join(policy.Names(), ", "))
			}
			return live(p, n), nil
		}
		if p, err := policy.New(n); err == nil && n != "" {
			return FromPolicy(p), nil
		}
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(PolicyNames(), ", "))
}

type never struct{}

func (never) nextRekey(*job, float64) float64 { return math.Inf(1) }
func (never) rekey(*job, float64)             {}
func (never) protected(*job, float64) bool    { return false }
func (never) schedPreempt() bool              { return false }
func (never) priority(*job, float64) int      { return 0 }
func (never) stableKeys() bool                { return true }
func (never) starving(*job, float64) bool     { return false }

// fifo is FIFO with backfill that reads each job's true duration as its
// estimate (an oracle, as EASY backfill with exact estimates): a blocked
// head gets a reservation and later gangs pass it where they end in time.
// Strict FIFO, which reads no durations, is internal/scheduler/policy's
// "fifo".
type fifo struct {
	never
	backfill bool
}

func (p fifo) Name() string {
	if p.backfill {
		return "fifo-backfill"
	}
	return "fifo"
}
func (p fifo) Oracle() bool   { return p.backfill } // backfill reads durations as its estimates
func (fifo) preemptive() bool { return false }
func (p fifo) mode() QueueMode {
	if p.backfill {
		return Backfill
	}
	return Strict
}
func (fifo) key(j *job, _ float64) key { return key{a: j.submit, idx: j.idx} }

// sjf starts the shortest job first, by its true duration, strictly: the
// shortest job that does not fit blocks the rest (the Helios reference).
type sjf struct{ never }

func (sjf) Name() string              { return "sjf" }
func (sjf) Oracle() bool              { return true }
func (sjf) preemptive() bool          { return false }
func (sjf) mode() QueueMode           { return Strict }
func (sjf) key(j *job, _ float64) key { return key{a: j.dur, idx: j.idx} }

// srtf runs the jobs with the least remaining time, preempting others, by
// GPU count (the Helios reference's SRTF).
type srtf struct{ never }

func (srtf) Name() string     { return "srtf" }
func (srtf) Oracle() bool     { return true }
func (srtf) preemptive() bool { return true }
func (srtf) stableKeys() bool { return false }
func (srtf) mode() QueueMode  { return Greedy }
func (srtf) key(j *job, now float64) key {
	return key{a: j.remainingAt(now), idx: j.idx}
}

// tiresias is 2D-LAS (Tiresias, NSDI'19, discretized): queue 0 holds jobs
// that have received less than Threshold GPU-seconds, queue 1 the rest;
// within a queue, first come first served; queue 0 preempts queue 1.
type tiresias struct {
	never
	thresholds []float64
}

// Tiresias returns 2D-LAS with the given queue thresholds in GPU-seconds.
func Tiresias(thresholds ...float64) Policy {
	return tiresias{thresholds: thresholds}
}

func (tiresias) Name() string     { return "tiresias" }
func (tiresias) Oracle() bool     { return false }
func (tiresias) preemptive() bool { return true }
func (tiresias) mode() QueueMode  { return Greedy }
func (p tiresias) key(j *job, now float64) key {
	return key{a: float64(policy.LevelOf(p.thresholds, j.attainedAt(now))), b: j.submit, idx: j.idx}
}
func (p tiresias) nextRekey(j *job, now float64) float64 {
	if j.phase != phaseRunning {
		return math.Inf(1)
	}
	return policy.Crossing(p.thresholds, j.attainedAt(now), j.gpus, now)
}

// shared runs a policy of internal/scheduler/policy, the code the
// server's controller runs, on the simulator's jobs.
type shared struct {
	p    policy.Policy
	name string
	qm   QueueMode
	// server: the scheduler reserves for ServerReservations blocked gangs
	// in Backfill mode, as the controller does.
	server bool
}

// FromPolicy runs p in the simulator under p's name.
func FromPolicy(p policy.Policy) Policy {
	return adapt(shared{p: p, name: p.Name(), qm: queueMode(p.Mode())})
}

// adapt is s, or, for a policy.LanePolicy, s with its lane kept as
// events come (laneShared).
func adapt(s shared) Policy {
	if lp, ok := s.p.(*policy.LanePolicy); ok {
		return &laneShared{shared: s, lp: lp}
	}
	return s
}

// Live is what the server's controller runs with p as its default
// queue's policy (nil: policy.Default), under the name "live": p's order
// and priorities, the scheduler reserving for ServerReservations blocked
// gangs in Backfill mode, each job's time limit as its estimate. Traces
// carry no time limits, so no end is known: a blocked gang's reservation
// has no start and only gangs that leave its GPUs alone pass it.
func Live(p policy.Policy) Policy {
	if p == nil {
		p = namedPolicy(policy.Default)
	}
	return live(p, "live")
}

// live is Live(p) under name.
func live(p policy.Policy, name string) Policy {
	return adapt(shared{p: p, name: name, qm: queueMode(p.Mode()), server: true})
}

// Gangway returns gangway's default policy (policy.LanePolicy) with its
// default settings.
func Gangway() Policy { return FromPolicy(policy.Lane()) }

func namedPolicy(name string) policy.Policy {
	p, err := policy.New(name)
	if err != nil {
		panic(err)
	}
	return p
}

func queueMode(m scheduler.Mode) QueueMode {
	switch m {
	case scheduler.Strict:
		return Strict
	case scheduler.Backfill:
		return Backfill
	}
	return Greedy
}

func (s shared) Name() string       { return s.name }
func (shared) Oracle() bool         { return false }
func (shared) preemptive() bool     { return false }
func (s shared) mode() QueueMode    { return s.qm }
func (s shared) schedPreempt() bool { return s.p.Preempts() }
func (shared) stableKeys() bool     { return true }
func (s shared) key(j *job, now float64) key {
	k := s.p.Key(j.pstate(), now)
	return key{a: k.A, b: k.B, idx: j.idx}
}
func (s shared) nextRekey(j *job, now float64) float64 {
	if j.phase != phasePending && j.phase != phaseRunning {
		return math.Inf(1)
	}
	return s.p.NextRekey(j.pstate(), now)
}
func (s shared) rekey(j *job, now float64) {
	if j.phase == phasePending {
		s.p.Rekey(j.pstate(), now)
	}
}
func (s shared) protected(j *job, now float64) bool { return s.p.Protected(j.pstate(), now) }
func (s shared) priority(j *job, now float64) int   { return s.p.Priority(j.pstate(), now) }
func (s shared) starving(j *job, now float64) bool {
	return j.phase == phasePending && s.p.Starving(j.pstate(), now)
}
