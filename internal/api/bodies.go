package api

// This file holds the /v1 bodies that are not a resource themselves: the
// lists, the error every failed request returns, and answers to actions.

// Health is GET /healthz's body. The fields are in the order the server's
// map once wrote them (sorted), so the bytes are unchanged.
type Health struct {
	// Leader is true on the replica that runs the controllers.
	Leader bool `json:"leader"`
	OK     bool `json:"ok"`
}

// Deleted is what DELETE /v1/queues/{name} answers.
type Deleted struct {
	Deleted string `json:"deleted"`
}

// ErrorBody is the JSON every failed request returns.
type ErrorBody struct {
	Error  string        `json:"error"`
	Fields []*FieldError `json:"fields,omitempty"`
}

// JobList is GET /v1/jobs's body.
type JobList struct {
	Index int64  `json:"index"`
	Jobs  []*Job `json:"jobs"`
	// Warnings say what the list may lack (all=1 on a server that keeps
	// no job archive).
	Warnings []string `json:"warnings,omitempty"`
}

// NodeList is GET /v1/nodes's body.
type NodeList struct {
	Index int64   `json:"index"`
	Nodes []*Node `json:"nodes"`
}

// ArrayCancel is what cancelling a job array answers.
type ArrayCancel struct {
	ArrayID string `json:"arrayId"`
	// Cancelled are the tasks asked to stop; Done those already finished.
	Cancelled int `json:"cancelled"`
	Done      int `json:"done"`
}

// QueueList is GET /v1/queues's body.
type QueueList struct {
	Queues []*Queue `json:"queues"`
}

// DeploymentList is GET /v1/deployments's body.
type DeploymentList struct {
	Index       int64         `json:"index"`
	Deployments []*Deployment `json:"deployments"`
}
