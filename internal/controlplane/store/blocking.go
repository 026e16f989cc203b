package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Blocking queries (?index=N&wait=D) wait here for the keys an answer is
// made of to change after revision N: a list's prefix (WaitChange), the
// queues and the jobs that make their usage (WaitQueueChange), or the keys
// of one job (WaitJobChange).

// watched is one key, or every key under a prefix, that a blocking query
// waits on.
type watched struct {
	key    string
	prefix bool
}

// WaitQueueChange blocks until a queue or a job changes after revision
// after (a queue's usage is its jobs'), ctx ends, or wait passes; it
// returns as WaitChange does.
func (s *Store) WaitQueueChange(ctx context.Context, after int64, wait time.Duration) (int64, error) {
	return s.waitAny(ctx, after, wait, watched{queuesPrefix, true}, watched{jobsPrefix, true})
}

// WaitJobChange blocks until job id, or its rank statuses, checkpoints,
// progress or stragglers, change after revision after, ctx ends, or wait
// passes; it returns as WaitChange does. Other jobs' keys (those of job
// 10 for job 1) do not wake it.
func (s *Store) WaitJobChange(ctx context.Context, id string, after int64, wait time.Duration) (int64, error) {
	return s.waitAny(ctx, after, wait,
		watched{jobKey(id), false}, watched{progKey(id), false},
		watched{ranksPrefix + id + "/", true}, watched{ckptPrefix + id + "/", true}, watched{stragPrefix + id + "/", true})
}

// waitAny blocks until one of ws changes after revision after, ctx ends,
// or wait passes. It returns the revision of the first change seen, or
// after if none happened; a compacted revision is reported as a change.
// Its watches share one context (and so one stream to etcd), and it
// returns only after each watch's goroutine has exited.
func (s *Store) waitAny(ctx context.Context, after int64, wait time.Duration, ws ...watched) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	wctx := clientv3.WithRequireLeader(ctx)
	type result struct {
		rev int64
		err error
	}
	results := make(chan result, len(ws)) // each goroutine sends at most once
	var wg sync.WaitGroup
	defer wg.Wait() // once cancel, deferred below and so run first, has ended the watches
	defer cancel()
	for _, w := range ws {
		opts := []clientv3.OpOption{clientv3.WithRev(after + 1)}
		if w.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wc := s.c.Watch(wctx, w.key, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range wc {
				switch {
				case wr.CompactRevision > 0:
					results <- result{rev: wr.CompactRevision}
				case wr.Err() != nil:
					results <- result{after, fmt.Errorf("store: watch %s: %w", w.key, wr.Err())}
				case len(wr.Events) > 0:
					results <- result{rev: wr.Events[len(wr.Events)-1].Kv.ModRevision}
				default:
					continue
				}
				return
			}
			results <- result{rev: after} // closed: ctx ended, or no leader
		}()
	}
	select {
	case <-ctx.Done():
		return after, nil
	case r := <-results:
		return r.rev, r.err
	}
}
