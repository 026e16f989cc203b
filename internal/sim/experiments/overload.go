package experiments

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// A Slice is a set of trace jobs a policy is judged on: a calendar
// window of the real trace, or one reshaped in time to make an overload
// the trace did not have.
type Slice struct {
	Name string `json:"name"`
	// About says how it was made, for tables and docs.
	About string      `json:"about"`
	Jobs  []trace.Job `json:"-"`
}

// Segment is a stretch of a reshaped slice: Days long, with arrivals
// Weight times as dense as the source's (relative to the other
// segments).
type Segment struct {
	Days   float64
	Weight float64
}

// Reshape keeps every job, its duration and GPUs, and moves its submit
// time so that the arrival density over the same span follows segs
// (repeated until the span is covered): a job at fraction u of the
// source's span lands where the weighted time reaches u. Jobs stay in
// order, so bursts the source had are kept and scaled, not smoothed.
func Reshape(jobs []trace.Job, segs []Segment) ([]trace.Job, error) {
	if len(jobs) < 2 {
		return nil, errors.New("reshape: needs at least two jobs")
	}
	var period float64
	for i, s := range segs {
		if s.Days <= 0 || s.Weight <= 0 || math.IsNaN(s.Days+s.Weight) {
			return nil, fmt.Errorf("reshape: segment %d needs positive days and weight (got %v, %v)", i, s.Days, s.Weight)
		}
		period += s.Days
	}
	if period == 0 {
		return nil, errors.New("reshape: no segments")
	}
	t0, span := jobs[0].Submit, jobs[len(jobs)-1].Submit-jobs[0].Submit
	if span <= 0 {
		return nil, errors.New("reshape: jobs span no time")
	}
	// Cut the span into pieces of constant weight, then map by the
	// cumulative weighted time.
	type piece struct{ from, to, w, cum float64 }
	var ps []piece
	var mass float64
	for t, i := 0.0, 0; t < span; i++ {
		s := segs[i%len(segs)]
		to := min(span, t+s.Days*86400)
		ps = append(ps, piece{from: t, to: to, w: s.Weight, cum: mass})
		mass += (to - t) * s.Weight
		t = to
	}
	out := slices.Clone(jobs)
	k := 0
	for i := range out {
		m := (out[i].Submit - t0) / span * mass
		for k < len(ps)-1 && ps[k].cum+(ps[k].to-ps[k].from)*ps[k].w < m {
			k++
		}
		p := ps[k]
		out[i].Submit = t0 + min(p.to, p.from+(m-p.cum)/p.w)
	}
	return out, nil
}

// Slices cuts the Philly September–October trace (read whole, with its
// start time) into the slices the overload study judges policies on: each
// month, both together, and three shapes built from both months' jobs.
// The shapes keep the real jobs and move only their submit times:
//
//   - long-overload: two ordinary weeks, three weeks with arrivals 2.2×
//     as dense, then a lighter rest (peak 1.77× the mean rate);
//   - bursts: every week, two days 3× as dense as the other five;
//   - busy-then-quiet: a month 1.6× as dense, then one 0.4×.
func Slices(tr *trace.Trace) ([]Slice, error) {
	if tr.Start.IsZero() {
		return nil, errors.New("slices: the trace has no calendar times (Philly's has)")
	}
	month := func(m time.Month) []trace.Job {
		var out []trace.Job
		for _, j := range tr.Jobs {
			if tr.Start.Add(time.Duration(j.Submit*float64(time.Second))).Month() == m {
				out = append(out, j)
			}
		}
		return out
	}
	sep, oct := month(time.September), month(time.October)
	if len(sep) < 2 || len(oct) < 2 {
		return nil, errors.New("slices: the trace needs jobs in September and October (philly-2017-09-10.csv)")
	}
	both := append(slices.Clone(sep), oct...)
	out := []Slice{
		{Name: "sep", About: "Philly, September 2017", Jobs: sep},
		{Name: "oct", About: "Philly, October 2017", Jobs: oct},
		{Name: "sep-oct", About: "Philly, September and October 2017", Jobs: both},
	}
	for _, s := range []struct {
		name, about string
		segs        []Segment
	}{
		{"long-overload", "Sep–Oct jobs; days 14–35 1.6× as dense, the rest 0.7× after two ordinary weeks", []Segment{{14, 1}, {21, 1.6}, {400, 0.7}}},
		{"bursts", "Sep–Oct jobs; each week two days 3× as dense as the other five", []Segment{{2, 3}, {5, 0.6}}},
		{"busy-then-quiet", "Sep–Oct jobs; 30 days 1.6× as dense, then 0.4×", []Segment{{30, 1.6}, {400, 0.4}}},
	} {
		jobs, err := Reshape(both, s.segs)
		if err != nil {
			return nil, err
		}
		out = append(out, Slice{Name: s.name, About: s.about, Jobs: jobs})
	}
	return out, nil
}

