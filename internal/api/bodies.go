package api

import "time"

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

// JobTopList is GET /v1/top/jobs's body: the running jobs, in ID order.
type JobTopList struct {
	Jobs []JobTop `json:"jobs"`
}

// JobTop is one running job as `gangway top jobs` shows it: the newest
// readings of its GPUs, as their nodes' heartbeats brought them, and its
// attempt's newest progress.
type JobTop struct {
	ID      string   `json:"id"`
	Name    string   `json:"name,omitempty"`
	User    string   `json:"user,omitempty"`
	Queue   string   `json:"queue"`
	Attempt int      `json:"attempt"`
	Nodes   []string `json:"nodes"`
	// GPUs is what the job asks for (fractions for time-shared and MIG
	// ranks); Sampled how many of the GPUs it holds have a reading.
	GPUs    float64 `json:"gpus"`
	Sampled int     `json:"sampled"`
	// UtilPercent is the mean utilisation of the sampled GPUs, -1 with
	// none; MemUsedMiB their frame buffer in use, added up.
	UtilPercent float64 `json:"utilPercent"`
	MemUsedMiB  float64 `json:"memUsedMiB"`
	// Step, Loss and ProgressAt are the attempt's newest progress line
	// (none yet: Step 0, ProgressAt zero); TokensPerSec the rate over its
	// recent lines (TokenRate), 0 when unknown.
	Step         int64     `json:"step"`
	Loss         *float64  `json:"loss,omitempty"`
	ProgressAt   time.Time `json:"progressAt,omitzero"`
	TokensPerSec float64   `json:"tokensPerSec"`
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
	Index  int64    `json:"index"`
	Queues []*Queue `json:"queues"`
}

// DeploymentList is GET /v1/deployments's body.
type DeploymentList struct {
	Index       int64         `json:"index"`
	Deployments []*Deployment `json:"deployments"`
}
