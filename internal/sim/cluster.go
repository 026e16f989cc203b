package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/gangway/gangway/internal/sim/trace"
	"github.com/goccy/go-yaml"
)

// Node labels the simulator puts on its nodes, as the agent would.
const (
	LabelGPUModel = "gpu-model"
	LabelLeaf     = "leaf" // the topology package's leaf label
	LabelPool     = "pool"
)

// Pool is a group of identical nodes.
type Pool struct {
	Name        string `yaml:"name" json:"name,omitempty"`
	Nodes       int    `yaml:"nodes" json:"nodes"`
	GPUsPerNode int    `yaml:"gpusPerNode" json:"gpusPerNode"`
	GPUModel    string `yaml:"gpuModel" json:"gpuModel,omitempty"`
	// NodesPerLeaf puts consecutive nodes of the pool under one leaf
	// switch; 0 means one leaf for the whole pool.
	NodesPerLeaf int `yaml:"nodesPerLeaf" json:"nodesPerLeaf,omitempty"`
	// CPUMilli and MemoryMiB per node; 0 means unlimited.
	CPUMilli  int64 `yaml:"cpuMilli" json:"cpuMilli,omitempty"`
	MemoryMiB int64 `yaml:"memoryMiB" json:"memoryMiB,omitempty"`
}

// Shape is a cluster: pools of identical nodes, or an explicit node list
// (the openb node file). Nodes are numbered pools first, in order.
type Shape struct {
	Pools []Pool `yaml:"pools" json:"pools,omitempty"`
	// Nodes, when set, lists every node explicitly; Pools must be empty.
	Nodes []trace.Node `yaml:"-" json:"-"`
}

// maxGPUsPerNode is the widest node the free-GPU bit masks can hold.
const maxGPUsPerNode = 64

// Validate reports the first thing wrong with the shape.
func (s Shape) Validate() error {
	if len(s.Pools) == 0 && len(s.Nodes) == 0 {
		return errors.New("cluster has no nodes: give --nodes and --gpus-per-node, or a cluster file")
	}
	if len(s.Pools) > 0 && len(s.Nodes) > 0 {
		return errors.New("cluster: give pools or an explicit node list, not both")
	}
	for i, p := range s.Pools {
		where := fmt.Sprintf("pools[%d]", i)
		if p.Name != "" {
			where += " (" + p.Name + ")"
		}
		switch {
		case p.Nodes < 1:
			return fmt.Errorf("%s: nodes must be at least 1 (got %d)", where, p.Nodes)
		case p.Nodes > 1<<20:
			return fmt.Errorf("%s: nodes must be at most %d (got %d)", where, 1<<20, p.Nodes)
		case p.GPUsPerNode < 1 || p.GPUsPerNode > maxGPUsPerNode:
			return fmt.Errorf("%s: gpusPerNode must be in 1..%d (got %d)", where, maxGPUsPerNode, p.GPUsPerNode)
		case p.NodesPerLeaf < 0:
			return fmt.Errorf("%s: nodesPerLeaf must not be negative (got %d)", where, p.NodesPerLeaf)
		case p.CPUMilli < 0 || p.MemoryMiB < 0:
			return fmt.Errorf("%s: cpuMilli and memoryMiB must not be negative", where)
		}
	}
	for _, n := range s.Nodes {
		if n.GPUs < 0 || n.GPUs > maxGPUsPerNode {
			return fmt.Errorf("node %s (line %d): GPUs must be in 0..%d (got %d)", n.Name, n.Line, maxGPUsPerNode, n.GPUs)
		}
	}
	return nil
}

// GPUs is the cluster's GPU count.
func (s Shape) GPUs() int {
	n := 0
	for _, p := range s.Pools {
		n += p.Nodes * p.GPUsPerNode
	}
	for _, nd := range s.Nodes {
		n += nd.GPUs
	}
	return n
}

// String describes the shape briefly, e.g. "64×8 V100".
func (s Shape) String() string {
	var b bytes.Buffer
	for i, p := range s.Pools {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%d×%d", p.Nodes, p.GPUsPerNode)
		if p.GPUModel != "" {
			b.WriteString(" " + p.GPUModel)
		}
	}
	if len(s.Nodes) > 0 {
		fmt.Fprintf(&b, "%d nodes, %d GPUs", len(s.Nodes), s.GPUs())
	}
	return b.String()
}

