package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cache mirrors the store in memory, fed by one list and then a watch, so
// controllers can read the whole cluster every pass without re-reading etcd.
// Objects handed out are shared: callers must not modify them (copy with
// api.CloneJob and friends first).
type Cache struct {
	s   *Store
	log *slog.Logger

	mu       sync.Mutex // guards the fields below
	rev      int64
	jobs     map[string]*api.Job
	nodes    map[string]*api.Node
	ranks    map[string]*api.RankStatus // by task key
	ckpts    map[string]*api.Checkpoint // newest per job
	progress map[string]*api.Progress   // newest per job
	deploys  map[string]*api.Deployment
	queues   map[string]*api.Queue
	revCond  *sync.Cond

	// changed gets a value (without blocking) after every applied batch.
	changed chan struct{}
}

// NewCache returns an empty cache; Run fills and follows it.
func NewCache(s *Store, log *slog.Logger) *Cache {
	c := &Cache{s: s, log: log, changed: make(chan struct{}, 1)}
	c.revCond = sync.NewCond(&c.mu)
	c.reset()
	return c
}

func (c *Cache) reset() {
	c.jobs = map[string]*api.Job{}
	c.nodes = map[string]*api.Node{}
	c.ranks = map[string]*api.RankStatus{}
	c.ckpts = map[string]*api.Checkpoint{}
	c.progress = map[string]*api.Progress{}
	c.deploys = map[string]*api.Deployment{}
	c.queues = map[string]*api.Queue{}
}

// Changed is signalled after the cache applies changes. One receiver only.
func (c *Cache) Changed() <-chan struct{} { return c.changed }

// Run lists and watches until ctx ends. It relists after a compaction or a
// broken watch.
func (c *Cache) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.revCond.Broadcast()
		c.mu.Unlock()
	}()
	for ctx.Err() == nil {
		rev, err := c.list(ctx)
		if err != nil {
			c.log.Warn("cache list failed", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		c.watch(ctx, rev)
	}
	return nil
}

func (c *Cache) list(ctx context.Context) (int64, error) {
	resp, err := c.s.c.Get(ctx, Root, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", Root, err)
	}
	c.mu.Lock()
	c.reset()
	for _, kv := range resp.Kvs {
		c.applyLocked(string(kv.Key), kv.Value, kv.ModRevision, false)
	}
	c.rev = resp.Header.Revision
	c.revCond.Broadcast()
	c.mu.Unlock()
	c.notify()
	return resp.Header.Revision, nil
}

func (c *Cache) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.s.c.Watch(wctx, Root, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.CompactRevision > 0 || wr.Err() != nil {
			return
		}
		c.mu.Lock()
		for _, ev := range wr.Events {
			c.applyLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete)
		}
		if wr.Header.Revision > c.rev {
			c.rev = wr.Header.Revision
		}
		c.revCond.Broadcast()
		c.mu.Unlock()
		c.notify()
	}
}

func (c *Cache) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *Cache) applyLocked(key string, val []byte, modRev int64, del bool) {
	switch {
	case strings.HasPrefix(key, jobsPrefix):
		id := key[len(jobsPrefix):]
		if del {
			delete(c.jobs, id)
			return
		}
		var j api.Job
		if json.Unmarshal(val, &j) == nil {
			j.ModRevision = modRev
			c.jobs[id] = &j
		}
	case strings.HasPrefix(key, nodesPrefix):
		name := key[len(nodesPrefix):]
		if del {
			delete(c.nodes, name)
			return
		}
		var n api.Node
		if json.Unmarshal(val, &n) == nil {
			n.ModRevision = modRev
			c.nodes[name] = &n
		}
	case strings.HasPrefix(key, ranksPrefix):
		k := key[len(ranksPrefix):]
		if del {
			delete(c.ranks, k)
			return
		}
		var r api.RankStatus
		if json.Unmarshal(val, &r) == nil {
			c.ranks[k] = &r
		}
	case strings.HasPrefix(key, ckptPrefix):
		if del {
			return
		}
		var ck api.Checkpoint
		if json.Unmarshal(val, &ck) == nil {
			job := key[len(ckptPrefix):]
			if i := strings.IndexByte(job, '/'); i >= 0 {
				job = job[:i]
			}
			if cur := c.ckpts[job]; cur == nil || ck.Step > cur.Step {
				c.ckpts[job] = &ck
			}
		}
	case strings.HasPrefix(key, queuesPrefix):
		name := key[len(queuesPrefix):]
		if del {
			delete(c.queues, name)
			return
		}
		var q api.Queue
		if json.Unmarshal(val, &q) == nil {
			q.ModRevision = modRev
			c.queues[name] = &q
		}
	case strings.HasPrefix(key, deployPrefix):
		name := key[len(deployPrefix):]
		if del {
			delete(c.deploys, name)
			return
		}
		var d api.Deployment
		if json.Unmarshal(val, &d) == nil {
			d.ModRevision = modRev
			c.deploys[name] = &d
		}
	case strings.HasPrefix(key, progPrefix):
		job := key[len(progPrefix):]
		if del {
			delete(c.progress, job)
			return
		}
		var pl api.ProgressLog
		if json.Unmarshal(val, &pl) == nil {
			p := pl.Latest
			c.progress[job] = &p
		}
	}
}

// WaitRevision blocks until the cache has applied revision rev or ctx ends.
func (c *Cache) WaitRevision(ctx context.Context, rev int64) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.revCond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.rev < rev {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.revCond.Wait()
	}
	return nil
}

// View is a consistent read of the cache at one revision. Its maps and
// objects are shared and read-only.
type View struct {
	Rev      int64
	Jobs     map[string]*api.Job
	Nodes    map[string]*api.Node
	Ranks    map[string]*api.RankStatus
	Ckpts    map[string]*api.Checkpoint
	Progress map[string]*api.Progress
	Deploys  map[string]*api.Deployment
	Queues   map[string]*api.Queue
}

// Snapshot copies the cache's maps (not the objects) under the lock.
func (c *Cache) Snapshot() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := View{
		Rev:      c.rev,
		Jobs:     make(map[string]*api.Job, len(c.jobs)),
		Nodes:    make(map[string]*api.Node, len(c.nodes)),
		Ranks:    make(map[string]*api.RankStatus, len(c.ranks)),
		Ckpts:    make(map[string]*api.Checkpoint, len(c.ckpts)),
		Progress: make(map[string]*api.Progress, len(c.progress)),
		Deploys:  make(map[string]*api.Deployment, len(c.deploys)),
		Queues:   make(map[string]*api.Queue, len(c.queues)),
	}
	for k, x := range c.queues {
		v.Queues[k] = x
	}
	for k, x := range c.deploys {
		v.Deploys[k] = x
	}
	for k, x := range c.jobs {
		v.Jobs[k] = x
	}
	for k, x := range c.nodes {
		v.Nodes[k] = x
	}
	for k, x := range c.ranks {
		v.Ranks[k] = x
	}
	for k, x := range c.ckpts {
		v.Ckpts[k] = x
	}
	for k, x := range c.progress {
		v.Progress[k] = x
	}
	return v
}
