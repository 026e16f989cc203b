// Package controller runs on the leader and reconciles the store: it finds
// lost nodes, moves jobs through their lifecycle (pending → running →
// stopping → restarting or done), asks the scheduler for a plan and writes
// what it decided, a few transactions per pass. It also scales deployments
// and deletes old finished jobs.
//
// A pass (controller.go) reads the store's cache once, then:
//   - lifecycle.go decides, from that view, the rank statuses reported
//     since and the pass's time, what becomes of each live job and silent
//     node; its decisions are values, and it does no I/O and reads no
//     clock;
//   - schedule.go builds the scheduler's snapshot and asks for a plan;
//   - apply.go alone turns decisions and the plan into store writes,
//     batched to the end of the pass;
//   - submit.go and reports.go hand new jobs and rank statuses from the API
//     to the next pass.
//
// deploy.go scales deployments, retention.go deletes finished jobs,
// sweep.go finishes arrays a crashed submitter left part-written and
// expires idempotency keys, topo.go keeps the cluster's topology,
// liveness.go the agents' heartbeats, and observe.go tells an Observer
// (the server's metrics) what passes did and why jobs wait.
//
// It imports api, base/stats, controlplane/store, launch, scheduler,
// scheduler/policy and topology; nothing imports it but the server.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/topology"
)

// Config tunes the controller.
type Config struct {
	// NodeTimeout: a node silent this long is lost (if a witness of it
	// is heard; see Fencing). Default 3s.
	NodeTimeout time.Duration
	// Fencing is the timing contract with the agents; zero: derived from
	// NodeTimeout and a 1s heartbeat.
	Fencing Fencing
	// CheckpointRoot is the parent of default job checkpoint directories.
	CheckpointRoot string
	// SecretsDir holds the files spec.secretEnv names, a directory per
	// user; "" keeps none.
	SecretsDir string
	// Tick is the longest gap between passes. Default 100ms.
	Tick time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Scaler sizes autoscaled deployments; nil holds them at their minimum.
	Scaler Scaler
	// TopologyFiles describe the fabric (leaves, spines, NVLink blocks)
	// beyond what the nodes' labels say.
	TopologyFiles []topology.File
	// JobRetention: a job finished this long ago is deleted with its rank
	// statuses, checkpoint records and progress. 0 keeps finished jobs.
	JobRetention time.Duration
	// MaxFinishedJobs: beyond this many finished jobs the oldest are
	// deleted, whatever their age, so that the store cannot fill up. 0:
	// no limit.
	MaxFinishedJobs int
	// JobArchive, if set, is where each job retention deletes is first
	// appended; if the append fails, nothing is deleted.
	JobArchive JobArchive
	// RetentionTick is how often retention looks. Default 10s.
	RetentionTick time.Duration
	// Preflight tests a wide gang's placement before its command runs
	// (preflight.go); the zero value tests none.
	Preflight Preflight
	// Observer hears what passes did (observe.go); nil: nothing does.
	Observer Observer
}

// JobArchive keeps the jobs retention deletes (jobarchive.Archive).
type JobArchive interface {
	// Append stores ds durably, all or nothing.
	Append(ds []api.JobDetail) error
}

// Controller reconciles nodes and jobs. Create with New; Run drives it.
type Controller struct {
	st     *store.Store
	cache  *store.Cache
	live   *Liveness
	cfg    Config
	log    *slog.Logger
	topo   topoCache // used by the Run goroutine only
	ready  *readiness
	scaler Scaler

	rmu      sync.Mutex // guards reasonAt
	reasonAt map[string]time.Time

	subs submissions // new jobs handed over by Submit
	reps reportQueue // rank statuses handed over by Report
	// lastBacklog: the last pass left jobs waiting that it could not
	// place (passes run one at a time).
	lastBacklog bool
	// kinds is why the newest pass left each waiting job waiting.
	kinds pendingKinds
}