// ParseShape reads a cluster file (YAML or JSON):
//
//	pools:
//	  - name: a100
//	    nodes: 64
//	    gpusPerNode: 8
//	    gpuModel: A100-SXM-80GB
//	    nodesPerLeaf: 16
//
// Unknown keys are errors with their line and column.
func ParseShape(data []byte) (Shape, error) {
	var s Shape
	if err := yaml.UnmarshalWithOptions(data, &s, yaml.Strict()); err != nil {
		return Shape{}, fmt.Errorf("cluster file: %s", yaml.FormatError(err, false, false))
	}
	if err := s.Validate(); err != nil {
		return Shape{}, fmt.Errorf("cluster file: %w", err)
	}
	return s, nil
}

// NodesForLoad sizes a pool of gpusPerNode-GPU nodes so that the jobs'
// GPU-time over their submission span is the given fraction of capacity:
// nodes = ceil(Σ duration×GPUs / (load × span × gpusPerNode)).
func NodesForLoad(jobs []trace.Job, load float64, gpusPerNode int) (int, error) {
	if load <= 0 || math.IsNaN(load) || math.IsInf(load, 0) {
		return 0, fmt.Errorf("load must be a positive number (got %v)", load)
	}
	if gpusPerNode < 1 {
		return 0, fmt.Errorf("gpus per node must be at least 1 (got %d)", gpusPerNode)
	}
	if len(jobs) < 2 {
		return 0, errors.New("sizing a pool for a load needs at least two jobs")
	}
	span := jobs[len(jobs)-1].Submit - jobs[0].Submit
	if span <= 0 {
		return 0, errors.New("sizing a pool for a load needs jobs submitted over a time span")
	}
	var work float64
	maxGPUs := 0
	for _, j := range jobs {
		work += j.Duration * j.GPUDemand()
		maxGPUs = max(maxGPUs, j.GPUs)
	}
	n := int(math.Ceil(work / (load * span * float64(gpusPerNode))))
	// The pool must hold the widest job.
	n = max(n, (maxGPUs+gpusPerNode-1)/gpusPerNode, 1)
	return n, nil
}

// node is one simulated machine.
type node struct {
	name   string
	total  int
	all    uint64 // bit i: GPU i exists
	free   uint64 // bit i: GPU i is free and healthy
	broken uint64 // bit i: GPU i is cordoned after a fault
	up     bool
	model  string
	pool   int
	labels map[string]string
	// freeList caches the indices of free GPUs for the snapshot; nil when
	// stale.
	freeList []int
	// jobs running here (job indices), for failures.
	jobs []int32
	// share holds GPUs that fractional ranks use in part: GPU index →
	// thousandths used. Such GPUs are not in free.
	share map[int]int16
	// Host capacity; 0 means unlimited.
	cpuCap, cpuFree int64
	memCap, memFree int64
}

// hasShareRoom reports whether a fractional rank of milli fits on a GPU
// already shared here.
func (n *node) hasShareRoom(milli int) bool {
	if milli <= 0 || milli >= 1000 {
		return false
	}
	for _, u := range n.share {
		if int(u)+milli <= 1000 {
			return true
		}
	}
	return false
}

func (n *node) nfree() int { return bits.OnesCount64(n.free) }

// cluster is the simulator's live view of the machines.
type cluster struct {
	nodes  []node
	byName map[string]int
	// gpus counts all GPUs; healthy those on up nodes and not broken;
	// free the healthy ones no job holds.
	gpus, healthy, free int
	// perNode is the largest node's GPU count.
	perNode int
	// byFree[k] counts up nodes with k free GPUs, so the widest free node
	// is found without a scan.
	byFree []int
	// hostLimits: some node has a CPU or memory capacity.
	hostLimits bool
	// shared counts GPUs held in part by fractional ranks.
	shared int
}

