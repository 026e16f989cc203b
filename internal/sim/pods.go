package sim

import (
	"math/bits"

	"github.com/gangway/gangway/internal/sim/trace"
)

// PodPlacer places single pods (openb's workload) one at a time through
// internal/scheduler on the simulator's cluster model, as the live
// scheduler would place one-rank jobs. It keeps the GPUs it gave out.
type PodPlacer struct {
	c  *cluster
	pl *placer
}

// PodSlot is one node's share of a placed pod: which GPUs (by index on
// the node) and how much of the pod's CPU and memory goes with them.
type PodSlot struct {
	Node      int
	GPUs      []int
	CPUMilli  int64
	MemoryMiB int64
}

// NewPodPlacer builds the cluster of nodes. workload is the pod list the
// placer will see, which gangway's fragmentation-aware placement weighs.
func NewPodPlacer(nodes []trace.Node, seed uint64, workload []trace.Job) (*PodPlacer, error) {
	c, err := newCluster(Shape{Nodes: nodes})
	if err != nil {
		return nil, err
	}
	pl, err := newPlacer(c, GangwayPlacement, seed, 1)
	if err != nil {
		return nil, err
	}
	pl.setWorkload(workload)
	return &PodPlacer{c: c, pl: pl}, nil
}

// Place places pod p with GPU share milli (1000 a whole GPU) and returns
// its slots, or nil if it does not fit.
func (pp *PodPlacer) Place(p *trace.Job, milli int) ([]PodSlot, error) {
	j := &job{idx: 0, t: p, gpus: p.GPUs, milli: milli, phase: phasePending, pod: true}
	pp.pl.ids[0] = "" // each pod is a new job
	out, err := pp.pl.place(pp.c, []*job{j}, call{mode: Greedy})
	if err != nil || len(out.placed) == 0 {
		return nil, err
	}
	slots := make([]PodSlot, 0, len(out.placed[0].slots))
	for _, s := range out.placed[0].slots {
		ps := PodSlot{Node: int(s.node)}
		for m := s.mask; m != 0; m &= m - 1 {
			ps.GPUs = append(ps.GPUs, bits.TrailingZeros64(m))
		}
		ps.CPUMilli, ps.MemoryMiB = hostShare(j, s)
		slots = append(slots, ps)
	}
	return slots, nil
}
