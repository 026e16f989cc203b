package xid

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// CheckName is the name of the Xid check's findings.
const CheckName = "xid"

// DefaultWarnFor is how long a counted Xid keeps its GPU at warn: long
// enough to be seen in `gangway describe node`, short enough that one
// crashed job's Xid 13 does not mark the GPU for the rest of the day.
const DefaultWarnFor = 10 * time.Minute

// Options configures New.
type Options struct {
	// GPUs is the number of GPUs; the check reports on 0 to GPUs-1.
	GPUs int
	// BusIDs maps each GPU's PCI address, in any form NormalizeBusID
	// reads, to its index: the kernel log names GPUs by address.
	BusIDs map[string]int
	// WarnFor is how long a counted Xid keeps its GPU at warn;
	// DefaultWarnFor when 0.
	WarnFor time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives a line per fatal Xid; nothing is logged when nil.
	Logger *slog.Logger
}

// Check turns a source's Xid events into findings, one per GPU: fatal
// while a fatal Xid has not been cleared (it stays fatal after the
// event, until [Check.Clear] or a Reset event), warn for DefaultWarnFor
// after a counted Xid, ok otherwise. An Xid on a PCI address that is no
// GPU of this node's is counted on the node (GPU -1), never fatal.
//
// It is safe for concurrent use.
type Check struct {
	src     Source
	gpus    int
	bus     map[string]int
	warnFor time.Duration
	now     func() time.Time
	log     *slog.Logger

	mu    sync.Mutex        // guards state
	state map[int]*gpuState // by GPU index; -1 is the node
}

// gpuState is what the check holds for one GPU between clears.
type gpuState struct {
	fatal    *api.HealthCheck // the worst fatal Xid since the last clear
	counts   map[int]int      // Xid → times seen since the last clear
	warnAt   time.Time        // the latest counted Xid; zero if none
	warnFrom time.Time        // when the current run of counted Xids began
	warnCode int
	warnMsg  string // the latest counted Xid, described
	warnAct  api.HealthAction
}

