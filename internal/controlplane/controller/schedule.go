package controller

import (
	"context"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
)

// schedule builds the scheduler's snapshot (free and shared GPUs,
// running gangs, queues, topology), with the order and priorities the
// queues' policies give (policy.go), asks for a plan and applies it:
// placements become attempts, preemptions send the checkpoint signal, and
// pending gangs get their reason.
func (p *pass) schedule(ctx context.Context, pending []*api.Job) {
	if len(pending) == 0 {
		return
	}
	topo, terr := p.c.topo.get(p.v.Nodes, p.v.NodesGen)
	if terr != nil {
		p.c.log.Warn("cluster topology unusable; placing without it", "err", terr)
		topo = nil
	}
	snap := scheduler.Snapshot{Now: p.now.UnixNano(), Topology: topo}
	used := map[string]map[int]bool{}
	shared := map[string]map[int]*scheduler.SharedGPU{}
	ports := map[string]map[int]bool{}
	ids := make([]string, 0, len(p.v.Jobs))
	for id := range p.v.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	pols := queuePolicies(p.v.Queues)
	gpus, healthy := 0, 0 // GPUs of schedulable nodes; those in service
	for _, n := range p.v.Nodes {
		if n.Schedulable() {
			gpus += len(n.GPUs)
			for _, g := range n.GPUs {
				if g.InService() {
					healthy++
				}
			}
		}
	}
	pols.assignLanes(p.v.Jobs, gpus, p.now)
	p.lanes = pols.lane
	snap.Running = make([]scheduler.Running, 0, len(ids))
	for _, id := range ids {
		j := p.v.Jobs[id]
		a := j.Status.Current()
		if a == nil || a.Phase == api.AttemptEnded {
			continue
		}
		r := scheduler.Running{Ranks: make([]scheduler.Slot, 0, len(a.Placement)),
			JobID: j.ID, Queue: j.Spec.Queue, Priority: j.Spec.Priority,
			StartedAt: a.CreatedAt.UnixNano(), Preemptible: j.Spec.IsPreemptible(),
			Stopping: a.Phase == api.AttemptStopping || !a.PreemptedAt.IsZero() || !a.RequeuedAt.IsZero(),
		}
		if j.Spec.TimeLimit > 0 {
			r.EstimatedEnd = a.CreatedAt.Add(j.Spec.TimeLimit.D()).UnixNano()
		}
		ck := p.v.Ckpts[j.ID]
		if ck != nil {
			r.LastCheckpoint = ck.Time.UnixNano()
		}
		pols.applyRunning(&r, j, a, ck, p.now)
		for _, rp := range a.Placement {
			r.Ranks = append(r.Ranks, scheduler.Slot{Node: rp.Node, GPUs: rp.GPUs, Milli: rp.Milli, MIGProfile: rp.MIGProfile, MIGStart: rp.MIGStart})
			if rp.Milli > 0 || rp.MIGProfile != "" {
				if shared[rp.Node] == nil {
					shared[rp.Node] = map[int]*scheduler.SharedGPU{}
				}
				g := rp.GPUs[0]
				sg := shared[rp.Node][g]
				if sg == nil {
					sg = &scheduler.SharedGPU{Index: g}
					shared[rp.Node][g] = sg
				}
				sg.UsedMilli += rp.Milli
				if rp.MIGProfile != "" {
					if shape, err := scheduler.ParseMIGProfile(rp.MIGProfile); err == nil {
						sg.MIGUsed |= uint8((1<<uint(shape.Width) - 1) << uint(rp.MIGStart))
					}
				}
				continue
			}
			if used[rp.Node] == nil {
				used[rp.Node] = map[int]bool{}
			}
			for _, g := range rp.GPUs {
				used[rp.Node][g] = true
			}
		}
		snap.Running = append(snap.Running, r)
		if len(a.Placement) > 0 {
			n := a.Placement[0].Node
			if ports[n] == nil {
				ports[n] = map[int]bool{}
			}
			ports[n][a.MasterPort] = true
		}
	}
	names := make([]string, 0, len(p.v.Nodes))
	for name := range p.v.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	snap.Nodes = make([]scheduler.Node, 0, len(names))
	lemons, widest := false, 0
	avoids := false // a pending job is kept off some nodes (JobStatus.Avoid)
	for _, j := range pending {
		avoids = avoids || len(j.Status.Avoid) > 0
	}
	for _, name := range names {
		if n := p.v.Nodes[name]; n.Schedulable() {
			lemons = lemons || n.Status.Lemon
			widest = max(widest, len(n.GPUs))
		}
	}
	for _, name := range names {
		n := p.v.Nodes[name]
		if !n.Schedulable() || len(n.GPUs) == 0 {
			continue
		}
		labels := n.Labels
		if lemons {
			labels = withLabel(labels, lemonLabel, strconv.FormatBool(n.Status.Lemon))
		}
		if avoids {
			labels = withLabel(labels, nodeNameLabel, name)
		}
		sn := scheduler.Node{Name: name, Total: len(n.GPUs), Labels: labels,
			CPUMillis: int64(n.CPUs) * 1000, MemoryBytes: n.MemoryBytes, Free: make([]int, 0, len(n.GPUs))}
		for _, g := range n.GPUs {
			if !g.InService() {
				continue
			}
			if sg := shared[name][g.Index]; sg != nil {
				sn.Shared = append(sn.Shared, *sg)
			} else if !used[name][g.Index] {
				sn.Free = append(sn.Free, g.Index)
			}
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	qnames := make([]string, 0, len(p.v.Queues))
	for name := range p.v.Queues {
		qnames = append(qnames, name)
	}
	sort.Strings(qnames)
	snap.Queues = schedQueues(qnames, p.v.Queues, pols)
	byID := map[string]*api.Job{}
	reqs := make([]scheduler.Request, 0, len(pending))
	for _, j := range pending {
		byID[j.ID] = j
		r := schedRequest(j)
		if lemons && multiNode(r, widest) {
			r.NodeSelector = maps.Clone(r.NodeSelector)
			if r.NodeSelector == nil {
				r.NodeSelector = map[string]string{}
			}
			r.NodeSelector[lemonLabel] = "false"
		}
		if len(j.Status.Avoid) > 0 {
			r.NodeSelectorIn = maps.Clone(r.NodeSelectorIn)
			if r.NodeSelectorIn == nil {
				r.NodeSelectorIn = map[string][]string{}
			}
			r.NodeSelectorIn[nodeNameLabel] = avoiding(names, j.Status.Avoid)
		}
		reqs = append(reqs, r)
	}
	pols.orderRequests(reqs, pending, p.now)
	pols.keepPlaces(snap.Running, healthy)
	addHostUse(&snap, p.v.Jobs)
	spreadReplicas(&snap, reqs, byID, p.v.Jobs)
	began := time.Now()
	plan := scheduler.ScheduleWith(snap, reqs, scheduler.Options{Mode: pols.mode(), Strategy: scheduler.Topology,
		MaxReservations: scheduler.ServerReservations})
	p.scheduling = time.Since(began)
	p.placed, p.preempted = len(plan.Placements), len(plan.Preemptions)
	for _, w := range plan.Warnings {
		p.c.log.Warn("scheduler", "warning", w)
	}
	p.applyPlan(ctx, plan, byID, ports)
}

// schedQueues is the queues as the scheduler sees them, in names' order
// (the default queue first when nobody created it), each whose policy
// runs another scheduler mode than the default queue's with that mode of
// its own (a backfill queue on a gangway cluster gets reservations). The
// default queue, created or not, borrows the guarantee other queues leave
// idle unless it is given a cohort: without that, guarantees that cover
// the cluster (or more) would leave it nothing, though the GPUs sit idle.
func schedQueues(names []string, qs map[string]*api.Queue, pols policies) []scheduler.Queue {
	out := make([]scheduler.Queue, 0, len(names)+1)
	if qs[api.DefaultQueue] == nil {
		out = append(out, scheduler.Queue{Name: api.DefaultQueue, BorrowIdle: true})
	}
	for _, name := range names {
		q := qs[name].Spec
		sq := scheduler.Queue{Name: q.Name, Cohort: q.Cohort, GuaranteeGPUs: q.GuaranteeGPUs,
			BorrowLimitGPUs: q.BorrowLimitGPUs, Weight: q.Weight, BorrowIdle: q.Name == api.DefaultQueue && q.Cohort == ""}
		if m := pols.of(name).Mode(); m != pols.mode() {
			sq.Mode = &m
		}
		out = append(out, sq)
	}
	return out
}

// lemonLabel marks, in the scheduler's snapshot only, whether a node is a
// lemon (it faulted LemonFaults times within LemonWindow): a gang that
// spans nodes stops whole when any of its nodes fails, so lemons are
// kept for gangs that fit on one node, where a fault costs only the gang
// that chose it.
const lemonLabel = "gangway.io/lemon"

// withLabel returns a copy of labels with key set to value: labels the
// scheduler's snapshot alone sees, the node's own left as they are.
func withLabel(labels map[string]string, key, value string) map[string]string {
	l := make(map[string]string, len(labels)+1)
	maps.Copy(l, labels)
	l[key] = value
	return l
}

// multiNode reports whether request r may span nodes, on a fleet whose
// widest node has widest GPUs.
func multiNode(r scheduler.Request, widest int) bool {
	if r.RanksPerNode > 0 && r.Ranks > r.RanksPerNode {
		return true
	}
	return r.Ranks > 1 && r.Ranks*r.GPUsPerRank > widest
}

// schedRequest is a pending job as the scheduler sees it.
func schedRequest(j *api.Job) scheduler.Request {
	s := &j.Spec
	r := scheduler.Request{
		JobID: j.ID, Queue: s.Queue, Priority: s.Priority, Order: j.SubmittedAt.UnixNano(),
		Ranks: s.Ranks, GPUsPerRank: s.GPUsPerRank, RanksPerNode: s.RanksPerNode, NodeSelector: s.NodeSelector,
		GPUMilli: s.GPUMilli, MIGProfile: s.MIGProfile, EstimatedDuration: s.TimeLimit.D(),
	}
	if r.GPUMilli > 0 || r.MIGProfile != "" {
		r.GPUsPerRank = 0
	}
	if par := s.Parallelism; par != nil && (par.TP > 0 || par.PP > 0 || par.DP > 0) {
		r.TP, r.PP, r.DP = par.TP, par.PP, par.DP
		if o, err := topology.ParseRankOrder(par.Order); err == nil {
			r.RankOrder = o
		}
	}
	if t := s.Topology; t != nil {
		r.Required, _ = topology.ParseLevel(t.Required)
		r.Preferred, _ = topology.ParseLevel(t.Preferred)
	}
	if s.Resources != nil {
		r.CPUMillisPerRank, r.MemoryBytesPerRank = s.Resources.CPUMillis, s.Resources.MemoryBytes
	}
	return r
}
