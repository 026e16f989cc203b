package topology

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Label keys a node may carry (in its agent configuration or set by an
// operator) that AddLabels understands. Other labels are ignored.
const (
	// LabelLeaf names the node's leaf switch: "leaf=l1".
	LabelLeaf = "leaf"
	// LabelSpine names the spine above the node's leaf: "spine=s1". It needs
	// LabelLeaf on the same node.
	LabelSpine = "spine"
	// LabelNVLinkDomain names the node's multi-node NVLink domain, such as
	// its NVL72 rack: "nvlink-domain=rack3". Nodes with the same value form
	// one domain.
	LabelNVLinkDomain = "nvlink-domain"
	// LabelRail gives the rail of each GPU, in GPU index order, as a comma
	// list ("rail=0,1,2,3,4,5,6,7"), or one rail for all GPUs ("rail=0").
	LabelRail = "rail"
)

// maxGPUsPerNode bounds NodeSpec.GPUs so that per-GPU data fits int16 ids.
const maxGPUsPerNode = 1024

// NodeSpec is what is known about one node's inside, typically from its
// agent (NVML and sysfs). Per-GPU slices are indexed by local GPU index; nil
// means unknown, otherwise the length must equal GPUs and -1 marks one
// unknown entry.
type NodeSpec struct {
	Name string
	// GPUs is how many GPUs the node has.
	GPUs int
	// NVLink is true when all the node's GPUs reach each other over NVLink
	// (NVSwitch, or a full NVLink mesh). Nodes of a multi-node NVLink domain
	// are NVLink nodes whatever this says.
	NVLink bool
	// NUMA is each GPU's NUMA node.
	NUMA []int
	// PCIeSwitch is a node-local id of the PCIe switch above each GPU.
	PCIeSwitch []int
	// Rails is each GPU's network rail (the index of its closest NIC).
	Rails []int
}

// Builder assembles a Topology from several sources. Each fact (a node's
// leaf, a leaf's spine, a node's NVLink domain, a GPU's rail) may be stated by
// more than one source as long as they agree; a disagreement is an error
// naming both sources. Calls may come in any order. A Builder is not safe
// for concurrent use.
type Builder struct {
	nodes      map[string]*buildNode
	leafSpine  map[string]fact
	blockSizes []int
	blockSrc   string
}

type fact struct {
	val string
	src string
}

type buildNode struct {
	spec     NodeSpec
	hasSpec  bool
	leaf     fact
	domain   fact
	rails    []int
	railsSrc string
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{nodes: map[string]*buildNode{}, leafSpine: map[string]fact{}}
}

func (b *Builder) node(name string) *buildNode {
	n := b.nodes[name]
	if n == nil {
		n = &buildNode{}
		b.nodes[name] = n
	}
	return n
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("empty %s name", what)
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return fmt.Errorf("%s name %q: invalid character %q (want letters, digits and -_.:+@)", what, name, name[i])
		}
	}
	return nil
}

// AddNode records what is known about a node's inside. A node may be added
// once; nodes named only by other sources (labels, Slurm files) have no GPUs.
func (b *Builder) AddNode(spec NodeSpec) error {
	if err := checkName("node", spec.Name); err != nil {
		return err
	}
	if spec.GPUs < 0 || spec.GPUs > maxGPUsPerNode {
		return fmt.Errorf("node %q: %d GPUs, want 0 to %d", spec.Name, spec.GPUs, maxGPUsPerNode)
	}
	for _, f := range []struct {
		name string
		vals []int
	}{{"NUMA", spec.NUMA}, {"PCIeSwitch", spec.PCIeSwitch}, {"Rails", spec.Rails}} {
		if f.vals == nil {
			continue
		}
		if len(f.vals) != spec.GPUs {
			return fmt.Errorf("node %q: %s has %d entries for %d GPUs", spec.Name, f.name, len(f.vals), spec.GPUs)
		}
		for i, v := range f.vals {
			if v < -1 || v > math.MaxInt16 {
				return fmt.Errorf("node %q: %s[%d] = %d, want -1 (unknown) to %d", spec.Name, f.name, i, v, math.MaxInt16)
			}
		}
	}
	n := b.node(spec.Name)
	if n.hasSpec {
		return fmt.Errorf("node %q added twice", spec.Name)
	}
	spec.NUMA = slices.Clone(spec.NUMA)
	spec.PCIeSwitch = slices.Clone(spec.PCIeSwitch)
	spec.Rails = slices.Clone(spec.Rails)
	n.spec, n.hasSpec = spec, true
	return nil
}

func setFact(f *fact, what, val, src string) error {
	if f.val != "" && f.val != val {
		return fmt.Errorf("%s %q (%s) conflicts with %q (%s)", what, val, src, f.val, f.src)
	}
	if f.val == "" {
		*f = fact{val, src}
	}
	return nil
}

