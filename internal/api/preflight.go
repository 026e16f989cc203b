package api

// Preflight: before a gang spanning --preflight-min-nodes nodes or more
// runs its command, its placement is tested. One probe per node checks the
// node's latest health findings and times the links of a ring over the
// gang's nodes; a node whose probe fails, or whose links run far below the
// gang's median, is kept out of the job's next placement. The test is an
// attempt of its own (Attempt.Preflight), whose end is charged to
// CausePreflight and uses up no restart.

// CausePreflight: the attempt was the gang's preflight test.
const CausePreflight Cause = "preflight"

// PreflightCommand stands, as an assignment's Command[0], for the agent's
// own probe: the agent runs its gangway executable's hidden
// `preflight-rank` with the rest of Command as arguments, once it has
// checked its node's health findings.
const PreflightCommand = "gangway:preflight"

// PreflightFile is the file, in the task directory, where a probe writes
// its result (a PreflightResult) for the agent to report with its exit.
const PreflightFile = "preflight.json"

// PreflightResult is what one node's probe measured.
type PreflightResult struct {
	// InGBps is the bandwidth, in GB/s, of the link from the previous
	// node of the ring to this one.
	InGBps float64 `json:"inGBps"`
	// AllReduceGBps is the ring all-reduce's bus bandwidth in GB/s (as
	// nccl-tests' busbw), the same on every node of a healthy ring.
	AllReduceGBps float64 `json:"allReduceGBps,omitempty"`
}

// PreflightRun is an attempt's preflight test: how each node came out.
type PreflightRun struct {
	Nodes []PreflightNode `json:"nodes,omitempty"`
	// MedianGBps is the median of the nodes' scores.
	MedianGBps float64 `json:"medianGBps,omitempty"`
	// AllReduceGBps is the ring all-reduce's bus bandwidth.
	AllReduceGBps float64 `json:"allReduceGBps,omitempty"`
	Passed        bool    `json:"passed,omitempty"`
}

// PreflightNode is one node's part in a preflight test.
type PreflightNode struct {
	Node string `json:"node"`
	// GBps is the node's score: the faster of its two ring links (a slow
	// node slows both of its own; a neighbour of it, only one).
	GBps float64 `json:"gbps,omitempty"`
	// Error is why its probe failed; "" if it did not.
	Error string `json:"error,omitempty"`
	// Excluded: kept out of the job's next placement.
	Excluded bool `json:"excluded,omitempty"`
}
