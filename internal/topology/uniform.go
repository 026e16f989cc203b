package topology

import (
	"fmt"
	"strconv"
)

// UniformSpec describes a regular synthetic cluster, for benchmarks, the
// simulator and tests: the scheduler benchmark's cluster is
// UniformSpec{Nodes: 4096, GPUsPerNode: 8, NodesPerLeaf: 32,
// LeavesPerSpine: 16, Rails: 8, NVLink: true}.
type UniformSpec struct {
	Nodes       int
	GPUsPerNode int
	// NodesPerLeaf puts consecutive nodes under one leaf; 0 means no leaves.
	NodesPerLeaf int
	// LeavesPerSpine puts consecutive leaves under one spine; 0 means no
	// spines.
	LeavesPerSpine int
	// NodesPerDomain groups consecutive nodes into one NVLink domain (18 for
	// GB200 NVL72 with 4 GPUs per node); 0 or 1 means each node is its own.
	NodesPerDomain int
	// Rails puts GPU i on rail i mod Rails; 0 leaves rails unknown.
	Rails int
	// NVLink gives every node's GPUs NVLink.
	NVLink bool
	// NUMAPerNode splits each node's GPUs evenly over this many NUMA nodes,
	// one PCIe switch per two GPUs; 0 leaves them unknown.
	NUMAPerNode int
}

// Uniform builds the topology UniformSpec describes. Nodes are named
// node0001..., leaves leaf001..., spines spine01..., domains nvl001...
func Uniform(spec UniformSpec) (*Topology, error) {
	if spec.Nodes <= 0 || spec.GPUsPerNode < 0 || spec.NodesPerLeaf < 0 || spec.LeavesPerSpine < 0 ||
		spec.NodesPerDomain < 0 || spec.Rails < 0 || spec.NUMAPerNode < 0 {
		return nil, fmt.Errorf("uniform topology: invalid spec %+v", spec)
	}
	name := func(prefix string, i, count int) string {
		w := len(strconv.Itoa(count))
		s := strconv.Itoa(i + 1)
		for len(s) < w {
			s = "0" + s
		}
		return prefix + s
	}
	b := NewBuilder()
	nLeaves := 0
	if spec.NodesPerLeaf > 0 {
		nLeaves = (spec.Nodes + spec.NodesPerLeaf - 1) / spec.NodesPerLeaf
	}
	nSpines := 0
	if spec.LeavesPerSpine > 0 {
		nSpines = (nLeaves + spec.LeavesPerSpine - 1) / spec.LeavesPerSpine
	}
	nDomains := 0
	if spec.NodesPerDomain > 1 {
		nDomains = (spec.Nodes + spec.NodesPerDomain - 1) / spec.NodesPerDomain
	}
	for i := range spec.Nodes {
		ns := NodeSpec{Name: name("node", i, spec.Nodes), GPUs: spec.GPUsPerNode, NVLink: spec.NVLink}
		if spec.Rails > 0 {
			ns.Rails = make([]int, spec.GPUsPerNode)
			for g := range ns.Rails {
				ns.Rails[g] = g % spec.Rails
			}
		}
		if spec.NUMAPerNode > 0 {
			ns.NUMA = make([]int, spec.GPUsPerNode)
			ns.PCIeSwitch = make([]int, spec.GPUsPerNode)
			per := max(1, (spec.GPUsPerNode+spec.NUMAPerNode-1)/spec.NUMAPerNode)
			for g := range ns.NUMA {
				ns.NUMA[g] = g / per
				ns.PCIeSwitch[g] = g / 2
			}
		}
		if err := b.AddNode(ns); err != nil {
			return nil, err
		}
		if spec.NodesPerLeaf > 0 {
			leaf := i / spec.NodesPerLeaf
			leafName := name("leaf", leaf, nLeaves)
			if err := b.SetLeaf(ns.Name, leafName); err != nil {
				return nil, err
			}
			if spec.LeavesPerSpine > 0 && i%spec.NodesPerLeaf == 0 {
				if err := b.SetSpine(leafName, name("spine", leaf/spec.LeavesPerSpine, nSpines)); err != nil {
					return nil, err
				}
			}
		}
		if spec.NodesPerDomain > 1 {
			if err := b.SetDomain(ns.Name, name("nvl", i/spec.NodesPerDomain, nDomains)); err != nil {
				return nil, err
			}
		}
	}
	return b.Build()
}
