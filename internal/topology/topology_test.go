package topology

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/golden")

func seqInts(n, mod int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i % mod
	}
	return out
}

// dgxSpec is an 8-GPU NVSwitch node: rails 0-7, GPUs 0-3 on NUMA 0.
func dgxSpec(name string) NodeSpec {
	return NodeSpec{Name: name, GPUs: 8, NVLink: true, Rails: seqInts(8, 8),
		NUMA: []int{0, 0, 0, 0, 1, 1, 1, 1}, PCIeSwitch: []int{0, 0, 1, 1, 2, 2, 3, 3}}
}

func mustBuild(t testing.TB, b *Builder) *Topology {
	t.Helper()
	topo, err := b.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return topo
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// goldenTopologies builds the written-by-hand examples.
func goldenTopologies(t testing.TB) map[string]*Topology {
	out := map[string]*Topology{}

	// DGX H100 cluster from topology.conf plus what the agents report.
	b := NewBuilder()
	check(t, b.AddSlurmTree(parseTreeFile(t, "tree-dgx.conf")))
	for _, n := range append(names("dgx", 1, 39, 3), "dgxlogin1") {
		check(t, b.AddNode(dgxSpec(n)))
	}
	out["dgx"] = mustBuild(t, b)

	// GB200 NVL72: blocks are the racks, the tree gives the leaves.
	b = NewBuilder()
	check(t, b.AddSlurmTree(parseTreeFile(t, "tree-nvl72.conf")))
	check(t, b.AddSlurmBlocks(parseBlocksFile(t, "blocks-nvl72.conf")))
	for _, n := range names("gb200-", 1, 72, 3) {
		check(t, b.AddNode(NodeSpec{Name: n, GPUs: 4, Rails: seqInts(4, 4), NUMA: []int{0, 0, 1, 1}}))
	}
	out["nvl72"] = mustBuild(t, b)

	// Three levels, no GPU information at all.
	b = NewBuilder()
	check(t, b.AddSlurmTree(parseTreeFile(t, "tree-3level.conf")))
	out["3level"] = mustBuild(t, b)

	// Labels only, as the control plane builds it from agents: two leaves
	// under one spine, a leaf with no spine, a node with no labels, a
	// PCIe-only node with one NIC, and a node whose rails run backwards.
	b = NewBuilder()
	labels := map[string]map[string]string{
		"a1":  {"leaf": "la", "spine": "s1", "rail": "0,1,2,3"},
		"a2":  {"leaf": "la", "spine": "s1", "rail": "3,2,1,0", "role": "ignored"},
		"b1":  {"leaf": "lb", "spine": "s1"},
		"c1":  {"leaf": "lc", "rail": "0"},
		"x10": {},
		"x9":  {},
	}
	for node, l := range labels {
		check(t, b.AddLabels(node, l))
	}
	check(t, b.AddNode(NodeSpec{Name: "a1", GPUs: 4, NVLink: true}))
	check(t, b.AddNode(NodeSpec{Name: "a2", GPUs: 4, NVLink: true}))
	check(t, b.AddNode(NodeSpec{Name: "b1", GPUs: 2, NVLink: true, Rails: []int{0, 1}}))
	check(t, b.AddNode(NodeSpec{Name: "c1", GPUs: 2, NUMA: []int{0, -1}}))
	check(t, b.AddNode(NodeSpec{Name: "x10", GPUs: 1}))
	out["labels"] = mustBuild(t, b)
	return out
}

func TestGolden(t *testing.T) {
	for name, topo := range goldenTopologies(t) {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := topo.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				check(t, os.MkdirAll(filepath.Dir(path), 0o755))
				check(t, os.WriteFile(path, buf.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), buf.String()); diff != "" {
				t.Errorf("WriteText differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestModel checks the compact model's lookups against the facts each
// example was built from.
func TestModel(t *testing.T) {
	topos := goldenTopologies(t)
	node := func(topo *Topology, name string) NodeID {
		t.Helper()
		n, ok := topo.NodeByName(name)
		if !ok {
			t.Fatalf("no node %q", name)
		}
		return n
	}

	dgx := topos["dgx"]
	if got, want := []int{dgx.NumNodes(), dgx.NumGPUs(), dgx.NumLeaves(), dgx.NumSpines(), dgx.NumDomains()}, []int{40, 320, 3, 1, 40}; !cmp.Equal(got, want) {
		t.Errorf("dgx counts = %v, want %v", got, want)
	}
	l3, _ := dgx.LeafByName("ib-leaf03")
	var leafNames []string
	for _, n := range dgx.LeafNodes(l3) {
		leafNames = append(leafNames, dgx.NodeName(n))
	}
	if diff := cmp.Diff(append(names("dgx", 33, 39, 3), "dgxlogin1"), leafNames); diff != "" {
		t.Errorf("LeafNodes(ib-leaf03) (-want +got):\n%s", diff)
	}
	if got := dgx.LeafGPUs(l3); got != 64 {
		t.Errorf("LeafGPUs(ib-leaf03) = %d, want 64", got)
	}
	sp, _ := dgx.SpineByName("ib-spine01")
	if got := dgx.SpineGPUs(sp); got != 320 {
		t.Errorf("SpineGPUs = %d, want 320", got)
	}
	if got := len(dgx.SpineNodes(sp)); got != 40 {
		t.Errorf("len(SpineNodes) = %d, want 40", got)
	}
	if got := dgx.LeafSpine(l3); got != sp {
		t.Errorf("LeafSpine(ib-leaf03) = %d, want %d", got, sp)
	}
	for i := range dgx.NumNodes() - 1 {
		a, b := NodeID(i), NodeID(i+1)
		if dgx.Leaf(a) > dgx.Leaf(b) {
			t.Errorf("node ids not in leaf order at %d", i)
		}
	}
	g := GPURef{node(dgx, "dgx017"), 5}
	if dgx.NUMA(g) != 1 || dgx.PCIeSwitch(g) != 2 || dgx.Rail(g) != 5 {
		t.Errorf("dgx017/5: numa %d pcie %d rail %d, want 1 2 5", dgx.NUMA(g), dgx.PCIeSwitch(g), dgx.Rail(g))
	}
	first, end := dgx.NodeGPUs(g.Node)
	if dgx.GPUIndex(g) != first+5 || end-first != 8 {
		t.Errorf("GPUIndex/NodeGPUs inconsistent: %d, [%d,%d)", dgx.GPUIndex(g), first, end)
	}

	nvl := topos["nvl72"]
	rack2, ok := nvl.DomainByName("rack2")
	if !ok {
		t.Fatal("no domain rack2")
	}
	if got := nvl.DomainGPUs(rack2); got != 72 {
		t.Errorf("DomainGPUs(rack2) = %d, want 72", got)
	}
	if got := nvl.DomainName(nvl.Domain(node(nvl, "gb200-019"))); got != "rack2" {
		t.Errorf("domain of gb200-019 = %q, want rack2", got)
	}
	if !nvl.NVLink(node(nvl, "gb200-019")) {
		t.Error("a node of a multi-node domain must be an NVLink node")
	}
	if diff := cmp.Diff([]int{18, 36, 72}, nvl.BlockSizes()); diff != "" {
		t.Errorf("BlockSizes (-want +got):\n%s", diff)
	}
	for _, l := range Levels {
		count := 0
		for grp := range int32(nvl.NumGroups(l)) {
			for _, n := range nvl.GroupNodes(l, grp) {
				if nvl.Group(l, n) != grp {
					t.Errorf("%v: node %s listed in group %s but Group says %d", l, nvl.NodeName(n), nvl.GroupName(l, grp), nvl.Group(l, n))
				}
				count++
			}
		}
		if count != nvl.NumNodes() {
			t.Errorf("%v: groups hold %d nodes, want %d", l, count, nvl.NumNodes())
		}
	}

	lab := topos["labels"]
	if got := lab.DomainName(lab.Domain(node(lab, "x9"))); got != "x9" {
		t.Errorf("a node's own domain is named after it: got %q", got)
	}
	if _, ok := lab.DomainByName("x9"); ok {
		t.Error("DomainByName found an implicit single-node domain")
	}
	if lab.Leaf(node(lab, "x9")) != NoLeaf || lab.Spine(node(lab, "c1")) != NoSpine {
		t.Error("unknown leaf/spine not reported as NoLeaf/NoSpine")
	}
	if got := lab.Rail(GPURef{node(lab, "a2"), 0}); got != 3 {
		t.Errorf("rail of a2/0 from label = %d, want 3", got)
	}
	if got := lab.Rail(GPURef{node(lab, "c1"), 1}); got != 0 {
		t.Errorf("single rail label applies to all GPUs: got %d", got)
	}
	if got := lab.Rail(GPURef{node(lab, "x10"), 0}); got != -1 {
		t.Errorf("unknown rail = %d, want -1", got)
	}
	// Natural order: x9 before x10, both after the nodes with leaves.
	if a, b := node(lab, "x9"), node(lab, "x10"); a >= b || a < node(lab, "c1") {
		t.Errorf("ids x9=%d x10=%d c1=%d not in natural, leafless-last order", a, b, node(lab, "c1"))
	}
}

func TestDistance(t *testing.T) {
	b := NewBuilder()
	// Leaf l1 (spine s1): n1, n2 (NVLink); leaf l2 (spine s1): n3; leaf l3
	// (spine s2): n4; pcie: a PCIe-only node under l1; r1, r2: one NVLink
	// rack of two nodes under l1 and l2; lone: no leaf.
	check(t, b.AddNode(NodeSpec{Name: "n1", GPUs: 8, NVLink: true, Rails: seqInts(8, 8)}))
	check(t, b.AddNode(NodeSpec{Name: "n2", GPUs: 8, NVLink: true, Rails: seqInts(8, 8)}))
	check(t, b.AddNode(NodeSpec{Name: "n3", GPUs: 8, NVLink: true, Rails: seqInts(8, 8)}))
	check(t, b.AddNode(NodeSpec{Name: "n4", GPUs: 8, NVLink: true}))
	check(t, b.AddNode(NodeSpec{Name: "pcie", GPUs: 4, NUMA: []int{0, 0, 1, -1}, PCIeSwitch: []int{0, 1, 2, 2}}))
	check(t, b.AddNode(NodeSpec{Name: "r1", GPUs: 4}))
	check(t, b.AddNode(NodeSpec{Name: "r2", GPUs: 4}))
	check(t, b.AddNode(NodeSpec{Name: "lone", GPUs: 1}))
	for node, leaf := range map[string]string{"n1": "l1", "n2": "l1", "n3": "l2", "n4": "l3", "pcie": "l1", "r1": "l1", "r2": "l2"} {
		check(t, b.SetLeaf(node, leaf))
	}
	check(t, b.SetSpine("l1", "s1"))
	check(t, b.SetSpine("l2", "s1"))
	check(t, b.SetSpine("l3", "s2"))
	check(t, b.SetDomain("r1", "rack"))
	check(t, b.SetDomain("r2", "rack"))
	topo := mustBuild(t, b)
	g := func(node string, gpu int32) GPURef {
		n, ok := topo.NodeByName(node)
		if !ok {
			t.Fatalf("no node %s", node)
		}
		return GPURef{n, gpu}
	}
	tests := []struct {
		name string
		a, b GPURef
		want int
	}{
		{"same GPU", g("n1", 3), g("n1", 3), DistanceSameGPU},
		{"same NVLink node", g("n1", 0), g("n1", 7), DistanceNVLink},
		{"rack across nodes and leaves", g("r1", 0), g("r2", 3), DistanceNVLink},
		{"pcie same switch", g("pcie", 2), g("pcie", 3), DistancePCIeSwitch},
		{"pcie same numa", g("pcie", 0), g("pcie", 1), DistanceNUMA},
		{"pcie across numa", g("pcie", 1), g("pcie", 2), DistanceNode},
		{"pcie unknown numa", g("pcie", 0), g("pcie", 3), DistanceNode},
		{"same leaf same rail", g("n1", 2), g("n2", 2), DistanceLeaf},
		{"same leaf other rail", g("n1", 2), g("n2", 3), DistanceLeaf + RailMismatch},
		{"same leaf unknown rail", g("n1", 2), g("pcie", 3), DistanceLeaf},
		{"same spine", g("n1", 0), g("n3", 0), DistanceSpine},
		{"same spine other rail", g("n1", 0), g("n3", 1), DistanceSpine + RailMismatch},
		{"cross spine", g("n1", 0), g("n4", 1), DistanceCrossSpine},
		{"no leaf", g("n1", 0), g("lone", 0), DistanceCrossSpine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := topo.Distance(tc.a, tc.b); got != tc.want {
				t.Errorf("Distance(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
			if got := topo.Distance(tc.b, tc.a); got != tc.want {
				t.Errorf("Distance is not symmetric: Distance(%v, %v) = %d, want %d", tc.b, tc.a, got, tc.want)
			}
		})
	}
	nodeTests := []struct {
		a, b string
		want int
	}{
		{"n1", "n1", DistanceNVLink}, {"r1", "r2", DistanceNVLink}, {"n1", "n2", DistanceLeaf},
		{"n1", "n3", DistanceSpine}, {"n3", "n4", DistanceCrossSpine}, {"lone", "n4", DistanceCrossSpine},
	}
	for _, tc := range nodeTests {
		if got := topo.NodeDistance(g(tc.a, 0).Node, g(tc.b, 0).Node); got != tc.want {
			t.Errorf("NodeDistance(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestBuilderErrors(t *testing.T) {
	tests := []struct {
		name  string
		steps func(b *Builder) error
		want  string
	}{
		{"node added twice", func(b *Builder) error {
			check(t, b.AddNode(NodeSpec{Name: "n1", GPUs: 8}))
			return b.AddNode(NodeSpec{Name: "n1", GPUs: 8})
		}, `node "n1" added twice`},
		{"bad node name", func(b *Builder) error {
			return b.AddNode(NodeSpec{Name: "n 1"})
		}, `node name "n 1": invalid character ' ' (want letters, digits and -_.:+@)`},
		{"too many GPUs", func(b *Builder) error {
			return b.AddNode(NodeSpec{Name: "n1", GPUs: 2000})
		}, `node "n1": 2000 GPUs, want 0 to 1024`},
		{"short per-GPU slice", func(b *Builder) error {
			return b.AddNode(NodeSpec{Name: "n1", GPUs: 8, Rails: []int{0, 1}})
		}, `node "n1": Rails has 2 entries for 8 GPUs`},
		{"bad per-GPU value", func(b *Builder) error {
			return b.AddNode(NodeSpec{Name: "n1", GPUs: 2, NUMA: []int{0, -2}})
		}, `node "n1": NUMA[1] = -2, want -1 (unknown) to 32767`},
		{"leaf conflict between sources", func(b *Builder) error {
			check(t, b.AddSlurmTree(&SlurmTree{File: "topology.conf", Switches: []SlurmSwitch{{Name: "l1", Nodes: []string{"n1"}, Line: 3}}}))
			return b.AddLabels("n1", map[string]string{"leaf": "l2"})
		}, `label leaf="l2": node "n1": leaf "l2" (labels of node "n1") conflicts with "l1" (topology.conf:3)`},
		{"agreeing sources are fine", func(b *Builder) error {
			check(t, b.AddSlurmTree(&SlurmTree{File: "t.conf", Switches: []SlurmSwitch{{Name: "l1", Nodes: []string{"n1"}}}}))
			return b.AddLabels("n1", map[string]string{"leaf": "l1"})
		}, ``},
		{"spine conflict between nodes", func(b *Builder) error {
			check(t, b.AddLabels("n1", map[string]string{"leaf": "l1", "spine": "s1"}))
			return b.AddLabels("n2", map[string]string{"leaf": "l1", "spine": "s2"})
		}, `label spine="s2": leaf "l1": spine "s2" (labels of node "n2") conflicts with "s1" (labels of node "n1")`},
		{"spine without leaf", func(b *Builder) error {
			return b.AddLabels("n1", map[string]string{"spine": "s1"})
		}, `node "n1": label spine="s1" needs a leaf label too`},
		{"bad rail label", func(b *Builder) error {
			return b.AddLabels("n1", map[string]string{"rail": "0,x"})
		}, `node "n1": label rail="0,x": entry 2 "x": want a rail number 0 to 32767`},
		{"bad domain label", func(b *Builder) error {
			return b.AddLabels("n1", map[string]string{"nvlink-domain": ""})
		}, `label nvlink-domain="": node "n1": empty nvlink-domain name`},
		{"domain conflict", func(b *Builder) error {
			check(t, b.AddSlurmBlocks(&SlurmBlocks{File: "b.conf", Blocks: []SlurmBlock{{Name: "rack1", Nodes: []string{"n1"}, Line: 2}}}))
			return b.AddLabels("n1", map[string]string{"nvlink-domain": "rack2"})
		}, `label nvlink-domain="rack2": node "n1": nvlink-domain "rack2" (labels of node "n1") conflicts with "rack1" (b.conf:2)`},
		{"rail label length", func(b *Builder) error {
			check(t, b.AddLabels("n1", map[string]string{"rail": "0,1,2"}))
			check(t, b.AddNode(NodeSpec{Name: "n1", GPUs: 8}))
			_, err := b.Build()
			return err
		}, `node "n1": rail label has 3 entries for 8 GPUs (labels of node "n1")`},
		{"rail label against agent", func(b *Builder) error {
			check(t, b.AddLabels("n1", map[string]string{"rail": "1,0"}))
			check(t, b.AddNode(NodeSpec{Name: "n1", GPUs: 2, Rails: []int{0, 1}}))
			_, err := b.Build()
			return err
		}, `node "n1": GPU 0: rail 0 from the agent conflicts with rail 1 (labels of node "n1")`},
		{"leaf used as spine", func(b *Builder) error {
			check(t, b.AddLabels("n1", map[string]string{"leaf": "x", "spine": "s"}))
			check(t, b.AddLabels("n2", map[string]string{"leaf": "y", "spine": "x"}))
			_, err := b.Build()
			return err
		}, `switch "x" is used both as a leaf and as a spine (spine of leaf "y" from labels of node "n2")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.steps(NewBuilder())
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("error:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestLevel(t *testing.T) {
	for _, l := range Levels {
		got, err := ParseLevel(l.String())
		if err != nil || got != l {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", l.String(), got, err, l)
		}
		text, _ := l.MarshalText()
		var back Level
		if err := back.UnmarshalText(text); err != nil || back != l {
			t.Errorf("text round trip of %v gave %v, %v", l, back, err)
		}
	}
	if got := []string{LevelNVLinkDomain.String(), LevelLeaf.String(), LevelSpine.String(), LevelNone.String()}; !cmp.Equal(got, []string{"nvlink-domain", "leaf", "spine", "none"}) {
		t.Errorf("level names = %q", got)
	}
	if !(LevelNVLinkDomain < LevelLeaf && LevelLeaf < LevelSpine) {
		t.Error("levels are not ordered tightest first")
	}
	for _, bad := range []string{"", "none", "Leaf", "rack", "nvlink"} {
		if _, err := ParseLevel(bad); err == nil || !strings.Contains(err.Error(), "want nvlink-domain, leaf or spine") {
			t.Errorf("ParseLevel(%q) error = %v, want one naming the valid levels", bad, err)
		}
	}
	var l Level = LevelLeaf
	if err := l.UnmarshalText(nil); err != nil || l != LevelNone {
		t.Errorf("UnmarshalText(\"\") = %v, %v; want none", l, err)
	}
	if text, _ := LevelNone.MarshalText(); len(text) != 0 {
		t.Errorf("LevelNone.MarshalText = %q, want empty", text)
	}
}

func TestUniform(t *testing.T) {
	topo, err := Uniform(UniformSpec{Nodes: 72, GPUsPerNode: 4, NodesPerLeaf: 36, LeavesPerSpine: 1, NodesPerDomain: 18, Rails: 4, NUMAPerNode: 2})
	check(t, err)
	if got, want := []int{topo.NumNodes(), topo.NumGPUs(), topo.NumLeaves(), topo.NumSpines(), topo.NumDomains()}, []int{72, 288, 2, 2, 4}; !cmp.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	n, _ := topo.NodeByName("node19")
	if got := topo.DomainName(topo.Domain(n)); got != "nvl2" {
		t.Errorf("node19 domain = %q, want nvl2", got)
	}
	if got := topo.LeafName(topo.Leaf(n)); got != "leaf1" {
		t.Errorf("node19 leaf = %q, want leaf1", got)
	}
	if topo.NUMA(GPURef{n, 3}) != 1 || topo.PCIeSwitch(GPURef{n, 3}) != 1 || topo.Rail(GPURef{n, 3}) != 3 {
		t.Errorf("node19/3: numa %d pcie %d rail %d", topo.NUMA(GPURef{n, 3}), topo.PCIeSwitch(GPURef{n, 3}), topo.Rail(GPURef{n, 3}))
	}
	if _, err := Uniform(UniformSpec{}); err == nil {
		t.Error("Uniform with no nodes did not fail")
	}
}
