package health

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/ib"
	"github.com/gangway/gangway/internal/node/health/nodecheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

// DefaultKmsgPath is the kernel log the agent reads Xids from unless told
// otherwise.
const DefaultKmsgPath = xid.DefaultKmsgPath

// NodeOptions says which checks a node gets and what they read.
type NodeOptions struct {
	// GPUs is the number of GPUs (indices 0 to GPUs-1).
	GPUs int
	// BusIDs maps each GPU's PCI address (NVML's "00000000:18:00.0" or
	// any form xid.NormalizeBusID reads) to its index, for the Xids the
	// kernel log names by address. Unused with Fake.
	BusIDs map[string]int
	// CheckpointRoot is where checkpoints are written; "" skips the disk
	// check. MinFreeBytes is the free space below which it warns.
	CheckpointRoot string
	MinFreeBytes   int64
	// ClockOffset reports this node's clock minus the server's, and
	// whether that is known yet; nil skips the clock check. MaxClockSkew
	// is the offset beyond which it warns (0:
	// nodecheck.DefaultMaxClockSkew).
	ClockOffset  func() (time.Duration, bool)
	MaxClockSkew time.Duration
	// IBRoot is where the RDMA devices are listed; ib.DefaultRoot
	// (/sys/class/infiniband) when "".
	IBRoot string
	// MeminfoPath is the kernel's memory report; /proc/meminfo when "".
	MeminfoPath string
	// KmsgPath is the kernel log Xids are read from (DefaultKmsgPath on a
	// GPU node); "" reads none.
	KmsgPath string
	// GPUHealth turns on the GPU checks; leave it off where there is no
	// way to read the GPUs (no driver, no fake).
	GPUHealth bool
	// Provider reads the GPUs' counters (NVML). Without it, and without
	// Fake, the only GPU check is the Xid check on the kernel log. A
	// Provider with a Close method is closed by the Runner once the
	// checks that read it have returned for the last time.
	Provider gpucheck.Provider
	// Events is a second source of Xids (NVML's event set), read in
	// place of the kernel log while the log cannot be read (see
	// xid.Fallback), or alone when KmsgPath is "".
	Events xid.Source
	// Fake, when set, stands in for Provider, Events and the kernel log;
	// it logs to Logger.
	Fake *Fake
	// Logger receives what the checks log (fatal Xids, bad injections);
	// nothing is logged when nil.
	Logger *slog.Logger
}

// DefaultChecks builds a node's checks: with GPUHealth, the Xid check
// (given a KmsgPath, Events or Fake) and, given a Provider or Fake, ecc,
// thermal, power, nvlink and pcie;
// always ib and memory; disk with a CheckpointRoot; clock with a
// ClockOffset. It also returns the Xid check, for the agent to Clear a
// GPU once it is reset or returned to service; nil when there is none
// (Clear on nil does nothing). An error means the options are
// inconsistent; nothing has been opened.
func DefaultChecks(o NodeOptions) ([]Check, *xid.Check, error) {
	if o.GPUs < 0 {
		return nil, nil, fmt.Errorf("health checks: %d GPUs", o.GPUs)
	}
	if o.Fake != nil && o.Fake.GPUs() != o.GPUs {
		return nil, nil, fmt.Errorf("health checks: the fake has %d GPUs, the node %d", o.Fake.GPUs(), o.GPUs)
	}
	var checks []Check
	var xc *xid.Check
	if o.GPUHealth && o.GPUs > 0 {
		p := o.Provider
		var src xid.Source
		switch {
		case o.Fake != nil:
			p, src = o.Fake, o.Fake
			o.Fake.SetLogger(o.Logger)
		case o.KmsgPath != "" && o.Events != nil:
			src = xid.Fallback(xid.NewKmsg(o.KmsgPath), o.Events)
		case o.KmsgPath != "":
			src = xid.NewKmsg(o.KmsgPath)
		case o.Events != nil:
			src = o.Events
		}
		if src != nil {
			bus := o.BusIDs
			if o.Fake != nil {
				bus = nil
			}
			var err error
			xc, err = xid.New(src, xid.Options{GPUs: o.GPUs, BusIDs: bus, Logger: o.Logger})
			if err != nil {
				return nil, nil, fmt.Errorf("health checks: %w", err)
			}
			checks = append(checks, xc)
		}
		if p != nil {
			var pcie Check = gpucheck.NewPCIeCheck(p, o.GPUs)
			if c, ok := p.(io.Closer); ok {
				pcie = closing{pcie, c}
			}
			checks = append(checks,
				gpucheck.NewECCCheck(p, o.GPUs),
				gpucheck.NewThermalCheck(p, o.GPUs),
				gpucheck.NewPowerCheck(p, o.GPUs),
				gpucheck.NewNVLinkCheck(p, o.GPUs),
				pcie,
			)
		}
	}
	checks = append(checks, ib.New(o.IBRoot), nodecheck.NewMemoryCheck(o.MeminfoPath))
	if o.CheckpointRoot != "" {
		checks = append(checks, nodecheck.NewDiskCheck(o.CheckpointRoot, o.MinFreeBytes))
	}
	if o.ClockOffset != nil {
		checks = append(checks, nodecheck.NewClockCheck(o.ClockOffset, o.MaxClockSkew))
	}
	return checks, xc, nil
}

// closing is a check that also closes c when the Runner closes it. The
// Runner closes its checks only after every run has returned, so the
// Provider the gpucheck checks share is closed after its last read.
type closing struct {
	Check
	c io.Closer
}

func (w closing) Close() error { return w.c.Close() }
