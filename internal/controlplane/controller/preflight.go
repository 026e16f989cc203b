package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/launch"
)

// A gang that spans many nodes stops whole when any one of them is sick,
// and the attempt it wastes is as long as it took to fail. So before such
// a gang's command runs, its placement is tested: the attempt is placed as
// usual but its agents run one probe per node instead (api.PreflightRun).
// A probe first checks its node's latest health findings, then the probes
// meet in a ring, time each link in turn and run an all-reduce. A node
// whose probe failed, or whose score (the faster of its two links: a slow
// node slows both of its own, a neighbour of it only one) is below
// MinRatio of the gang's median, is kept out of the job's placements
// (JobStatus.Avoid) and the gang is placed again; with every node passing,
// the job's command runs next, on the same nodes as nothing else could
// take them between (the pass that ends the test places the job again).
// Neither end uses up a restart; the GPU-hours go to CausePreflight.

// Preflight configures preflight tests.
type Preflight struct {
	// MinNodes: gangs placed on this many nodes or more are tested. 0:
	// none is.
	MinNodes int
	// MinRatio: a node scoring below this fraction of the gang's median
	// is excluded. Default 0.5.
	MinRatio float64
	// Args are extra arguments for every probe (tests slow a node so).
	Args []string
	// Timeout bounds a test; its probes still running then fail it.
	// Default 2m.
	Timeout time.Duration
}

// DefaultPreflightRatio is Preflight.MinRatio's default: half the median
// is far outside a healthy fabric's spread (links of one class differ by
// a few percent) and inside a degraded link's (a port that trained at a
// lower rate, or a NIC on the wrong PCIe link, runs at a half or less).
const DefaultPreflightRatio = 0.5

func (pf Preflight) ratio() float64 {
	if pf.MinRatio <= 0 {
		return DefaultPreflightRatio
	}
	return pf.MinRatio
}

func (pf Preflight) timeout() time.Duration {
	if pf.Timeout <= 0 {
		return 2 * time.Minute
	}
	return pf.Timeout
}

// wants reports whether a placement of j on nodes nodes is to be tested
// first: wide enough, and not the placement a test just passed.
func (pf Preflight) wants(j *api.Job, nodes []string) bool {
	if pf.MinNodes <= 0 || len(nodes) < pf.MinNodes {
		return false
	}
	a := j.Status.Current()
	if a == nil || a.Preflight == nil || !a.Preflight.Passed {
		return true
	}
	tested := a.Nodes()
	for _, n := range nodes {
		if !slices.Contains(tested, n) {
			return true
		}
	}
	return false
}

// preflightAssignment makes the probe of process r (the first rank on
// its node) of a preflight attempt.
func preflightAssignment(m *api.Job, ma *api.Attempt, r, nodeRank, nodes int, nodeRecs map[string]*api.Node, args []string) api.Assignment {
	rp := ma.Placement[r]
	var gpus []int
	for _, q := range ma.Placement {
		if q.Node == rp.Node {
			gpus = append(gpus, q.GPUs...)
		}
	}
	env := map[string]string{
		"RANK": strconv.Itoa(nodeRank), "WORLD_SIZE": strconv.Itoa(nodes), "LOCAL_RANK": "0",
		"MASTER_ADDR": ma.MasterAddr, "MASTER_PORT": strconv.Itoa(ma.MasterPort),
		"GANGWAY_JOB_ID": m.ID, "GANGWAY_ATTEMPT": strconv.Itoa(ma.Number), "GANGWAY_NODE": rp.Node,
	}
	if n := nodeRecs[rp.Node]; n != nil {
		env["GANGWAY_NODE_ADDR"] = n.Address
	}
	return api.Assignment{
		JobID: m.ID, Attempt: ma.Number, Rank: r, Node: rp.Node,
		Command: append([]string{api.PreflightCommand}, args...),
		Env:     env, GPUs: gpus, Grace: api.Duration(time.Second),
	}
}

