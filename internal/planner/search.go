package planner

import (
	"fmt"
	"sort"
)

// DefaultMaxBubble is the pipeline-bubble share above which Search rejects
// a layout outright.
const DefaultMaxBubble = 0.25

// SearchRequest asks for the best layouts of one job on all of its GPUs.
type SearchRequest struct {
	Job Job
	// Top is how many layouts to return (default 5).
	Top int
	// MaxBubble rejects layouts whose bubble exceeds this share of the
	// pipeline time (default DefaultMaxBubble).
	MaxBubble float64
}

// Rejection groups the layouts Search turned down for one kind of reason.
type Rejection struct {
	// Kind is "out-of-memory", "tp-exceeds-nvlink-domain",
	// "bubble-too-large" or "shape".
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	// Example explains one rejected layout, the one that came closest.
	Example string `json:"example"`
	closest float64
}

// Rejection kinds.
const (
	RejectOOM      = "out-of-memory"
	RejectTPDomain = "tp-exceeds-nvlink-domain"
	RejectBubble   = "bubble-too-large"
	RejectShape    = "shape"
)

// SearchResult is the best layouts, best first, and why the others lost.
type SearchResult struct {
	Best []Estimate `json:"best"`
	// Considered is the number of layouts examined.
	Considered int         `json:"considered"`
	Rejected   []Rejection `json:"rejected"`
	// BubbleOverLimit: no layout that fits keeps its bubble under
	// MaxBubble, so Best lists the least bad of those.
	BubbleOverLimit bool `json:"bubble_over_limit,omitempty"`
	// Stack names the stack and its fitted efficiencies.
	Stack string `json:"stack"`
}

// powersOfTwo returns 1, 2, 4, … up to limit.
func powersOfTwo(limit int) []int {
	var out []int
	for v := 1; v <= limit; v *= 2 {
		out = append(out, v)
	}
	return out
}

