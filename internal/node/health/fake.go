package health

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

// What the fake reports for a healthy H100 SXM as NVML does: PCIe gen 5
// x16, 18 NVLink 4 links, a 700 W limit, an idle draw and temperature,
// and a slowdown threshold in the range nvidia-smi shows for the board.
const (
	fakeLinks     = 18
	fakeLimitW    = 700
	fakeSlowdownC = 87
	fakePCIeGen   = 5
	fakePCIeWidth = 16
)

// maxInjectBytes bounds the injection file the fake reads.
const maxInjectBytes = 1 << 20

// Fake is a GPU health provider for machines without GPUs: a
// gpucheck.Provider and an xid.Source that answer for n healthy H100s
// the way NVML does, until faults are injected.
//
// Faults come as JSON lines, through [Fake.Inject] or appended to the
// injection file, which the fake reads again whenever its size or
// modification time changed (each line is applied once, in order; a
// file rewritten with different lines is read from its start):
//
//	{"gpu":2,"xid":79}                 an Xid event on GPU 2, once
//	{"gpu":1,"ecc_dbe":1}              volatile uncorrected ECC errors (a count, not an increment)
//	{"gpu":1,"ecc_sbe":5}              volatile corrected ECC errors
//	{"gpu":1,"row_remap_failure":true} a row that could not be remapped
//	{"gpu":0,"temp":95}                core temperature in C
//	{"gpu":0,"throttle":["hw_slowdown"]} throttle reasons (gpucheck.ThrottleNames; [] for none)
//	{"gpu":0,"power":750}              power draw in W
//	{"gpu":3,"nvlink_down":1}          how many of its NVLinks are down (the first ones)
//	{"gpu":0,"pcie_width":8}           PCIe link width
//	{"clear":true}                     every GPU healthy again, sticky Xids cleared
//	{"gpu":2,"clear":true}             GPU 2 healthy again
//
// Blank lines and lines starting with # are skipped. A line that does
// not parse (unknown key, GPU out of range) is logged, counted and
// skipped.
//
// A Fake is safe for concurrent use.
type Fake struct {
	n    int
	path string

	mu      sync.Mutex // guards the fields below
	log     *slog.Logger
	gpus    []fakeGPU
	pending []xid.Event
	bad     int
	// What was read of the file: its size and time when last read, and
	// how many bytes of complete lines were applied, with their hash to
	// tell an append from a rewrite.
	size     int64
	mod      time.Time
	consumed int
	sum      [sha256.Size]byte
}

type fakeGPU struct {
	tempC        int
	throttle     uint64
	sbe, dbe     uint64
	remapFailure bool
	powerW       int
	linksDown    int
	pcieWidth    int
}

func healthyGPU(i int) fakeGPU {
	return fakeGPU{tempC: 35 + (i*3)%10, powerW: 70 + (i*7)%20, pcieWidth: fakePCIeWidth}
}

// NewFake returns a fake for n GPUs that reads injections from
// injectPath ("" for none: only Inject). The file need not exist yet.
func NewFake(n int, injectPath string) *Fake {
	f := &Fake{n: n, path: injectPath, log: slog.New(slog.DiscardHandler), gpus: make([]fakeGPU, n)}
	for i := range f.gpus {
		f.gpus[i] = healthyGPU(i)
	}
	return f
}

// SetLogger makes the fake log bad injection lines to l.
func (f *Fake) SetLogger(l *slog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l != nil {
		f.log = l
	}
}

// GPUs returns the number of GPUs the fake answers for.
func (f *Fake) GPUs() int { return f.n }

// BadLines counts the injection lines that were skipped.
func (f *Fake) BadLines() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bad
}

// Inject applies one injection line; an error says why it was skipped.
func (f *Fake) Inject(line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injectLocked(line)
}

func (f *Fake) injectLocked(line string) error {
	in, skip, err := parseInjection(line, f.n)
	if err != nil {
		f.bad++
		f.log.Warn("fake gpu health: bad injection line skipped", "line", line, "err", err)
		return err
	}
	if !skip {
		f.applyLocked(in)
	}
	return nil
}

