package durbench

import (
	"fmt"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func job(id, name string) *api.Job {
	return &api.Job{ID: id, Spec: api.JobSpec{Name: name}}
}

func tasks(first int, n int, name string) []*api.Job {
	var out []*api.Job
	for i := range n {
		j := job(itoa(first+i), name)
		j.Array = &api.ArrayTask{ID: itoa(first), Index: i, Count: n}
		out = append(out, j)
	}
	return out
}

func itoa(i int) string { return fmt.Sprintf("%03d", i) }

func TestTally(t *testing.T) {
	ok := func(name, acked string) submission { return submission{name: name, acked: acked, retried: acked} }
	for _, tc := range []struct {
		name          string
		subs          []submission
		before, after []*api.Job
		want          Result
	}{{
		name:   "all there",
		subs:   []submission{ok("a", "001"), {name: "b", retried: "002"}, {name: "c", tasks: 3, retried: "010"}},
		before: []*api.Job{job("001", "a"), job("002", "b")},
		after:  append([]*api.Job{job("001", "a"), job("002", "b")}, tasks(10, 3, "c")...),
		want:   Result{Submitted: 3, Arrays: 1, Acknowledged: 1, Present: 1, Unanswered: 2, InFlightStored: 1, OK: true},
	}, {
		name:  "lost",
		subs:  []submission{ok("a", "001")},
		after: []*api.Job{job("005", "a")},
		want:  Result{Submitted: 1, Acknowledged: 1, Missing: 1},
	}, {
		name:  "another ID by the key",
		subs:  []submission{{name: "a", acked: "001", retried: "002"}},
		after: []*api.Job{job("001", "a")},
		want:  Result{Submitted: 1, Acknowledged: 1, KeyMismatch: 1},
	}, {
		name:  "acknowledged, then stored again by its retry",
		subs:  []submission{{name: "a", acked: "001", retried: "004"}},
		after: []*api.Job{job("001", "a"), job("004", "a")},
		want:  Result{Submitted: 1, Acknowledged: 1, KeyMismatch: 1, Duplicated: 1},
	}, {
		name:  "stored twice",
		subs:  []submission{{name: "b", retried: "003"}},
		after: []*api.Job{job("002", "b"), job("003", "b")},
		want:  Result{Submitted: 1, Unanswered: 1, Duplicated: 1},
	}, {
		name:  "array not whole",
		subs:  []submission{{name: "c", tasks: 3, acked: "010", retried: "010"}},
		after: tasks(10, 2, "c"),
		want:  Result{Submitted: 1, Arrays: 1, Acknowledged: 1, Partial: 1},
	}, {
		name: "retry failed",
		subs: []submission{{name: "b"}},
		want: Result{Submitted: 1, Unanswered: 1, RetryFailed: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tally(tc.subs, tc.before, tc.after)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Result{}, "Problems")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !got.OK && len(got.Problems) == 0 {
				t.Error("not OK, and no problem said why")
			}
		})
	}
}
