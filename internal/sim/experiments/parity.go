package experiments

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// The Helios reference runs (shared/data/traces/reference) replay Philly
// 2017-10-01..07 on one pool of 64 or 80 eight-GPU nodes with
// "consolidate" placement. Two things about them are not in the trace:
//
//   - The order of jobs submitted in the same second. Helios sorts its
//     input with pandas' default (unstable) quicksort, so same-second
//     jobs run in an order no input file records. Strict FIFO is chaotic
//     in it: on 64 nodes the average JCT moves by 11% between two valid
//     orders. HeliosOrder recovers the order from the FIFO log's
//     placements.
//   - Helios steps time by whole seconds and its SRTF notices a finished
//     job one step late, so every SRTF job holds its GPUs one second
//     longer than its duration.
//
// Parity reports our runs both plainly (trace order, exact times) and with
// these two artefacts reproduced.

// ParityRow compares one policy on one pool with the reference.
type ParityRow struct {
	Nodes  int    `json:"nodes"`
	Policy string `json:"policy"`
	// Ref is the reference run; Plain ours in trace order; Helios ours
	// with the reference's same-second order and SRTF step lag.
	Ref, Plain, Helios sim.Summary
	// Same counts jobs whose start time equals the reference's, of Jobs.
	PlainSame, HeliosSame, Jobs int
}

// ParityCase is one reference run: a pool size and a policy.
type ParityCase struct {
	Nodes  int
	Policy string
}

// ParityCases are the runs the reference covers.
func ParityCases() []ParityCase {
	var out []ParityCase
	for _, n := range []int{64, 80} {
		for _, p := range []string{"fifo", "sjf", "srtf"} {
			out = append(out, ParityCase{n, p})
		}
	}
	return out
}

