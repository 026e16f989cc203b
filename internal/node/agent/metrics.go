package agent

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/adminhttp"
	"github.com/gangway/gangway/internal/node/gpu"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultGPUMetricsInterval is how often the agent reads its GPUs'
// telemetry by default (dcgm-exporter collects every 30 s).
const DefaultGPUMetricsInterval = 10 * time.Second

// gpuMetrics is the newest telemetry of the node's GPUs, read by
// sampleLoop, reported by the collector at scrape time and, in short, by
// heartbeats (for `gangway top`).
type gpuMetrics struct {
	mu      sync.Mutex // guards latest, at and the addresses
	latest  []gpu.Telemetry
	at      time.Time // when latest was read
	metrics net.Addr  // where --metrics-listen serves; set by Run before serving
	debug   net.Addr  // where --debug-listen serves
}

// telemetry is the newest readings in a heartbeat's terms, nil before the
// first.
func (g *gpuMetrics) telemetry() *api.GPUTelemetry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at.IsZero() {
		return nil
	}
	t := &api.GPUTelemetry{At: g.at, GPUs: make([]api.GPUSample, len(g.latest))}
	for i := range g.latest {
		r := &g.latest[i]
		t.GPUs[i] = api.GPUSample{Index: r.Index, UtilPercent: reading(r.UtilPercent), MemUsedMiB: reading(r.FBUsedMiB),
			TempC: reading(r.TempC), PowerW: reading(r.PowerW)}
	}
	return t
}

// reading is v, or -1 for a reading the device does not give (NaN),
// which JSON cannot carry.
func reading(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return v
}

// MetricsAddr is where the agent serves /metrics (--metrics-listen), nil
// without it or before Run has opened it.
func (a *Agent) MetricsAddr() net.Addr {
	a.gm.mu.Lock()
	defer a.gm.mu.Unlock()
	return a.gm.metrics
}

// DebugAddr is where the agent serves /metrics and pprof
// (--debug-listen), nil without it or before Run has opened it.
func (a *Agent) DebugAddr() net.Addr {
	a.gm.mu.Lock()
	defer a.gm.mu.Unlock()
	return a.gm.debug
}

// dcgm-exporter's field names, help and labels, so that its dashboards
// and alerts work on gangway's nodes unchanged; job_id, rank, queue and
// user are those of the rank holding the GPU (empty while none does), as
// dcgm-exporter's pod and HPC-job mapping adds its own. (`job` is the
// label Prometheus gives every target, so the job's ID is job_id.)
var gpuLabels = []string{"gpu", "UUID", "device", "modelName", "Hostname", "job_id", "rank", "queue", "user"}

type gpuField struct {
	desc    *prometheus.Desc
	typ     prometheus.ValueType
	reading func(*gpu.Telemetry) float64
}

