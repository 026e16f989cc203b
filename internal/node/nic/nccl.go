package nic

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Rail is one RDMA port of the compute fabric. On a rail-optimised fabric the
// port with the same index on every node plugs into the same rail switch, and
// GPU i of a node normally uses the rail closest to it (same PCIe switch).
type Rail struct {
	// Index numbers rails from 0 in the order Rails returns them.
	Index      int
	HCA        string
	Port       int
	NetDev     string // the port's netdev, or ""
	Kind       Kind
	SpeedMbps  int64
	NUMANode   int
	PCIAddress string
}

// HCAPort returns the port as NCCL_IB_HCA names it: "mlx5_0:1".
func (r Rail) HCAPort() string { return r.HCA + ":" + strconv.Itoa(r.Port) }

// Rails picks the compute fabric's RDMA ports from nics and orders them.
//
// Only ACTIVE ports count. They are grouped by kind and speed, and the
// largest group is the compute fabric (ties: the faster, then InfiniBand):
// a GPU node has one identical NIC per rail, while storage or front-end NICs
// are fewer or of another kind. The rails are ordered by NUMA node, then PCI
// address, then HCA and port, which follows the GPUs' own PCI order on
// common servers (GPU i and NIC i share a PCIe switch), unlike HCA names.
func Rails(nics []NIC) []Rail {
	type group struct {
		kind  Kind
		speed int64
	}
	members := map[group][]NIC{}
	for _, n := range nics {
		if n.HCA == "" || n.PortState != "ACTIVE" {
			continue
		}
		g := group{n.Kind, n.SpeedMbps}
		members[g] = append(members[g], n)
	}
	var best group
	found := false
	for g, ms := range members {
		if !found {
			best, found = g, true
			continue
		}
		b := members[best]
		switch {
		case len(ms) != len(b):
			if len(ms) > len(b) {
				best = g
			}
		case g.speed != best.speed:
			if g.speed > best.speed {
				best = g
			}
		case g.kind != best.kind:
			if g.kind == KindInfiniBand {
				best = g
			}
		}
	}
	chosen := members[best]
	slices.SortFunc(chosen, func(a, b NIC) int {
		// Unknown NUMA (-1) sorts last.
		na, nb := a.NUMANode, b.NUMANode
		if na < 0 {
			na = int(^uint(0) >> 1)
		}
		if nb < 0 {
			nb = int(^uint(0) >> 1)
		}
		return cmp.Or(cmp.Compare(na, nb), strings.Compare(a.PCIAddress, b.PCIAddress),
			strings.Compare(a.HCA, b.HCA), cmp.Compare(a.Port, b.Port))
	})
	rails := make([]Rail, len(chosen))
	for i, n := range chosen {
		rails[i] = Rail{Index: i, HCA: n.HCA, Port: n.Port, NetDev: n.Name, Kind: n.Kind,
			SpeedMbps: n.SpeedMbps, NUMANode: n.NUMANode, PCIAddress: n.PCIAddress}
	}
	return rails
}

// NCCL is the NCCL configuration derived from a node's NICs.
type NCCL struct {
	// SocketIfname is NCCL_SOCKET_IFNAME: the netdevs for NCCL's bootstrap
	// and socket transport, as an exact-match list ("=eno1"), or "" to
	// leave NCCL's default. An agent that knows which interface carries the
	// address it advertises should put that one here instead.
	SocketIfname string
	// IBHCA is NCCL_IB_HCA naming every rail ("=mlx5_0:1,mlx5_3:1"), or ""
	// when the node has no usable RDMA port.
	IBHCA string
	// Rails are the compute fabric's ports, as Rails returns them.
	Rails []Rail
}