// ReadReference reads one reference job log (gzip or plain CSV).
func ReadReference(path string) ([]trace.LogRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if filepath.Ext(path) == ".gz" {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return trace.ReadHeliosJobLog(r, filepath.Base(path))
}

// ReferencePath is the log of policy on the pool of nodes in dir.
func ReferencePath(dir string, nodes int, policy string) string {
	pool := "PhillyPoolW1"
	if nodes == 64 {
		pool = "PhillyPool64W1"
	}
	return filepath.Join(dir, fmt.Sprintf("%s_%s_joblog.csv.gz", pool, policy))
}

// RefSummary computes a Summary from a reference log the way Run does.
func RefSummary(policy string, recs []trace.LogRecord) sim.Summary {
	s := sim.Summary{Policy: policy, Placement: "consolidate", Jobs: len(recs)}
	jct := make([]float64, len(recs))
	var q float64
	for i, r := range recs {
		jct[i] = r.JCT
		q += r.Queue
		s.MaxQueue = max(s.MaxQueue, r.Queue)
		s.Makespan = max(s.Makespan, r.End)
		s.Preemptions += r.Preemptions
	}
	if len(recs) == 0 {
		return s
	}
	s.AvgJCT = stats.Mean(jct)
	s.AvgQueue = q / float64(len(recs))
	slices.Sort(jct)
	s.P50JCT, s.P95JCT, s.P99JCT = stats.Percentile(jct, 50), stats.Percentile(jct, 95), stats.Percentile(jct, 99)
	return s
}

// HeliosOrder recovers the order in which a Helios run queued jobs that
// were submitted in the same second, from its FIFO log on a pool of nodes
// with gpusPerNode GPUs. It replays the log's starts and ends; for each
// second, the jobs that started then are ordered by replaying consolidate
// placement (best fit for one node, whole idle nodes in index order
// beyond) and matching each step's choice to the node the log shows.
// Jobs of one submit second that started at different times are ordered
// by start time (FIFO starts them in queue order). It returns each job's
// rank: sort by (submit, rank).
func HeliosOrder(fifo []trace.LogRecord, nodes, gpusPerNode int) (map[string]int, error) {
	free := make([]int, nodes)
	for i := range free {
		free[i] = gpusPerNode
	}
	type ev struct {
		t     float64
		start bool
		r     *trace.LogRecord
	}
	evs := make([]ev, 0, 2*len(fifo))
	for i := range fifo {
		r := &fifo[i]
		for _, n := range r.Nodes {
			if n.Node >= nodes {
				return nil, fmt.Errorf("job %s on node %d of a %d-node pool", r.Name, n.Node, nodes)
			}
		}
		evs = append(evs, ev{r.Start, true, r}, ev{r.End, false, r})
	}
	sort.SliceStable(evs, func(a, b int) bool {
		if evs[a].t != evs[b].t {
			return evs[a].t < evs[b].t
		}
		return !evs[a].start && evs[b].start // ends first
	})
	rank := map[string]int{}
	// For each submit second, the start time and in-step position.
	type pos struct {
		start float64
		step  int
	}
	order := map[string]pos{}
	predict := func(g int) []trace.NodeGPUs {
		if g <= gpusPerNode {
			best := -1
			for n, f := range free {
				if f > 0 && f >= g && (best < 0 || f < free[best]) {
					best = n
				}
			}
			if best < 0 {
				return nil
			}
			return []trace.NodeGPUs{{Node: best, GPUs: g}}
		}
		var out []trace.NodeGPUs
		for n, f := range free {
			if f == gpusPerNode && len(out) < g/gpusPerNode {
				out = append(out, trace.NodeGPUs{Node: n, GPUs: gpusPerNode})
			}
		}
		return out
	}
	same := func(a, b []trace.NodeGPUs) bool {
		if len(a) != len(b) {
			return false
		}
		x, y := slices.Clone(a), slices.Clone(b)
		less := func(p, q trace.NodeGPUs) int { return p.Node - q.Node }
		slices.SortFunc(x, less)
		slices.SortFunc(y, less)
		return slices.Equal(x, y)
	}
	for i := 0; i < len(evs); {
		t := evs[i].t
		var starting []*trace.LogRecord
		for ; i < len(evs) && evs[i].t == t; i++ {
			e := evs[i]
			if !e.start {
				for _, n := range e.r.Nodes {
					free[n.Node] += n.GPUs
				}
				continue
			}
			starting = append(starting, e.r)
		}
		// Queue order at this second: by submit time, then unknown.
		sort.SliceStable(starting, func(a, b int) bool { return starting[a].Submit < starting[b].Submit })
		step := 0
		for len(starting) > 0 {
			sub := starting[0].Submit
			k := 0
			for k < len(starting) && starting[k].Submit == sub {
				k++
			}
			group := starting[:k]
			pick := -1
			for gi, r := range group {
				if same(predict(r.GPUs), r.Nodes) && (pick < 0 || nameIndex(r.Name) < nameIndex(group[pick].Name)) {
					pick = gi
				}
			}
			if pick < 0 {
				pick = 0 // no match: keep the log's order
			}
			r := group[pick]
			for _, n := range r.Nodes {
				free[n.Node] -= n.GPUs
			}
			order[r.Name] = pos{t, step}
			step++
			starting = append(starting[:pick], starting[pick+1:]...)
		}
	}
	if len(order) != len(fifo) {
		return nil, errors.New("reference log: job names are not unique")
	}
	names := make([]string, 0, len(fifo))
	subOf := map[string]float64{}
	for _, r := range fifo {
		names = append(names, r.Name)
		subOf[r.Name] = r.Submit
	}
	sort.Slice(names, func(a, b int) bool {
		x, y := names[a], names[b]
		if subOf[x] != subOf[y] {
			return subOf[x] < subOf[y]
		}
		if order[x].start != order[y].start {
			return order[x].start < order[y].start
		}
		return order[x].step < order[y].step
	})
	for k, n := range names {
		rank[n] = k
	}
	return rank, nil
}

func nameIndex(s string) int {
	if len(s) > 1 {
		if v, err := strconv.Atoi(s[1:]); err == nil {
			return v
		}
	}
	return 0
}

// matchReference names the trace's jobs after the reference's, matching
// by (submit, duration, GPUs), and returns them in the reference's queue
// order (rank). The trace must be the reference's slice.
func matchReference(jobs []trace.Job, ref []trace.LogRecord, rank map[string]int) ([]trace.Job, error) {
	type k struct {
		s, d float64
		g    int
	}
	byKey := map[k][]string{}
	for _, r := range ref {
		kk := k{r.Submit, r.Duration, r.GPUs}
		byKey[kk] = append(byKey[kk], r.Name)
	}
	for kk := range byKey {
		names := byKey[kk]
		sort.Slice(names, func(a, b int) bool { return rank[names[a]] < rank[names[b]] })
	}
	out := slices.Clone(jobs)
	pos := make(map[string]int, len(out))
	for i := range out {
		kk := k{out[i].Submit, out[i].Duration, out[i].GPUs}
		names := byKey[kk]
		if len(names) == 0 {
			return nil, fmt.Errorf("trace job %s (submit %v, %v s, %d GPUs) is not in the reference", out[i].ID, out[i].Submit, out[i].Duration, out[i].GPUs)
		}
		out[i].ID = names[0]
		byKey[kk] = names[1:]
		pos[out[i].ID] = rank[out[i].ID]
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].Submit != out[b].Submit {
			return out[a].Submit < out[b].Submit
		}
		return pos[out[a].ID] < pos[out[b].ID]
	})
	return out, nil
}

