package topology

import (
	"strings"
	"testing"
)

func TestParseTopologyFile(t *testing.T) {
	if _, err := ParseTopologyFile("bad.conf", []byte("SwitchName=x Nodez=a\n")); err == nil || !strings.Contains(err.Error(), "bad.conf:1:") {
		t.Errorf("bad file error = %v; want file:line:col", err)
	}
	bl, err := ParseTopologyFile("blocks.conf", []byte("BlockName=rack1 Nodes=a,b\nBlockSizes=2\n"))
	if err != nil || bl.Blocks == nil {
		t.Fatalf("block topology: %+v, %v", bl, err)
	}
}
