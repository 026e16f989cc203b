package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/stats"
)

// Stragglers. In a synchronous gang every rank's step takes as long as
// the slowest rank's work plus the collective: one slow GPU, a throttled
// clock or a noisy neighbour slows the whole gang, and no rank's step time
// shows which. Each rank's own work per step (api.Progress.ComputeS, the
// step less its wait in the collective) does: the others wait for the
// straggler, so theirs stays short and its own is long. A rank whose work
// stays at StragglerFactor times the median of the gang's ranks on other
// nodes, and costs at least a tenth of the gang's step, for
// StragglerWindow is a straggler (one per node); by
// policy its node leaves service (cause straggler) and the gang restarts
// without it, as after a health fault. The check assumes the ranks share
// the work evenly, as data- and tensor-parallel ranks do; pipeline stages
// of very uneven cost would read as stragglers, and such a job turns the
// check off for itself (spec.stragglerCheck: off).

// Values of Config.StragglerAction: off ignores timing lines; report logs
// a straggler and lists it in describe job; cordon also takes its node out
// of service.
const (
	StragglerOff    = "off"
	StragglerReport = "report"
	StragglerCordon = "cordon"
)

var stragglerActions = []string{StragglerOff, StragglerReport, StragglerCordon}

// Defaults for Config.StragglerFactor and StragglerWindow. 1.5×: the
// gang runs at most two thirds of its speed, which no restart (a minute
// or two) fails to pay back within the window and an hour's run after it;
// 1 minute: long enough that a garbage collection, a checkpoint write or
// a data-loader hiccup on one rank does not count.
const (
	DefaultStragglerFactor = 1.5
	DefaultStragglerWindow = time.Minute
)

// stragglerMinShare is the least share of the gang's step the excess work
// must cost: on a model whose work per step is microseconds, a rank twice
// the median is noise.
const stragglerMinShare = 0.1

// stragglerMinOthers is how many ranks on other nodes must report before a
// rank is judged against them: with one, which of the two is slow cannot
// be told.
const stragglerMinOthers = 2

// stragglerForget drops a gang not heard of for this long.
const stragglerForget = 10 * time.Minute

// stragglerPolicy is how the detector judges.
type stragglerPolicy struct {
	factor float64
	window time.Duration
}

// stragglers follows each running gang's ranks' work per step. Safe for
// concurrent use.
type stragglers struct {
	mu    sync.Mutex // guards the fields below
	gangs map[string]*gangTiming
	// found are the stragglers declared, by job, for describe job.
	found map[string][]api.Straggler
	swept time.Time
}

type gangTiming struct {
	attempt  int
	ranks    map[int]*rankTiming
	declared map[string]bool // nodes with a straggler found
	seen     time.Time
}

type rankTiming struct {
	node     string
	compute  float64 // seconds of own work per step, smoothed
	step     float64 // seconds per step, smoothed
	lastStep int64
	lastTime time.Time
	behind   time.Time // since when it has been behind; zero: it is not
	declared bool
}

// smooth is an exponentially weighted mean with weight 0.3 for the new
// sample (about the last three lines), seeded by the first.
func smooth(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return 0.7*old + 0.3*v
}

func newStragglers() *stragglers {
	return &stragglers{gangs: map[string]*gangTiming{}, found: map[string][]api.Straggler{}}
}

// observe takes a progress line a rank on node wrote and returns the
// stragglers it declares (each at most once per attempt).
func (d *stragglers) observe(node string, p api.Progress, now time.Time, pol stragglerPolicy) []api.Straggler {
	if p.ComputeS <= 0 || p.JobID == "" || pol.factor <= 1 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked(now)
	g := d.gangs[p.JobID]
	switch {
	case g == nil || g.attempt < p.Attempt:
		g = &gangTiming{attempt: p.Attempt, ranks: map[int]*rankTiming{}, declared: map[string]bool{}}
		d.gangs[p.JobID] = g
	case g.attempt > p.Attempt:
		return nil // a line of an attempt already replaced
	}
	g.seen = now
	r := g.ranks[p.Rank]
	if r == nil {
		r = &rankTiming{}
		g.ranks[p.Rank] = r
	}
	r.node = node
	if !r.lastTime.IsZero() && p.Step > r.lastStep && p.Time.After(r.lastTime) {
		r.step = smooth(r.step, p.Time.Sub(r.lastTime).Seconds()/float64(p.Step-r.lastStep))
	}
	if p.Step > r.lastStep {
		r.lastStep, r.lastTime = p.Step, p.Time
	}
	r.compute = smooth(r.compute, p.ComputeS)
	if r.declared {
		return nil
	}
	if g.declared[node] {
		return nil // its node is found already
	}
	// Judged against the ranks on other nodes: a slow node holding half
	// the gang would otherwise drag the median halfway to itself.
	var comp, steps []float64
	for _, o := range g.ranks {
		if o.step > 0 {
			steps = append(steps, o.step)
			if o.node != node {
				comp = append(comp, o.compute)
			}
		}
	}
	if len(comp) < stragglerMinOthers || r.step == 0 {
		return nil
	}
	med, stepMed := median(comp), median(steps)
	behind := r.compute >= pol.factor*med && r.compute-med >= stragglerMinShare*stepMed
	if !behind {
		r.behind = time.Time{}
		return nil
	}
	if r.behind.IsZero() {
		r.behind = p.Time
	}
	if p.Time.Sub(r.behind) < pol.window {
		return nil
	}
	r.declared = true
	g.declared[node] = true
	s := api.Straggler{JobID: p.JobID, Attempt: p.Attempt, Rank: p.Rank, Node: node,
		ComputeS: r.compute, MedianS: med, StepS: stepMed, Since: r.behind, At: now}
	d.found[p.JobID] = append(d.found[p.JobID], s)
	if k := len(d.found[p.JobID]) - 16; k > 0 {
		d.found[p.JobID] = d.found[p.JobID][k:]
	}
	return []api.Straggler{s}
}