// SweepRow is one policy on one slice at one load: the run's summary
// (with its slowdown and over-24 h figures) and its ratios to the
// references.
type SweepRow struct {
	Slice  string  `json:"slice"`
	Load   float64 `json:"load"`
	Nodes  int     `json:"nodes"`
	Policy string  `json:"policy"`
	sim.Summary
	// Against the oracle SRTF and FIFO with backfill on the same slice
	// and load (0 when they were not run).
	JCTvsSRTF     float64 `json:"avg_jct_vs_srtf,omitempty"`
	P99vsFIFO     float64 `json:"p99_vs_fifo_backfill,omitempty"`
	MaxWaitvsFIFO float64 `json:"max_wait_vs_fifo_backfill,omitempty"`
}

// SweepConfig is the overload study: every policy on every slice at
// every load.
type SweepConfig struct {
	Slices   []Slice
	Loads    []float64
	Policies []func() sim.Policy
	// Labels, when set, name the policies in the rows (variants of one
	// policy share its name).
	Labels []string
	// Workers runs this many simulations at once; 0: GOMAXPROCS.
	Workers int
	// Progress, when set, is called after each run with runs done and
	// total, from one goroutine at a time.
	Progress func(done, total int, row SweepRow)
}

// Sweep runs the study. Rows come back ordered by slice, load and policy
// as configured.
func Sweep(ctx context.Context, cfg SweepConfig) ([]SweepRow, error) {
	type task struct{ s, l, p int }
	var tasks []task
	for s := range cfg.Slices {
		for l := range cfg.Loads {
			for p := range cfg.Policies {
				tasks = append(tasks, task{s, l, p})
			}
		}
	}
	rows := make([]SweepRow, len(tasks))
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		done  int
		wg    sync.WaitGroup
	)
	ch := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				t := tasks[i]
				row, err := sweepOne(ctx, cfg.Slices[t.s], cfg.Loads[t.l], cfg.Policies[t.p]())
				if t.p < len(cfg.Labels) {
					row.Policy = cfg.Labels[t.p]
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				rows[i] = row
				done++
				if err == nil && cfg.Progress != nil {
					cfg.Progress(done, len(tasks), row)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range tasks {
		select {
		case ch <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	compare(rows)
	return rows, nil
}

func sweepOne(ctx context.Context, s Slice, load float64, p sim.Policy) (SweepRow, error) {
	n, err := sim.NodesForLoad(s.Jobs, load, 8)
	if err != nil {
		return SweepRow{}, fmt.Errorf("%s at load %v: %w", s.Name, load, err)
	}
	res, err := sim.Run(ctx, sim.Config{
		Shape:  sim.Shape{Pools: []sim.Pool{{Nodes: n, GPUsPerNode: 8}}},
		Policy: p,
	}, s.Jobs)
	if err != nil {
		return SweepRow{}, fmt.Errorf("%s at load %v, %s: %w", s.Name, load, p.Name(), err)
	}
	row := SweepRow{Slice: s.Name, Load: load, Nodes: n, Policy: p.Name(), Summary: res.Summary}
	return row, nil
}

// compare fills the ratios against SRTF and FIFO with backfill.
func compare(rows []SweepRow) {
	type k struct {
		s string
		l float64
	}
	srtf, fifo := map[k]*SweepRow{}, map[k]*SweepRow{}
	for i := range rows {
		r := &rows[i]
		switch r.Policy {
		case "srtf":
			srtf[k{r.Slice, r.Load}] = r
		case "fifo-backfill":
			fifo[k{r.Slice, r.Load}] = r
		}
	}
	for i := range rows {
		r := &rows[i]
		if s := srtf[k{r.Slice, r.Load}]; s != nil && s.AvgJCT > 0 {
			r.JCTvsSRTF = r.AvgJCT / s.AvgJCT
		}
		if f := fifo[k{r.Slice, r.Load}]; f != nil {
			if f.P99JCT > 0 {
				r.P99vsFIFO = r.P99JCT / f.P99JCT
			}
			if f.MaxWait > 0 {
				r.MaxWaitvsFIFO = r.MaxWait / f.MaxWait
			}
		}
	}
}