// SetLeaf puts node under leaf switch leaf.
func (b *Builder) SetLeaf(node, leaf string) error { return b.setLeaf(node, leaf, "SetLeaf") }

func (b *Builder) setLeaf(node, leaf, src string) error {
	if err := checkName("node", node); err != nil {
		return err
	}
	if err := checkName("leaf", leaf); err != nil {
		return fmt.Errorf("node %q: %w", node, err)
	}
	if err := setFact(&b.node(node).leaf, "node "+strconv.Quote(node)+": leaf", leaf, src); err != nil {
		return err
	}
	return nil
}

// SetSpine puts leaf switch leaf under spine switch spine.
func (b *Builder) SetSpine(leaf, spine string) error { return b.setSpine(leaf, spine, "SetSpine") }

func (b *Builder) setSpine(leaf, spine, src string) error {
	if err := checkName("leaf", leaf); err != nil {
		return err
	}
	if err := checkName("spine", spine); err != nil {
		return fmt.Errorf("leaf %q: %w", leaf, err)
	}
	f := b.leafSpine[leaf]
	if err := setFact(&f, "leaf "+strconv.Quote(leaf)+": spine", spine, src); err != nil {
		return err
	}
	b.leafSpine[leaf] = f
	return nil
}

// SetDomain puts node in the multi-node NVLink domain named domain.
func (b *Builder) SetDomain(node, domain string) error {
	return b.setDomain(node, domain, "SetDomain")
}

func (b *Builder) setDomain(node, domain, src string) error {
	if err := checkName("node", node); err != nil {
		return err
	}
	if err := checkName("nvlink-domain", domain); err != nil {
		return fmt.Errorf("node %q: %w", node, err)
	}
	return setFact(&b.node(node).domain, "node "+strconv.Quote(node)+": nvlink-domain", domain, src)
}

// AddLabels applies a node's topology labels: LabelLeaf, LabelSpine,
// LabelNVLinkDomain and LabelRail. Other keys are ignored, so a node's whole
// label set may be passed. The node is part of the topology even when it has
// none of these labels.
func (b *Builder) AddLabels(node string, labels map[string]string) error {
	src := "labels of node " + strconv.Quote(node)
	if err := checkName("node", node); err != nil {
		return err
	}
	b.node(node)
	leaf, hasLeaf := labels[LabelLeaf]
	if hasLeaf {
		if err := b.setLeaf(node, leaf, src); err != nil {
			return fmt.Errorf("label %s=%q: %w", LabelLeaf, leaf, err)
		}
	}
	if spine, ok := labels[LabelSpine]; ok {
		if !hasLeaf {
			return fmt.Errorf("node %q: label %s=%q needs a %s label too", node, LabelSpine, spine, LabelLeaf)
		}
		if err := b.setSpine(leaf, spine, src); err != nil {
			return fmt.Errorf("label %s=%q: %w", LabelSpine, spine, err)
		}
	}
	if d, ok := labels[LabelNVLinkDomain]; ok {
		if err := b.setDomain(node, d, src); err != nil {
			return fmt.Errorf("label %s=%q: %w", LabelNVLinkDomain, d, err)
		}
	}
	if r, ok := labels[LabelRail]; ok {
		rails, err := parseRails(r)
		if err != nil {
			return fmt.Errorf("node %q: label %s=%q: %w", node, LabelRail, r, err)
		}
		n := b.node(node)
		if n.rails != nil && !slices.Equal(n.rails, rails) {
			return fmt.Errorf("node %q: label %s=%q conflicts with rails %v (%s)", node, LabelRail, r, n.rails, n.railsSrc)
		}
		n.rails, n.railsSrc = rails, src
	}
	return nil
}

// parseRails parses a rail label: "0,1,2,3" or "5".
func parseRails(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty rail list")
	}
	var out []int
	for i, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(part)
		if err != nil || v < 0 || v > math.MaxInt16 {
			return nil, fmt.Errorf("entry %d %q: want a rail number 0 to %d", i+1, part, math.MaxInt16)
		}
		out = append(out, v)
	}
	return out, nil
}