// containerPrefixes name virtual netdevs that container runtimes and CNI
// plugins create; they never carry NCCL traffic between nodes.
var containerPrefixes = []string{"docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "vxlan", "tunl", "kube-", "weave", "podman", "lxc"}

// DeriveNCCL chooses the NCCL settings for a node with these NICs.
//
// NCCL_IB_HCA lists the rails (see Rails). NCCL_SOCKET_IFNAME names the up
// netdevs of the first non-empty tier, keeping only the fastest of that
// tier: (1) physical Ethernet netdevs that are not rails (the front-end or
// management network), (2) IPoIB netdevs, (3) physical netdevs that are
// rails (RoCE), (4) virtual netdevs other than container plumbing.
func DeriveNCCL(nics []NIC) NCCL {
	rails := Rails(nics)
	isRail := map[string]bool{}
	for _, r := range rails {
		isRail[r.HCAPort()] = true
	}
	tier := func(n NIC) int {
		rail := n.HCA != "" && isRail[n.HCA+":"+strconv.Itoa(n.Port)]
		switch {
		case n.Virtual:
			for _, p := range containerPrefixes {
				if strings.HasPrefix(n.Name, p) {
					return 0
				}
			}
			return 4
		case n.Kind == KindEthernet && !rail:
			return 1
		case n.Kind == KindInfiniBand:
			return 2
		case rail:
			return 3
		}
		return 0
	}
	best := 0
	var picked []NIC
	for _, n := range nics {
		if n.Name == "" || n.OperState != "up" {
			continue
		}
		t := tier(n)
		switch {
		case t == 0:
		case best == 0 || t < best:
			best, picked = t, []NIC{n}
		case t == best:
			picked = append(picked, n)
		}
	}
	var fastest int64
	for _, n := range picked {
		fastest = max(fastest, n.SpeedMbps)
	}
	var names []string
	for _, n := range picked {
		if n.SpeedMbps == fastest {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	out := NCCL{Rails: rails}
	if len(names) > 0 {
		out.SocketIfname = "=" + strings.Join(names, ",")
	}
	if len(rails) > 0 {
		hcas := make([]string, len(rails))
		for i, r := range rails {
			hcas[i] = r.HCAPort()
		}
		out.IBHCA = "=" + strings.Join(hcas, ",")
	}
	return out
}

// RailHCA returns an NCCL_IB_HCA value naming only rail i ("=mlx5_3:1"), for
// a rank that should use its own rail; "" if there is no such rail.
func (n NCCL) RailHCA(i int) string {
	if i < 0 || i >= len(n.Rails) {
		return ""
	}
	return "=" + n.Rails[i].HCAPort()
}

// Env returns the settings as sorted "KEY=value" strings, leaving out the
// ones that are "" so NCCL keeps its defaults for them.
func (n NCCL) Env() []string {
	var env []string
	if n.IBHCA != "" {
		env = append(env, "NCCL_IB_HCA="+n.IBHCA)
	}
	if n.SocketIfname != "" {
		env = append(env, "NCCL_SOCKET_IFNAME="+n.SocketIfname)
	}
	return env
}

// GPURails returns the rail each GPU should use, for topology's
// NodeSpec.Rails: gpuNUMA lists the GPUs' NUMA nodes in GPU index order (-1
// when unknown). The GPUs of a NUMA node share that node's rails in
// contiguous blocks, in order (8 GPUs over 4 rails: GPUs 0-1 on the first
// rail, 2-3 on the second, ...), which matches servers where GPU i and NIC i
// sit under one PCIe switch. GPUs whose NUMA node has no rail are spread the
// same way over all rails. With no rails every entry is -1.
func GPURails(gpuNUMA []int, rails []Rail) []int {
	out := make([]int, len(gpuNUMA))
	if len(rails) == 0 {
		for i := range out {
			out[i] = -1
		}
		return out
	}
	byNUMA := map[int][]int{} // NUMA node -> rail indices, in rail order
	for _, r := range rails {
		if r.NUMANode >= 0 {
			byNUMA[r.NUMANode] = append(byNUMA[r.NUMANode], r.Index)
		}
	}
	gpusOn := map[int][]int{} // NUMA node -> GPU indices
	var homeless []int
	for g, m := range gpuNUMA {
		if m >= 0 && len(byNUMA[m]) > 0 {
			gpusOn[m] = append(gpusOn[m], g)
		} else {
			homeless = append(homeless, g)
		}
	}
	spread := func(gpus, railIdx []int) {
		for j, g := range gpus {
			out[g] = railIdx[j*len(railIdx)/len(gpus)]
		}
	}
	for m, gpus := range gpusOn {
		spread(gpus, byNUMA[m])
	}
	if len(homeless) > 0 {
		all := make([]int, len(rails))
		for i, r := range rails {
			all[i] = r.Index
		}
		spread(homeless, all)
	}
	return out
}