// New returns a controller over the store, its cache (which the caller
// runs) and the heartbeat table the API fills.
func New(st *store.Store, cache *store.Cache, live *Liveness, cfg Config, log *slog.Logger) *Controller {
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 3 * time.Second
	}
	if cfg.Fencing.NodeTimeout == 0 {
		cfg.Fencing = NewFencing(time.Second, cfg.NodeTimeout, 0)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetentionTick <= 0 {
		cfg.RetentionTick = 10 * time.Second
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	return &Controller{st: st, cache: cache, live: live, cfg: cfg, log: log, ready: newReadiness(), scaler: cfg.Scaler,
		topo: topoCache{files: cfg.TopologyFiles}, subs: submissions{poke: make(chan struct{}, 1), arrived: make(chan struct{}, 1), slow: slowPass},
		reps: reportQueue{hold: reportHold}}
}

// Run reconciles after every cache change and at least every Tick until
// ctx ends. It returns nil when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	poke := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.ready.run(ctx, time.Second, func() {
			select {
			case poke <- struct{}{}:
			default:
			}
		})
	}()
	wg.Add(1)
	go func() { defer wg.Done(); c.sweep(ctx) }()
	if c.cfg.JobRetention > 0 || c.cfg.MaxFinishedJobs > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); c.retain(ctx) }()
	}
	again := false
	for {
		if !again {
			select {
			case <-ctx.Done():
				return nil
			case <-poke:
			case <-c.subs.poke:
			case <-c.cache.Changed():
			case <-t.C:
			}
			if !c.lastBacklog {
				c.holdReports(ctx)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		rev, follow, err := c.reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("reconcile failed", "err", err)
		}
		again = false
		if rev > 0 {
			// See our own writes before the next pass, so it does not
			// place on GPUs this one gave out.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = c.cache.WaitRevision(wctx, rev)
			cancel()
			select {
			case <-c.cache.Changed():
			default:
			}
			// Then act on them at once if they open new work: an
			// attempt that ended frees GPUs the waiting gangs can take
			// now. A pass that only placed jobs leaves nothing for the
			// next, which would only hold up the next submission.
			again = follow
		}
	}
}

// pass is the state of one reconcile pass.
type pass struct {
	c      *Controller
	v      store.View
	now    time.Time
	life   lifecycle  // decides from v, reported and now
	mu     sync.Mutex // guards maxRev, errs, queued, next, freed and backlog
	maxRev int64
	errs   []error
	queued []queuedWrite
	// What the next pass could do at once (see reconcile): next, a
	// write left a job for it (pending, restarting, stopping) or wrote
	// outside the queue; freed, a write may have freed GPUs (anything
	// but a queueQuiet one); backlog, jobs wait that this pass did not
	// place.
	next, freed, backlog bool
	sem                  chan struct{}
	wg                   sync.WaitGroup
	// subs are the Submit batches this pass took; fresh their jobs by ID.
	subs  []*submission
	fresh map[string]*freshJob
	// reps are the Report batches this pass took; reported their
	// statuses by task key, which win over the view's.
	reps     []*reportBatch
	reported map[string]*api.RankStatus
	// kinds is why each job this pass left waiting waits (observe.go);
	// placed and preempted count the plan's gangs, scheduling times the
	// scheduler. Written by the pass's own goroutine only.
	kinds             map[string]string
	placed, preempted int
	scheduling        time.Duration
	// lanes is each job's place in its queue's overdue lane this pass
	// (policies.assignLanes); startAttempt records a granted one's start.
	lanes map[string]policy.LaneState
}

// forEachChunk is how many jobs' checks one goroutine of forEach takes.
// Each check only reads the view (a few microseconds), so a goroutine per
// job cost more in scheduling than the check: with GOMAXPROCS 2 it made
// the pass hand work between threads several times over.
const forEachChunk = 256

// forEach runs fn on every job: inline for up to forEachChunk of them,
// else in chunks beside the rest of the pass (p.wg waits for them). Each
// job is handled once per pass, and fn only reads the pass's view.
func (p *pass) forEach(jobs []*api.Job, fn func(*api.Job)) {
	if len(jobs) <= forEachChunk {
		for _, j := range jobs {
			fn(j)
		}
		return
	}
	for start := 0; start < len(jobs); start += forEachChunk {
		part := jobs[start:min(start+forEachChunk, len(jobs))]
		p.async(func() {
			for _, j := range part {
				fn(j)
			}
		})
	}
}

// async runs fn beside the rest of the pass.
func (p *pass) async(fn func()) {
	p.wg.Add(1)
	p.sem <- struct{}{}
	go func() {
		defer func() { <-p.sem; p.wg.Done() }()
		fn()
	}()
}

// Reconcile runs one pass and returns the newest revision it wrote.
func (c *Controller) Reconcile(ctx context.Context) (int64, error) {
	rev, _, err := c.reconcile(ctx)
	return rev, err
}

