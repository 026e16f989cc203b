package scheduler

import (
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/topology"
)

// Node is a schedulable node as the scheduler sees it.
type Node struct {
	Name string
	// Free lists the indices of the node's wholly free GPUs, ascending: no
	// rank of any job, whole or fractional, uses them.
	Free []int
	// Shared lists GPUs that fractional ranks use in part; they are not in
	// Free. See SharedGPU.
	Shared []SharedGPU
	// Total is the node's GPU count. At most 64 GPUs per node are used.
	Total  int
	Labels map[string]string
	// CPUMillis and MemoryBytes are the node's capacity. They weigh CPU
	// and memory in dominant-resource fair share and bound what ranks
	// placed here may ask for. Zero: unknown, not limited.
	CPUMillis   int64
	MemoryBytes int64
	// CPUMillisUsed and MemoryBytesUsed are what is held on the node now
	// (the ranks of running jobs, and anything else the caller counts),
	// as Free is for GPUs: a rank fits when its request is at most the
	// capacity less what is used. Ignored where the capacity is zero.
	CPUMillisUsed   int64
	MemoryBytesUsed int64
}

// SharedGPU is a GPU that fractional ranks use in part. A GPU is shared in
// one way at a time: time-sliced in milli-GPUs, or split into MIG
// instances.
type SharedGPU struct {
	Index int
	// UsedMilli is how much of the GPU time-sliced ranks hold, 1 to 999.
	UsedMilli int
	// MIGUsed marks which of the GPU's 8 MIG memory-slice positions are
	// held by MIG instances (bit i = position i); see ParseMIGProfile.
	MIGUsed uint8
}

// Snapshot is the cluster at one instant. Only nodes that may receive new
// ranks belong in Nodes; running jobs on other nodes still count in
// Running for their queue's usage.
type Snapshot struct {
	// Now is the snapshot's time in nanoseconds on the same clock as every
	// other time here: Unix nanoseconds in the server, nanoseconds since
	// the start of the trace in the simulator.
	Now   int64
	Nodes []Node
	// Topology places the nodes in NVLink domains, leaves and spines and
	// gives each GPU's rail. Nil: built from the nodes' labels (see
	// topology.Builder.AddLabels), which costs a little per call; a caller
	// that schedules often should build it once and pass it. Nodes missing
	// from it are skipped with a warning in the plan.
	Topology *topology.Topology
	// Running lists the jobs that hold GPUs now, including those already
	// stopping. Their GPUs are not in any node's Free list; the scheduler
	// uses them for queue usage, backfill reservations and preemption.
	Running []Running
	// Queues configures queues. A request or running job naming a queue
	// not listed here gets the default: no guarantee, unlimited
	// borrowing, weight 1, no cohort.
	Queues []Queue
}

// Queue is a tenant's line: a guarantee of GPUs it gets whenever it asks
// (preempting borrowers if need be), how much more it may borrow, and its
// weight in fair share.
type Queue struct {
	Name string
	// Cohort groups queues that lend each other their idle guarantee.
	// Empty: the queue borrows only from GPUs no queue is guaranteed,
	// unless BorrowIdle.
	Cohort string
	// BorrowIdle lets a queue in no cohort also borrow the guarantee that
	// other queues leave idle, as if every queue were in its cohort: a
	// queue that then asks for its guarantee preempts the borrowers. The
	// server sets it on the default queue unless it is given a cohort.
	BorrowIdle bool
	// GuaranteeGPUs is the queue's nominal quota in GPUs.
	GuaranteeGPUs int
	// BorrowLimitGPUs bounds how far above its guarantee the queue may
	// go; nil means no bound, 0 forbids borrowing.
	BorrowLimitGPUs *int
	// Weight is the queue's share in fair share; zero means 1.
	Weight float64
	// Mode, when set, is the queue's own mode: what happens after one of
	// its gangs does not fit. Nil: Options.Mode. A strict queue's gang
	// that does not fit blocks its queue only; a backfill queue's gets a
	// reservation that every queue's gangs respect.
	Mode *Mode
}

