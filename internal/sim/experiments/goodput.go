package experiments

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// GoodputConfig is the goodput experiment: one training gang of JobGPUs
// on a cluster of that many GPUs plus spare nodes, for Days, with
// failures; it is run at several checkpoint intervals to show which one
// gives the most effective training time.
type GoodputConfig struct {
	JobGPUs     int     // 16,384 in Llama 3
	GPUsPerNode int     // 8
	SpareNodes  int     // hot spares that replace failed nodes
	Days        float64 // 54
	Failures    sim.Failures
	// CkptCost is how long one checkpoint stalls training (seconds).
	CkptCost float64
	// Scales multiply the recommended (Young/Daly) interval; 1 is the
	// recommendation.
	Scales []float64
	// Fixed are fixed intervals in seconds, for comparison.
	Fixed []float64
	Seeds []uint64
	// Policy and Placement run the gang; nil and zero mean gangway's.
	Policy    sim.Policy
	Placement sim.Placement
}

// GoodputRow is one interval's outcome, averaged over seeds.
type GoodputRow struct {
	Label string `json:"label"`
	// Scale is the multiple of the recommended interval; 0 for a fixed
	// interval.
	Scale    float64 `json:"scale,omitempty"`
	Interval float64 `json:"interval_s"`
	// ETTR is the job's effective training time: useful work over wall
	// time, in [0, 1]; Min and Max over seeds.
	ETTR    float64 `json:"ettr"`
	ETTRMin float64 `json:"ettr_min"`
	ETTRMax float64 `json:"ettr_max"`
	// Expected is the first-order model's effective training time.
	Expected      float64 `json:"expected"`
	Interruptions float64 `json:"interruptions"`
	// GPUHoursLost by cause, averaged over seeds.
	GPUHoursLost map[string]float64 `json:"gpu_hours_lost"`
}

// GoodputResult is the whole experiment.
type GoodputResult struct {
	// MTBF is the job's mean time between interruptions (seconds).
	MTBF float64 `json:"mtbf_s"`
	// Recommended is the Young/Daly interval for the job.
	Recommended float64      `json:"recommended_interval_s"`
	Rows        []GoodputRow `json:"rows"`
}

// RecommendedInterval is gangway's checkpoint interval for a gang of gpus
// GPUs on whole nodes of perNode GPUs: Daly's interval for its MTBF under
// f and checkpoint cost delta.
func RecommendedInterval(f sim.Failures, gpus, perNode int, delta float64) float64 {
	nodeGPUs := ((gpus + perNode - 1) / perNode) * perNode
	return sim.DalyInterval(delta, f.JobMTBF(gpus, nodeGPUs))
}

// Goodput runs the experiment.
func Goodput(ctx context.Context, cfg GoodputConfig) (*GoodputResult, error) {
	if cfg.JobGPUs <= 0 || cfg.GPUsPerNode <= 0 || cfg.JobGPUs%cfg.GPUsPerNode != 0 {
		return nil, fmt.Errorf("goodput: the job's %d GPUs must fill whole nodes of %d", cfg.JobGPUs, cfg.GPUsPerNode)
	}
	if cfg.Days <= 0 || cfg.CkptCost <= 0 {
		return nil, errors.New("goodput: days and checkpoint cost must be positive")
	}
	if err := cfg.Failures.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Seeds) == 0 {
		cfg.Seeds = []uint64{1}
	}
	pol := cfg.Policy
	if pol == nil {
		pol = sim.Gangway()
	}
	nodes := cfg.JobGPUs/cfg.GPUsPerNode + cfg.SpareNodes
	shape := sim.Shape{Pools: []sim.Pool{{Nodes: nodes, GPUsPerNode: cfg.GPUsPerNode}}}
	horizon := cfg.Days * 86400
	// The job has more work than the horizon: we measure its progress.
	job := []trace.Job{{ID: "pretrain", Submit: 0, Duration: 10 * horizon, GPUs: cfg.JobGPUs, GPUMilli: 1000}}
	res := &GoodputResult{
		MTBF:        cfg.Failures.JobMTBF(cfg.JobGPUs, cfg.JobGPUs),
		Recommended: RecommendedInterval(cfg.Failures, cfg.JobGPUs, cfg.GPUsPerNode, cfg.CkptCost),
	}
	type variant struct {
		label string
		scale float64
		every float64
	}
	var vs []variant
	for _, s := range cfg.Scales {
		vs = append(vs, variant{fmt.Sprintf("%g× recommended", s), s, 0})
	}
	for _, e := range cfg.Fixed {
		vs = append(vs, variant{"every " + FormatSeconds(e), 0, e})
	}
	for _, v := range vs {
		row := GoodputRow{Label: v.label, Scale: v.scale, GPUHoursLost: map[string]float64{}, ETTRMin: math.Inf(1), ETTRMax: math.Inf(-1)}
		ck := sim.Checkpointing{Cost: cfg.CkptCost}
		if v.scale > 0 {
			ck.Auto, ck.Scale = true, v.scale
			row.Interval = res.Recommended * v.scale
		} else {
			ck.Every = v.every
			row.Interval = v.every
		}
		row.Expected = sim.ExpectedGoodput(row.Interval, cfg.CkptCost, cfg.Failures.RestartCost, res.MTBF)
		f := cfg.Failures
		for _, seed := range cfg.Seeds {
			r, err := sim.Run(ctx, sim.Config{Shape: shape, Policy: pol, Placement: cfg.Placement, Failures: &f,
				Checkpoint: ck, Horizon: horizon, Seed: seed}, job)
			if err != nil {
				return nil, fmt.Errorf("goodput %s seed %d: %w", v.label, seed, err)
			}
			s := r.Summary
			e := s.ETTR
			row.ETTR += e / float64(len(cfg.Seeds))
			row.ETTRMin, row.ETTRMax = min(row.ETTRMin, e), max(row.ETTRMax, e)
			n := 0
			for _, c := range s.Interruptions {
				n += c
			}
			row.Interruptions += float64(n) / float64(len(cfg.Seeds))
			for k, h := range s.GPUHoursLost {
				row.GPUHoursLost[k] += h / float64(len(cfg.Seeds))
			}
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}