// injection is one line of the injection file.
type injection struct {
	GPU          *int     `json:"gpu,omitempty"`
	Xid          int      `json:"xid,omitempty"`
	ECCSBE       *uint64  `json:"ecc_sbe,omitempty"`
	ECCDBE       *uint64  `json:"ecc_dbe,omitempty"`
	RemapFailure *bool    `json:"row_remap_failure,omitempty"`
	Temp         *int     `json:"temp,omitempty"`
	Throttle     []string `json:"throttle"`
	Power        *int     `json:"power,omitempty"`
	NVLinkDown   *int     `json:"nvlink_down,omitempty"`
	PCIeWidth    *int     `json:"pcie_width,omitempty"`
	Clear        bool     `json:"clear,omitempty"`
}

// parseInjection reads one line for a fake of n GPUs; skip is true for a
// blank line or a comment.
func parseInjection(line string, n int) (in injection, skip bool, err error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return in, true, nil
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, false, fmt.Errorf("injection %q: %w", line, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return in, false, fmt.Errorf("injection %q: more after the object", line)
	}
	bad := func(format string, args ...any) (injection, bool, error) {
		return in, false, fmt.Errorf("injection %q: "+format, append([]any{line}, args...)...)
	}
	effects := 0
	for _, set := range []bool{in.Xid != 0, in.ECCSBE != nil, in.ECCDBE != nil, in.RemapFailure != nil, in.Temp != nil,
		in.Throttle != nil, in.Power != nil, in.NVLinkDown != nil, in.PCIeWidth != nil} {
		if set {
			effects++
		}
	}
	switch {
	case in.GPU == nil && !in.Clear:
		return bad("no \"gpu\"")
	case in.GPU != nil && (*in.GPU < 0 || *in.GPU >= n):
		return bad("gpu %d: this node has GPUs 0 to %d", *in.GPU, n-1)
	case in.Clear && effects > 0:
		return bad("\"clear\" goes alone")
	case !in.Clear && effects == 0:
		return bad("nothing to inject")
	case in.Xid < 0 || in.Xid > 99999:
		return bad("xid %d: want 1 to 99999", in.Xid)
	case in.Temp != nil && (*in.Temp < -50 || *in.Temp > 200):
		return bad("temp %d C", *in.Temp)
	case in.Power != nil && (*in.Power < 0 || *in.Power > 10000):
		return bad("power %d W", *in.Power)
	case in.NVLinkDown != nil && (*in.NVLinkDown < 0 || *in.NVLinkDown > fakeLinks):
		return bad("nvlink_down %d: the GPU has %d links", *in.NVLinkDown, fakeLinks)
	case in.PCIeWidth != nil && (*in.PCIeWidth < 1 || *in.PCIeWidth > fakePCIeWidth):
		return bad("pcie_width %d: want 1 to %d", *in.PCIeWidth, fakePCIeWidth)
	}
	for _, name := range in.Throttle {
		if _, ok := gpucheck.ThrottleBit(name); !ok {
			return bad("throttle reason %q unknown", name)
		}
	}
	return in, false, nil
}

func (f *Fake) applyLocked(in injection) {
	if in.Clear {
		if in.GPU == nil {
			for i := range f.gpus {
				f.gpus[i] = healthyGPU(i)
			}
			f.pending = append(f.pending, xid.Event{GPU: -1, Reset: true})
			return
		}
		f.gpus[*in.GPU] = healthyGPU(*in.GPU)
		f.pending = append(f.pending, xid.Event{GPU: *in.GPU, Reset: true})
		return
	}
	g := &f.gpus[*in.GPU]
	if in.Xid != 0 {
		f.pending = append(f.pending, xid.Event{GPU: *in.GPU, Xid: in.Xid, Detail: "injected by the fake"})
	}
	if in.ECCSBE != nil {
		g.sbe = *in.ECCSBE
	}
	if in.ECCDBE != nil {
		g.dbe = *in.ECCDBE
	}
	if in.RemapFailure != nil {
		g.remapFailure = *in.RemapFailure
	}
	if in.Temp != nil {
		g.tempC = *in.Temp
	}
	if in.Throttle != nil {
		g.throttle = 0
		for _, name := range in.Throttle {
			bit, _ := gpucheck.ThrottleBit(name)
			g.throttle |= bit
		}
	}
	if in.Power != nil {
		g.powerW = *in.Power
	}
	if in.NVLinkDown != nil {
		g.linksDown = *in.NVLinkDown
	}
	if in.PCIeWidth != nil {
		g.pcieWidth = *in.PCIeWidth
	}
}

