package store

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func TestCacheAssignmentDeltaSendsOnlyWhatChanged(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	start := func(rank int) *api.Job {
		j, err := s.CreateJob(ctx, spec(1), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		j.Status.Phase = api.JobRunning
		j.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning}}
		if _, err := s.StartAttempt(ctx, j, []api.Assignment{{JobID: j.ID, Attempt: 1, Rank: rank, Node: "n1", Command: []string{"true"}}}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	list := func(after int64, delta bool) api.AssignmentList {
		t.Helper()
		rev, _ := s.Revision(ctx)
		if err := c.WaitRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
		b, _, err := c.Assignments(ctx, "n1", after, time.Second, delta)
		if err != nil {
			t.Fatal(err)
		}
		var l api.AssignmentList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return l
	}
	a, b := start(0), start(0)
	full := list(0, true)
	if full.Delta || len(full.Assignments) != 2 || len(full.Unchanged) != 0 {
		t.Fatalf("first list: %+v; want both assignments in full", full)
	}
	// b stops, c starts: the delta carries c in full, names a, drops b.
	if _, err := s.StopAttempt(ctx, b, 1, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	cj := start(0)
	d := list(full.Revision, true)
	if !d.Delta || len(d.Assignments) != 1 || d.Assignments[0].JobID != cj.ID {
		t.Fatalf("delta: %+v; want only job %s's assignment in full", d, cj.ID)
	}
	if want := api.TaskKey(a.ID, 1, 0); len(d.Unchanged) != 1 || d.Unchanged[0] != want {
		t.Fatalf("delta names %v unchanged; want [%s]", d.Unchanged, want)
	}
	// Without delta the same question gets the whole list.
	if l := list(full.Revision, false); l.Delta || len(l.Assignments) != 2 {
		t.Fatalf("without delta: %+v; want both live assignments", l)
	}
}