// preflightDone decides for a running preflight attempt a of j: nothing
// yet (ok false) while a probe runs, else the stop that ends it, passed or
// with the nodes to keep out.
func (l *lifecycle) preflightDone(j *api.Job, a *api.Attempt) (decision, bool) {
	procs := launch.Processes(j, a)
	run := &api.PreflightRun{}
	timedOut := l.now.Sub(a.CreatedAt) > l.preflight.timeout()
	in := make([]float64, len(procs))
	for i, r := range procs {
		rp := a.Placement[r]
		pn := api.PreflightNode{Node: rp.Node}
		rs := l.rank(j.ID, a.Number, r)
		switch {
		case rs == nil || !rs.State.Terminal():
			if !timedOut {
				return decision{}, false
			}
			pn.Error = fmt.Sprintf("its probe did not finish within %s", l.preflight.timeout())
		case rs.State == api.RankFailedStart:
			pn.Error = rs.Message
		case rs.ExitCode != 0 || rs.Preflight == nil:
			pn.Error = fmt.Sprintf("its probe exited with code %d%s", rs.ExitCode, sigSuffix(rs.Signal))
			if rs.StderrTail != "" {
				pn.Error += ": " + rs.StderrTail
			}
		default:
			in[i] = rs.Preflight.InGBps
			run.AllReduceGBps = max(run.AllReduceGBps, rs.Preflight.AllReduceGBps)
		}
		run.Nodes = append(run.Nodes, pn)
	}
	failed := 0
	for i := range run.Nodes {
		if run.Nodes[i].Error != "" {
			failed++
		}
	}
	var scores []float64
	if failed == 0 {
		// Node i's links: in from i-1, out to i+1 (node i+1's in).
		for i := range run.Nodes {
			out := in[(i+1)%len(in)]
			run.Nodes[i].GBps = max(in[i], out)
			scores = append(scores, run.Nodes[i].GBps)
		}
		run.MedianGBps = stats.Percentile(slices.Sorted(slices.Values(scores)), 50)
	}
	var excluded []string
	for i := range run.Nodes {
		pn := &run.Nodes[i]
		switch {
		case failed > 0 && failed < len(run.Nodes) && pn.Error != "":
			pn.Excluded = true
		case failed == 0 && len(run.Nodes) > 2 && pn.GBps < l.preflight.ratio()*run.MedianGBps:
			// With two nodes both links join the same pair: a slow one
			// cannot be told from its peer.
			pn.Excluded = true
			pn.Error = fmt.Sprintf("links at %.3g GB/s, below %.0f%% of the gang's median %.3g GB/s", pn.GBps, 100*l.preflight.ratio(), run.MedianGBps)
		}
		if pn.Excluded {
			excluded = append(excluded, pn.Node)
		}
	}
	m := j.Clone()
	var reason string
	switch {
	case len(excluded) > 0:
		m.Status.Avoid = append(m.Status.Avoid, excluded...)
		var why []string
		for _, pn := range run.Nodes {
			if pn.Excluded {
				why = append(why, pn.Node+": "+pn.Error)
			}
		}
		reason = fmt.Sprintf("preflight kept %s out of the placement (%s)", strings.Join(excluded, ", "), strings.Join(why, "; "))
	case failed > 0:
		// Every probe failed: nothing tells the sick node from the rest
		// (a broken ring fails all). The job's own run says more than a
		// test that cannot blame anyone; it goes on untested.
		run.Passed = true
		reason = fmt.Sprintf("preflight inconclusive: every probe failed (%s: %s); running untested", run.Nodes[0].Node, run.Nodes[0].Error)
	default:
		run.Passed = true
		reason = fmt.Sprintf("preflight passed on %d nodes (links %.3g GB/s median, all-reduce %.3g GB/s)", len(run.Nodes), run.MedianGBps, run.AllReduceGBps)
	}
	m.Status.Current().Preflight = run
	d := l.stop(m, api.OutcomeInterrupted, reason)
	d.job.Status.Current().Cause = api.CausePreflight
	return d, true
}

// nodeNameLabel is each node's name as a label of the scheduler's
// snapshot alone, for the selector that keeps a job off the nodes its
// preflight excluded.
const nodeNameLabel = "gangway.io/node"

// avoiding returns the names of the schedulable nodes not in avoid.
func avoiding(names []string, avoid []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !slices.Contains(avoid, n) {
			out = append(out, n)
		}
	}
	return out
}
