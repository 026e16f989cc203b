package topology

import "fmt"

// NodeID is a node's index in a Topology, 0 to NumNodes()-1. Ids follow
// locality: the nodes of one leaf, and of one spine, are consecutive.
type NodeID int32

// LeafID is a leaf switch's index, 0 to NumLeaves()-1; NoLeaf when unknown.
type LeafID int32

// SpineID is a spine switch's index, 0 to NumSpines()-1; NoSpine when
// unknown.
type SpineID int32

// DomainID is an NVLink domain's index, 0 to NumDomains()-1. Every node has
// one: a node that shares NVLink with no other node is its own domain.
type DomainID int32

const (
	// NoLeaf is the LeafID of a node whose leaf switch is unknown.
	NoLeaf LeafID = -1
	// NoSpine is the SpineID of a leaf (or node) whose spine is unknown.
	NoSpine SpineID = -1
)

// GPURef names one GPU: a node and the GPU's local index on it (0 to
// GPUs(node)-1, the order the agent reports, which is NVML's index).
type GPURef struct {
	Node NodeID
	GPU  int32
}

func (g GPURef) String() string { return fmt.Sprintf("%d/%d", g.Node, g.GPU) }

// Topology is an immutable, compact model of a cluster's shape. Build one
// with a Builder or Uniform. All methods are safe for concurrent use. Slices
// returned by methods are shared and must not be modified.
//
// Methods taking ids panic on ids out of range, like slice indexing; ids come
// from the same Topology.
type Topology struct {
	nodeName   []string
	nodeByName map[string]NodeID
	node       []nodeInfo
	gpuStart   []int32 // GPUs of node n are flat indices [gpuStart[n], gpuStart[n+1])

	gpuNUMA []int16 // by flat GPU index; -1 unknown
	gpuPCIe []int16 // node-local PCIe switch id; -1 unknown
	gpuRail []int16 // -1 unknown

	nodes []NodeID // 0..n-1, so group node lists are subslices

	leafName   []string
	leafByName map[string]LeafID
	leafSpine  []SpineID
	leafStart  []int32 // nodes of leaf l are ids [leafStart[l], leafStart[l+1])

	spineName   []string
	spineByName map[string]SpineID
	spineLeaf   []int32 // leaves of spine s are ids [spineLeaf[s], spineLeaf[s+1])
	leaves      []LeafID

	domainName      []string // "" for a node's implicit single-node domain
	domainByName    map[string]DomainID
	domainNodeStart []int32 // domainNodes[domainNodeStart[d]:domainNodeStart[d+1]]
	domainNodes     []NodeID
	domainGPUs      []int32

	blockSizes []int
}

// nodeInfo is what Distance needs of a node, in one cache line.
type nodeInfo struct {
	gpuStart int32 // first flat GPU index, as gpuStart[n]
	leaf     LeafID
	spine    SpineID // spine of the node's leaf
	domain   DomainID
	nvlink   bool
}

// NumNodes returns how many nodes the topology has.
func (t *Topology) NumNodes() int { return len(t.nodeName) }

// NumGPUs returns how many GPUs all nodes have together.
func (t *Topology) NumGPUs() int { return int(t.gpuStart[len(t.nodeName)]) }

// NodeName returns the node's name.
func (t *Topology) NodeName(n NodeID) string { return t.nodeName[n] }

// NodeByName returns the id of the named node, and false if there is none.
func (t *Topology) NodeByName(name string) (NodeID, bool) {
	n, ok := t.nodeByName[name]
	return n, ok
}

// GPUs returns how many GPUs node n has.
func (t *Topology) GPUs(n NodeID) int { return int(t.gpuStart[n+1] - t.gpuStart[n]) }

// GPUIndex returns g's flat index, 0 to NumGPUs()-1, unique across the
// cluster and consecutive within a node (for bitsets over all GPUs).
func (t *Topology) GPUIndex(g GPURef) int { return int(t.gpuStart[g.Node] + g.GPU) }

// NodeGPUs returns the flat indices of node n's GPUs: [first, end).
func (t *Topology) NodeGPUs(n NodeID) (first, end int) {
	return int(t.gpuStart[n]), int(t.gpuStart[n+1])
}

// NVLink reports whether node n's GPUs reach each other over NVLink. It is
// true for every node of a multi-node NVLink domain.
func (t *Topology) NVLink(n NodeID) bool { return t.node[n].nvlink }

// NUMA returns the NUMA node of GPU g, or -1 when unknown.
func (t *Topology) NUMA(g GPURef) int { return int(t.gpuNUMA[t.GPUIndex(g)]) }

