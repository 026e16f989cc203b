package topology

import "strings"

// TopologyFile is a parsed cluster topology file: a Slurm topology.conf
// tree or a block topology (one of the two is set).
type TopologyFile struct {
	Name   string
	Tree   *SlurmTree
	Blocks *SlurmBlocks
}

// ParseTopologyFile reads Slurm's topology.conf in either its tree
// (SwitchName=...) or block (BlockName=...) form. Errors carry the file,
// line and column.
func ParseTopologyFile(name string, data []byte) (TopologyFile, error) {
	tf := TopologyFile{Name: name}
	var err error
	if strings.Contains(string(data), "BlockName") {
		tf.Blocks, err = ParseSlurmBlocks(strings.NewReader(string(data)), name)
	} else {
		tf.Tree, err = ParseSlurmTree(strings.NewReader(string(data)), name)
	}
	return tf, err
}
