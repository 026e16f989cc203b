package chaos

import (
	"sort"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// sample is a measurement in seconds and the index of the fault it
// follows.
type sample struct {
	fault int
	s     float64
}

// seconds returns the samples' values, sorted.
func seconds(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, x := range ss {
		out[i] = x.s
	}
	sort.Float64s(out)
	return out
}

// detections measures, for every fault on a node that the server marked
// the node lost for, the time from the fault to the server's LostAt. A
// LostAt counts for a fault if it falls after it and before the next fault
// on that node. Faults the node came through without being marked lost (a
// short freeze or partition, a quick agent restart) give no sample.
func detections(faults []Fault, lost map[string][]time.Time, end time.Time) []sample {
	var out []sample
	for i, f := range faults {
		if f.Node == "" || f.Err != "" {
			continue
		}
		until := end
		for _, g := range faults[i+1:] {
			if g.Node == f.Node {
				until = g.At
				break
			}
		}
		for _, t := range lost[f.Node] {
			if !t.Before(f.At) && t.Before(until) {
				out = append(out, sample{i, t.Sub(f.At).Seconds()})
				break
			}
		}
	}
	return out
}

// recoveries measures, for every fault and every gang it interrupted, the
// time from the fault to the gang running again: the RunningAt of the
// job's next attempt, as the server recorded it. A gang counts as hit by a
// fault when one of its ranks was alive at the fault on the faulted node
// (any node, for a server fault), and as interrupted when a rank of that
// attempt then died otherwise than by exiting 0 before the next fault.
// It also returns how many interrupted gangs never ran again.
func recoveries(faults []Fault, rs []*run, jobs map[string]*api.Job, end time.Time) (samples []sample, unrecovered int) {
	byJob := map[string][]*run{}
	for _, r := range rs {
		byJob[r.key.job] = append(byJob[r.key.job], r)
	}
	for i, f := range faults {
		if f.Err != "" {
			continue
		}
		until := end
		if i+1 < len(faults) {
			until = faults[i+1].At
		}
		hit := map[string]int{} // job → attempt alive at the fault
		for _, r := range rs {
			if (f.Node == "" || r.host == f.Node) && !r.start.After(f.At) && r.end.After(f.At) {
				hit[r.key.job] = max(hit[r.key.job], r.key.attempt)
			}
		}
		for job, att := range hit {
			interrupted := false
			for _, r := range byJob[job] {
				if r.key.attempt == att && !r.ok() && r.end.After(f.At) && r.end.Before(until) {
					interrupted = true
				}
			}
			if !interrupted {
				continue
			}
			j := jobs[job]
			var next *api.Attempt
			if j != nil {
				for k := range j.Status.Attempts {
					a := &j.Status.Attempts[k]
					if a.Number > att && !a.RunningAt.IsZero() {
						next = a
						break
					}
				}
			}
			if next == nil {
				unrecovered++
				continue
			}
			samples = append(samples, sample{i, next.RunningAt.Sub(f.At).Seconds()})
		}
	}
	return samples, unrecovered
}

// killedAfter counts, for each fault, the ranks that died (otherwise than
// by exiting 0) between it and the next fault: its blast radius.
func killedAfter(faults []Fault, rs []*run, end time.Time) []int {
	out := make([]int, len(faults))
	for _, r := range rs {
		if r.ok() || !r.end.Before(end) {
			continue
		}
		for i := len(faults) - 1; i >= 0; i-- {
			if !r.end.Before(faults[i].At) {
				out[i]++
				break
			}
		}
	}
	return out
}
