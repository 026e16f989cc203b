package api

import (
	"slices"
	"time"
)

// Event is something that happened to a job, a node, a deployment or a
// queue, in plain words, as `gangway events` and `gangway describe` show
// it (Kubernetes' events, in gangway's terms). The leader derives events
// from the changes it sees in the store; they are kept for the server's
// --event-ttl.
type Event struct {
	// Index is the store revision the event was written at: events are
	// listed in its order, and a blocking query (?index=N) waits for one
	// past N. Events written together share it.
	Index int64     `json:"index"`
	Time  time.Time `json:"time"`
	// Type is EventNormal or EventWarning, as kubectl shows them.
	Type EventType `json:"type"`
	// Reason is one word in CamelCase: Scheduled, Started, NodeLost, ...
	Reason string `json:"reason"`
	// Kind and Name are the object: a job's ID, or a node's, a
	// deployment's or a queue's name.
	Kind ObjectKind `json:"kind"`
	Name string     `json:"name"`
	// Attempt is the job's attempt the event is about; 0 if none.
	Attempt int `json:"attempt,omitempty"`
	// Nodes are the nodes the event concerns besides its object (a job's
	// placement, the node lost under it): a query for a node finds it by
	// them too.
	Nodes   []string `json:"nodes,omitempty"`
	Message string   `json:"message"`
}

// EventType is how much an event asks for attention.
type EventType string

// Event types, as Kubernetes has them.
const (
	EventNormal  EventType = "Normal"
	EventWarning EventType = "Warning"
)

// ObjectKind is what an event is about.
type ObjectKind string

// The kinds of object events are about.
const (
	KindJob        ObjectKind = "job"
	KindNode       ObjectKind = "node"
	KindDeployment ObjectKind = "deployment"
	KindQueue      ObjectKind = "queue"
)

// ObjectKinds are the kinds of object events are about.
var ObjectKinds = []ObjectKind{KindJob, KindNode, KindDeployment, KindQueue}

// Event reasons. A job's: it was submitted, waits, was placed, runs,
// committed a checkpoint, got its checkpoint signal before a preemption,
// lost an attempt (for the cause the reason names), restarts as a new
// attempt, and ends. A node's: it registered, is ready, was lost,
// cordoned, drained; a GPU or the whole node faulted or recovered; it was
// found a straggler or a lemon. A deployment's: created, changed, scaled,
// deleted. A queue's: created, changed, deleted.
const (
	ReasonSubmitted  = "Submitted"
	ReasonWaiting    = "Waiting"
	ReasonScheduled  = "Scheduled"
	ReasonStarted    = "Started"
	ReasonCheckpoint = "Checkpoint"
	ReasonPreempting = "Preempting"
	ReasonPreempted  = "Preempted"
	ReasonRequeuing  = "Requeuing"
	ReasonRequeued   = "Requeued"
	ReasonSignalled  = "Signalled"
	ReasonNodeLost   = "NodeLost"
	ReasonGPUFault   = "GPUFault"
	ReasonNodeFault  = "NodeFault"
	ReasonHang       = "Hang"
	ReasonStraggler  = "Straggler"
	ReasonFenced     = "Fenced"
	ReasonDrained    = "Drained"
	ReasonTimedOut   = "TimedOut"
	ReasonFailed     = "Failed"
	ReasonPreflight  = "Preflight"
	ReasonRestarted  = "Restarted"
	ReasonSucceeded  = "Succeeded"
	ReasonCancelled  = "Cancelled"

	ReasonRegistered   = "Registered"
	ReasonReady        = "Ready"
	ReasonCordoned     = "Cordoned"
	ReasonUncordoned   = "Uncordoned"
	ReasonDraining     = "Draining"
	ReasonGPURecovered = "GPURecovered"
	ReasonRecovered    = "Recovered"
	ReasonLemon        = "Lemon"

	ReasonCreated  = "Created"
	ReasonChanged  = "Changed"
	ReasonScaled   = "Scaled"
	ReasonDeleting = "Deleting"
	ReasonDeleted  = "Deleted"
)

// EventList is GET /v1/events's body: the events asked for, oldest
// first, and the index to ask with for the next ones.
type EventList struct {
	Index  int64   `json:"index"`
	Events []Event `json:"events"`
}

// EventFilter is what GET /v1/events keeps; its zero value keeps every
// event.
type EventFilter struct {
	// Job, Deployment and Queue keep the events of that object; Node those
	// of the node and those naming it in Nodes.
	Job, Node, Deployment, Queue string
	// Kind keeps the events of objects of that kind.
	Kind ObjectKind
	// Since keeps the events from that time on.
	Since time.Time
}

// Match reports whether f keeps e.
func (f *EventFilter) Match(e *Event) bool {
	switch {
	case f.Job != "" && (e.Kind != KindJob || e.Name != f.Job),
		f.Deployment != "" && (e.Kind != KindDeployment || e.Name != f.Deployment),
		f.Queue != "" && (e.Kind != KindQueue || e.Name != f.Queue),
		f.Node != "" && !(e.Kind == KindNode && e.Name == f.Node) && !slices.Contains(e.Nodes, f.Node),
		f.Kind != "" && e.Kind != f.Kind,
		!f.Since.IsZero() && e.Time.Before(f.Since):
		return false
	}
	return true
}
