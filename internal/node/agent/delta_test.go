package agent

import (
	"testing"

	"github.com/gangway/gangway/internal/api"
)

func TestUndeltaRebuildsTheWholeList(t *testing.T) {
	a := api.Assignment{JobID: "1", Attempt: 1, Rank: 0, Command: []string{"a"}}
	b := api.Assignment{JobID: "2", Attempt: 1, Rank: 0, Command: []string{"b"}}
	c := api.Assignment{JobID: "3", Attempt: 1, Rank: 0, Command: []string{"c"}}
	held := map[string]api.Assignment{a.TaskKey(): a, b.TaskKey(): b}
	// b is gone, c is new, a unchanged.
	l, ok := undelta(api.AssignmentList{Revision: 9, Delta: true, Assignments: []api.Assignment{c}, Unchanged: []string{a.TaskKey()}}, held)
	if !ok || l.Revision != 9 || l.Delta || len(l.Assignments) != 2 {
		t.Fatalf("undelta = %+v, %v; want a and c at revision 9", l, ok)
	}
	got := map[string]string{}
	for _, x := range l.Assignments {
		got[x.TaskKey()] = x.Command[0]
	}
	if got[a.TaskKey()] != "a" || got[c.TaskKey()] != "c" {
		t.Fatalf("undelta kept %v; want a's and c's own commands", got)
	}
	// A delta naming a task the agent does not hold cannot be applied.
	if _, ok := undelta(api.AssignmentList{Delta: true, Unchanged: []string{"7/1/0"}}, held); ok {
		t.Fatal("undelta accepted an unchanged task it does not hold")
	}
}

// TestFreshRefusesAnOlderList: a list older than the one held is not
// applied (it would stop ranks assigned since); the same or newer is.
func TestFreshRefusesAnOlderList(t *testing.T) {
	for _, c := range []struct {
		name       string
		rev, index int64
		ok         bool
	}{
		{"first list", 5, 0, true},
		{"same revision (a wait that passed)", 9, 9, true},
		{"newer", 12, 9, true},
		{"older: a server behind", 7, 9, false},
	} {
		if err := fresh(api.AssignmentList{Revision: c.rev}, c.index); (err == nil) != c.ok {
			t.Errorf("%s: fresh(revision %d, index %d) = %v; want ok %v", c.name, c.rev, c.index, err, c.ok)
		}
	}
}