// Search enumerates TP (powers of two), PP (dividing the layers), virtual
// stages, DP, micro-batch, recomputation and ZeRO stage for the job's
// GPUs, predicts each, and returns the fastest few distinct (tp, pp, vp,
// dp) layouts that fit, with the rejected ones grouped by reason. It is
// pure and deterministic.
func Search(req SearchRequest) SearchResult {
	j := req.Job
	top := req.Top
	if top <= 0 {
		top = 5
	}
	maxBubble := req.MaxBubble
	if maxBubble <= 0 {
		maxBubble = DefaultMaxBubble
	}
	res := SearchResult{Stack: j.Stack.String()}
	rej := map[string]*Rejection{}
	reject := func(kind string, closeness float64, why func() string) {
		r, ok := rej[kind]
		if !ok {
			r = &Rejection{Kind: kind, closest: closeness + 1}
			rej[kind] = r
		}
		r.Count++
		if closeness < r.closest {
			r.closest = closeness
			r.Example = why()
		}
	}
	n := j.Cluster.GPUs
	m := j.Model
	dom := j.Cluster.domain()
	usable := UsableBytes(j.Cluster.GPU)
	maxTP, maxPP := j.Stack.MaxTP, j.Stack.MaxPP
	if maxTP <= 0 {
		maxTP = m.Heads
	}
	if maxPP <= 0 {
		maxPP = m.Layers
	}
	recomputes := []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
	var zeros []int
	switch j.Stack.Kind {
	case FSDP:
		zeros = []int{3}
	case DeepSpeed:
		zeros = []int{0, 1, 2, 3}
	default:
		zeros = []int{0, 1}
	}
	best := map[[4]int]Estimate{}
	bubbly := map[[4]int]Estimate{} // fit, but over MaxBubble
	for _, tp := range powersOfTwo(min(maxTP, n)) {
		if m.Heads%tp != 0 || (m.KVHeads%tp != 0 && tp%m.KVHeads != 0) {
			reject(RejectShape, 0, func() string {
				return fmt.Sprintf("tp=%d: does not divide %d heads / %d key-value heads", tp, m.Heads, m.KVHeads)
			})
			continue
		}
		if tp > dom {
			reject(RejectTPDomain, float64(tp), func() string {
				return fmt.Sprintf("tp=%d: a TP group must sit in one NVLink domain of %d GPUs", tp, dom)
			})
			continue
		}
		for pp := 1; pp <= min(maxPP, n/tp); pp++ {
			if (n/tp)%pp != 0 || n%(tp*pp) != 0 {
				continue
			}
			dp := n / (tp * pp)
			if j.GlobalBatch%dp != 0 {
				reject(RejectShape, 0, func() string {
					return fmt.Sprintf("tp=%d pp=%d dp=%d: global batch %d is not a multiple of dp", tp, pp, dp, j.GlobalBatch)
				})
				continue
			}
			perDP := j.GlobalBatch / dp
			for _, mbs := range powersOfTwo(min(perDP, 64)) {
				if perDP%mbs != 0 {
					continue
				}
				micro := perDP / mbs
				vps := []int{1}
				if pp > 1 && !j.Stack.BalancedPipeline && micro%pp == 0 {
					for v := 2; v*pp <= m.Layers; v++ {
						if m.Layers%(pp*v) == 0 {
							vps = append(vps, v)
						}
					}
				}
				for _, vp := range vps {
					for _, rc := range recomputes {
						for _, z := range zeros {
							for _, ep := range expertDegrees(m, dp) {
								if j.Stack.Kind == DeepSpeed && pp > 1 && z > 1 {
									continue // ZeRO-2/3 do not combine with DeepSpeed's pipeline
								}
								c := Config{TP: tp, PP: pp, VP: vp, DP: dp, MicroBatch: mbs, Recompute: rc, ZeRO: z,
									SP: tp > 1 && j.Stack.Kind == Megatron, EP: ep}
								if z > 0 && dp == 1 && j.Stack.Kind != FSDP {
									continue // nothing to shard over
								}
								res.Considered++
								mem := Memory(j, c)
								if mem.TotalBytes > usable {
									over := float64(mem.TotalBytes) / float64(usable)
									reject(RejectOOM, over, func() string {
										return fmt.Sprintf("%s: needs %.1f GiB per GPU (%s stage: states %.1f, activations %.1f), %.1f GiB usable",
											c, float64(mem.TotalBytes)/gib, mem.Stage, float64(mem.States())/gib,
											float64(mem.ActivationBytes)/gib, float64(usable)/gib)
									})
									continue
								}
								e := Predict(j, c)
								key := [4]int{tp, pp, vp, dp}
								if e.BubbleFraction > maxBubble {
									reject(RejectBubble, e.BubbleFraction, func() string {
										return fmt.Sprintf("%s: pipeline bubble %.1f%% of the step (limit %.0f%%) with %d micro-batches over %d stages",
											c, 100*e.BubbleFraction, 100*maxBubble, e.MicroBatches, pp)
									})
									if b, ok := bubbly[key]; !ok || better(e, b) {
										bubbly[key] = e
									}
									continue
								}
								if b, ok := best[key]; !ok || better(e, b) {
									best[key] = e
								}
							}
						}
					}
				}
			}
		}
	}
	if len(best) == 0 {
		// Every layout that fits has a large bubble: better a slow plan
		// than none. The rejection stays listed as the warning.
		best = bubbly
		res.BubbleOverLimit = len(bubbly) > 0
	}
	for _, e := range best {
		res.Best = append(res.Best, e)
	}
	sort.Slice(res.Best, func(a, b int) bool { return better(res.Best[a], res.Best[b]) })
	if len(res.Best) > top {
		res.Best = res.Best[:top]
	}
	for _, kind := range []string{RejectOOM, RejectTPDomain, RejectBubble, RejectShape} {
		if r, ok := rej[kind]; ok {
			res.Rejected = append(res.Rejected, *r)
		}
	}
	return res
}

// better orders estimates: faster first, then less memory, then the
// simpler layout (smaller TP, then PP) so results are deterministic.
func better(a, b Estimate) bool {
	if a.StepSeconds != b.StepSeconds {
		return a.StepSeconds < b.StepSeconds
	}
	if a.Memory.TotalBytes != b.Memory.TotalBytes {
		return a.Memory.TotalBytes < b.Memory.TotalBytes
	}
	ka, kb := a.Config, b.Config
	for _, d := range [][2]int{{ka.TP, kb.TP}, {ka.PP, kb.PP}, {ka.VP, kb.VP}, {ka.MicroBatch, kb.MicroBatch}, {ka.ZeRO, kb.ZeRO}} {
		if d[0] != d[1] {
			return d[0] < d[1]
		}
	}
	return ka.Recompute < kb.Recompute
}

// expertDegrees is the expert-parallel degrees Search tries: 1 for a
// dense model, else the powers of two dividing both the routed experts
// and dp.
func expertDegrees(m Model, dp int) []int {
	if !m.MoE() {
		return []int{1}
	}
	var out []int
	for _, ep := range powersOfTwo(dp) {
		if m.Experts%ep == 0 && dp%ep == 0 {
			out = append(out, ep)
		}
	}
	return out
}
