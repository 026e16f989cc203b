// Package topology models where every GPU of a cluster sits: its node, the
// node's NVLink domain (the node itself, or a multi-node NVLink rack such as
// a GB200 NVL72), the GPU's NUMA node and PCIe switch, its network rail, and
// the node's leaf and spine switches. It answers "how far apart are these two
// GPUs" (Distance), "which nodes share this leaf" (LeafNodes, GroupNodes) and
// "in which order should a gang's ranks be numbered" (OrderRanks).
//
// A Topology is immutable and compact: nodes, leaves, spines and domains have
// small integer ids assigned in locality order, so the nodes of one leaf (and
// of one spine) are a contiguous id range. The scheduler uses it in hot loops.
//
// Topologies are built with a Builder from any mix of: what agents report
// (NodeSpec), gangway's node labels (leaf, spine, nvlink-domain, rail), and
// Slurm's topology.conf in its tree form (ParseSlurmTree) and block form
// (ParseSlurmBlocks). ParseFile reads an operator's topology file in either
// form, and Builder.AddFile applies it. See README.md for the vocabulary and
// file formats.
//
// The package does no I/O beyond reading an io.Reader or bytes handed to a
// parser. It imports only the standard library: nothing of gangway's.
package topology