func newCluster(s Shape) (*cluster, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c := &cluster{byName: map[string]int{}}
	add := func(name string, gpus int, model string, pool int, labels map[string]string, cpu, mem int64) {
		n := node{name: name, total: gpus, up: true, model: model, pool: pool, labels: labels,
			cpuCap: cpu, cpuFree: cpu, memCap: mem, memFree: mem}
		c.hostLimits = c.hostLimits || cpu > 0 || mem > 0
		if gpus == 64 {
			n.all = math.MaxUint64
		} else {
			n.all = 1<<uint(gpus) - 1
		}
		n.free = n.all
		c.byName[name] = len(c.nodes)
		c.nodes = append(c.nodes, n)
		c.gpus += gpus
		c.perNode = max(c.perNode, gpus)
	}
	total := 0
	for _, p := range s.Pools {
		total += p.Nodes
	}
	total += len(s.Nodes)
	width := len(strconv.Itoa(total))
	k := 0
	for pi, p := range s.Pools {
		for i := 0; i < p.Nodes; i++ {
			labels := map[string]string{}
			if p.GPUModel != "" {
				labels[LabelGPUModel] = p.GPUModel
			}
			if p.Name != "" {
				labels[LabelPool] = p.Name
			}
			leaf := 0
			if p.NodesPerLeaf > 0 {
				leaf = i / p.NodesPerLeaf
			}
			labels[LabelLeaf] = fmt.Sprintf("p%d-leaf%04d", pi, leaf)
			add(fmt.Sprintf("n%0*d", width, k), p.GPUsPerNode, p.GPUModel, pi, labels, p.CPUMilli, p.MemoryMiB)
			k++
		}
	}
	for _, n := range s.Nodes {
		labels := map[string]string{}
		if n.GPUModel != "" {
			labels[LabelGPUModel] = n.GPUModel
		}
		name := n.Name
		if _, dup := c.byName[name]; dup || name == "" {
			name = fmt.Sprintf("n%0*d", width, k)
		}
		add(name, n.GPUs, n.GPUModel, 0, labels, n.CPUMilli, n.MemoryMiB)
		k++
	}
	c.healthy, c.free = c.gpus, c.gpus
	c.byFree = make([]int, c.perNode+1)
	for i := range c.nodes {
		c.byFree[c.nodes[i].total]++
	}
	return c, nil
}

// maxFree is the most free GPUs on any one up node.
func (c *cluster) maxFree() int {
	for k := len(c.byFree) - 1; k > 0; k-- {
		if c.byFree[k] > 0 {
			return k
		}
	}
	return 0
}

// setFree changes node i's free mask, keeping the counters right.
func (c *cluster) setFree(i int, mask uint64) {
	n := &c.nodes[i]
	before := n.nfree()
	n.free = mask
	after := n.nfree()
	if n.up {
		c.byFree[before]--
		c.byFree[after]++
		c.free += after - before
	}
	n.freeList = nil
}

// take marks GPUs of node i as held.
func (c *cluster) take(i int, mask uint64) error {
	n := &c.nodes[i]
	if !n.up || n.free&mask != mask {
		return fmt.Errorf("node %s: GPUs %b are not all free (free %b)", n.name, mask, n.free)
	}
	c.setFree(i, n.free&^mask)
	return nil
}

// release returns GPUs of node i; broken GPUs stay out.
func (c *cluster) release(i int, mask uint64) {
	n := &c.nodes[i]
	c.setFree(i, n.free|(mask&^n.broken))
}

// setUp takes a node down or brings it back.
func (c *cluster) setUp(i int, up bool) {
	n := &c.nodes[i]
	if n.up == up {
		return
	}
	k := n.nfree()
	healthy := bits.OnesCount64(n.all &^ n.broken)
	if up {
		c.byFree[k]++
		c.free += k
		c.healthy += healthy
	} else {
		c.byFree[k]--
		c.free -= k
		c.healthy -= healthy
	}
	n.up = up
	n.freeList = nil
}