// of returns the stragglers declared in job's attempts, oldest first.
func (d *stragglers) of(job string) []api.Straggler {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.found[job])
}

func (d *stragglers) sweepLocked(now time.Time) {
	if now.Sub(d.swept) < time.Minute {
		return
	}
	d.swept = now
	for id, g := range d.gangs {
		if now.Sub(g.seen) > stragglerForget {
			delete(d.gangs, id)
		}
	}
	if len(d.found) > 10000 {
		d.found = map[string][]api.Straggler{}
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return stats.Percentile(s, 50)
}

// describeStraggler is a straggler as its node's fault reason.
func describeStraggler(s api.Straggler) string {
	return fmt.Sprintf("straggler: rank %d of job %s worked %.3gs per step against its gang's median %.3gs (step %.3gs) for %s",
		s.Rank, s.JobID, s.ComputeS, s.MedianS, s.StepS, s.At.Sub(s.Since).Round(time.Second))
}

// watchStragglers feeds a heartbeat's progress lines to the detector and
// acts on what it declares: logs it and, under --straggler-action cordon,
// takes the node out of service, which stops the gang there to be placed
// again without it.
func (s *Server) watchStragglers(ctx context.Context, hb *api.Heartbeat) {
	if s.cfg.StragglerAction == StragglerOff {
		return
	}
	now := time.Now()
	pol := stragglerPolicy{factor: s.cfg.StragglerFactor, window: s.cfg.StragglerWindow}
	for _, p := range hb.Progress {
		if p.ComputeS <= 0 {
			continue
		}
		if j, ok := s.cache.Job(p.JobID); ok && j.Spec.StragglerCheck == "off" {
			continue
		}
		for _, st := range s.strag.observe(hb.Node, p, now, pol) {
			s.log.Warn("straggler", "job_id", st.JobID, "attempt", st.Attempt, "rank", st.Rank, "node", st.Node,
				"compute_s", st.ComputeS, "median_s", st.MedianS, "action", s.cfg.StragglerAction)
			// Bounded as the heartbeat's other writes are: a store that
			// takes none must not hold the beat (the list in memory still
			// has it for describe).
			wctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
			if err := s.st.PutStraggler(wctx, st); err != nil {
				s.log.Warn("record a straggler", "job_id", st.JobID, "node", st.Node, "err", err)
			}
			if s.cfg.StragglerAction != StragglerCordon {
				cancel()
				continue
			}
			_, err := s.st.ModifyNode(wctx, st.Node, func(m *api.Node) error {
				if m.Status.Fault != "" || m.Status.State == api.NodeLost {
					return errNoChange
				}
				m.Status.Fault, m.Status.FaultAt, m.Status.FaultCause = describeStraggler(st), now, api.CauseStraggler
				countFault(m, now, s.healthPolicy())
				return nil
			})
			cancel()
			if err != nil && !errors.Is(err, errNoChange) {
				s.log.Error("take a straggler's node out of service", "node", st.Node, "err", err)
			}
		}
	}
}

// stragglersOf returns the stragglers declared in job's attempts: those
// stored, which any replica wrote, and those this one holds in memory
// (whose store write may have failed), oldest first.
func (s *Server) stragglersOf(ctx context.Context, job string) []api.Straggler {
	out, err := s.st.Stragglers(ctx, job)
	if err != nil {
		s.log.Debug("read stragglers", "job_id", job, "err", err)
	}
	for _, m := range s.strag.of(job) {
		if !slices.ContainsFunc(out, func(o api.Straggler) bool { return o.Attempt == m.Attempt && o.Node == m.Node }) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].At.Before(out[b].At) })
	return out
}