// refreshLocked applies the injection file's new lines, if it changed.
func (f *Fake) refreshLocked() {
	if f.path == "" {
		return
	}
	st, err := os.Stat(f.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			f.log.Warn("fake gpu health: injection file", "err", err)
		}
		return
	}
	if st.Size() == f.size && st.ModTime().Equal(f.mod) {
		return
	}
	if st.Size() > maxInjectBytes {
		f.log.Warn("fake gpu health: injection file too large", "path", f.path, "bytes", st.Size(), "max_bytes", maxInjectBytes)
		f.size, f.mod = st.Size(), st.ModTime()
		return
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.log.Warn("fake gpu health: injection file", "err", err)
		return
	}
	f.size, f.mod = st.Size(), st.ModTime()
	start := 0
	if f.consumed <= len(data) && sha256.Sum256(data[:f.consumed]) == f.sum {
		start = f.consumed // appended to
	}
	end := bytes.LastIndexByte(data, '\n') + 1
	if end <= start {
		return // no new complete line yet
	}
	for _, line := range strings.Split(string(data[start:end-1]), "\n") {
		_ = f.injectLocked(line)
	}
	f.consumed, f.sum = end, sha256.Sum256(data[:end])
}

// gpuLocked refreshes and returns GPU i's state.
func (f *Fake) gpuLocked(ctx context.Context, i int) (fakeGPU, error) {
	if err := ctx.Err(); err != nil {
		return fakeGPU{}, err
	}
	if i < 0 || i >= f.n {
		return fakeGPU{}, fmt.Errorf("fake gpu health: no GPU %d", i)
	}
	f.refreshLocked()
	return f.gpus[i], nil
}

// ECC answers as nvmlDeviceGetTotalEccErrors and nvmlDeviceGetRemappedRows.
func (f *Fake) ECC(ctx context.Context, gpu int) (gpucheck.ECC, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpuLocked(ctx, gpu)
	return gpucheck.ECC{VolatileSBE: g.sbe, VolatileDBE: g.dbe, AggregateSBE: g.sbe, AggregateDBE: g.dbe, RemapFailure: g.remapFailure}, err
}

// Thermal answers as nvmlDeviceGetTemperature and its throttle reasons.
func (f *Fake) Thermal(ctx context.Context, gpu int) (gpucheck.Thermal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpuLocked(ctx, gpu)
	th := gpucheck.Thermal{TempC: g.tempC, SlowdownC: fakeSlowdownC, Throttle: g.throttle}
	if th.Throttle == 0 && g.powerW < 100 {
		th.Throttle = gpucheck.ThrottleGPUIdle
	}
	return th, err
}

// Power answers as nvmlDeviceGetPowerUsage and its enforced limit.
func (f *Fake) Power(ctx context.Context, gpu int) (gpucheck.Power, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpuLocked(ctx, gpu)
	return gpucheck.Power{DrawMilliwatts: int64(g.powerW) * 1000, LimitMilliwatts: fakeLimitW * 1000}, err
}

// NVLinks answers with the GPU's 18 links.
func (f *Fake) NVLinks(ctx context.Context, gpu int) ([]gpucheck.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpuLocked(ctx, gpu)
	if err != nil {
		return nil, err
	}
	links := make([]gpucheck.Link, fakeLinks)
	for i := range links {
		links[i] = gpucheck.Link{Index: i, Up: i >= g.linksDown}
	}
	return links, nil
}

// PCIe answers with the GPU's link, gen 5 at the width injected.
func (f *Fake) PCIe(ctx context.Context, gpu int) (gpucheck.PCIe, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpuLocked(ctx, gpu)
	return gpucheck.PCIe{Gen: fakePCIeGen, MaxGen: fakePCIeGen, Width: g.pcieWidth, MaxWidth: fakePCIeWidth}, err
}

// Read hands the Xid check the Xids (and clears) injected since the last
// Read.
func (f *Fake) Read(ctx context.Context) ([]xid.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshLocked()
	ev := f.pending
	f.pending = nil
	return ev, nil
}

var (
	_ gpucheck.Provider = (*Fake)(nil)
	_ xid.Source        = (*Fake)(nil)
)
