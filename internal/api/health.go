package api

import (
	"slices"
	"strings"
	"time"
)

// CheckStatus is how one health check last came out.
type CheckStatus string

// The statuses of a check.
const (
	CheckOK CheckStatus = "ok"
	// CheckWarn: something to count or watch (a correctable ECC error, a
	// throttle); it takes nothing out of service.
	CheckWarn CheckStatus = "warn"
	// CheckFatal: the GPU or node must leave service (Action says which).
	CheckFatal CheckStatus = "fatal"
	// CheckError: the check itself failed or hung; it says nothing about
	// the hardware and takes nothing out of service.
	CheckError CheckStatus = "error"
)

// HealthAction is what a finding calls for.
type HealthAction string

// The actions, mildest first.
const (
	ActionNone HealthAction = ""
	// ActionCount: record it; nothing leaves service.
	ActionCount HealthAction = "count"
	// ActionResetGPU: the GPU needs a reset (an operator's or the
	// driver's) before it is used again; it leaves service until then.
	ActionResetGPU HealthAction = "reset-gpu"
	// ActionCordonGPU: the GPU leaves service; the node keeps serving with
	// its others.
	ActionCordonGPU HealthAction = "cordon-gpu"
	// ActionCordonNode: the whole node leaves service.
	ActionCordonNode HealthAction = "cordon-node"
)

// HealthCheck is one check's latest result on a node, as its agent
// reports it.
type HealthCheck struct {
	// Check names the check: xid, ecc, thermal, power, nvlink, pcie, ib,
	// disk, clock, memory.
	Check  string       `json:"check"`
	Status CheckStatus  `json:"status"`
	Action HealthAction `json:"action,omitempty"`
	// GPU is the index of the GPU the finding is about, -1 for the node.
	GPU int `json:"gpu"`
	// Code is the Xid (or another check's numeric code), 0 if none.
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Since is when the check first came out this way; At when it last ran.
	Since time.Time `json:"since,omitzero"`
	At    time.Time `json:"at,omitzero"`
}

// Fatal reports whether the result takes a GPU or the node out of service.
func (h HealthCheck) Fatal() bool {
	return h.Status == CheckFatal && (h.Action == ActionResetGPU || h.Action == ActionCordonGPU || h.Action == ActionCordonNode)
}

// SameHealth reports whether two reports say the same, ignoring when the
// checks last ran (At): an agent sends its report again only when this
// is false, and the server rewrites a node only then.
func SameHealth(a, b []HealthCheck) bool {
	return slices.EqualFunc(a, b, func(x, y HealthCheck) bool {
		x.At, y.At = time.Time{}, time.Time{}
		return x == y
	})
}

// CauseOf is the attempt's cause: as recorded, else read from its outcome
// and reason (attempts that ended before causes were recorded).
func CauseOf(a *Attempt) Cause {
	if a.Cause != "" {
		return a.Cause
	}
	switch a.Outcome {
	case OutcomeSucceeded:
		return CauseSucceeded
	case OutcomeCancelled:
		return CauseCancelled
	case OutcomePreempted:
		return CausePreempted
	case OutcomeTimedOut:
		return CauseTimeLimit
	case OutcomeInterrupted:
		return CauseDrain
	case OutcomeRequeued:
		return CauseRequeued
	case OutcomeFailed:
		switch {
		case strings.HasPrefix(a.Reason, "node ") && strings.HasSuffix(a.Reason, " lost"):
			return CauseNodeLost
		case strings.HasPrefix(a.Reason, "no progress for "):
			return CauseHang
		}
		return CauseUserError
	}
	return ""
}
