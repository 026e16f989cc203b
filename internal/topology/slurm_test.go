package topology

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(prefix string, lo, hi, width int) []string {
	var out []string
	for i := lo; i <= hi; i++ {
		out = append(out, fmt.Sprintf("%s%0*d", prefix, width, i))
	}
	return out
}

func parseTreeFile(t testing.TB, name string) *SlurmTree {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := ParseSlurmTree(f, name)
	if err != nil {
		t.Fatalf("ParseSlurmTree(%s): %v", name, err)
	}
	return tr
}

func parseBlocksFile(t testing.TB, name string) *SlurmBlocks {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bl, err := ParseSlurmBlocks(f, name)
	if err != nil {
		t.Fatalf("ParseSlurmBlocks(%s): %v", name, err)
	}
	return bl
}

func TestParseSlurmTreeFiles(t *testing.T) {
	tests := []struct {
		file string
		want *SlurmTree
	}{
		{"tree-dgx.conf", &SlurmTree{File: "tree-dgx.conf", Switches: []SlurmSwitch{
			{Name: "ib-leaf01", Nodes: names("dgx", 1, 16, 3), LinkSpeed: "400", Line: 6},
			{Name: "ib-leaf02", Nodes: names("dgx", 17, 32, 3), LinkSpeed: "400", Line: 7},
			{Name: "ib-leaf03", Nodes: append(names("dgx", 33, 39, 3), "dgxlogin1"), LinkSpeed: "400", Line: 9},
			{Name: "ib-spine01", Switches: []string{"ib-leaf01", "ib-leaf02", "ib-leaf03"}, Line: 11},
		}}},
		{"tree-3level.conf", &SlurmTree{File: "tree-3level.conf", Switches: []SlurmSwitch{
			{Name: "l1", Nodes: names("n", 1, 4, 1), Line: 3},
			{Name: "l2", Nodes: names("n", 5, 8, 1), Line: 4},
			{Name: "l3", Nodes: names("n", 9, 12, 1), Line: 5},
			{Name: "l4", Nodes: names("n", 13, 16, 1), Line: 6},
			{Name: "s1", Switches: []string{"l1", "l2"}, Line: 7},
			{Name: "s2", Switches: []string{"l3", "l4"}, Line: 8},
			{Name: "core", Switches: []string{"s1", "s2"}, Line: 9},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got := parseTreeFile(t, tc.file)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSlurmTree (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSlurmTreeErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"unknown key", "SwitchName=s0 Nodes=n[0-3]\nSwitchName=s1 Switchs=s0\n",
			`t.conf:2:15: unknown key "Switchs" (want SwitchName, Switches, Nodes or LinkSpeed)`},
		{"not key=value", "SwitchName=s0 n[0-3]\n", `t.conf:1:15: expected Key=Value, got "n[0-3]"`},
		{"missing key", "SwitchName=s0 =n1\n", `t.conf:1:15: missing key before '=' in "=n1"`},
		{"empty value", "SwitchName=s0 Nodes=\n", `t.conf:1:20: empty value for Nodes`},
		{"must start with SwitchName", "Nodes=n1 SwitchName=s0\n", `t.conf:1:1: a line must start with SwitchName=, got Nodes=`},
		{"block record", "# blocks\nBlockName=b1 Nodes=n1\n", `t.conf:2:1: BlockName belongs to the block topology (topology/block), not the tree topology`},
		{"ring record", "RingName=r Nodes=n1\n", `t.conf:1:1: RingName (topology/ring) is not supported`},
		{"duplicate key", "SwitchName=s0 Nodes=n1 nodes=n2\n", `t.conf:1:24: duplicate key Nodes (first at line 1, column 15)`},
		{"switch defined twice", "SwitchName=s0 Nodes=n1\n\nSwitchName=s0 Nodes=n2\n", `t.conf:3:12: switch "s0" is defined twice (first on line 1)`},
		{"switch name is a list", "SwitchName=s[0-1] Nodes=n1\n", `t.conf:1:13: invalid character '[' in switch name "s[0-1]" (want letters, digits and -_.:+@; one name, not a list)`},
		{"switch name too long", "SwitchName=" + strings.Repeat("s", 65) + " Nodes=n1\n", `t.conf:1:12: switch name "` + strings.Repeat("s", 65) + `" is longer than 64 characters`},
		{"both switches and nodes", "SwitchName=a Nodes=n1\nSwitchName=s0 Switches=a Nodes=n2\n", `t.conf:2:26: switch "s0" has both Switches and Nodes; a switch holds either child switches or nodes`},
		{"bad hostlist", "SwitchName=s0 Nodes=n[1-3,x]\n", `t.conf:1:27: Nodes: invalid character 'x' in range; want digits`},
		{"bad hostlist after continuation", "SwitchName=s0 Nodes=n1,\\\nn[3-2]\n", `t.conf:2:3: Nodes: range 3-2 is descending`},
		{"undefined switch", "SwitchName=l1 Nodes=n1\nSwitchName=sp Switches=l1,l2\n", `t.conf:2:27: switch "l2" under "sp" is not defined (no SwitchName=l2 line)`},
		{"self parent", "SwitchName=s0 Switches=s0\n", `t.conf:1:24: switch "s0" lists itself under Switches`},
		{"two parents", "SwitchName=l1 Nodes=n1\nSwitchName=a Switches=l1\nSwitchName=b Switches=l1\n", `t.conf:3:23: switch "l1" has two parents: "a" (line 2) and "b"`},
		{"switch listed twice", "SwitchName=l1 Nodes=n1\nSwitchName=a Switches=l1,l[1]\n", `t.conf:2:26: switch "l1" is listed twice under "a"`},
		{"cycle", "SwitchName=x Switches=y\nSwitchName=y Switches=x\n", `t.conf:1: switch cycle: x -> y -> x (each lists the next under Switches)`},
		{"node under two leaves", "SwitchName=l1 Nodes=n[1-4]\nSwitchName=l2 Nodes=n5,n[4-6]\n", `t.conf:2:24: node "n4" is under two leaf switches: "l1" (line 1) and "l2"`},
		{"node twice in one leaf", "SwitchName=l1 Nodes=n[1-4],n2\n", `t.conf:1:28: node "n2" is listed twice under switch "l1"`},
		{"stray backslash", "SwitchName=s0 Nodes=n\\1\n", `t.conf:1:22: unexpected '\' (a backslash only continues a line at its end)`},
		{"continuation at end of file", "SwitchName=s0 Nodes=n1 \\\n", `t.conf:1: file ends with a '\' continuation`},
		{"too many names", "SwitchName=a Nodes=a[0-59]\nSwitchName=b Nodes=b[0-59]\n", `t.conf:2:20: Nodes: expands to more than 100 names`},
	}
	defer func(old int) { maxExpand = old }(maxExpand)
	maxExpand = 100
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSlurmTree(strings.NewReader(tc.input), "t.conf")
			if err == nil {
				t.Fatalf("ParseSlurmTree = %+v, want error %q", got, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %q\nwant %q", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "t.conf" || pe.Line < 1 {
				t.Errorf("error %v is not a *ParseError with file and line", err)
			}
		})
	}
}

// The written-by-hand broken files under testdata give errors at the
// right place.
func TestParseSlurmBadFiles(t *testing.T) {
	tests := []struct {
		file   string
		blocks bool
		want   string
	}{
		{"bad-key.conf", false, `bad-key.conf:4:15: unknown key "Switchs" (want SwitchName, Switches, Nodes or LinkSpeed)`},
		{"bad-cycle.conf", false, `bad-cycle.conf:1: switch cycle: a -> b -> c -> a (each lists the next under Switches)`},
		{"bad-two-leaves.conf", false, `bad-two-leaves.conf:2:21: node "n16" is under two leaf switches: "l1" (line 1) and "l2"`},
		{"bad-undefined.conf", false, `bad-undefined.conf:3:33: switch "l3" under "spine" is not defined (no SwitchName=l3 line)`},
		{"bad-blocksizes.conf", true, `bad-blocksizes.conf:3:15: BlockSizes entry 54 must be a power-of-two multiple (2x, 4x, ...) of the entry before it, 18`},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if tc.blocks {
				_, err = ParseSlurmBlocks(bytes.NewReader(data), tc.file)
			} else {
				_, err = ParseSlurmTree(bytes.NewReader(data), tc.file)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestParseSlurmBlocks(t *testing.T) {
	got := parseBlocksFile(t, "blocks-nvl72.conf")
	want := &SlurmBlocks{File: "blocks-nvl72.conf", Blocks: []SlurmBlock{
		{Name: "rack1", Nodes: names("gb200-", 1, 18, 3), Line: 4},
		{Name: "rack2", Nodes: names("gb200-", 19, 36, 3), Line: 5},
		{Name: "rack3", Nodes: names("gb200-", 37, 54, 3), Line: 6},
		{Name: "rack4", Nodes: names("gb200-", 55, 72, 3), Line: 7},
	}, BlockSizes: []int{18, 36, 72}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSlurmBlocks (-want +got):\n%s", diff)
	}
	text, err := got.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	wantText := "BlockName=rack1 Nodes=gb200-[001-018]\nBlockName=rack2 Nodes=gb200-[019-036]\n" +
		"BlockName=rack3 Nodes=gb200-[037-054]\nBlockName=rack4 Nodes=gb200-[055-072]\nBlockSizes=18,36,72\n"
	if diff := cmp.Diff(wantText, string(text)); diff != "" {
		t.Errorf("MarshalText (-want +got):\n%s", diff)
	}
}

func TestParseSlurmBlocksErrors(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"unknown key", "BlockName=b1 Node=n1\n", `b.conf:1:14: unknown key "Node" (want BlockName or Nodes)`},
		{"no nodes", "BlockName=b1\n", `b.conf:1: block "b1" has no Nodes=`},
		{"tree record", "SwitchName=s Nodes=n1\n", `b.conf:1:1: SwitchName belongs to the tree topology (topology/tree), not the block topology`},
		{"other first key", "Nodes=n1 BlockName=b\n", `b.conf:1:1: a line must start with BlockName= or BlockSizes=, got Nodes=`},
		{"defined twice", "BlockName=b1 Nodes=n1\nBlockName=b1 Nodes=n2\n", `b.conf:2:11: block "b1" is defined twice (first on line 1)`},
		{"node in two blocks", "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[4-8]\n", `b.conf:2:20: node "n4" is in two blocks: "b1" (line 1) and "b2"`},
		{"node twice in a block", "BlockName=b1 Nodes=n1,n1\n", `b.conf:1:23: node "n1" is listed twice in block "b1"`},
		{"sizes not alone", "BlockSizes=4 BlockName=b\n", `b.conf:1:14: BlockSizes must be alone on its line, got BlockName=`},
		{"sizes twice", "BlockSizes=4\nblocksizes=4\n", `b.conf:2:1: BlockSizes given twice (first on line 1)`},
		{"size not a number", "BlockSizes=4,x\n", `b.conf:1:14: BlockSizes entry "x": want a positive number of nodes`},
		{"size zero", "BlockSizes=0\n", `b.conf:1:12: BlockSizes entry "0": want a positive number of nodes`},
		{"size not increasing", "BlockSizes=8,8\n", `b.conf:1:14: BlockSizes entry 8 must be a power-of-two multiple (2x, 4x, ...) of the entry before it, 8`},
		{"size times three", "BlockSizes=4,12\n", `b.conf:1:14: BlockSizes entry 12 must be a power-of-two multiple (2x, 4x, ...) of the entry before it, 4`},
		{"block smaller than base", "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-6]\nBlockSizes=4,8\n", `b.conf:2: block "b2" has 2 nodes, fewer than the base block size 4 (BlockSizes on line 3)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSlurmBlocks(strings.NewReader(tc.input), "b.conf")
			if err == nil {
				t.Fatalf("ParseSlurmBlocks = %+v, want error %q", got, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %q\nwant %q", err, tc.want)
			}
		})
	}
}

func TestParseSlurmTreeSyntax(t *testing.T) {
	// Comments, blank lines, case-insensitive keys, tabs, CRLF, a list split
	// by a continuation, and a continuation between pairs.
	input := "# header\r\n\r\n" +
		"switchname=l1\tNODES=n[1-2],\\\r\n" +
		"n3 # trailing comment\r\n" +
		"SwitchName=sp \\\n" +
		"   Switches=l1   LinkSpeed=100 # speed is ignored\n"
	got, err := ParseSlurmTree(strings.NewReader(input), "x.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := &SlurmTree{File: "x.conf", Switches: []SlurmSwitch{
		{Name: "l1", Nodes: []string{"n1", "n2", "n3"}, Line: 3},
		{Name: "sp", Switches: []string{"l1"}, LinkSpeed: "100", Line: 5},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSlurmTree (-want +got):\n%s", diff)
	}
	text, _ := got.MarshalText()
	if want := "SwitchName=l1 Nodes=n[1-3]\nSwitchName=sp Switches=l1 LinkSpeed=100\n"; string(text) != want {
		t.Errorf("MarshalText = %q, want %q", text, want)
	}
}

// canonicalTree drops line numbers and sorts lists, for round-trip
// comparisons (MarshalText sorts lists).
func canonicalTree(t *SlurmTree) []SlurmSwitch {
	out := make([]SlurmSwitch, len(t.Switches))
	for i, s := range t.Switches {
		s.Line = 0
		s.Nodes = uniqueSorted(s.Nodes)
		s.Switches = uniqueSorted(s.Switches)
		if len(s.Nodes) == 0 {
			s.Nodes = nil
		}
		if len(s.Switches) == 0 {
			s.Switches = nil
		}
		out[i] = s
	}
	return out
}

func FuzzParseSlurmTree(f *testing.F) {
	lowerMaxExpand(f)
	for _, name := range []string{"tree-dgx.conf", "tree-3level.conf", "tree-nvl72.conf", "bad-key.conf", "bad-cycle.conf", "bad-two-leaves.conf", "bad-undefined.conf"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("SwitchName=a Nodes=n[1-2],\\\nn3\nSwitchName=b Switches=a\n")
	f.Fuzz(func(t *testing.T, input string) {
		tr, err := ParseSlurmTree(strings.NewReader(input), "f.conf")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
			if pe.Line < 1 || pe.Col < 0 || pe.File != "f.conf" {
				t.Fatalf("error without a place: %#v", pe)
			}
			return
		}
		total := 0
		for _, s := range tr.Switches {
			total += len(s.Nodes) + len(s.Switches)
		}
		if total > 10000 {
			return // valid but slow to round-trip
		}
		text, err := tr.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSlurmTree(bytes.NewReader(text), "f.conf")
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", text, err)
		}
		if diff := cmp.Diff(canonicalTree(tr), canonicalTree(again)); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		// A valid tree always builds.
		b := NewBuilder()
		if err := b.AddSlurmTree(tr); err != nil {
			t.Fatalf("AddSlurmTree: %v", err)
		}
		topo, err := b.Build()
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		for n := range topo.NumNodes() {
			if l := topo.Leaf(NodeID(n)); l < 0 || !slices.Contains(topo.LeafNodes(l), NodeID(n)) {
				t.Fatalf("node %s: leaf %d does not list it", topo.NodeName(NodeID(n)), l)
			}
		}
	})
}

func FuzzParseSlurmBlocks(f *testing.F) {
	lowerMaxExpand(f)
	for _, name := range []string{"blocks-nvl72.conf", "bad-blocksizes.conf"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("BlockName=b1 Nodes=n[1-4]\nBlockSizes=2,4\n")
	f.Fuzz(func(t *testing.T, input string) {
		bl, err := ParseSlurmBlocks(strings.NewReader(input), "f.conf")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
			if pe.Line < 1 || pe.Col < 0 {
				t.Fatalf("error without a place: %#v", pe)
			}
			return
		}
		total := 0
		for _, b := range bl.Blocks {
			total += len(b.Nodes)
		}
		if total > 10000 {
			return
		}
		text, _ := bl.MarshalText()
		again, err := ParseSlurmBlocks(bytes.NewReader(text), "f.conf")
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", text, err)
		}
		canon := func(b *SlurmBlocks) *SlurmBlocks {
			c := &SlurmBlocks{BlockSizes: b.BlockSizes}
			for _, blk := range b.Blocks {
				c.Blocks = append(c.Blocks, SlurmBlock{Name: blk.Name, Nodes: uniqueSorted(blk.Nodes)})
			}
			return c
		}
		if diff := cmp.Diff(canon(bl), canon(again)); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		b := NewBuilder()
		if err := b.AddSlurmBlocks(bl); err != nil {
			t.Fatalf("AddSlurmBlocks: %v", err)
		}
		if _, err := b.Build(); err != nil {
			t.Fatalf("Build: %v", err)
		}
	})
}