// breakGPU cordons GPU g of node i (it may be held; it is not returned on
// release) or repairs it.
func (c *cluster) breakGPU(i, g int, broken bool) {
	n := &c.nodes[i]
	bit := uint64(1) << uint(g)
	if (n.broken&bit != 0) == broken {
		return
	}
	if broken {
		n.broken |= bit
		if n.up {
			c.healthy--
		}
		c.setFree(i, n.free&^bit)
	} else {
		n.broken &^= bit
		if n.up {
			c.healthy++
		}
		// Jobs on a GPU that failed were stopped, so a repaired GPU is free.
		c.setFree(i, n.free|bit)
	}
}

// freeIndices lists node i's free GPU indices, cached.
func (c *cluster) freeIndices(i int) []int {
	n := &c.nodes[i]
	if n.freeList == nil {
		n.freeList = make([]int, 0, n.total)
		for m := n.free; m != 0; m &= m - 1 {
			n.freeList = append(n.freeList, bits.TrailingZeros64(m))
		}
	}
	return n.freeList
}

// hostBound reports whether j asks for host CPU or memory that the
// cluster limits.
func (c *cluster) hostBound(j *job) bool {
	return c.hostLimits && (j.t.CPUMilli > 0 || j.t.MemoryMiB > 0)
}

// fits reports whether node n meets j's host and GPU-model constraints
// (for its share of a multi-node gang: the whole request, conservatively).
func (c *cluster) fits(n *node, j *job) bool {
	if n.cpuCap > 0 && n.cpuFree < j.t.CPUMilli {
		return false
	}
	if n.memCap > 0 && n.memFree < j.t.MemoryMiB {
		return false
	}
	return matchesModel(n, j)
}

func matchesModel(n *node, j *job) bool {
	ms := j.t.GPUModels
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if m == n.model {
			return true
		}
	}
	return false
}

// hostShare is the part of j's host CPU and memory charged to a slot.
func hostShare(j *job, s slot) (cpu, mem int64) {
	if j.gpus <= 0 {
		return j.t.CPUMilli, j.t.MemoryMiB
	}
	g := int64(bits.OnesCount64(s.mask))
	return j.t.CPUMilli * g / int64(j.gpus), j.t.MemoryMiB * g / int64(j.gpus)
}

// apply takes the GPUs (whole or in part) and host resources of a
// placement.
func (c *cluster) apply(p placed) error {
	for k, s := range p.slots {
		n := &c.nodes[s.node]
		if s.milli > 0 {
			g := bits.TrailingZeros64(s.mask)
			used, shared := n.share[g]
			switch {
			case shared && int(used)+int(s.milli) <= 1000:
				n.share[g] = used + s.milli
			case !shared && n.free&s.mask != 0:
				if n.share == nil {
					n.share = map[int]int16{}
				}
				n.share[g] = s.milli
				c.shared++
				c.setFree(int(s.node), n.free&^s.mask)
			default:
				c.unapply(p.j, p.slots[:k])
				return fmt.Errorf("node %s GPU %d: no room for %d thousandths", n.name, g, s.milli)
			}
		} else if err := c.take(int(s.node), s.mask); err != nil {
			c.unapply(p.j, p.slots[:k])
			return err
		}
		cpu, mem := hostShare(p.j, s)
		n.cpuFree -= cpu
		n.memFree -= mem
	}
	return nil
}

// unapply gives back what apply took for slots.
func (c *cluster) unapply(j *job, slots []slot) {
	for _, s := range slots {
		n := &c.nodes[s.node]
		if s.milli > 0 {
			g := bits.TrailingZeros64(s.mask)
			n.share[g] -= s.milli
			if n.share[g] <= 0 {
				delete(n.share, g)
				c.shared--
				c.release(int(s.node), s.mask)
			}
		} else {
			c.release(int(s.node), s.mask)
		}
		cpu, mem := hostShare(j, s)
		n.cpuFree += cpu
		n.memFree += mem
	}
}

// shareRoom reports whether any up node has a shared GPU with room for a
// fractional rank of milli.
func (c *cluster) shareRoom(milli int) bool {
	for i := range c.nodes {
		if c.nodes[i].up && c.nodes[i].hasShareRoom(milli) {
			return true
		}
	}
	return false
}

// anyShared reports whether some GPU is shared (so fractional ranks may
// still fit when no GPU is wholly free).
func (c *cluster) anyShared() bool { return c.shared > 0 }
