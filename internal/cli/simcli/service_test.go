package simcli

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

// TestServiceSimulates: the server's simulator replays a tiny trace with
// two policies and answers their summaries, JCT distributions ending at
// every job, and time series; bad options name their field.
func TestServiceSimulates(t *testing.T) {
	ctx := context.Background()
	res, err := Service{}.Simulate(ctx, "tiny.csv", strings.NewReader(tinyTrace),
		api.SimulateRequest{TraceData: tinyTrace, Nodes: 2, Policies: []string{"fifo", "gangway"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 4 || res.GPUs != 16 || len(res.Runs) != 2 {
		t.Fatalf("%d jobs, %d GPUs, %d runs; want 4, 16, 2: %+v", res.Jobs, res.GPUs, len(res.Runs), res)
	}
	for i, pol := range []string{"fifo", "gangway"} {
		r := res.Runs[i]
		if r.Summary.Policy != pol || r.Summary.Jobs != 4 || r.Summary.AvgJCTSeconds <= 0 {
			t.Errorf("run %d: %+v; want %s's summary of 4 jobs", i, r.Summary, pol)
		}
		if n := len(r.JCT.Seconds); n != 4 || r.JCT.Fraction[n-1] != 1 || !slices.IsSorted(r.JCT.Seconds) {
			t.Errorf("run %d's JCT distribution: %+v", i, r.JCT)
		}
		if len(r.Series.Seconds) == 0 || len(r.Series.Seconds) != len(r.Series.BusyGPUs) || len(r.Series.Pending) != len(r.Series.Seconds) {
			t.Errorf("run %d's series: %+v", i, r.Series)
		}
	}

	for _, c := range []struct {
		name  string
		req   api.SimulateRequest
		trace string
		field string
	}{
		{"an unknown policy", api.SimulateRequest{Trace: "t", Nodes: 2, Policies: []string{"nope"}}, tinyTrace, "policies"},
		{"a bad date", api.SimulateRequest{Trace: "t", Nodes: 2, From: "yesterday"}, tinyTrace, "from"},
		{"a bad format", api.SimulateRequest{Trace: "t", Nodes: 2, Format: "xml"}, tinyTrace, "format"},
		{"a bad placement", api.SimulateRequest{Trace: "t", Nodes: 2, Placement: "anywhere"}, tinyTrace, "placement"},
		{"a malformed trace", api.SimulateRequest{Trace: "t", Nodes: 2}, "id,submit,duration,gpus\na,0,ten,1\n", "trace"},
		{"an upload's unknown header", api.SimulateRequest{TraceData: "x", Nodes: 2}, "what,is,this\n1,2,3\n", "traceData"},
		{"too small a cluster", api.SimulateRequest{Trace: "t", Nodes: 1}, tinyTrace, "nodes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Service{}.Simulate(ctx, "t.csv", strings.NewReader(c.trace), c.req)
			var ve *api.ValidationError
			if !errors.As(err, &ve) || ve.Fields[0].Field != c.field {
				t.Errorf("%v; want a validation error naming %s", err, c.field)
			}
		})
	}
}

// TestCDFAndThin: the chart data keep the extremes and bound the points.
func TestCDFAndThin(t *testing.T) {
	var v []float64
	for i := range 1000 {
		v = append(v, float64(i+1))
	}
	c := cdf(v, 200)
	if n := len(c.Seconds); n < 190 || n > 201 || c.Seconds[n-1] != 1000 || c.Fraction[n-1] != 1 {
		t.Errorf("cdf of 1000 values: %d points ending at %v, %v", n, c.Seconds[n-1], c.Fraction[n-1])
	}
	if c := cdf(v[:3], 200); len(c.Seconds) != 3 || c.Seconds[0] != 1 {
		t.Errorf("cdf of 3 values: %+v; want all three", c)
	}
	if c := cdf(nil, 200); c.Seconds == nil || len(c.Seconds) != 0 {
		t.Errorf("cdf of none: %+v; want empty, not null", c)
	}
}
