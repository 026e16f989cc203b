package topology

import (
	"fmt"
)

// Level is a grouping of nodes used by topology constraints in job specs
// ("required: leaf"). Levels are ordered from tightest to widest, so
// LevelNVLinkDomain < LevelLeaf < LevelSpine. The zero value, LevelNone,
// means "no level" (no constraint).
type Level uint8

const (
	// LevelNone is the zero Level: no constraint.
	LevelNone Level = iota
	// LevelNVLinkDomain groups nodes whose GPUs all reach each other over
	// NVLink: one node, or a multi-node rack such as a GB200 NVL72.
	LevelNVLinkDomain
	// LevelLeaf groups nodes under one leaf switch (a Slurm switch with
	// Nodes=...). In a rail-optimised fabric it is the scalable unit whose
	// rail switches all count as one leaf.
	LevelLeaf
	// LevelSpine groups the leaves under one spine switch (or pod).
	LevelSpine
)

// Levels lists the levels a constraint may name, tightest first.
var Levels = [...]Level{LevelNVLinkDomain, LevelLeaf, LevelSpine}

var levelNames = [...]string{
	LevelNone:         "none",
	LevelNVLinkDomain: "nvlink-domain",
	LevelLeaf:         "leaf",
	LevelSpine:        "spine",
}

// String returns the level's name: "nvlink-domain", "leaf", "spine", or
// "none" for the zero value.
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// ParseLevel parses "nvlink-domain", "leaf" or "spine". Anything else,
// including "" and "none", is an error naming the accepted values.
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if levelNames[l] == s {
			return l, nil
		}
	}
	return LevelNone, fmt.Errorf("unknown topology level %q: want nvlink-domain, leaf or spine", s)
}

// MarshalText encodes the level's name; LevelNone encodes as "".
func (l Level) MarshalText() ([]byte, error) {
	if l == LevelNone {
		return []byte{}, nil
	}
	if int(l) >= len(levelNames) {
		return nil, fmt.Errorf("invalid topology level %d", uint8(l))
	}
	return []byte(levelNames[l]), nil
}

// UnmarshalText decodes a level name; "" decodes as LevelNone.
func (l *Level) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*l = LevelNone
		return nil
	}
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Distances returned by Topology.Distance. They grow with the cost of
// talking across the link; only their order is a contract, so compare them
// with each other rather than relying on the numbers.
const (
	// DistanceSameGPU is the distance from a GPU to itself.
	DistanceSameGPU = 0
	// DistanceNVLink: two GPUs in the same NVLink domain (same node with
	// NVLink/NVSwitch, or two nodes of one multi-node NVLink rack).
	DistanceNVLink = 10
	// DistancePCIeSwitch: same node, no NVLink, same PCIe switch.
	DistancePCIeSwitch = 20
	// DistanceNUMA: same node, no NVLink, same NUMA node.
	DistanceNUMA = 30
	// DistanceNode: same node, no NVLink, across NUMA nodes (or unknown).
	DistanceNode = 40
	// DistanceLeaf: different nodes (and NVLink domains) under one leaf.
	DistanceLeaf = 50
	// DistanceSpine: different leaves under one spine.
	DistanceSpine = 60
	// DistanceCrossSpine: different spines, or a node whose leaf or spine is
	// unknown.
	DistanceCrossSpine = 70
	// RailMismatch is added to a network distance (leaf, spine, cross-spine)
	// when both GPUs' rails are known and differ: the traffic must change
	// rails, through the spine or through NCCL's PXN hop over NVLink.
	RailMismatch = 1
)
