package durbench

import (
	"fmt"
	"slices"

	"github.com/gangway/gangway/internal/api"
)

// submission is one submission as the run saw it.
type submission struct {
	name  string // its job's (or array's) name, unique to it
	tasks int    // an array's task count; 0 for a single job
	key   string
	body  []byte
	// acked is the job (or array) ID of a success answer before the kill;
	// "" if it got none (in flight when the server died, or not sent).
	acked string
	// retried is the ID the same submission sent again with its key after
	// the restart answered; "" if that failed too.
	retried  string
	retryErr error
}

// maxProblems bounds the problems a Result lists.
const maxProblems = 10

// tally checks the submissions against the jobs the restarted server held
// before the retries (before) and after them (after).
func tally(subs []submission, before, after []*api.Job) Result {
	type found struct {
		jobs   []string       // single jobs by that name
		arrays map[string]int // array ID → tasks stored
	}
	index := func(jobs []*api.Job) map[string]*found {
		m := map[string]*found{}
		for _, j := range jobs {
			f := m[j.Spec.Name]
			if f == nil {
				f = &found{arrays: map[string]int{}}
				m[j.Spec.Name] = f
			}
			if j.Array != nil {
				f.arrays[j.Array.ID]++
			} else {
				f.jobs = append(f.jobs, j.ID)
			}
		}
		return m
	}
	pre, post := index(before), index(after)
	var r Result
	problem := func(format string, a ...any) {
		if len(r.Problems) < maxProblems {
			r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
		}
	}
	for _, s := range subs {
		r.Submitted++
		if s.tasks > 0 {
			r.Arrays++
		}
		f := post[s.name]
		if f == nil {
			f = &found{arrays: map[string]int{}}
		}
		made := len(f.jobs) + len(f.arrays)
		if made > 1 {
			r.Duplicated++
			problem("%s: stored %d times (jobs %v, arrays %v)", s.name, made, f.jobs, f.arrays)
		}
		whole := true
		for id, n := range f.arrays {
			if n != s.tasks {
				whole = false
				r.Partial++
				problem("%s: array %s has %d of its %d tasks", s.name, id, n, s.tasks)
			}
		}
		if s.retried == "" {
			r.RetryFailed++
			problem("%s: sent again with its key after the restart: %v", s.name, s.retryErr)
		}
		if s.acked == "" {
			r.Unanswered++
			if pre[s.name] != nil {
				r.InFlightStored++
			}
			continue
		}
		r.Acknowledged++
		stored := slices.Contains(f.jobs, s.acked) || f.arrays[s.acked] > 0
		switch {
		case !stored:
			r.Missing++
			problem("%s: answered %s before the kill; after the restart the store holds jobs %v, arrays %v", s.name, s.acked, f.jobs, f.arrays)
		case s.retried != "" && s.retried != s.acked:
			r.KeyMismatch++
			problem("%s: answered %s before the kill; its key now answers %s", s.name, s.acked, s.retried)
		case made == 1 && whole && s.retried == s.acked:
			r.Present++
		}
	}
	r.OK = r.Missing == 0 && r.KeyMismatch == 0 && r.Duplicated == 0 && r.Partial == 0 && r.RetryFailed == 0 && r.Present == r.Acknowledged
	return r
}