// PCIeSwitch returns a node-local id of the PCIe switch above GPU g, or -1
// when unknown. Two GPUs of one node with the same id share the switch.
func (t *Topology) PCIeSwitch(g GPURef) int { return int(t.gpuPCIe[t.GPUIndex(g)]) }

// Rail returns the network rail of GPU g (the index of the NIC it uses, the
// same on every node of a rail-optimised fabric), or -1 when unknown.
func (t *Topology) Rail(g GPURef) int { return int(t.gpuRail[t.GPUIndex(g)]) }

// Leaf returns node n's leaf switch, or NoLeaf.
func (t *Topology) Leaf(n NodeID) LeafID { return t.node[n].leaf }

// Spine returns the spine above node n's leaf, or NoSpine.
func (t *Topology) Spine(n NodeID) SpineID { return t.node[n].spine }

// Domain returns node n's NVLink domain.
func (t *Topology) Domain(n NodeID) DomainID { return t.node[n].domain }

// NumLeaves returns how many leaf switches the topology has.
func (t *Topology) NumLeaves() int { return len(t.leafName) }

// LeafName returns the leaf's name.
func (t *Topology) LeafName(l LeafID) string { return t.leafName[l] }

// LeafByName returns the named leaf, and false if there is none.
func (t *Topology) LeafByName(name string) (LeafID, bool) {
	l, ok := t.leafByName[name]
	return l, ok
}

// LeafSpine returns the spine above leaf l, or NoSpine.
func (t *Topology) LeafSpine(l LeafID) SpineID { return t.leafSpine[l] }

// LeafNodes returns the nodes under leaf l, in id order. They are the
// consecutive ids LeafNodes(l)[0] to LeafNodes(l)[len-1].
func (t *Topology) LeafNodes(l LeafID) []NodeID { return t.nodes[t.leafStart[l]:t.leafStart[l+1]] }

// LeafGPUs returns how many GPUs the nodes under leaf l have together.
func (t *Topology) LeafGPUs(l LeafID) int {
	return int(t.gpuStart[t.leafStart[l+1]] - t.gpuStart[t.leafStart[l]])
}

// NumSpines returns how many spine switches the topology has.
func (t *Topology) NumSpines() int { return len(t.spineName) }

// SpineName returns the spine's name.
func (t *Topology) SpineName(s SpineID) string { return t.spineName[s] }

// SpineByName returns the named spine, and false if there is none.
func (t *Topology) SpineByName(name string) (SpineID, bool) {
	s, ok := t.spineByName[name]
	return s, ok
}

// SpineLeaves returns the leaves under spine s, in id order (consecutive).
func (t *Topology) SpineLeaves(s SpineID) []LeafID { return t.leaves[t.spineLeaf[s]:t.spineLeaf[s+1]] }

// SpineNodes returns the nodes under spine s, in id order (consecutive).
func (t *Topology) SpineNodes(s SpineID) []NodeID {
	first, end := t.spineNodeRange(s)
	return t.nodes[first:end]
}

func (t *Topology) spineNodeRange(s SpineID) (first, end int32) {
	lf, le := t.spineLeaf[s], t.spineLeaf[s+1]
	return t.leafStart[lf], t.leafStart[le]
}

// SpineGPUs returns how many GPUs the nodes under spine s have together.
func (t *Topology) SpineGPUs(s SpineID) int {
	first, end := t.spineNodeRange(s)
	return int(t.gpuStart[end] - t.gpuStart[first])
}

// NumDomains returns how many NVLink domains the topology has, counting
// every single-node domain.
func (t *Topology) NumDomains() int { return len(t.domainGPUs) }

// DomainName returns the domain's name: the nvlink-domain label or Slurm
// block name, or for a node's own single-node domain the node's name.
func (t *Topology) DomainName(d DomainID) string {
	if name := t.domainName[d]; name != "" {
		return name
	}
	return t.nodeName[t.DomainNodes(d)[0]]
}

// DomainByName returns the domain named by a label or Slurm block, and false
// if there is none. Single-node domains without a name are not found.
func (t *Topology) DomainByName(name string) (DomainID, bool) {
	d, ok := t.domainByName[name]
	return d, ok
}

// DomainNodes returns the nodes of NVLink domain d, in id order. They are
// consecutive unless the domain spans leaves.
func (t *Topology) DomainNodes(d DomainID) []NodeID {
	return t.domainNodes[t.domainNodeStart[d]:t.domainNodeStart[d+1]]
}

// DomainGPUs returns how many GPUs the nodes of domain d have together.
func (t *Topology) DomainGPUs(d DomainID) int { return int(t.domainGPUs[d]) }

// BlockSizes returns Slurm's BlockSizes from a block topology: the base
// block size in nodes and the larger aggregate sizes, or nil.
func (t *Topology) BlockSizes() []int { return t.blockSizes }

