package topology

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText writes a human-readable outline of the topology: spines, their
// leaves, and each leaf's nodes with GPU count, NVLink domain and per-GPU
// NUMA, PCIe switch and rail. Leaves without a spine are listed under
// "spine -", nodes without a leaf under "leaf -". It is stable: the same
// topology always gives the same text (used by golden tests and the CLI).
func (t *Topology) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# %d spines, %d leaves, %d nodes, %d GPUs, %d NVLink domains",
		t.NumSpines(), t.NumLeaves(), t.NumNodes(), t.NumGPUs(), t.NumDomains())
	if t.blockSizes != nil {
		fmt.Fprintf(bw, ", block sizes %s", joinInts(t.blockSizes))
	}
	bw.WriteByte('\n')
	writeNode := func(n NodeID) {
		fmt.Fprintf(bw, "    node %s gpus=%d", t.nodeName[n], t.GPUs(n))
		if name := t.domainName[t.node[n].domain]; name != "" {
			fmt.Fprintf(bw, " domain=%s", name)
		}
		if t.node[n].nvlink {
			bw.WriteString(" nvlink")
		}
		first, end := t.NodeGPUs(n)
		for _, f := range []struct {
			name string
			vals []int16
		}{{"numa", t.gpuNUMA}, {"pcie", t.gpuPCIe}, {"rail", t.gpuRail}} {
			known := false
			for _, v := range f.vals[first:end] {
				known = known || v >= 0
			}
			if !known {
				continue
			}
			parts := make([]string, 0, end-first)
			for _, v := range f.vals[first:end] {
				if v < 0 {
					parts = append(parts, "-")
				} else {
					parts = append(parts, strconv.Itoa(int(v)))
				}
			}
			fmt.Fprintf(bw, " %s=%s", f.name, strings.Join(parts, ","))
		}
		bw.WriteByte('\n')
	}
	writeLeaf := func(l LeafID) {
		fmt.Fprintf(bw, "  leaf %s\n", t.leafName[l])
		for _, n := range t.LeafNodes(l) {
			writeNode(n)
		}
	}
	for s := range t.spineName {
		fmt.Fprintf(bw, "spine %s\n", t.spineName[s])
		for _, l := range t.SpineLeaves(SpineID(s)) {
			writeLeaf(l)
		}
	}
	spineless := false
	for l := range t.leafName {
		if t.leafSpine[l] < 0 {
			if !spineless {
				bw.WriteString("spine -\n")
				spineless = true
			}
			writeLeaf(LeafID(l))
		}
	}
	leafless := false
	for n := range t.nodeName {
		if t.node[n].leaf < 0 {
			if !leafless {
				if !spineless {
					bw.WriteString("spine -\n")
				}
				bw.WriteString("  leaf -\n")
				leafless = true
			}
			writeNode(NodeID(n))
		}
	}
	return bw.Flush()
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
