package scheduler

import (
	"fmt"
	"strconv"
)

// Host resources: a node's CPU (millis) and memory (bytes) bound the ranks
// placed on it, like its free GPUs. The counters are per node (cluster's
// cpuFree and memFree), changed by the same takes and releases as the
// GPUs; a gang that asks for a resource some node limits is placed by
// looking at nodes one by one (gang.host), the others by the histograms.

// hostNeed says what each rank of g asks of its node's CPU and memory,
// for people: ", 16 CPUs and 64 GiB of memory per rank"; "" when nothing.
func hostNeed(g *gang) string {
	switch {
	case g.cpuPR > 0 && g.memPR > 0:
		return fmt.Sprintf(", %s and %s of memory per rank", fmtCPU(g.cpuPR), fmtBytes(g.memPR))
	case g.cpuPR > 0:
		return fmt.Sprintf(", %s per rank", fmtCPU(g.cpuPR))
	case g.memPR > 0:
		return fmt.Sprintf(", %s of memory per rank", fmtBytes(g.memPR))
	}
	return ""
}

// whyHost explains a gang that has the GPUs it needs but not the CPU or
// memory: what the best node offers. It returns false when CPU and memory
// are not what holds g back.
func (p *Pass) whyHost(g *gang) (string, bool) {
	c := p.c
	if !g.host {
		return "", false
	}
	gpuOnly := func(n int32) bool { // the node has GPUs for one rank (or unit)
		switch {
		case !g.eligible(c, n):
			return false
		case g.hostOnly:
			return true
		case g.frac && g.milli > 0:
			if c.nfree[n] > 0 {
				return true
			}
			left, _ := c.sharesOf(n, nil, nil)
			for _, l := range left {
				if int(l) >= g.milli {
					return true
				}
			}
			return false
		case g.frac:
			return c.nfree[n] > 0
		}
		return g.f[c.nfree[n]] > 0
	}
	if !g.frac {
		// Would the GPUs do without the host limits?
		g.host, g.flat = false, g.sel == nil
		fits := c.canFit(g, p.opts.Strategy)
		g.host, g.flat = true, false
		if !fits {
			return "", false
		}
	}
	var capCPU, capMem, freeCPU, freeMem int64
	openCPU, openMem := false, false // some node does not limit it
	any, hostFit := false, 0
	for n := range int32(c.nn) {
		if !g.eligible(c, n) {
			continue
		}
		capCPU, capMem = max(capCPU, c.cpuCap[n]), max(capMem, c.memCap[n])
		openCPU, openMem = openCPU || c.cpuCap[n] == 0, openMem || c.memCap[n] == 0
		if !gpuOnly(n) {
			continue
		}
		any = true
		freeCPU, freeMem = max(freeCPU, c.cpuFree[n]), max(freeMem, c.memFree[n])
		if c.hostFits(g, n) {
			hostFit++
		}
	}
	if !any {
		return "", false
	}
	need := p.needText(g)
	switch {
	case g.cpuPR > capCPU && !openCPU:
		return fmt.Sprintf("%s; the largest node has %s", need, fmtCPU(capCPU)), true
	case g.memPR > capMem && !openMem:
		return fmt.Sprintf("%s; the largest node has %s of memory", need, fmtBytes(capMem)), true
	case g.cpuPR > freeCPU:
		return fmt.Sprintf("%s; the best node with free GPUs has %s free", need, fmtCPU(max(0, freeCPU))), true
	case g.memPR > freeMem:
		return fmt.Sprintf("%s; the best node with free GPUs has %s of memory free", need, fmtBytes(max(0, freeMem))), true
	case g.frac && hostFit == 0:
		return fmt.Sprintf("%s; no node with room on its GPUs has the CPU and memory left for a rank", need), true
	case g.frac:
		return "", false
	}
	return fmt.Sprintf("%s; nodes with free GPUs have the CPU and memory for only part of it (%d %s room for a rank)",
		need, hostFit, plural(hostFit, "node has", "nodes have")), true
}

// fmtCPU writes CPU millis for people: "16 CPUs", "1 CPU", "0.5 CPUs".
func fmtCPU(m int64) string {
	if m == 1000 {
		return "1 CPU"
	}
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10) + " CPUs"
	}
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + " CPUs"
}

// fmtBytes writes a memory size for people: "64 GiB", "512 MiB", "1.5 GiB".
func fmtBytes(b int64) string {
	const (
		ki = int64(1) << 10
		mi = ki << 10
		gi = mi << 10
		ti = gi << 10
	)
	for _, u := range []struct {
		size int64
		name string
	}{{ti, "TiB"}, {gi, "GiB"}, {mi, "MiB"}, {ki, "KiB"}} {
		if b >= u.size {
			v := float64(b) / float64(u.size)
			return strconv.FormatFloat(float64(int64(v*10+0.5))/10, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(b, 10) + " B"
}