// Running is a job that holds GPUs.
type Running struct {
	JobID    string
	Queue    string
	Priority int
	// Ranks are where its ranks run (Slot.Node, Slot.GPUs and, for
	// fractional ranks, Slot.Milli or Slot.MIGProfile and Slot.MIGStart).
	Ranks []Slot
	// StartedAt is when the current attempt started (ns, Snapshot.Now's
	// clock).
	StartedAt int64
	// EstimatedEnd is when it is expected to finish: its time limit, or an
	// estimate. Zero: unknown (it never ends as far as backfill knows).
	EstimatedEnd int64
	// LastCheckpoint is when its newest committed checkpoint was taken;
	// zero: none (all work since StartedAt would be lost).
	LastCheckpoint int64
	// Preemptible allows the scheduler to choose it as a victim.
	Preemptible bool
	// Stopping is true once it has been told to stop (preempted, cancelled,
	// failed): it is no victim candidate, and a preemptor counts its GPUs
	// as soon free.
	Stopping bool
	// CPUMillis and MemoryBytes are what the whole job holds, for fair
	// share. What each rank holds on its node is in Ranks (Slot.CPUMillis,
	// Slot.MemoryBytes): backfill and preemption give it back with the
	// rank's GPUs.
	CPUMillis   int64
	MemoryBytes int64
}

// Request is one pending gang.
type Request struct {
	JobID    string
	Queue    string
	Priority int
	// Order breaks ties within a priority: lower goes first (submit time,
	// or a sequence number).
	Order        int64
	Ranks        int
	GPUsPerRank  int // 0 means 1, unless GPUMilli or MIGProfile is set
	RanksPerNode int // 0: pack onto the fewest nodes
	// NodeSelector: every label given must have the value given.
	NodeSelector map[string]string
	// NodeSelectorIn: every label given must have one of the values given
	// ("gpu-model" in {"A100-80GB", "H100"}). Both selectors apply.
	NodeSelectorIn map[string][]string

	// GPUMilli asks for a time-sliced fraction of one GPU per rank, 1 to
	// 999 thousandths. MIGProfile asks for a MIG instance per rank
	// ("1g.10gb", "3g.40gb", ...). At most one of them is set; then
	// GPUsPerRank must be 0 or 1.
	GPUMilli   int
	MIGProfile string

	// TP, PP and DP are the gang's tensor-, pipeline- and data-parallel
	// sizes in ranks; zero means not given (see topology.Parallelism).
	// A tensor-parallel group never crosses an NVLink domain.
	TP, PP, DP int
	// RankOrder is how grid coordinates number the ranks.
	RankOrder topology.RankOrder
	// Required is the widest topology level the whole gang may span:
	// placement fails rather than cross it. Preferred is tried first but
	// may be crossed. LevelNone: no constraint.
	Required  topology.Level
	Preferred topology.Level

	// EstimatedDuration is how long the gang is expected to run (its time
	// limit or an estimate); zero: unknown. Backfill uses it.
	EstimatedDuration time.Duration

	// CPUMillisPerRank and MemoryBytesPerRank are what each rank needs of
	// its node's CPU and memory; they weigh in fair share too. Zero: none.
	CPUMillisPerRank   int64
	MemoryBytesPerRank int64
	// HostOnly ranks take no GPU, only CPUMillisPerRank and
	// MemoryBytesPerRank (a CPU-only job beside the GPU jobs). They are
	// placed one rank at a time, where they take least from what GPU
	// requests will need.
	HostOnly bool
}

// Slot is where one rank goes.
type Slot struct {
	Node string
	GPUs []int
	// Milli is set for a time-sliced fractional rank: the thousandths of
	// GPUs[0] it holds.
	Milli int
	// MIGProfile and MIGStart are set for a MIG rank: the instance's
	// profile and its first memory-slice position on GPUs[0].
	MIGProfile string
	MIGStart   int
	// CPUMillis and MemoryBytes are the CPU and memory the rank holds on
	// Node: in a placement, what its request asks for; in a running job,
	// what it holds (zero: nothing counted).
	CPUMillis   int64
	MemoryBytes int64
	// TP, PP and DP are the rank's coordinates in the parallel grid.
	TP, PP, DP int
}

