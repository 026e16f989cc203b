package store

import (
	"encoding/json"
	"math"

	"github.com/gangway/gangway/internal/api"
)

// ChangeKind says what a Change is of.
type ChangeKind uint8

// The kinds of change a Tap hears.
const (
	ChangeJob ChangeKind = iota + 1
	ChangeNode
	ChangeDeployment
	ChangeQueue
	// ChangeCheckpoint: a live job's newest committed checkpoint.
	ChangeCheckpoint
	// ChangeStraggler: a straggler declared in a job's attempt.
	ChangeStraggler
)

// Change is one object of the store as the cache applied it: its value
// before (nil: the cache did not have it) and after (nil: deleted).
// Objects are shared and read-only.
type Change struct {
	Kind ChangeKind
	// Name is the job's ID (for its checkpoints and stragglers too), or
	// the node's, deployment's or queue's name.
	Name string
	// Rev is the revision it was written or deleted at; after a list, a
	// deletion the list implies has the list's.
	Rev int64

	OldJob, Job               *api.Job // a final job too (Job), which the cache then drops
	OldNode, Node             *api.Node
	OldDeployment, Deployment *api.Deployment
	OldQueue, Queue           *api.Queue
	// OldCheckpoint is the job's newest before, Checkpoint a newer one.
	OldCheckpoint, Checkpoint *api.Checkpoint
	Straggler                 *api.Straggler
}

// Tap hears what the cache applies, so that what happened can be told
// (the leader's events) without a watch or a decoding of its own.
type Tap interface {
	// Changed is called with the cache locked after each batch the
	// watch delivered, rev being the cache's revision after it, and after
	// each list (full): changes then holds what the list found written
	// since the cache's view before it (Old set from that view, which may
	// be some time behind), and the deletions the list implies; after the
	// first list, nothing. It must be quick,
	// must not call the cache and must not keep changes (it may keep the
	// objects in them).
	Changed(changes []Change, rev int64, full bool)
}

// SetTap makes t hear every change the cache applies from now on; nil:
// none. Call it before Run.
func (c *Cache) SetTap(t Tap) {
	c.mu.Lock()
	c.tap = t
	c.mu.Unlock()
}

// SetEvents makes the cache keep l filled with the events the store holds;
// nil: none. Call it before Run.
func (c *Cache) SetEvents(l *EventLog) {
	c.mu.Lock()
	c.events = l
	c.mu.Unlock()
}

func (c *Cache) noteLocked(ch Change) {
	if c.tap != nil && ch.Rev > c.tapAfter {
		c.tapped = append(c.tapped, ch)
	}
}

// tapJobLocked notes job id written (ok: as j) or deleted at rev, before
// the cache applies it.
func (c *Cache) tapJobLocked(id string, rev int64, del, ok bool, j *api.Job) {
	switch {
	case ok:
		c.noteLocked(Change{Kind: ChangeJob, Name: id, Rev: rev, OldJob: c.jobs[id], Job: j})
	case del:
		c.noteLocked(Change{Kind: ChangeJob, Name: id, Rev: rev, OldJob: c.jobs[id]})
	}
}

// tapStragglerLocked notes a straggler declared: the cache keeps none, so
// it decodes one only for a tap.
func (c *Cache) tapStragglerLocked(key string, val []byte, rev int64, del bool) {
	if c.tap == nil || del || rev <= c.tapAfter {
		return
	}
	var st api.Straggler
	if json.Unmarshal(val, &st) == nil {
		c.noteLocked(Change{Kind: ChangeStraggler, Name: jobOf(key[len(stragPrefix):]), Rev: rev, Straggler: &st})
	}
}

// tapView is the cache's objects before a list replaced them, and its
// event log, which the list fills anew beside it.
type tapView struct {
	jobs    map[string]*api.Job
	nodes   map[string]*api.Node
	deploys map[string]*api.Deployment
	queues  map[string]*api.Queue
	ckpts   map[string]*api.Checkpoint
	events  *EventLog
}

// relistLocked begins a list: it returns the view the tap hears the list
// against (reset replaces the maps, so the ones returned stay as they
// were), and has the list fill a new event log, which relistedLocked
// puts in place of the old one. The tap hears of the list only what was
// written after the view (the first list: nothing), so that a store of
// many finished jobs is not held in memory for it.
func (c *Cache) relistLocked() tapView {
	v := tapView{jobs: c.jobs, nodes: c.nodes, deploys: c.deploys, queues: c.queues, ckpts: c.ckpts, events: c.events}
	c.events = c.events.staging()
	c.tapAfter = c.rev
	if c.rev == 0 {
		c.tapAfter = math.MaxInt64
	}
	return v
}

// relistedLocked ends a list begun by relistLocked.
func (c *Cache) relistedLocked(was *tapView) {
	was.events.replace(c.events)
	c.events = was.events
	c.flushTapLocked(was)
	c.tapAfter = 0
}

// flushTapLocked hands the changes noted since the last flush to the tap.
// After a list (old not nil), each change's old value is old's, and what
// old has and the list did not bring is a deletion.
func (c *Cache) flushTapLocked(old *tapView) {
	if c.tap == nil {
		return
	}
	if old != nil {
		for i := range c.tapped {
			ch := &c.tapped[i]
			switch ch.Kind {
			case ChangeJob:
				ch.OldJob = old.jobs[ch.Name]
			case ChangeNode:
				ch.OldNode = old.nodes[ch.Name]
			case ChangeDeployment:
				ch.OldDeployment = old.deploys[ch.Name]
			case ChangeQueue:
				ch.OldQueue = old.queues[ch.Name]
			case ChangeCheckpoint:
				ch.OldCheckpoint = old.ckpts[ch.Name]
			}
		}
		for id, j := range old.jobs {
			if _, finished := c.finished[id]; c.jobs[id] == nil && !finished {
				c.tapped = append(c.tapped, Change{Kind: ChangeJob, Name: id, Rev: c.rev, OldJob: j})
			}
		}
		for name, n := range old.nodes {
			if c.nodes[name] == nil {
				c.tapped = append(c.tapped, Change{Kind: ChangeNode, Name: name, Rev: c.rev, OldNode: n})
			}
		}
		for name, d := range old.deploys {
			if c.deploys[name] == nil {
				c.tapped = append(c.tapped, Change{Kind: ChangeDeployment, Name: name, Rev: c.rev, OldDeployment: d})
			}
		}
		for name, q := range old.queues {
			if c.queues[name] == nil {
				c.tapped = append(c.tapped, Change{Kind: ChangeQueue, Name: name, Rev: c.rev, OldQueue: q})
			}
		}
	}
	c.tap.Changed(c.tapped, c.rev, old != nil)
	clear(c.tapped) // drop the objects
	c.tapped = c.tapped[:0]
	if cap(c.tapped) > 4096 {
		c.tapped = nil // a list's: a watch batch needs far less
	}
}
