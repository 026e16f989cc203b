package simcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// Service is the simulator the server runs for POST /v1/simulate (its
// server.Simulator): `gangway simulate`'s replay, with the request's
// fields for its flags, answering summaries and chart data rather than
// printing them. It holds nothing; its methods may run concurrently.
type Service struct{}

// Points bound what a run answers for charts: the JCT distribution and
// the time series are thinned to about this many points each.
const (
	cdfPoints    = 200
	seriesPoints = 400
)

// Policies are the policy names, the recommended one first.
func (Service) Policies() []string {
	names := sim.PolicyNames()
	i := slices.Index(names, "gangway")
	if i > 0 {
		names = append([]string{"gangway"}, slices.Delete(names, i, i+1)...)
	}
	return names
}

// Simulate replays the trace read from r with each of req's policies, one
// after another, until done or ctx ends. Bad options and a malformed
// trace are *api.ValidationError naming the request's field.
func (Service) Simulate(ctx context.Context, name string, r io.Reader, req api.SimulateRequest) (*api.SimulateResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	traceField := "trace"
	if req.TraceData != "" {
		traceField = "traceData"
	}
	var opt trace.Options
	var err error
	if req.From != "" {
		if opt.From, err = parseWhen(req.From, false); err != nil {
			return nil, api.ErrorForField("from", "%v", err)
		}
	}
	if req.To != "" {
		if opt.To, err = parseWhen(req.To, true); err != nil {
			return nil, api.ErrorForField("to", "%v", err)
		}
	}
	if req.Format != "" && !slices.Contains(trace.Formats(), trace.Format(req.Format)) {
		return nil, api.ErrorForField("format", "%q: want one of %s, or none to tell it from the header", req.Format, formatNames())
	}
	tr, err := trace.Read(r, name, trace.Format(req.Format), opt)
	var pe *trace.ParseError
	switch {
	case errors.Is(err, trace.ErrEmpty):
		return nil, api.ErrorForField(traceField, "%s: no job left to replay (outside from..to, or asking for no GPU)", name)
	case errors.As(err, &pe):
		return nil, api.ErrorForField(traceField, "%v", err)
	case err != nil && ctx.Err() == nil:
		// The readers' other errors are the file's: an unknown header,
		// a node list.
		return nil, api.ErrorForField(traceField, "%v", err)
	case err != nil:
		return nil, err
	}
	gpn := req.GPUsPerNode
	if gpn == 0 {
		gpn = 8
	}
	nodes := req.Nodes
	if req.Load > 0 {
		if nodes, err = sim.NodesForLoad(tr.Jobs, req.Load, gpn); err != nil {
			return nil, api.ErrorForField("load", "%v", err)
		}
	}
	shape := sim.Shape{Pools: []sim.Pool{{Nodes: nodes, GPUsPerNode: gpn, NodesPerLeaf: req.NodesPerLeaf}}}
	if err := shape.Validate(); err != nil {
		return nil, api.ErrorForField("nodes", "%v", err)
	}
	var pols []sim.Policy
	if len(req.Policies) == 0 {
		req.Policies = []string{"gangway"}
	}
	if pols, err = parsePolicies(strings.Join(req.Policies, ",")); err != nil {
		return nil, api.ErrorForField("policies", "%s", strings.TrimPrefix(err.Error(), "-policy: "))
	}
	placement, err := sim.ParsePlacement(req.Placement)
	if err != nil {
		return nil, api.ErrorForField("placement", "%v", err)
	}
	res := &api.SimulateResult{Trace: name, Jobs: len(tr.Jobs), Skipped: tr.Skipped, Cluster: shape.String(), GPUs: shape.GPUs(), Placement: placement.String()}
	for _, p := range pols {
		r, err := sim.Run(ctx, sim.Config{Shape: shape, Policy: p, Placement: placement, Seed: 1, PreemptCost: sim.HeliosPreemptCost, Checkpoint: sim.Checkpointing{Auto: true, Cost: 10}}, tr.Jobs)
		if errors.Is(err, sim.ErrStuck) {
			return nil, api.ErrorForField("nodes", "policy %s: %v: the cluster is too small for the trace's widest jobs", p.Name(), err)
		}
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name(), err)
		}
		res.Runs = append(res.Runs, apiRun(r))
	}
	return res, nil
}

// apiRun is a run's summary and chart data.
func apiRun(r *sim.Result) api.SimRun {
	s := r.Summary
	run := api.SimRun{Summary: api.SimSummary{
		Policy: s.Policy, Placement: s.Placement, Jobs: s.Jobs, Unfinished: s.Unfinished,
		AvgJCTSeconds: s.AvgJCT, P50JCTSeconds: s.P50JCT, P95JCTSeconds: s.P95JCT, P99JCTSeconds: s.P99JCT,
		AvgQueueSeconds: s.AvgQueue, MaxQueueSeconds: s.MaxQueue, MakespanSeconds: s.Makespan,
		GPUUtilization: s.GPUUtilization, Goodput: s.Goodput, Preemptions: s.Preemptions, FragBlocked: s.FragBlocked,
	}}
	var jct []float64
	for _, j := range r.Jobs {
		if v := j.JCT(); v >= 0 {
			jct = append(jct, v)
		}
	}
	slices.Sort(jct)
	run.JCT = cdf(jct, cdfPoints)
	run.Series = thin(r.Series, seriesPoints)
	return run
}

// cdf is the distribution of sorted values at about n points: every
// value when there are few, else evenly spaced ranks with the first and
// the last.
func cdf(sorted []float64, n int) api.SimCDF {
	out := api.SimCDF{Seconds: []float64{}, Fraction: []float64{}}
	m := len(sorted)
	if m == 0 {
		return out
	}
	step := max(1, float64(m)/float64(n))
	last := -1
	for f := step - 1; ; f += step {
		i := min(m-1, int(math.Round(f)))
		if i != last {
			out.Seconds = append(out.Seconds, sorted[i])
			out.Fraction = append(out.Fraction, float64(i+1)/float64(m))
			last = i
		}
		if i == m-1 {
			return out
		}
	}
}

// thin averages a series over windows so that about n points are left.
func thin(s sim.Series, n int) api.SimSeries {
	out := api.SimSeries{Seconds: []float64{}, Pending: []float64{}, BusyGPUs: []float64{}}
	win := max(1, (len(s.T)+n-1)/n)
	for i := 0; i < len(s.T); i += win {
		end := min(i+win, len(s.T))
		var pend, busy float64
		for k := i; k < end; k++ {
			pend += float64(s.Pending[k])
			busy += float64(s.Busy[k])
		}
		k := float64(end - i)
		out.Seconds = append(out.Seconds, s.T[i])
		out.Pending = append(out.Pending, pend/k)
		out.BusyGPUs = append(out.BusyGPUs, busy/k)
	}
	return out
}