// Placement puts every rank of one gang; Ranks[i] is rank i.
type Placement struct {
	JobID string
	Ranks []Slot
	// Nodes, Leaves and Spines count what the gang spans (leaves and
	// spines that are unknown count one each per node).
	Nodes, Leaves, Spines int
	// TPGroupsCrossingDomain, PPStepsCrossingLeaf and RailMismatches come
	// from topology.OrderRanks: how well the grid fits the placement.
	TPGroupsCrossingDomain int
	PPStepsCrossingLeaf    int
	RailMismatches         int
	// Backfilled is true when the gang started ahead of a blocked gang
	// holding a reservation.
	Backfilled bool
}

// PendingKind classifies why a gang waits.
type PendingKind uint8

const (
	// PendingCapacity: not enough free GPUs in the cluster.
	PendingCapacity PendingKind = iota + 1
	// PendingTopology: enough GPUs in total, but not in the shape the gang
	// needs (one leaf, whole nodes, TP groups in NVLink domains).
	PendingTopology
	// PendingQuota: its queue's guarantee and borrowing limit, or its
	// cohort's idle guarantee, do not allow it.
	PendingQuota
	// PendingPreempting: victims were chosen for it; it waits for them to
	// stop.
	PendingPreempting
	// PendingReserved: it holds the backfill reservation and starts when
	// the GPUs it reserved are free.
	PendingReserved
	// PendingBlocked: strict FIFO, it waits behind a gang that does not
	// fit.
	PendingBlocked
	// PendingBackfill: it fits now but would delay the gang holding the
	// reservation.
	PendingBackfill
	// PendingInvalid: the request cannot be placed on any cluster (sizes
	// that do not divide, an unknown MIG profile). It is not an error: the
	// API should have rejected it; the reason says what is wrong.
	PendingInvalid
	// PendingResources: nodes have the GPUs, but not the CPU or memory
	// its ranks ask for.
	PendingResources
)

var pendingKindNames = [...]string{
	PendingCapacity:   "capacity",
	PendingTopology:   "topology",
	PendingQuota:      "quota",
	PendingPreempting: "preempting",
	PendingReserved:   "reserved",
	PendingBlocked:    "blocked",
	PendingBackfill:   "backfill",
	PendingInvalid:    "invalid",
	PendingResources:  "resources",
}

// String returns the kind's name ("capacity", "topology", ...).
func (k PendingKind) String() string {
	if int(k) < len(pendingKindNames) && pendingKindNames[k] != "" {
		return pendingKindNames[k]
	}
	return "unknown"
}

// Pending is a gang that did not start, with why, in words for people.
type Pending struct {
	JobID string
	Queue string
	Kind  PendingKind
	// Reason says what the gang needs and what stands in the way, ending
	// with how many gangs ahead of it in its queue also wait.
	Reason string
	// Ahead counts the gangs ahead of it in its queue that also wait.
	Ahead int
}

// Preemption asks for a running job to be stopped so that another can
// start. The job should get its checkpoint signal and grace period, then be
// requeued.
type Preemption struct {
	// JobID is the victim.
	JobID string
	// For is the pending gang that needs its GPUs.
	For    string
	Reason string
	// LostWork is the GPU time since its last checkpoint (or start) that
	// stopping it now throws away.
	LostWork time.Duration
}

// Reservation is the backfill reservation of a blocked gang: the GPUs it
// will get at Start, which gangs started by backfill leave alone.
type Reservation struct {
	JobID string
	// Start is when the reserved GPUs are expected free (Snapshot.Now's
	// clock), from running jobs' estimated ends; 0 when some of them have
	// no estimate.
	Start int64
	Nodes []string
}

// Plan is the scheduler's decision for one pass.
type Plan struct {
	Placements   []Placement
	Pending      []Pending
	Preemptions  []Preemption
	Reservations []Reservation
	// Warnings are problems with the snapshot (a node missing from the
	// topology, a running job on an unknown GPU) that the scheduler worked
	// around.
	Warnings []string
}

// Mode is what happens after a gang does not fit.
type Mode uint8