// NumGroups returns how many groups level l has: domains, leaves or spines.
// It returns 0 for LevelNone.
func (t *Topology) NumGroups(l Level) int {
	switch l {
	case LevelNVLinkDomain:
		return t.NumDomains()
	case LevelLeaf:
		return t.NumLeaves()
	case LevelSpine:
		return t.NumSpines()
	}
	return 0
}

// Group returns the id of node n's group at level l (a DomainID, LeafID or
// SpineID as an int32), or -1 when the node has no known group there or l is
// LevelNone.
func (t *Topology) Group(l Level, n NodeID) int32 {
	switch l {
	case LevelNVLinkDomain:
		return int32(t.node[n].domain)
	case LevelLeaf:
		return int32(t.node[n].leaf)
	case LevelSpine:
		return int32(t.node[n].spine)
	}
	return -1
}

// GroupNodes returns the nodes of group g at level l, in id order.
func (t *Topology) GroupNodes(l Level, g int32) []NodeID {
	switch l {
	case LevelNVLinkDomain:
		return t.DomainNodes(DomainID(g))
	case LevelLeaf:
		return t.LeafNodes(LeafID(g))
	case LevelSpine:
		return t.SpineNodes(SpineID(g))
	}
	return nil
}

// GroupGPUs returns how many GPUs group g at level l has.
func (t *Topology) GroupGPUs(l Level, g int32) int {
	switch l {
	case LevelNVLinkDomain:
		return t.DomainGPUs(DomainID(g))
	case LevelLeaf:
		return t.LeafGPUs(LeafID(g))
	case LevelSpine:
		return t.SpineGPUs(SpineID(g))
	}
	return 0
}

// GroupName returns the name of group g at level l.
func (t *Topology) GroupName(l Level, g int32) string {
	switch l {
	case LevelNVLinkDomain:
		return t.DomainName(DomainID(g))
	case LevelLeaf:
		return t.LeafName(LeafID(g))
	case LevelSpine:
		return t.SpineName(SpineID(g))
	}
	return ""
}

// NodeDistance returns the network distance between two nodes, without the
// rail term: DistanceNVLink for one node or one NVLink domain, then
// DistanceLeaf, DistanceSpine or DistanceCrossSpine.
func (t *Topology) NodeDistance(a, b NodeID) int {
	if a == b || t.node[a].domain == t.node[b].domain {
		return DistanceNVLink
	}
	return t.networkDistance(a, b)
}

func (t *Topology) networkDistance(a, b NodeID) int {
	na, nb := &t.node[a], &t.node[b]
	switch {
	case na.leaf < 0 || nb.leaf < 0:
		return DistanceCrossSpine
	case na.leaf == nb.leaf:
		return DistanceLeaf
	case na.spine >= 0 && na.spine == nb.spine:
		return DistanceSpine
	}
	return DistanceCrossSpine
}

// Distance returns how far apart two GPUs are, one of the Distance*
// constants, plus RailMismatch for a network path between GPUs on different
// known rails:
//
//	same GPU                                    DistanceSameGPU (0)
//	same NVLink domain (node or rack)           DistanceNVLink
//	same node without NVLink: PCIe switch,      DistancePCIeSwitch,
//	  NUMA node, or neither                       DistanceNUMA, DistanceNode
//	same leaf / spine / neither                 DistanceLeaf, DistanceSpine,
//	                                              DistanceCrossSpine
//
// It does no allocation and only indexes arrays.
func (t *Topology) Distance(a, b GPURef) int {
	na, nb := &t.node[a.Node], &t.node[b.Node]
	ia, ib := na.gpuStart+a.GPU, nb.gpuStart+b.GPU
	if a.Node == b.Node {
		switch {
		case a.GPU == b.GPU:
			return DistanceSameGPU
		case na.nvlink:
			return DistanceNVLink
		}
		if p := t.gpuPCIe[ia]; p >= 0 && p == t.gpuPCIe[ib] {
			return DistancePCIeSwitch
		}
		if m := t.gpuNUMA[ia]; m >= 0 && m == t.gpuNUMA[ib] {
			return DistanceNUMA
		}
		return DistanceNode
	}
	if na.domain == nb.domain {
		return DistanceNVLink
	}
	var d int
	switch {
	case na.leaf < 0 || nb.leaf < 0:
		d = DistanceCrossSpine
	case na.leaf == nb.leaf:
		d = DistanceLeaf
	case na.spine >= 0 && na.spine == nb.spine:
		d = DistanceSpine
	default:
		d = DistanceCrossSpine
	}
	if ra, rb := t.gpuRail[ia], t.gpuRail[ib]; ra >= 0 && rb >= 0 && ra != rb {
		d += RailMismatch
	}
	return d
}
