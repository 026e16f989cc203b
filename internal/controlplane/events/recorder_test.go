package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/google/go-cmp/cmp"
)

// fakeStore keeps what a Recorder writes; its first fails puts fail.
type fakeStore struct {
	mu             sync.Mutex
	fails          int
	puts           int
	keys           []string
	trims, expires int
}

func (f *fakeStore) PutEvents(_ context.Context, ws []store.EventWrite, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	if f.fails > 0 {
		f.fails--
		return errors.New("etcd is down")
	}
	for _, w := range ws {
		f.keys = append(f.keys, fmt.Sprintf("%d/%d %s %s", w.Source, w.Seq, w.Event.Name, w.Event.Reason))
	}
	return nil
}

func (f *fakeStore) TrimEvents(context.Context, int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trims++
	return 0, nil
}

func (f *fakeStore) ExpireEvents(context.Context, time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expires++
	return 0, nil
}

func (f *fakeStore) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.keys
	f.keys = nil
	return out
}

func jobChange(rev int64, old, j *api.Job) store.Change {
	id := j.ID
	return store.Change{Kind: store.ChangeJob, Name: id, Rev: rev, OldJob: old, Job: j}
}

// TestRecorderWritesOnlyWhileLeading: changes heard before Run, or after
// it, are told by nobody; those heard while it runs are written with keys
// numbered within their revision, those heard within the linger in one
// write, retried when the store fails, and the
// first list tells nothing (the state a leader finds is no news), a later
// one only what changed since the revision heard last.
func TestRecorderWritesOnlyWhileLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &fakeStore{}
		r := New(fs, Config{Tick: time.Hour, Now: func() time.Time { return t0 }}, slog.New(slog.DiscardHandler))
		pending := jobAt(api.JobPending, "")
		placed := jobAt(api.JobRunning, "", "n1:Running")
		r.Changed([]store.Change{jobChange(5, nil, pending)}, 5, false) // not leading yet

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		synctest.Wait()
		// Two batches of changes within the linger: one write.
		other := with(pending, func(j *api.Job) { j.ID = "8" })
		r.Changed([]store.Change{jobChange(6, pending, placed), jobChange(6, nil, other)}, 6, false)
		time.Sleep(DefaultLinger / 2)
		third := with(pending, func(j *api.Job) { j.ID = "10" })
		r.Changed([]store.Change{jobChange(7, nil, third)}, 7, false)
		synctest.Wait()
		if got := fs.take(); len(got) != 0 {
			t.Fatalf("written before the linger passed: %v", got)
		}
		time.Sleep(DefaultLinger / 2)
		synctest.Wait()
		want := []string{"6/0 7 Scheduled", "6/1 8 Submitted", "7/0 10 Submitted"}
		if diff := cmp.Diff(want, fs.take()); diff != "" {
			t.Fatalf("written (-want +got):\n%s", diff)
		}
		fs.mu.Lock()
		if fs.puts != 1 {
			t.Errorf("%d writes; want the linger's changes in one", fs.puts)
		}
		fs.mu.Unlock()

		// The store fails twice: the events are written on the third try.
		fs.mu.Lock()
		fs.fails = 2
		fs.mu.Unlock()
		running := with(placed, func(j *api.Job) { j.Status.Attempts[0].RunningAt = t0.Add(time.Second) })
		r.Changed([]store.Change{jobChange(9, placed, running)}, 9, false)
		time.Sleep(DefaultLinger)
		synctest.Wait()
		if got := fs.take(); len(got) != 0 {
			t.Fatalf("written while the store fails: %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"9/0 7 Started"}, fs.take()); diff != "" {
			t.Fatalf("written after retries (-want +got):\n%s", diff)
		}

		// A list after the watch broke: job 8, unchanged since the
		// revision heard last, tells nothing; job 7 finished meanwhile.
		done7 := with(running, func(j *api.Job) {
			ended(api.OutcomeSucceeded, api.CauseSucceeded, "")(j)
			j.Status.Phase = api.JobSucceeded
		})
		r.Changed([]store.Change{jobChange(6, nil, other), jobChange(12, running, done7)}, 12, true)
		time.Sleep(DefaultLinger)
		synctest.Wait()
		if diff := cmp.Diff([]string{"12/0 7 Succeeded"}, fs.take()); diff != "" {
			t.Fatalf("written after a relist (-want +got):\n%s", diff)
		}

		cancel()
		<-done
		r.Changed([]store.Change{jobChange(13, nil, with(pending, func(j *api.Job) { j.ID = "9" }))}, 13, false)
		time.Sleep(DefaultLinger)
		synctest.Wait()
		if got := fs.take(); len(got) != 0 {
			t.Errorf("written after leadership ended: %v", got)
		}
	})
}

// TestRecorderNewLeaderTellsNothingOfWhatItFound: a recorder whose cache
// has not loaded the store yet when it starts leading hears the first
// list as what it found, not as news.
func TestRecorderNewLeaderTellsNothingOfWhatItFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &fakeStore{}
		r := New(fs, Config{Tick: time.Minute}, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		synctest.Wait()
		r.Changed([]store.Change{jobChange(3, nil, jobAt(api.JobRunning, "", "n1:Running"))}, 40, true)
		time.Sleep(DefaultLinger)
		synctest.Wait()
		if got := fs.take(); len(got) != 0 {
			t.Errorf("the first list told %v", got)
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		fs.mu.Lock()
		if fs.trims != 1 || fs.expires != 1 {
			t.Errorf("after a tick: %d trims, %d expiries; want 1 each", fs.trims, fs.expires)
		}
		fs.mu.Unlock()
		cancel()
		<-done
	})
}