// New returns a check reading src, which may be nil (no events: every
// GPU ok). A bus id that does not parse, or an index outside 0 to
// GPUs-1, is an error.
func New(src Source, o Options) (*Check, error) {
	c := &Check{src: src, gpus: o.GPUs, bus: map[string]int{}, warnFor: o.WarnFor, now: o.Now, log: o.Logger, state: map[int]*gpuState{}}
	if c.gpus < 0 {
		return nil, fmt.Errorf("xid check: %d GPUs", c.gpus)
	}
	for id, i := range o.BusIDs {
		b, err := NormalizeBusID(id)
		if err != nil {
			return nil, fmt.Errorf("xid check: %w", err)
		}
		if i < 0 || i >= c.gpus {
			return nil, fmt.Errorf("xid check: bus %s maps to GPU %d, not one of 0 to %d", id, i, c.gpus-1)
		}
		c.bus[b] = i
	}
	if c.warnFor <= 0 {
		c.warnFor = DefaultWarnFor
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Name returns CheckName.
func (c *Check) Name() string { return CheckName }

// Run reads the source and returns a finding per GPU, and one for the
// node when an Xid came on an unknown GPU or the source could not be
// read (Status error: it says nothing of the GPUs, whose findings stand).
func (c *Check) Run(ctx context.Context) []api.HealthCheck {
	var events []Event
	var readErr error
	if c.src != nil {
		events, readErr = c.src.Read(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, e := range events {
		c.applyLocked(e, now)
	}
	return c.findingsLocked(now, readErr)
}

// Clear forgets what the check holds against gpu (every GPU and the node
// when gpu < 0): call it once the GPU was reset or an operator returned
// it to service. Clear on a nil *Check does nothing.
func (c *Check) Clear(gpu int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked(gpu)
}

// Close closes the source if it has a Close method.
func (c *Check) Close() error {
	if cl, ok := c.src.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

func (c *Check) clearLocked(gpu int) {
	if gpu < 0 {
		clear(c.state)
		return
	}
	delete(c.state, gpu)
}

// gpuOf resolves the event's GPU: its index, its bus id's, or -1.
func (c *Check) gpuOf(e Event) int {
	if e.GPU >= 0 {
		if e.GPU < c.gpus {
			return e.GPU
		}
		return -1
	}
	if i, ok := c.bus[e.BusID]; ok {
		return i
	}
	return -1
}

func (c *Check) applyLocked(e Event, now time.Time) {
	gpu := c.gpuOf(e)
	if e.Reset {
		if gpu >= 0 || (e.GPU < 0 && e.BusID == "") {
			c.clearLocked(gpu)
		}
		return
	}
	at := e.At
	if at.IsZero() {
		at = now
	}
	cl := Classify(e)
	st := c.state[gpu]
	if st == nil {
		st = &gpuState{counts: map[int]int{}}
		c.state[gpu] = st
	}
	st.counts[e.Xid]++
	msg := fmt.Sprintf("Xid %d: %s", e.Xid, cl.Name)
	if e.Detail != "" {
		msg += " (" + truncate(e.Detail, 160) + ")"
	}
	if gpu < 0 {
		// Not one of our GPUs: nothing of ours to take out of service.
		cl = Class{Status: api.CheckWarn, Action: api.ActionCount}
		where := e.BusID
		if where == "" {
			where = fmt.Sprintf("GPU %d", e.GPU)
		}
		msg += " on " + where + ", which is no GPU of this node's"
	}
	if cl.Status == api.CheckFatal {
		c.log.Warn("xid", "gpu", gpu, "xid", e.Xid, "action", string(cl.Action), "detail", e.Detail)
		if st.fatal == nil || actionRank(cl.Action) > actionRank(st.fatal.Action) {
			st.fatal = &api.HealthCheck{Check: CheckName, Status: cl.Status, Action: cl.Action, GPU: gpu, Code: e.Xid, Message: msg, Since: at}
		}
		return
	}
	if st.warnAt.IsZero() || now.Sub(st.warnAt) >= c.warnFor {
		st.warnFrom, st.warnAct = at, api.ActionNone
	}
	st.warnAt, st.warnCode, st.warnMsg = now, e.Xid, msg
	if actionRank(cl.Action) > actionRank(st.warnAct) {
		st.warnAct = cl.Action
	}
}

func (c *Check) findingsLocked(now time.Time, readErr error) []api.HealthCheck {
	var out []api.HealthCheck
	for gpu := -1; gpu < c.gpus; gpu++ {
		h := api.HealthCheck{Check: CheckName, Status: api.CheckOK, GPU: gpu, At: now}
		st := c.state[gpu]
		switch {
		case st != nil && st.fatal != nil:
			h = *st.fatal
			h.At = now
		case st != nil && !st.warnAt.IsZero() && now.Sub(st.warnAt) < c.warnFor:
			h.Status, h.Action, h.Code, h.Since = api.CheckWarn, st.warnAct, st.warnCode, st.warnFrom
			h.Message = counts(st.counts) + "; last: " + st.warnMsg
		case st != nil && len(st.counts) > 0:
			h.Message = "earlier: " + counts(st.counts)
		}
		if gpu < 0 {
			if readErr != nil {
				if h.Status == api.CheckOK {
					h.Status, h.Message = api.CheckError, readErr.Error()
				} else {
					h.Message += "; " + readErr.Error()
				}
			}
			if h.Status == api.CheckOK {
				continue // nothing to say about the node
			}
		}
		out = append(out, h)
	}
	return out
}

// counts writes Xid counts as "Xid 13 ×3, Xid 31 ×1".
func counts(m map[int]int) string {
	var parts []string
	for _, x := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("Xid %d ×%d", x, m[x]))
	}
	return strings.Join(parts, ", ")
}

// actionRank orders actions mildest first.
func actionRank(a api.HealthAction) int {
	return slices.Index([]api.HealthAction{api.ActionNone, api.ActionCount, api.ActionResetGPU, api.ActionCordonGPU, api.ActionCordonNode}, a)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
