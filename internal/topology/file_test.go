package topology

import (
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	tests := []struct {
		name, file, data string
		tree, blocks     bool
		err              string // a substring of the error; "" for none
	}{
		{name: "tree", file: "topology.conf", data: "SwitchName=leaf1 Nodes=a\nSwitchName=spine Switches=leaf1\n", tree: true},
		{name: "blocks", file: "blocks.conf", data: "BlockName=rack1 Nodes=a,b\nBlockSizes=2\n", blocks: true},
		{name: "error names file, line and column", file: "bad.conf", data: "SwitchName=x Nodez=a\n", err: "bad.conf:1:"},
		{name: "bad block file", file: "bad-blocks.conf", data: "BlockName=rack1 Nodes=a[\n", err: "bad-blocks.conf:1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFile(tt.file, []byte(tt.data))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v; want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Name != tt.file || (f.Tree != nil) != tt.tree || (f.Blocks != nil) != tt.blocks {
				t.Errorf("got name %q, tree %v, blocks %v; want %q, %v, %v", f.Name, f.Tree != nil, f.Blocks != nil, tt.file, tt.tree, tt.blocks)
			}
		})
	}
}

func TestAddFileNamesTheFileInErrors(t *testing.T) {
	f, err := ParseFile("topology.conf", []byte("SwitchName=leaf1 Nodes=a\nSwitchName=spine Switches=leaf1\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	if err := b.AddNode(NodeSpec{Name: "a", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddLabels("a", map[string]string{"leaf": "other"}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddFile(f); err == nil || !strings.HasPrefix(err.Error(), "topology.conf: ") {
		t.Errorf("a file contradicting a label: error = %v; want one starting with the file name", err)
	}
	if err := NewBuilder().AddFile(File{Name: "empty"}); err != nil {
		t.Errorf("an empty file: %v", err)
	}
}
