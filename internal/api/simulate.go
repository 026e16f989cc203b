package api

import (
	"math"
	"path/filepath"
	"strings"
)

// This file holds the bodies of POST /v1/simulate and GET
// /v1/simulate/traces: a trace replayed through the simulator on the
// server, for the dashboard's Simulate page. The options mean what
// `gangway simulate`'s flags of the same names mean.

// MaxTraceBytes bounds an uploaded trace (SimulateRequest.TraceData); a
// bigger one goes in the server's --trace-dir and is named instead.
const MaxTraceBytes = 64 << 20

// SimulateRequest is POST /v1/simulate's body: one trace, named or
// uploaded, and the cluster and policies to replay it with.
type SimulateRequest struct {
	// Trace names a file of the server's --trace-dir (GET
	// /v1/simulate/traces lists them).
	Trace string `json:"trace,omitempty"`
	// TraceData is an uploaded trace, the file's text (at most
	// MaxTraceBytes); TraceName is its file name, for messages.
	TraceData string `json:"traceData,omitempty"`
	TraceName string `json:"traceName,omitempty"`
	// Format is the trace's format (philly, helios, openb, csv, jsonl);
	// empty: told from its header.
	Format string `json:"format,omitempty"`
	// From and To keep the jobs submitted in that window: a date
	// (YYYY-MM-DD; To's is the end of that day), "YYYY-MM-DD HH:MM:SS"
	// or RFC 3339.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Policies to compare, each over the whole trace (default gangway;
	// "all" is every one).
	Policies []string `json:"policies,omitempty"`
	// Placement is the placement strategy (default gangway).
	Placement string `json:"placement,omitempty"`
	// The cluster: Nodes of GPUsPerNode GPUs (default 8), NodesPerLeaf
	// under one leaf switch (0: one leaf), or as many nodes as make the
	// trace's GPU-time Load of the capacity over its submission span.
	// Give Nodes or Load.
	Nodes        int     `json:"nodes,omitempty"`
	GPUsPerNode  int     `json:"gpusPerNode,omitempty"`
	NodesPerLeaf int     `json:"nodesPerLeaf,omitempty"`
	Load         float64 `json:"load,omitempty"`
}

// Validate checks what needs no simulator: one trace, named plainly or
// uploaded within MaxTraceBytes, and a cluster size. The simulator checks
// the rest (policies, placement, format, window) and names the field.
func (r *SimulateRequest) Validate() error {
	var fe FieldErrors
	switch {
	case r.Trace == "" && r.TraceData == "":
		fe.Add("trace", "name a trace of the server's trace directory, or upload one as traceData")
	case r.Trace != "" && r.TraceData != "":
		fe.Add("trace", "name a trace or upload one (traceData), not both")
	case r.Trace != "" && !PlainFileName(r.Trace):
		fe.Add("trace", "%q is not a file name of the trace directory (no directories, no leading dot)", r.Trace)
	case len(r.TraceData) > MaxTraceBytes:
		fe.Add("traceData", "the trace has %d bytes; an upload may have at most %d MiB (put bigger ones in the server's --trace-dir)", len(r.TraceData), MaxTraceBytes>>20)
	}
	switch {
	case r.Nodes < 0:
		fe.Add("nodes", "must not be negative")
	case math.IsNaN(r.Load) || math.IsInf(r.Load, 0) || r.Load < 0:
		fe.Add("load", "must be a positive number")
	case r.Nodes > 0 && r.Load > 0:
		fe.Add("nodes", "give nodes or load, not both")
	case r.Nodes == 0 && r.Load == 0:
		fe.Add("nodes", "the cluster has no nodes: give nodes, or load to size it for the trace")
	}
	if r.GPUsPerNode < 0 {
		fe.Add("gpusPerNode", "must not be negative")
	}
	if r.NodesPerLeaf < 0 {
		fe.Add("nodesPerLeaf", "must not be negative")
	}
	return fe.Err()
}

