package controller

import "time"

// Fencing is the timing contract that keeps a gang from running twice
// while letting ranks live through a control-plane outage. The server
// derives it from the heartbeat interval I and the node timeout N, tells
// the agents their part at registration, and the lifecycle decides node
// loss by it. docs/design.md ("No gang runs twice") argues the numbers;
// in short, with message delays under I/4:
//
//   - An agent whose heartbeats have all failed for FenceAfter (N − I)
//     kills its ranks (its supervisor does, if the agent is dead or
//     frozen), unless every one of its witnesses (other nodes) answers
//     that it too has had no successful heartbeat for WitnessDown: then
//     the control plane is down, not this node cut off, and the ranks
//     live for another FenceAfter from that answer, up to MaxOutage.
//   - A witness silent for WitnessDown has a gap in its heartbeats longer
//     than StreakGap as the server saw them, so its run of heartbeats
//     starts again after the answer.
//   - The server declares a node silent for N lost only while one of its
//     witnesses has an unbroken run of heartbeats of at least WitnessRun
//     (longer than FenceAfter): that witness would have told the node to
//     fence, or could not be reached by it, which also fences. With no
//     witness heard that long, it waits MaxOutage + N.
type Fencing struct {
	Interval, NodeTimeout time.Duration
	FenceAfter            time.Duration
	WitnessDown           time.Duration
	StreakGap             time.Duration
	WitnessRun            time.Duration
	MaxOutage             time.Duration
	// Witnesses is how many witnesses each node gets; 0 when N is too
	// short for a witness's silence to show before the fence (N < 4I):
	// agents then fence after FenceAfter whatever happens.
	Witnesses int
}

// DefaultMaxOutage is how long agents keep ranks while no server answers,
// as Slurm's SlurmdTimeout default.
const DefaultMaxOutage = 5 * time.Minute

// NewFencing derives the contract from the heartbeat interval, the node
// timeout and the longest outage ranks outlive (0: DefaultMaxOutage).
func NewFencing(interval, nodeTimeout, maxOutage time.Duration) Fencing {
	if maxOutage <= 0 {
		maxOutage = DefaultMaxOutage
	}
	f := Fencing{
		Interval: interval, NodeTimeout: nodeTimeout,
		FenceAfter:  nodeTimeout - interval,
		WitnessDown: interval * 8 / 5,
		StreakGap:   interval * 13 / 10,
		MaxOutage:   maxOutage,
	}
	f.WitnessRun = f.FenceAfter + interval
	if nodeTimeout >= 4*interval {
		f.Witnesses = 3
	}
	return f
}
