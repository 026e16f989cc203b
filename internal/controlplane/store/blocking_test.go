package store

import (
	"context"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestWaitJobAndQueueChange: a wait on one job wakes for its own keys
// (record, progress, ranks, checkpoints) and not for another job's whose
// ID it is a prefix of; a wait on the queues wakes for a queue and for a
// job, and not for a node.
func TestWaitJobAndQueueChange(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	var jobs []*api.Job
	for range 10 {
		j, err := s.CreateJob(ctx, spec(1), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	one, ten := jobs[0], jobs[9]
	if one.ID != "1" || ten.ID != "10" {
		t.Fatalf("ids %s and %s; want 1 and 10", one.ID, ten.ID)
	}
	loss := 0.5
	tests := []struct {
		name  string
		wait  func(after int64) (int64, error)
		write func() error
		wakes bool
	}{
		{"job 10's record does not wake job 1", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 300*time.Millisecond) },
			func() error {
				_, err := s.ModifyJob(ctx, "10", func(j *api.Job) error { j.Spec.Priority = 5; return nil })
				return err
			}, false},
		{"job 10's progress does not wake job 1", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 300*time.Millisecond) },
			func() error { return s.AppendProgress(ctx, "10", []api.Progress{{Step: 1, Loss: &loss}}) }, false},
		{"job 1's record", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 10*time.Second) },
			func() error {
				_, err := s.ModifyJob(ctx, "1", func(j *api.Job) error { j.Spec.Priority = 5; return nil })
				return err
			}, true},
		{"job 1's progress", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 10*time.Second) },
			func() error { return s.AppendProgress(ctx, "1", []api.Progress{{Step: 1, Loss: &loss}}) }, true},
		{"job 1's rank", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 10*time.Second) },
			func() error {
				return s.PutRankStatuses(ctx, []api.RankStatus{{JobID: "1", Attempt: 1, Rank: 0, State: api.RankRunning}})
			}, true},
		{"job 1's checkpoint", func(a int64) (int64, error) { return s.WaitJobChange(ctx, "1", a, 10*time.Second) },
			func() error { return s.PutCheckpoint(ctx, "1", api.Checkpoint{Step: 5}) }, true},
		{"a node does not wake the queues", func(a int64) (int64, error) { return s.WaitQueueChange(ctx, a, 300*time.Millisecond) },
			func() error {
				return s.PutNode(ctx, &api.Node{Name: "n1", Status: api.NodeStatus{State: api.NodeReady}})
			}, false},
		{"a queue wakes the queues", func(a int64) (int64, error) { return s.WaitQueueChange(ctx, a, 10*time.Second) },
			func() error { return s.PutQueue(ctx, &api.Queue{Spec: api.QueueSpec{Name: "research", Weight: 1}}) }, true},
		{"a job wakes the queues", func(a int64) (int64, error) { return s.WaitQueueChange(ctx, a, 10*time.Second) },
			func() error { _, err := s.CreateJob(ctx, spec(1), time.Now()); return err }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := s.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				rev int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := tt.wait(rev)
				done <- result{r, err}
			}()
			if err := tt.write(); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if woke := r.rev > rev; woke != tt.wakes {
				t.Errorf("returned %d after %d: woke %v, want %v", r.rev, rev, woke, tt.wakes)
			}
		})
	}
}