// AddSlurmTree applies a parsed topology.conf tree: each node under a switch
// with Nodes= gets that switch as its leaf, and each such leaf gets its
// parent switch (if any) as its spine. Switches above the spines are not
// modelled: leaves under different spines are DistanceCrossSpine apart.
func (b *Builder) AddSlurmTree(t *SlurmTree) error {
	parent := map[string]string{}
	for _, s := range t.Switches {
		for _, c := range s.Switches {
			parent[c] = s.Name
		}
	}
	for _, s := range t.Switches {
		if len(s.Nodes) == 0 {
			continue
		}
		src := fmt.Sprintf("%s:%d", t.File, s.Line)
		for _, n := range s.Nodes {
			if err := b.setLeaf(n, s.Name, src); err != nil {
				return err
			}
		}
		if p, ok := parent[s.Name]; ok {
			if err := b.setSpine(s.Name, p, src); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddSlurmBlocks applies a parsed block topology: each block becomes a
// multi-node NVLink domain (on GB200 NVL72 systems Slurm's blocks are the
// NVLink racks), and BlockSizes is kept for Topology.BlockSizes.
func (b *Builder) AddSlurmBlocks(bl *SlurmBlocks) error {
	for _, blk := range bl.Blocks {
		src := fmt.Sprintf("%s:%d", bl.File, blk.Line)
		for _, n := range blk.Nodes {
			if err := b.setDomain(n, blk.Name, src); err != nil {
				return err
			}
		}
	}
	if bl.BlockSizes != nil {
		if b.blockSizes != nil && !slices.Equal(b.blockSizes, bl.BlockSizes) {
			return fmt.Errorf("BlockSizes %v (%s) conflicts with %v (%s)", bl.BlockSizes, bl.File, b.blockSizes, b.blockSrc)
		}
		b.blockSizes, b.blockSrc = slices.Clone(bl.BlockSizes), bl.File
	}
	return nil
}

// Build checks the facts gathered and returns the Topology. Node ids are
// assigned in locality order: by spine, then leaf (each in natural name
// order, "n2" before "n10"), then NVLink domain, then node name; nodes
// without a leaf come last. The same facts always give the same ids.
func (b *Builder) Build() (*Topology, error) {
	// Leaves and spines.
	leafSet := map[string]bool{}
	for _, n := range b.nodes {
		if n.leaf.val != "" {
			leafSet[n.leaf.val] = true
		}
	}
	spineSet := map[string]bool{}
	for leaf, f := range b.leafSpine {
		if !leafSet[leaf] {
			continue // a spine above a leaf with no nodes: nothing to place
		}
		spineSet[f.val] = true
	}
	for s := range spineSet {
		if leafSet[s] {
			return nil, fmt.Errorf("switch %q is used both as a leaf and as a spine (%s)", s, b.spineSource(s))
		}
	}
	spineNames := sortedNames(spineSet)
	spineID := make(map[string]SpineID, len(spineNames))
	for i, s := range spineNames {
		spineID[s] = SpineID(i)
	}
	leafNames := sortedNames(leafSet)
	leafSpineOf := func(l string) SpineID {
		if f, ok := b.leafSpine[l]; ok {
			return spineID[f.val]
		}
		return NoSpine
	}
	slices.SortStableFunc(leafNames, func(x, y string) int {
		return cmpGroup(int32(leafSpineOf(x)), int32(leafSpineOf(y)))
	})
	leafID := make(map[string]LeafID, len(leafNames))
	for i, l := range leafNames {
		leafID[l] = LeafID(i)
	}

	// Nodes, in locality order.
	names := make([]string, 0, len(b.nodes))
	for name := range b.nodes {
		names = append(names, name)
	}
	leafOf := func(name string) int32 {
		if l := b.nodes[name].leaf.val; l != "" {
			return int32(leafID[l])
		}
		return -1
	}
	domainKey := func(name string) string {
		if d := b.nodes[name].domain.val; d != "" {
			return d
		}
		return name
	}
	slices.SortFunc(names, func(x, y string) int {
		if c := cmpGroup(leafOf(x), leafOf(y)); c != 0 {
			return c
		}
		if c := naturalCompare(domainKey(x), domainKey(y)); c != 0 {
			return c
		}
		return naturalCompare(x, y)
	})

	nn := len(names)
	t := &Topology{
		nodeName:     names,
		nodeByName:   make(map[string]NodeID, nn),
		node:         make([]nodeInfo, nn),
		gpuStart:     make([]int32, nn+1),
		nodes:        make([]NodeID, nn),
		leafName:     leafNames,
		leafByName:   leafID,
		leafSpine:    make([]SpineID, len(leafNames)),
		leafStart:    make([]int32, len(leafNames)+1),
		spineName:    spineNames,
		spineByName:  spineID,
		spineLeaf:    make([]int32, len(spineNames)+1),
		leaves:       make([]LeafID, len(leafNames)),
		domainByName: map[string]DomainID{},
		blockSizes:   slices.Clone(b.blockSizes),
	}
	for i, name := range names {
		id := NodeID(i)
		t.nodes[i] = id
		t.nodeByName[name] = id
		n := b.nodes[name]
		t.gpuStart[i+1] = t.gpuStart[i] + int32(n.spec.GPUs)
		t.node[i].gpuStart = t.gpuStart[i]
		t.node[i].leaf = NoLeaf
		t.node[i].spine = NoSpine
		if n.leaf.val != "" {
			l := leafID[n.leaf.val]
			t.node[i].leaf = l
			t.node[i].spine = leafSpineOf(n.leaf.val)
		}
		t.node[i].nvlink = n.spec.NVLink
	}
	// Leaf node ranges; nodes are sorted by leaf, leafless last.
	for i := range t.node {
		if l := t.node[i].leaf; l >= 0 {
			t.leafStart[l+1] = int32(i + 1)
		}
	}
	for l := range leafNames {
		t.leaves[l] = LeafID(l)
		t.leafSpine[l] = leafSpineOf(leafNames[l])
		if t.leafStart[l+1] < t.leafStart[l] { // cannot happen: every leaf has a node
			t.leafStart[l+1] = t.leafStart[l]
		}
	}
	for l, s := range t.leafSpine {
		if s >= 0 {
			t.spineLeaf[s+1] = int32(l + 1)
		}
	}
	for s := range spineNames {
		if t.spineLeaf[s+1] < t.spineLeaf[s] {
			t.spineLeaf[s+1] = t.spineLeaf[s]
		}
	}

	// Per-GPU data.
	ng := t.gpuStart[nn]
	t.gpuNUMA = make([]int16, ng)
	t.gpuPCIe = make([]int16, ng)
	t.gpuRail = make([]int16, ng)
	for i, name := range names {
		n := b.nodes[name]
		rails, err := mergeRails(name, n)
		if err != nil {
			return nil, err
		}
		base := t.gpuStart[i]
		for g := 0; g < n.spec.GPUs; g++ {
			t.gpuNUMA[base+int32(g)] = int16(at(n.spec.NUMA, g))
			t.gpuPCIe[base+int32(g)] = int16(at(n.spec.PCIeSwitch, g))
			t.gpuRail[base+int32(g)] = int16(at(rails, g))
		}
	}

	// NVLink domains, numbered in order of their first node.
	domainOf := map[string]DomainID{}
	members := [][]NodeID{}
	for i, name := range names {
		d := b.nodes[name].domain.val
		if d == "" {
			t.node[i].domain = DomainID(len(members))
			t.domainName = append(t.domainName, "")
			members = append(members, []NodeID{NodeID(i)})
			continue
		}
		id, ok := domainOf[d]
		if !ok {
			id = DomainID(len(members))
			domainOf[d] = id
			t.domainName = append(t.domainName, d)
			members = append(members, nil)
		}
		t.node[i].domain = id
		members[id] = append(members[id], NodeID(i))
	}
	t.domainByName = domainOf
	t.domainNodeStart = make([]int32, len(members)+1)
	t.domainGPUs = make([]int32, len(members))
	t.domainNodes = make([]NodeID, 0, nn)
	for d, ms := range members {
		t.domainNodes = append(t.domainNodes, ms...)
		t.domainNodeStart[d+1] = int32(len(t.domainNodes))
		for _, n := range ms {
			t.domainGPUs[d] += int32(t.GPUs(n))
			if len(ms) > 1 {
				t.node[n].nvlink = true
			}
		}
	}
	return t, nil
}

func (b *Builder) spineSource(s string) string {
	var srcs []string
	for leaf, f := range b.leafSpine {
		if f.val == s {
			srcs = append(srcs, fmt.Sprintf("spine of leaf %q from %s", leaf, f.src))
		}
	}
	slices.Sort(srcs)
	return strings.Join(srcs, "; ")
}

// mergeRails combines the rails from a node's spec and its rail label.
func mergeRails(name string, n *buildNode) ([]int, error) {
	spec := n.spec.Rails
	lab := n.rails
	if lab != nil && n.spec.GPUs > 0 {
		switch len(lab) {
		case n.spec.GPUs:
		case 1:
			one := lab[0]
			lab = make([]int, n.spec.GPUs)
			for i := range lab {
				lab[i] = one
			}
		default:
			return nil, fmt.Errorf("node %q: rail label has %d entries for %d GPUs (%s)", name, len(lab), n.spec.GPUs, n.railsSrc)
		}
	}
	if n.spec.GPUs == 0 {
		return nil, nil
	}
	if spec == nil {
		return lab, nil
	}
	if lab == nil {
		return spec, nil
	}
	for i := range spec {
		if spec[i] >= 0 && spec[i] != lab[i] {
			return nil, fmt.Errorf("node %q: GPU %d: rail %d from the agent conflicts with rail %d (%s)", name, i, spec[i], lab[i], n.railsSrc)
		}
	}
	return lab, nil
}

func at(vals []int, i int) int {
	if vals == nil {
		return -1
	}
	return vals[i]
}

// cmpGroup orders group ids with -1 (unknown) last.
func cmpGroup(a, b int32) int {
	if a < 0 {
		a = math.MaxInt32
	}
	if b < 0 {
		b = math.MaxInt32
	}
	return cmp.Compare(a, b)
}

func sortedNames(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.SortFunc(out, naturalCompare)
	return out
}