// PlainFileName reports whether name is a file's name alone: no
// directory, not "." or "..", not hidden.
func PlainFileName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && filepath.Base(name) == name && !strings.HasPrefix(name, ".")
}

// SimulateTraces is GET /v1/simulate/traces's body: the traces a
// simulation may name, and what it may choose.
type SimulateTraces struct {
	// TraceDir says whether the server has a trace directory; without
	// one, traces are uploaded.
	TraceDir bool       `json:"traceDir"`
	Traces   []SimTrace `json:"traces"`
	// Policies are the simulator's policy names; DefaultPolicy the one
	// it recommends.
	Policies      []string `json:"policies"`
	DefaultPolicy string   `json:"defaultPolicy"`
	// MaxTraceBytes bounds an upload.
	MaxTraceBytes int64 `json:"maxTraceBytes"`
}

// SimTrace is one file of the trace directory.
type SimTrace struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// SimulateResult is POST /v1/simulate's answer: each policy's summary and
// what the dashboard draws of its run.
type SimulateResult struct {
	// Trace is the trace's name; Jobs how many of its jobs were replayed,
	// Skipped how many were left out (outside the window, no GPU).
	Trace   string `json:"trace"`
	Jobs    int    `json:"jobs"`
	Skipped int    `json:"skipped"`
	// Cluster is the cluster's shape (as `gangway simulate` prints it),
	// GPUs its size.
	Cluster   string   `json:"cluster"`
	GPUs      int      `json:"gpus"`
	Placement string   `json:"placement"`
	Runs      []SimRun `json:"runs"`
	// Seconds is how long the server took.
	Seconds float64 `json:"seconds"`
}

// SimRun is one policy's run.
type SimRun struct {
	Summary SimSummary `json:"summary"`
	// JCT is the distribution of the finished jobs' completion times: at
	// most a few hundred points of (seconds, share of jobs done by then).
	JCT SimCDF `json:"jct"`
	// Series samples the cluster over time, a few hundred points at most.
	Series SimSeries `json:"series"`
}

// SimSummary is one run's headline figures; times are seconds.
type SimSummary struct {
	Policy    string `json:"policy"`
	Placement string `json:"placement"`
	// Jobs finished; Unfinished still pending or running at the end.
	Jobs            int     `json:"jobs"`
	Unfinished      int     `json:"unfinished"`
	AvgJCTSeconds   float64 `json:"avgJCTSeconds"`
	P50JCTSeconds   float64 `json:"p50JCTSeconds"`
	P95JCTSeconds   float64 `json:"p95JCTSeconds"`
	P99JCTSeconds   float64 `json:"p99JCTSeconds"`
	AvgQueueSeconds float64 `json:"avgQueueSeconds"`
	MaxQueueSeconds float64 `json:"maxQueueSeconds"`
	MakespanSeconds float64 `json:"makespanSeconds"`
	// GPUUtilization is GPU-time held over capacity; Goodput useful
	// GPU-time over GPU-time held.
	GPUUtilization float64 `json:"gpuUtilization"`
	Goodput        float64 `json:"goodput"`
	Preemptions    int     `json:"preemptions"`
	// FragBlocked is the share of the time with a queue during which its
	// head waited although enough GPUs were free in total.
	FragBlocked float64 `json:"fragBlocked"`
}

// SimCDF is a distribution: Fraction[i] of the values are at most
// Seconds[i].
type SimCDF struct {
	Seconds  []float64 `json:"seconds"`
	Fraction []float64 `json:"fraction"`
}

// SimSeries samples a run: at Seconds[i] since the first submission, the
// jobs waiting and the GPUs busy (means over the sample's span).
type SimSeries struct {
	Seconds  []float64 `json:"seconds"`
	Pending  []float64 `json:"pending"`
	BusyGPUs []float64 `json:"busyGPUs"`
}
