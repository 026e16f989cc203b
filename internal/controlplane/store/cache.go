package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrStale: the cache cannot answer yet without going back in time: it
// has not loaded the store since the server started, or is behind the
// revision the asker already holds. A retry soon may succeed.
var ErrStale = errors.New("store: the server's view of the store is behind")

// Cache mirrors the live part of the store in memory, fed by one list and
// then a watch: jobs not yet finished with their ranks, newest checkpoint
// and progress; nodes, queues, deployments; and each node's assignments.
// Controllers read the whole cluster every pass from it without re-reading
// etcd, and agents' long polls and heartbeats are answered from it. A job
// that reaches a final phase leaves the cache with everything of its own,
// so a pass costs what is live, not everything that ever ran (the store
// keeps finished jobs for the API). Objects handed out are shared: callers
// must not modify them (copy with api.CloneJob and friends first).
type Cache struct {
	s   *Store
	log *slog.Logger

	mu       sync.Mutex // guards the fields below
	rev      int64
	jobs     map[string]*api.Job                   // not final
	ranks    map[string]map[string]*api.RankStatus // job → task key → status
	ckpts    map[string]*api.Checkpoint            // newest per job
	progress map[string]*api.Progress              // newest per job
	nodes    map[string]*api.Node                  //
	nodesGen int64                                 // bumped on every node change
	deploys  map[string]*api.Deployment            //
	queues   map[string]*api.Queue                 //
	assign   map[string]map[string]cachedAssign    // node → task key → assignment
	assignAt map[string]int64                      // node → revision of its last assignment change
	stops    map[string]map[int]int64              // job → attempt → revision its assignments were deleted at
	wake     map[string]chan struct{}              // node → closed at its next assignment change
	finished map[string]FinishedJob                // finished jobs the store still holds, for retention
	revCond  *sync.Cond
	tap      Tap       // hears what is applied (cachetap.go); nil: nobody
	tapped   []Change  // noted for tap since its last call
	tapAfter int64     // what is noted: changes past it (a list's: new since the view before)
	events   *EventLog // filled from the store's events; nil: none kept

	// changed gets a value (without blocking) after every applied batch
	// but one of events alone.
	changed chan struct{}
}

// NewCache returns an empty cache; Run fills and follows it.
func NewCache(s *Store, log *slog.Logger) *Cache {
	c := &Cache{s: s, log: log, changed: make(chan struct{}, 1), wake: map[string]chan struct{}{}}
	c.revCond = sync.NewCond(&c.mu)
	c.reset()
	return c
}

func (c *Cache) reset() {
	c.jobs = map[string]*api.Job{}
	c.ranks = map[string]map[string]*api.RankStatus{}
	c.ckpts = map[string]*api.Checkpoint{}
	c.progress = map[string]*api.Progress{}
	c.nodes = map[string]*api.Node{}
	c.nodesGen++
	c.deploys = map[string]*api.Deployment{}
	c.queues = map[string]*api.Queue{}
	c.assign = map[string]map[string]cachedAssign{}
	c.assignAt = map[string]int64{}
	c.stops = map[string]map[int]int64{}
	c.finished = map[string]FinishedJob{}
}

// Changed is signalled after the cache applies changes (not after a batch
// of events alone, which no controller reads). One receiver only.
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
	old, was := c.assign, c.relistLocked()
	c.reset()
	// Keys come sorted, so a job comes before its ranks, checkpoints and
	// progress.
	for _, kv := range resp.Kvs {
		c.applyLocked(string(kv.Key), kv.Value, kv.ModRevision, false)
	}
	c.rev = resp.Header.Revision
	c.relistedLocked(&was)
	// Every node's long poll must look again: its list may have changed
	// while the watch was down.
	for node := range old {
		c.assignAt[node] = max(c.assignAt[node], c.rev)
	}
	for node := range c.assign {
		c.assignAt[node] = c.rev
	}
	c.wakeAllLocked()
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
		quiet := true // only events, which no controller reads
		for _, ev := range wr.Events {
			quiet = quiet && bytes.HasPrefix(ev.Kv.Key, []byte(eventsPrefix))
			c.applyLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete)
		}
		if wr.Header.Revision > c.rev {
			c.rev = wr.Header.Revision
		}
		c.events.settle(wr.Header.Revision)
		c.flushTapLocked(nil)
		c.revCond.Broadcast()
		c.mu.Unlock()
		if !quiet {
			c.notify()
		}
	}
}

