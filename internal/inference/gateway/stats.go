package gateway

import (
	"fmt"
	"slices"
	"strings"
)

// ModelStats are one model's answers through the gateway since it
// started, as counters: whoever wants rates and means (requests a second,
// the mean TTFT of the last minute) takes two and divides their
// differences. TTFT and TPOT count the replicas serving now: a retired
// replica's observations leave the sums with its series, so a sum may
// fall between two reads.
type ModelStats struct {
	Model string
	// Requests are the answers, of any status; Errors those of 5xx.
	Requests, Errors int64
	// TTFTCount streamed answers' time to first token add up to
	// TTFTSeconds; TPOTCount's time per output token to TPOTSeconds.
	TTFTCount   int64
	TTFTSeconds float64
	TPOTCount   int64
	TPOTSeconds float64
}

// Stats reads every model's counters from the gateway's own series, by
// model name.
func (g *Gateway) Stats() ([]ModelStats, error) {
	mfs, err := g.metrics.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gateway: gather metrics: %w", err)
	}
	by := map[string]*ModelStats{}
	of := func(model string) *ModelStats {
		s := by[model]
		if s == nil {
			s = &ModelStats{Model: model}
			by[model] = s
		}
		return s
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var model, code string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "model":
					model = l.GetValue()
				case "code":
					code = l.GetValue()
				}
			}
			switch mf.GetName() {
			case "gangway_gateway_requests_total":
				s := of(model)
				n := int64(m.GetCounter().GetValue())
				s.Requests += n
				if strings.HasPrefix(code, "5") {
					s.Errors += n
				}
			case "gangway_gateway_ttft_seconds":
				s := of(model)
				s.TTFTCount += int64(m.GetHistogram().GetSampleCount())
				s.TTFTSeconds += m.GetHistogram().GetSampleSum()
			case "gangway_gateway_tpot_seconds":
				s := of(model)
				s.TPOTCount += int64(m.GetHistogram().GetSampleCount())
				s.TPOTSeconds += m.GetHistogram().GetSampleSum()
			}
		}
	}
	out := make([]ModelStats, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ModelStats) int { return strings.Compare(a.Model, b.Model) })
	return out, nil
}