// Parity replays the reference slice (jobs: Philly 2017-10-01..07 as the
// trace reader returns it) for each case and compares with the reference
// logs in dir.
func Parity(ctx context.Context, jobs []trace.Job, dir string, cases []ParityCase) ([]ParityRow, error) {
	// The order is recovered once, from the 64-node FIFO log (where the
	// queue is long and the order shows); the 80-node runs are then an
	// independent check.
	fifo, err := ReadReference(ReferencePath(dir, 64, "fifo"))
	if err != nil {
		return nil, err
	}
	rank, err := HeliosOrder(fifo, 64, 8)
	if err != nil {
		return nil, err
	}
	ordered, err := matchReference(jobs, fifo, rank)
	if err != nil {
		return nil, err
	}
	var rows []ParityRow
	for _, pc := range cases {
		nodes, pol := pc.Nodes, pc.Policy
		{
			ref, err := ReadReference(ReferencePath(dir, nodes, pol))
			if err != nil {
				return nil, err
			}
			row := ParityRow{Nodes: nodes, Policy: pol, Ref: RefSummary(pol, ref), Jobs: len(ref)}
			p, err := sim.ParsePolicy(pol)
			if err != nil {
				return nil, err
			}
			cfg := sim.Config{Shape: sim.Shape{Pools: []sim.Pool{{Nodes: nodes, GPUsPerNode: 8}}}, Policy: p, Placement: sim.Consolidate}
			plain, err := sim.Run(ctx, cfg, jobs)
			if err != nil {
				return nil, fmt.Errorf("parity %s on %d nodes: %w", pol, nodes, err)
			}
			hj := ordered
			if pol == "srtf" {
				hj = slices.Clone(ordered)
				for i := range hj {
					hj[i].Duration++ // Helios' one-step completion lag
				}
			}
			helios, err := sim.Run(ctx, cfg, hj)
			if err != nil {
				return nil, fmt.Errorf("parity %s on %d nodes: %w", pol, nodes, err)
			}
			row.Plain, row.Helios = plain.Summary, helios.Summary
			row.PlainSame = sameStarts(ref, plain.Jobs, false)
			row.HeliosSame = sameStarts(ref, helios.Jobs, true)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// sameStarts counts reference jobs whose start equals ours: by name when
// the names match the reference's, else by (submit, duration, GPUs).
func sameStarts(ref []trace.LogRecord, ours []sim.JobResult, byName bool) int {
	type k struct {
		s, d float64
		g    int
	}
	starts := map[any][]float64{}
	for _, j := range ours {
		var kk any = k{j.Submit, j.Duration, j.GPUs}
		if byName {
			kk = j.ID
		}
		starts[kk] = append(starts[kk], j.Start)
	}
	n := 0
	for _, r := range ref {
		var kk any = k{r.Submit, r.Duration, r.GPUs}
		if byName {
			kk = r.Name
		}
		if s := starts[kk]; len(s) > 0 {
			if s[0] == r.Start {
				n++
			}
			starts[kk] = s[1:]
		}
	}
	return n
}