var gpuFields = []gpuField{
	{prometheus.NewDesc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.UtilPercent }},
	{prometheus.NewDesc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.FBUsedMiB }},
	{prometheus.NewDesc("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.FBFreeMiB }},
	{prometheus.NewDesc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.TempC }},
	{prometheus.NewDesc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.PowerW }},
	{prometheus.NewDesc("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.SMClockMHz }},
	{prometheus.NewDesc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", gpuLabels, nil), prometheus.GaugeValue, func(t *gpu.Telemetry) float64 { return t.LastXid }},
	{prometheus.NewDesc("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", gpuLabels, nil), prometheus.CounterValue, func(t *gpu.Telemetry) float64 { return t.ECCDBEVolTotal }},
	{prometheus.NewDesc("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes.", gpuLabels, nil), prometheus.CounterValue, func(t *gpu.Telemetry) float64 { return t.NVLinkBandwidthTotal }},
}

var rankLabels = []string{"job_id", "attempt", "rank", "queue", "user"}

var (
	stepDesc   = prometheus.NewDesc("gangway_rank_step", "The newest step in the rank's progress file.", rankLabels, nil)
	lossDesc   = prometheus.NewDesc("gangway_rank_loss", "The loss of the rank's newest progress line that has one.", rankLabels, nil)
	tokensDesc = prometheus.NewDesc("gangway_rank_tokens_total", "Tokens the rank's newest progress line counts (this attempt).", rankLabels, nil)
	tpsDesc    = prometheus.NewDesc("gangway_rank_tokens_per_second", "Tokens a second between the rank's last two progress lines that count tokens.", rankLabels, nil)
)

// rankProgress is what the metrics keep of a rank's progress lines.
type rankProgress struct {
	step, tokens int64
	loss         float64 // NaN: none yet
	tps          float64 // NaN: not yet two lines with tokens
	at           time.Time
}

// noteProgress keeps the newest of lines for t's metrics. Called with
// a.mu held.
func (t *task) noteProgressLocked(lines []api.Progress) {
	for _, p := range lines {
		if t.prog == nil {
			t.prog = &rankProgress{loss: math.NaN(), tps: math.NaN()}
		}
		r := t.prog
		if p.TimingOnly() {
			continue
		}
		if p.Tokens > r.tokens && !r.at.IsZero() && p.Time.After(r.at) {
			r.tps = float64(p.Tokens-r.tokens) / p.Time.Sub(r.at).Seconds()
		}
		if p.Tokens > 0 {
			r.tokens, r.at = p.Tokens, p.Time
		}
		r.step = max(r.step, p.Step)
		if p.Loss != nil {
			r.loss = *p.Loss
		}
	}
}

// Describe implements prometheus.Collector.
func (a *Agent) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range gpuFields {
		ch <- f.desc
	}
	for _, d := range []*prometheus.Desc{stepDesc, lossDesc, tokensDesc, tpsDesc} {
		ch <- d
	}
}

// holder is who holds a GPU, as its labels say it.
type holder struct{ job, rank, queue, user string }

// Collect implements prometheus.Collector: the newest GPU readings with
// the rank holding each GPU, and the running ranks' progress.
func (a *Agent) Collect(ch chan<- prometheus.Metric) {
	a.gm.mu.Lock()
	readings := a.gm.latest
	a.gm.mu.Unlock()
	held := map[int]holder{}
	a.mu.Lock()
	for _, t := range a.tasks {
		if !t.live() {
			continue
		}
		h := holder{t.asg.JobID, strconv.Itoa(t.asg.Rank), t.asg.Queue, t.asg.User}
		for _, g := range t.asg.GPUs {
			held[g] = h
		}
		if p := t.prog; p != nil {
			lv := []string{t.asg.JobID, strconv.Itoa(t.asg.Attempt), h.rank, h.queue, h.user}
			ch <- prometheus.MustNewConstMetric(stepDesc, prometheus.GaugeValue, float64(p.step), lv...)
			if !math.IsNaN(p.loss) {
				ch <- prometheus.MustNewConstMetric(lossDesc, prometheus.GaugeValue, p.loss, lv...)
			}
			if p.tokens > 0 {
				ch <- prometheus.MustNewConstMetric(tokensDesc, prometheus.CounterValue, float64(p.tokens), lv...)
			}
			if !math.IsNaN(p.tps) {
				ch <- prometheus.MustNewConstMetric(tpsDesc, prometheus.GaugeValue, p.tps, lv...)
			}
		}
	}
	a.mu.Unlock()
	for i := range readings {
		r := &readings[i]
		h := held[r.Index]
		lv := []string{strconv.Itoa(r.Index), r.UUID, fmt.Sprintf("nvidia%d", r.Index), r.Model, a.cfg.Name, h.job, h.rank, h.queue, h.user}
		for _, f := range gpuFields {
			if v := f.reading(r); !math.IsNaN(v) {
				ch <- prometheus.MustNewConstMetric(f.desc, f.typ, v, lv...)
			}
		}
	}
}

// live reports whether the rank may be running: started, not exited.
func (t *task) live() bool {
	return t.status.State == api.RankRunning || t.status.State == api.RankStarting
}

// busyGPUs is which GPUs live ranks hold now.
func (a *Agent) busyGPUs() map[int]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	busy := map[int]bool{}
	for _, t := range a.tasks {
		if t.live() {
			for _, g := range t.asg.GPUs {
				busy[g] = true
			}
		}
	}
	return busy
}

// sampleLoop reads the GPUs' telemetry every GPUMetricsInterval until ctx
// ends, when the GPUs can be read (gpu.Sampler).
func (a *Agent) sampleLoop(ctx context.Context, s gpu.Sampler) {
	t := time.NewTicker(a.cfg.GPUMetricsInterval)
	defer t.Stop()
	for {
		busy := a.busyGPUs()
		readings, err := s.Sample(ctx, func(i int) bool { return busy[i] })
		if err != nil && ctx.Err() == nil {
			a.log.Debug("read GPU telemetry", "err", err)
		}
		if err == nil {
			a.gm.mu.Lock()
			a.gm.latest, a.gm.at = readings, time.Now()
			a.gm.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveMetrics opens the admin listeners the configuration asks for and
// serves them, and reads the GPUs (for them and for heartbeats) when they
// can be read, in wg's goroutines until ctx ends.
func (a *Agent) serveMetrics(ctx context.Context, wg *sync.WaitGroup) error {
	reg := adminhttp.NewRegistry()
	reg.MustRegister(a)
	var open []*adminhttp.Server
	for _, l := range []struct {
		addr  string
		debug bool
		into  *net.Addr
	}{{a.cfg.MetricsListen, false, &a.gm.metrics}, {a.cfg.DebugListen, true, &a.gm.debug}} {
		if l.addr == "" {
			continue
		}
		s, err := adminhttp.Listen(l.addr, reg, l.debug, a.log)
		if err != nil {
			for _, o := range open {
				o.Close()
			}
			return fmt.Errorf("agent: %w", err)
		}
		open = append(open, s)
		a.gm.mu.Lock()
		*l.into = s.Addr()
		a.gm.mu.Unlock()
		a.log.Info("serving metrics", "addr", s.Addr().String(), "pprof", l.debug)
	}
	for _, s := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				a.log.Error("admin listener stopped", "err", err)
			}
		}()
	}
	if sm, ok := a.cfg.GPUs.(gpu.Sampler); ok {
		wg.Add(1)
		go func() { defer wg.Done(); a.sampleLoop(ctx, sm) }()
	}
	return nil
}