func (c *Cache) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// jobOf is the job id a per-job key (ranks, checkpoints, progress) names.
func jobOf(rest string) string {
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// decodeCachedJob decodes a job the cache keeps. encoding/json, not
// fastjson: the fast decoder gives every slice room for 10 elements, so a
// 600-byte running job held 10 KB instead of 1.7 KB (its attempts and
// placements), 6× the memory for every live job a large cluster caches.
func decodeCachedJob(val []byte, j *api.Job) error { return json.Unmarshal(val, j) }

func (c *Cache) applyLocked(key string, val []byte, modRev int64, del bool) {
	switch {
	case strings.HasPrefix(key, jobsPrefix):
		id := key[len(jobsPrefix):]
		var j api.Job
		ok := !del && decodeCachedJob(val, &j) == nil
		c.tapJobLocked(id, modRev, del, ok, &j)
		if ok && !j.Status.Phase.Final() {
			j.ModRevision = modRev
			c.jobs[id] = &j
			return
		}
		if ok {
			at := j.Status.FinishedAt
			if at.IsZero() { // written before finish times were kept
				at = j.SubmittedAt
			}
			c.finished[id] = FinishedJob{ID: id, FinishedAt: at, ModRevision: modRev, Phase: j.Status.Phase, Started: len(j.Status.Attempts) > 0}
		} else {
			delete(c.finished, id)
		}
		// Finished or gone: it leaves with everything of its own.
		delete(c.jobs, id)
		delete(c.ranks, id)
		delete(c.ckpts, id)
		delete(c.progress, id)
		delete(c.stops, id)
	case strings.HasPrefix(key, ranksPrefix):
		k := key[len(ranksPrefix):]
		job := jobOf(k)
		if del {
			delete(c.ranks[job], k)
			return
		}
		if c.jobs[job] == nil {
			return // a late report for a finished job
		}
		var r api.RankStatus
		if fastjson.Unmarshal(val, &r) == nil {
			if c.ranks[job] == nil {
				c.ranks[job] = map[string]*api.RankStatus{}
			}
			c.ranks[job][k] = &r
		}
	case strings.HasPrefix(key, ckptPrefix):
		job := jobOf(key[len(ckptPrefix):])
		if del || c.jobs[job] == nil {
			return
		}
		var ck api.Checkpoint
		if fastjson.Unmarshal(val, &ck) == nil {
			if cur := c.ckpts[job]; cur == nil || ck.Step > cur.Step {
				c.noteLocked(Change{Kind: ChangeCheckpoint, Name: job, Rev: modRev, OldCheckpoint: cur, Checkpoint: &ck})
				c.ckpts[job] = &ck
			}
		}
	case strings.HasPrefix(key, progPrefix):
		job := key[len(progPrefix):]
		if del || c.jobs[job] == nil {
			delete(c.progress, job)
			return
		}
		var pl api.ProgressLog
		if fastjson.Unmarshal(val, &pl) == nil {
			p := pl.Latest
			c.progress[job] = &p
		}
	case strings.HasPrefix(key, nodesPrefix):
		name := key[len(nodesPrefix):]
		c.nodesGen++
		if del {
			c.noteLocked(Change{Kind: ChangeNode, Name: name, Rev: modRev, OldNode: c.nodes[name]})
			delete(c.nodes, name)
			return
		}
		var n api.Node
		if fastjson.Unmarshal(val, &n) == nil {
			n.ModRevision = modRev
			c.noteLocked(Change{Kind: ChangeNode, Name: name, Rev: modRev, OldNode: c.nodes[name], Node: &n})
			c.nodes[name] = &n
		}
	case strings.HasPrefix(key, assignPrefix):
		rest := key[len(assignPrefix):]
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return
		}
		node, task := rest[:i], rest[i+1:]
		if del {
			delete(c.assign[node], task)
			// The transaction that stops an attempt deletes its
			// assignments: its revision is what agents must acknowledge.
			// Copied on write: views share the inner maps.
			if job, att, _, err := api.ParseTaskKey(task); err == nil && c.jobs[job] != nil && c.stops[job][att] < modRev {
				m := maps.Clone(c.stops[job])
				if m == nil {
					m = map[int]int64{}
				}
				m[att] = modRev
				c.stops[job] = m
			}
		} else {
			if c.assign[node] == nil {
				c.assign[node] = map[string]cachedAssign{}
			}
			c.assign[node][task] = cachedAssign{raw: bytes.Clone(val), mod: modRev}
		}
		c.assignAt[node] = modRev
		if ch := c.wake[node]; ch != nil {
			close(ch)
			delete(c.wake, node)
		}
	case strings.HasPrefix(key, queuesPrefix):
		name := key[len(queuesPrefix):]
		if del {
			c.noteLocked(Change{Kind: ChangeQueue, Name: name, Rev: modRev, OldQueue: c.queues[name]})
			delete(c.queues, name)
			return
		}
		var q api.Queue
		if fastjson.Unmarshal(val, &q) == nil {
			q.ModRevision = modRev
			c.noteLocked(Change{Kind: ChangeQueue, Name: name, Rev: modRev, OldQueue: c.queues[name], Queue: &q})
			c.queues[name] = &q
		}
	case strings.HasPrefix(key, deployPrefix):
		name := key[len(deployPrefix):]
		if del {
			c.noteLocked(Change{Kind: ChangeDeployment, Name: name, Rev: modRev, OldDeployment: c.deploys[name]})
			delete(c.deploys, name)
			return
		}
		var d api.Deployment
		if fastjson.Unmarshal(val, &d) == nil {
			d.ModRevision = modRev
			c.noteLocked(Change{Kind: ChangeDeployment, Name: name, Rev: modRev, OldDeployment: c.deploys[name], Deployment: &d})
			c.deploys[name] = &d
		}
	case strings.HasPrefix(key, eventsPrefix):
		c.events.applyPending(key, val, modRev, del) // settled once its whole answer is in
	case strings.HasPrefix(key, stragPrefix):
		c.tapStragglerLocked(key, val, modRev, del)
	}
}