const (
	// Greedy: a gang that does not fit does not block later ones.
	Greedy Mode = iota
	// Strict: strict FIFO; nothing after the first gang that does not fit
	// starts. A gang held back only by its own queue's quota blocks the
	// rest of its queue, not other queues.
	Strict
	// Backfill: the first blocked gang (the first Options.MaxReservations
	// of them) gets a reservation from running jobs' estimated ends; later
	// gangs start only if they cannot delay any (they leave the reserved
	// GPUs alone, or end before the first reservation starts).
	Backfill
)

// Strategy is how a gang's GPUs are chosen among those free.
type Strategy uint8

const (
	// Topology is gangway's default: the tightest NVLink domain, leaf or
	// spine that holds the gang, best fit among those, fewest children at
	// each level, so whole nodes, leaves and spines stay free. A gang
	// that fits on one node, fractional and host-only ranks go where the
	// node's expected fragmentation over the workload (Options.Workload)
	// grows least.
	Topology Strategy = iota
	// BestFit ignores leaves and spines: one node with the fewest free
	// GPUs that fit, else the fewest nodes.
	BestFit
	// Consolidate is Helios' consolidate: a gang of at most one node's
	// GPUs on one node (best fit), bigger gangs on whole idle nodes only.
	Consolidate
)

// ServerReservations is Options.MaxReservations as the server's
// controller passes it (and the simulator's live policy): how many
// blocked gangs hold a backfill reservation at once. Several, as Slurm's
// backfill reserves for every job it tests: with one, the second big gang
// behind the first has no promise and small jobs can keep it waiting.
const ServerReservations = 8

// Options tune one scheduling pass. The zero value is Greedy with the
// Topology strategy and preemption on.
type Options struct {
	Mode     Mode
	Strategy Strategy
	// NoPreemption turns preemption off.
	NoPreemption bool
	// MaxPreemptionSearches bounds how many gangs per pass may search for
	// victims (each search looks at running jobs). Zero means 64.
	MaxPreemptionSearches int
	// MaxReservations is how many blocked gangs, in the order they are
	// decided, get a backfill reservation in one pass (Backfill mode).
	// Zero means 1: EASY backfill.
	MaxReservations int
	// Workload is the mix of request shapes the cluster typically sees,
	// for the Topology strategy's fragmentation-aware placement of gangs
	// that fit on one node. Nil: learned from the pass's requests and
	// running jobs. Its order does not matter.
	Workload []Demand
}

// Demand is a request shape the cluster typically sees, and how common it
// is. Placement keeps nodes able to take the common shapes: a node's
// expected fragmentation is, over the shapes, the free GPU capacity that
// a request of the shape could not use there (all of it when the shape
// does not fit on the node at all). See Weng et al., "Beware of
// Fragmentation", ATC'23.
type Demand struct {
	// GPUs is how many whole GPUs the shape takes on one node. GPUMilli,
	// when set (1..999), is a share of one GPU instead. Both zero: a
	// host-only shape.
	GPUs     int
	GPUMilli int
	// CPUMillis and MemoryBytes are what the shape takes of the node.
	CPUMillis   int64
	MemoryBytes int64
	// NodeSelector and NodeSelectorIn restrict the nodes it may use, as in
	// Request.
	NodeSelector   map[string]string
	NodeSelectorIn map[string][]string
	// Weight is how common the shape is relative to the others: a count
	// or a share. Entries without a positive weight are ignored.
	Weight float64
}

var modeNames = [...]string{Greedy: "greedy", Strict: "strict", Backfill: "backfill"}

// String returns "greedy", "strict" or "backfill".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown"
}

// ParseMode parses a Mode's name.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown scheduling mode %q: want greedy, strict or backfill", s)
}

var strategyNames = [...]string{Topology: "topology", BestFit: "bestfit", Consolidate: "consolidate"}

// String returns "topology", "bestfit" or "consolidate".
func (s Strategy) String() string {
	if int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return "unknown"
}

// ParseStrategy parses a Strategy's name.
func ParseStrategy(s string) (Strategy, error) {
	for v, name := range strategyNames {
		if name == s {
			return Strategy(v), nil
		}
	}
	return 0, fmt.Errorf("unknown placement strategy %q: want topology, bestfit or consolidate", s)
}
