package infbench

import (
	"slices"
	"time"

	"github.com/gangway/gangway/internal/base/stats"
)

// SLO is the service level a request must meet to count toward goodput.
type SLO struct {
	TTFT time.Duration // time to first token at most
	TPOT time.Duration // mean time per output token after the first at most
}

// Summary is one policy's result in one scenario; the JSON names are the
// contract of `gangway bench inference -o json`.
type Summary struct {
	Scenario      string  `json:"scenario"`
	Policy        string  `json:"policy"`
	Requests      int     `json:"requests"`           // completed
	Dropped       int     `json:"dropped,omitempty"`  // unfinished, rejected included
	Rejected      int     `json:"rejected,omitempty"` // turned away by the admission queue (429/503)
	HeldP99ms     float64 `json:"held_p99_ms,omitempty"`
	TTFTp50ms     float64 `json:"ttft_p50_ms"`
	TTFTp90ms     float64 `json:"ttft_p90_ms"`
	TTFTp99ms     float64 `json:"ttft_p99_ms"`
	TTFTp999ms    float64 `json:"ttft_p999_ms"`
	TPOTp50ms     float64 `json:"tpot_p50_ms"`
	TPOTp99ms     float64 `json:"tpot_p99_ms"`
	E2Ep50ms      float64 `json:"e2e_p50_ms"`
	E2Ep99ms      float64 `json:"e2e_p99_ms"`
	E2Ep999ms     float64 `json:"e2e_p999_ms"`
	Goodput       float64 `json:"goodput"`        // requests/s meeting the SLO
	SLOAttainment float64 `json:"slo_attainment"` // share of requests meeting it
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
	// The overhead scenario: e2e percentiles through the gateway minus the
	// same percentiles straight to the engines, measured in alternating
	// rounds of the same load: the median over rounds of each round's
	// difference; the pooled difference (all rounds together) beside it.
	AddedP50ms       float64      `json:"added_p50_ms,omitempty"`
	AddedP99ms       float64      `json:"added_p99_ms,omitempty"`
	AddedP999ms      float64      `json:"added_p999_ms,omitempty"`
	AddedP99PooledMS float64      `json:"added_p99_pooled_ms,omitempty"`
	DirectP50ms      float64      `json:"direct_e2e_p50_ms,omitempty"`
	DirectP99ms      float64      `json:"direct_e2e_p99_ms,omitempty"`
	DirectP999ms     float64      `json:"direct_e2e_p999_ms,omitempty"`
	CPU              *OverheadCPU `json:"cpu_us_per_request,omitempty"`
	LimitMS          float64      `json:"limit_ms,omitempty"` // overhead: the target for added_p99_ms
	Load             string       `json:"load,omitempty"`     // overhead: the load shape
	Rate             float64      `json:"rate_rps,omitempty"`
	PeakReplicas     int          `json:"peak_replicas,omitempty"`
	RecoveryS        float64      `json:"recovery_s,omitempty"`
	DurationS        float64      `json:"duration_s"`
	Note             string       `json:"note,omitempty"`
}

// OverheadCPU is the CPU time per request of each process in the
// overhead scenario, in microseconds, on each path: what the machine's
// cores were spent on. In-process runs (tests) have only a total.
type OverheadCPU struct {
	Direct ComponentCPU `json:"direct"`
	Via    ComponentCPU `json:"via_gateway"`
	// SendLateP99ms is how late the load generator released a request
	// after its scheduled time, 99th percentile (open loop).
	SendLateP99ms float64 `json:"send_late_p99_ms,omitempty"`
	// LoadAvg is the machine's 1-minute load average before and after.
	LoadAvg [2]float64 `json:"load_avg,omitempty"`
}

// ComponentCPU splits one path's CPU per request by process.
type ComponentCPU struct {
	LoadGen float64 `json:"loadgen_us,omitempty"`
	Gateway float64 `json:"gateway_us,omitempty"`
	Engines float64 `json:"engines_us,omitempty"` // the eight together
	Total   float64 `json:"total_us"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize computes the figures of a virtual-time run. Requests that did
// not finish count as SLO misses, and their TTFT as at least the time
// they waited (end − arrival) so that overload shows in the tail.
func summarize(scenario, policy string, outs []Outcome, slo SLO, end time.Duration) Summary {
	s := Summary{Scenario: scenario, Policy: policy}
	var ttft, tpot, e2e, held []float64
	var cached, prompt float64
	good := 0
	var last time.Duration
	for _, o := range outs {
		last = max(last, o.Arrival)
		if o.Held > 0 {
			held = append(held, ms(o.Held))
		}
		if o.Rejected {
			s.Rejected++
		}
		if o.Dropped || o.E2E == 0 {
			s.Dropped++
			w := o.TTFT
			if w == 0 {
				w = end - o.Arrival
			}
			ttft = append(ttft, ms(w))
			e2e = append(e2e, ms(end-o.Arrival))
			continue
		}
		s.Requests++
		ttft = append(ttft, ms(o.TTFT))
		e2e = append(e2e, ms(o.E2E))
		var tp time.Duration
		if o.Output > 1 {
			tp = (o.E2E - o.TTFT) / time.Duration(o.Output-1)
			tpot = append(tpot, ms(tp))
		}
		cached += float64(o.Cached)
		prompt += float64(o.PromptLen)
		if (slo.TTFT == 0 || o.TTFT <= slo.TTFT) && (slo.TPOT == 0 || tp <= slo.TPOT) {
			good++
		}
	}
	slices.Sort(ttft)
	slices.Sort(tpot)
	slices.Sort(e2e)
	s.TTFTp50ms, s.TTFTp90ms, s.TTFTp99ms, s.TTFTp999ms = stats.Quantile(ttft, .5), stats.Quantile(ttft, .9), stats.Quantile(ttft, .99), stats.Quantile(ttft, .999)
	s.TPOTp50ms, s.TPOTp99ms = stats.Quantile(tpot, .5), stats.Quantile(tpot, .99)
	s.E2Ep50ms, s.E2Ep99ms, s.E2Ep999ms = stats.Quantile(e2e, .5), stats.Quantile(e2e, .99), stats.Quantile(e2e, .999)
	if len(held) > 0 {
		slices.Sort(held)
		s.HeldP99ms = stats.Quantile(held, .99)
	}
	if len(outs) > 0 {
		s.SLOAttainment = float64(good) / float64(len(outs))
	}
	if last > 0 {
		s.Goodput = float64(good) / last.Seconds()
		s.Rate = float64(len(outs)) / last.Seconds()
	}
	if prompt > 0 {
		s.PrefixHitRate = cached / prompt
	}
	s.DurationS = end.Seconds()
	return s
}
