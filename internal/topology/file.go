package topology

import (
	"bytes"
	"fmt"
)

// File is a parsed cluster topology file: a Slurm topology.conf tree or a
// block topology (one of the two is set). Builder.AddFile applies it.
type File struct {
	Name   string // what errors call it: the path it was read from
	Tree   *SlurmTree
	Blocks *SlurmBlocks
}

// ParseFile reads Slurm's topology.conf in either its tree (SwitchName=...)
// or block (BlockName=...) form. Errors carry the file, line and column.
func ParseFile(name string, data []byte) (File, error) {
	f := File{Name: name}
	var err error
	if bytes.Contains(data, []byte("BlockName")) {
		f.Blocks, err = ParseSlurmBlocks(bytes.NewReader(data), name)
	} else {
		f.Tree, err = ParseSlurmTree(bytes.NewReader(data), name)
	}
	return f, err
}

// AddFile adds a topology file's switches or blocks, like AddSlurmTree and
// AddSlurmBlocks; errors name the file.
func (b *Builder) AddFile(f File) error {
	var err error
	switch {
	case f.Tree != nil:
		err = b.AddSlurmTree(f.Tree)
	case f.Blocks != nil:
		err = b.AddSlurmBlocks(f.Blocks)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	return nil
}
