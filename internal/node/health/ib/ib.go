// Package ib is the health check of a node's InfiniBand (and RoCE) ports:
// it reads /sys/class/infiniband/*/ports/*/{state,phys_state,rate} and
// reports, for the node, whether the ports it saw up are still up and at
// the rate they trained to.
//
// The sysfs directory is a parameter, so tests run on the trees under
// testdata/.
//
// It imports the standard library, internal/api and internal/node/nic
// (the sysfs port files are read as NIC discovery reads them).
package ib

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/nic"
)

// DefaultRoot is where the kernel lists RDMA devices.
const DefaultRoot = "/sys/class/infiniband"

// CheckName is the name of the check's findings.
const CheckName = "ib"

// Check is the "ib" check. It remembers which ports it has seen ACTIVE
// and the best rate each trained to.
type Check struct {
	root string

	mu    sync.Mutex // guards ports
	ports map[string]portMemory
}

type portMemory struct {
	wasActive bool
	bestMbps  int64
}

// New returns the check of the RDMA ports under root (DefaultRoot when
// "").
//
// A port down that was up is a warn: NCCL spreads a gang's traffic over
// the node's rails and carries on over the others, slower. When every
// port is down and one was up, multi-node gangs on the node cannot talk
// at all, and the scheduler has no way to keep only those off it, so the
// node is cordoned. A port that was never up (unused, uncabled) is noted
// and not held against the node, unless no port is up at all (warn: the
// check cannot tell a broken fabric from a node without one cabled).
// A port that trained below the rate it had before is a warn.
func New(root string) *Check {
	if root == "" {
		root = DefaultRoot
	}
	return &Check{root: root, ports: map[string]portMemory{}}
}

// Name returns CheckName.
func (c *Check) Name() string { return CheckName }

// port is one read of a port.
type port struct {
	name   string // "mlx5_0 port 1"
	active bool
	state  string // "ACTIVE/LinkUp"
	mbps   int64
	err    error
}

// Run reads the ports and returns one finding for the node.
func (c *Check) Run(ctx context.Context) []api.HealthCheck {
	h := api.HealthCheck{Check: CheckName, GPU: -1, Status: api.CheckOK}
	ports, err := readPorts(c.root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		h.Message = "no RDMA devices"
		return []api.HealthCheck{h}
	case err != nil:
		h.Status, h.Message = api.CheckError, err.Error()
		return []api.HealthCheck{h}
	case len(ports) == 0:
		h.Message = "no RDMA ports"
		return []api.HealthCheck{h}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var lost, slow, neverUp, broken []string
	active, readable := 0, 0
	for _, p := range ports {
		if p.err != nil {
			broken = append(broken, fmt.Sprintf("%s: %v", p.name, p.err))
			continue
		}
		readable++
		m := c.ports[p.name]
		switch {
		case p.active:
			active++
			if p.mbps < m.bestMbps {
				slow = append(slow, fmt.Sprintf("%s at %s, below the %s it had", p.name, gbps(p.mbps), gbps(m.bestMbps)))
			}
			m.wasActive = true
			m.bestMbps = max(m.bestMbps, p.mbps)
		case m.wasActive:
			lost = append(lost, fmt.Sprintf("%s %s (was ACTIVE)", p.name, p.state))
		default:
			neverUp = append(neverUp, p.name)
		}
		c.ports[p.name] = m
	}

	var why []string
	add := func(label string, list []string) {
		if len(list) > 0 {
			why = append(why, label+strings.Join(list, ", "))
		}
	}
	add("down: ", lost)
	add("slow: ", slow)
	add("unreadable: ", broken)
	add("never up: ", neverUp)
	h.Message = strings.Join(why, "; ")
	switch {
	case len(lost) > 0 && active == 0:
		h.Status, h.Action = api.CheckFatal, api.ActionCordonNode
		h.Message = "every port is down; " + h.Message
	case len(lost) > 0 || len(slow) > 0 || (readable > 0 && active == 0):
		h.Status, h.Action = api.CheckWarn, api.ActionCount
	case len(broken) > 0:
		h.Status = api.CheckError
	}
	if h.Message == "" {
		h.Message = fmt.Sprintf("%d of %d ports ACTIVE", active, len(ports))
	}
	return []api.HealthCheck{h}
}

// readPorts reads every port under root, sorted by device and port. An
// error is for root itself; a port's own errors are in its err.
func readPorts(root string) ([]port, error) {
	hcas, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	var out []port
	for _, h := range hcas {
		dir := filepath.Join(root, h.Name(), "ports")
		nums, err := os.ReadDir(dir)
		if err != nil {
			out = append(out, port{name: h.Name(), err: fmt.Errorf("list ports: %w", err)})
			continue
		}
		for _, n := range nums {
			num, err := strconv.Atoi(n.Name())
			if err != nil {
				continue
			}
			p := port{name: fmt.Sprintf("%s port %d", h.Name(), num)}
			p.state, p.active, p.mbps, p.err = readPort(filepath.Join(dir, n.Name()))
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b port) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func readPort(dir string) (state string, active bool, mbps int64, err error) {
	var vals [3]string
	for i, f := range []string{"state", "phys_state", "rate"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is long and says little more
			}
			return "", false, 0, fmt.Errorf("read %s: %w", f, err)
		}
		vals[i] = strings.TrimSpace(string(data))
	}
	st, err := nic.ParsePortState(vals[0])
	if err != nil {
		return "", false, 0, err
	}
	phys, err := nic.ParsePortState(vals[1])
	if err != nil {
		return "", false, 0, err
	}
	if mbps, err = nic.ParseRate(vals[2]); err != nil {
		return "", false, 0, err
	}
	return st + "/" + phys, st == "ACTIVE" && phys == "LinkUp", mbps, nil
}

func gbps(mbps int64) string {
	return strconv.FormatFloat(float64(mbps)/1000, 'f', -1, 64) + " Gb/sec"
}