// reconcile is Reconcile, and says whether the pass's writes open work
// for the next pass at once (see pass.next).
func (c *Controller) reconcile(ctx context.Context) (int64, bool, error) {
	start := time.Now()
	p := &pass{c: c, v: c.cache.Snapshot(), now: c.cfg.Now(), sem: make(chan struct{}, 64), kinds: map[string]string{}}
	p.life = lifecycle{v: p.v, beats: c.live, nodeTimeout: c.cfg.NodeTimeout, fence: c.cfg.Fencing, now: p.now, preflight: c.cfg.Preflight}
	p.nodes(ctx)
	p.subs = c.take()
	p.reps, p.reported = c.takeReports()
	p.life.reported = p.reported
	ids := make([]*api.Job, 0, len(p.v.Jobs))
	for _, j := range p.v.Jobs {
		if !j.Status.Phase.Final() {
			ids = append(ids, j)
		}
	}
	if len(p.subs) > 0 {
		p.fresh = map[string]*freshJob{}
		for _, s := range p.subs {
			for i, j := range s.jobs {
				f := &freshJob{}
				if i == 0 {
					f.claim = s.claim
				}
				p.fresh[j.ID] = f
				ids = append(ids, j)
			}
		}
	}
	store.SortJobs(ids)
	// An array with a limit ("%N") offers the scheduler only as many of
	// its waiting tasks as it has room to run.
	room := map[string]int{}
	for _, j := range ids {
		if t := j.Array; t != nil && t.Limit > 0 {
			if _, ok := room[t.ID]; !ok {
				room[t.ID] = t.Limit
			}
			if j.Status.Phase == api.JobRunning || j.Status.Phase == api.JobStopping {
				room[t.ID]--
			}
		}
	}
	var pending, live []*api.Job
	for _, j := range ids {
		switch j.Status.Phase {
		case api.JobPending, api.JobRestarting:
			if j.Status.CancelRequested || (len(j.Status.Attempts) > 0 && p.life.lateSuccess(j) >= 0) {
				live = append(live, j)
				continue
			}
			if j.Status.NotBefore.After(p.now) {
				continue
			}
			if j.IsHeld() && j.Status.Phase == api.JobPending {
				p.heldByUser(j)
				continue
			}
			if j.Spec.Dependency != "" && len(j.Status.Attempts) == 0 {
				if why, never := p.dependency(j); why != "" {
					p.heldByDependency(j, why, never)
					continue
				}
			}
			if t := j.Array; t != nil && t.Limit > 0 {
				if room[t.ID] <= 0 {
					p.mu.Lock()
					p.backlog = true
					p.mu.Unlock()
					p.heldByArrayLimit(j)
					continue
				}
				room[t.ID]--
			}
			pending = append(pending, j)
		case api.JobRunning, api.JobStopping:
			live = append(live, j)
		}
	}
	p.forEach(live, func(j *api.Job) { p.apply(p.life.decide(j)) })
	p.schedule(ctx, pending)
	p.deployments(ctx)
	p.wg.Wait()
	p.storeFresh()
	// What a new job handed to a pass waits for beyond its own write.
	took := time.Since(start)
	c.subs.passNanos.Store(int64(took))
	c.kinds.p.Store(&p.kinds)
	c.cfg.Observer.Passed(took, p.scheduling, p.placed, p.preempted)
	left := p.flush(ctx)
	err := errors.Join(p.errs...)
	// Submitters wait for their jobs' own writes only, not for the rank
	// statuses no job write carried, which take a transaction of their own.
	answer(p.subs, p.fresh, err)
	p.storeReported(ctx, left)
	c.lastBacklog = p.backlog
	// Freed GPUs matter only to jobs that wait for them.
	return p.maxRev, p.next || (p.freed && p.backlog), err
}

// heldByArrayLimit says in a waiting array task's reason that its array's
// limit holds it back (the scheduler never sees it, so would say nothing).
func (p *pass) heldByArrayLimit(j *api.Job) {
	t := j.Array
	reason := fmt.Sprintf("array %s runs at most %d tasks at once (%%%d); this one waits for one of them to finish", t.ID, t.Limit, t.Limit)
	if j.Status.Phase == api.JobRestarting {
		reason = "restarting: " + reason
	}
	p.kinds[j.ID] = PendingArrayLimit
	if j.Status.Reason == reason || !p.c.reasonDue(j.ID, j.Status.Reason, p.now) {
		return
	}
	m := j.Clone()
	m.Status.Reason = reason
	p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
}
