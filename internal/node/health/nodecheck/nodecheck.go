// Package nodecheck holds the health checks of the node itself, beside
// its GPUs: disk (the checkpoint root is writable and has room), memory
// (the kernel has memory to hand out) and clock (the node's clock agrees
// with the server's). Each reports one finding for the node (GPU -1).
//
// What the checks read (the filesystem's free space, /proc/meminfo, the
// clock offset) is a parameter, so tests run on files they write.
//
// It imports the standard library and internal/api.
package nodecheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func node(name string, s api.CheckStatus, a api.HealthAction, msg string) []api.HealthCheck {
	return []api.HealthCheck{{Check: name, GPU: -1, Status: s, Action: a, Message: msg}}
}

// DiskCheck is the "disk" check.
type DiskCheck struct {
	root    string
	minFree int64
	free    func(path string) (int64, error)
	probe   func(dir string) error
}

// NewDiskCheck returns the disk check of the checkpoint root: fatal,
// cordoning the node, when a file cannot be created there (a filesystem
// gone read-only after errors, a dead mount: every checkpoint would
// fail); warn when fewer than minFreeBytes are free (0: no minimum). A
// root that does not exist or that the agent may not write to is an
// error of the configuration, not of the node.
func NewDiskCheck(root string, minFreeBytes int64) *DiskCheck {
	return &DiskCheck{root: root, minFree: minFreeBytes, free: freeBytes, probe: writeProbe}
}

// Name returns "disk".
func (c *DiskCheck) Name() string { return "disk" }

// Run creates and removes a file under the root and reads its free space.
func (c *DiskCheck) Run(ctx context.Context) []api.HealthCheck {
	err := c.probe(c.root)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		// The agent was pointed at a root it cannot use: fix the
		// configuration; cordoning every node would not help.
		return node(c.Name(), api.CheckError, "", fmt.Sprintf("checkpoint root: %v", err))
	case err != nil:
		return node(c.Name(), api.CheckFatal, api.ActionCordonNode, fmt.Sprintf("cannot write under the checkpoint root: %v", err))
	}
	free, err := c.free(c.root)
	if err != nil {
		return node(c.Name(), api.CheckError, "", fmt.Sprintf("free space under %s: %v", c.root, err))
	}
	if free < c.minFree {
		return node(c.Name(), api.CheckWarn, api.ActionCount,
			fmt.Sprintf("%s free under %s, below the %s wanted", bytesText(free), c.root, bytesText(c.minFree)))
	}
	return node(c.Name(), api.CheckOK, "", "")
}

// writeProbe creates a file under dir and removes it.
func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".gangway-health-*")
	if err != nil {
		return err
	}
	err = f.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	return err
}

func bytesText(n int64) string {
	const gib = 1 << 30
	if n >= gib {
		return strconv.FormatFloat(float64(n)/gib, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

// DefaultMeminfo is where the kernel reports memory.
const DefaultMeminfo = "/proc/meminfo"

// MemoryCheck is the "memory" check.
type MemoryCheck struct{ path string }

// NewMemoryCheck returns the memory check, reading path (DefaultMeminfo
// when ""): warn when MemAvailable is below 5% of MemTotal, where the
// kernel starts reclaiming hard and the OOM killer is near; data loaders
// and pinned buffers are the first to suffer.
func NewMemoryCheck(path string) *MemoryCheck {
	if path == "" {
		path = DefaultMeminfo
	}
	return &MemoryCheck{path: path}
}

// Name returns "memory".
func (c *MemoryCheck) Name() string { return "memory" }

// Run reads the memory counters.
func (c *MemoryCheck) Run(ctx context.Context) []api.HealthCheck {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return node(c.Name(), api.CheckError, "", err.Error())
	}
	m, err := ParseMeminfo(data)
	if err != nil {
		return node(c.Name(), api.CheckError, "", err.Error())
	}
	total, okT := m["MemTotal"]
	avail, okA := m["MemAvailable"]
	if !okT || !okA || total <= 0 {
		return node(c.Name(), api.CheckError, "", c.path+": no MemTotal and MemAvailable")
	}
	if avail*20 < total {
		return node(c.Name(), api.CheckWarn, api.ActionCount,
			fmt.Sprintf("%s available of %s (%.1f%%), below 5%%", bytesText(avail), bytesText(total), 100*float64(avail)/float64(total)))
	}
	return node(c.Name(), api.CheckOK, "", "")
}

// ParseMeminfo reads /proc/meminfo's "Name:   1234 kB" lines into bytes
// by name. A line that is not of that form is an error.
func ParseMeminfo(data []byte) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || name == "" || len(fields) == 0 || len(fields) > 2 {
			return nil, fmt.Errorf("meminfo line %d: want \"Name: N [kB]\", got %q", n, line)
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("meminfo line %d: bad number %q", n, fields[0])
		}
		if len(fields) == 2 {
			if fields[1] != "kB" || v > 1<<53 {
				return nil, fmt.Errorf("meminfo line %d: bad unit or size in %q", n, line)
			}
			v *= 1024
		}
		out[name] = v
	}
	return out, sc.Err()
}

// DefaultMaxClockSkew is how far the node's clock may be from the
// server's before the clock check warns. NTP keeps a synced host within
// milliseconds, and estimating the offset over a heartbeat's round trip
// is uncertain by half of it, well under 100 ms on a cluster network: half
// a second leaves room for that and still catches a node whose time sync
// is broken, before lease and timestamp comparisons go astray.
const DefaultMaxClockSkew = 500 * time.Millisecond

// ClockCheck is the "clock" check.
type ClockCheck struct {
	offset func() (time.Duration, bool)
	max    time.Duration
}

// NewClockCheck returns the clock check: warn when offset reports the
// node's clock further than max (DefaultMaxClockSkew when 0) from the
// server's; ok when the offset is not known yet.
func NewClockCheck(offset func() (time.Duration, bool), max time.Duration) *ClockCheck {
	if max <= 0 {
		max = DefaultMaxClockSkew
	}
	return &ClockCheck{offset: offset, max: max}
}

// Name returns "clock".
func (c *ClockCheck) Name() string { return "clock" }

// Run asks for the offset.
func (c *ClockCheck) Run(ctx context.Context) []api.HealthCheck {
	d, ok := c.offset()
	switch {
	case !ok:
		return node(c.Name(), api.CheckOK, "", "offset from the server not known yet")
	case d > c.max || d < -c.max:
		return node(c.Name(), api.CheckWarn, api.ActionCount,
			fmt.Sprintf("clock %v off the server's, more than %v", d.Round(time.Millisecond), c.max))
	}
	return node(c.Name(), api.CheckOK, "", "")
}