func (c *Cache) wakeAllLocked() {
	for node, ch := range c.wake {
		close(ch)
		delete(c.wake, node)
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

// Deployments returns every deployment as the cache has it, by name.
func (c *Cache) Deployments() []*api.Deployment {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*api.Deployment, 0, len(c.deploys))
	for _, d := range c.deploys {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out
}

// Node returns a node as the cache has it, if it does.
func (c *Cache) Node(name string) (*api.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	return n, ok
}

// Revision is the newest store revision the cache has applied; 0 before
// its first list.
func (c *Cache) Revision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// Job returns a job not yet finished as the cache has it, if it does. It
// is shared: read-only.
func (c *Cache) Job(id string) (*api.Job, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[id]
	return j, ok
}

// LiveJobs lists the jobs not yet finished, in ID order. They are shared:
// read-only.
func (c *Cache) LiveJobs() []*api.Job {
	c.mu.Lock()
	out := make([]*api.Job, 0, len(c.jobs))
	for _, j := range c.jobs {
		out = append(out, j)
	}
	c.mu.Unlock()
	SortJobs(out)
	return out
}

// Finished returns a finished job the store still holds, if it does.
func (c *Cache) Finished(id string) (FinishedJob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.finished[id]
	return f, ok
}

// FinishedJobs lists the finished jobs the store holds, in no order.
func (c *Cache) FinishedJobs() []FinishedJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]FinishedJob, 0, len(c.finished))
	for _, f := range c.finished {
		out = append(out, f)
	}
	return out
}

// View is a consistent read of the cache at one revision. Its maps and
// objects are shared and read-only. Jobs holds only jobs not yet finished,
// and Ranks, Ckpts and Progress only theirs.
type View struct {
	Rev      int64
	Jobs     map[string]*api.Job
	Nodes    map[string]*api.Node
	Ranks    map[string]*api.RankStatus // by task key
	Ckpts    map[string]*api.Checkpoint
	Progress map[string]*api.Progress
	Deploys  map[string]*api.Deployment
	Queues   map[string]*api.Queue
	// Stops is, per live job and attempt, the revision the attempt's
	// assignments were deleted at: its stop revision. Read with StopRev.
	Stops map[string]map[int]int64
	// NodesGen changes whenever any node does, so that what is derived
	// from the nodes alone can be kept while it stays the same.
	NodesGen int64
}

// Snapshot copies the cache's maps (not the objects) under the lock.
func (c *Cache) Snapshot() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	nranks := 0
	for _, rs := range c.ranks {
		nranks += len(rs)
	}
	v := View{
		Rev:      c.rev,
		NodesGen: c.nodesGen,
		Jobs:     make(map[string]*api.Job, len(c.jobs)),
		Nodes:    make(map[string]*api.Node, len(c.nodes)),
		Ranks:    make(map[string]*api.RankStatus, nranks),
		Ckpts:    make(map[string]*api.Checkpoint, len(c.ckpts)),
		Progress: make(map[string]*api.Progress, len(c.progress)),
		Deploys:  make(map[string]*api.Deployment, len(c.deploys)),
		Queues:   make(map[string]*api.Queue, len(c.queues)),
		Stops:    make(map[string]map[int]int64, len(c.stops)),
	}
	for k, x := range c.stops {
		v.Stops[k] = x // the cache replaces a job's inner map, never edits it
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
	for _, rs := range c.ranks {
		for k, x := range rs {
			v.Ranks[k] = x
		}
	}
	for k, x := range c.ckpts {
		v.Ckpts[k] = x
	}
	for k, x := range c.progress {
		v.Progress[k] = x
	}
	return v
}
