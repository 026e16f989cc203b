package sim

import (
	"errors"
	"fmt"
	"math"
)

// Failures is a rate model of interruptions. Interruptions arrive as a
// Poisson process at Interruptions / (Days × GPUs) per GPU-second, each on
// a node drawn in proportion to its GPUs; its cause decides what breaks:
//
//	gpu       one GPU fails: it is cordoned for RepairGPU and the job on it
//	          stops
//	host      the node fails (host, NIC, switch): it is down for
//	          RepairHost and every job on it stops
//	software  the job on one GPU crashes; nothing needs repair
//
// A stopped job resumes from its last checkpoint after RestartCost.
type Failures struct {
	Interruptions float64 `json:"interruptions"`
	Days          float64 `json:"days"`
	GPUs          int     `json:"gpus"`
	// Shares of causes; they must sum to 1.
	GPUShare      float64 `json:"gpu_share"`
	HostShare     float64 `json:"host_share"`
	SoftwareShare float64 `json:"software_share"`
	// Mean repair times in seconds (exponentially distributed).
	RepairGPU  float64 `json:"repair_gpu_s"`
	RepairHost float64 `json:"repair_host_s"`
	// RestartCost is what one interruption costs a job besides lost
	// work: noticing it, rescheduling, relaunching and loading the
	// checkpoint, in seconds.
	RestartCost float64 `json:"restart_s"`
}

// Llama3Failures is the interruption rate of Llama 3 405B pre-training
// (Dubey et al. 2024, §3.3.4): 466 interruptions in 54 days on 16,384 H100
// GPUs, 78% attributed to hardware (58% GPU-related, 20% host and network),
// the rest software. Repair times and the restart cost are not in the
// report; the defaults here are assumptions (a GPU or host swap within a
// working day, three minutes to detect, relaunch and load a checkpoint).
func Llama3Failures() Failures {
	return Failures{
		Interruptions: 466, Days: 54, GPUs: 16384,
		GPUShare: 0.58, HostShare: 0.20, SoftwareShare: 0.22,
		RepairGPU: 8 * 3600, RepairHost: 8 * 3600,
		RestartCost: 180,
	}
}

// Validate reports the first thing wrong.
func (f Failures) Validate() error {
	switch {
	case f.Interruptions < 0 || f.Days <= 0 || f.GPUs <= 0:
		return fmt.Errorf("failures: want interruptions ≥ 0 over days > 0 on GPUs > 0 (got %v over %v days on %d)", f.Interruptions, f.Days, f.GPUs)
	case f.GPUShare < 0 || f.HostShare < 0 || f.SoftwareShare < 0 || math.Abs(f.GPUShare+f.HostShare+f.SoftwareShare-1) > 1e-6:
		return fmt.Errorf("failures: cause shares gpu %v + host %v + software %v must be non-negative and sum to 1", f.GPUShare, f.HostShare, f.SoftwareShare)
	case f.RepairGPU < 0 || f.RepairHost < 0 || f.RestartCost < 0:
		return errors.New("failures: repair and restart times must not be negative")
	}
	return nil
}

// PerGPURate is interruptions per GPU-second.
func (f Failures) PerGPURate() float64 {
	return f.Interruptions / (f.Days * 86400 * float64(f.GPUs))
}

// JobMTBF is the mean time between interruptions of a gang holding gpus
// GPUs on nodes whose GPU counts sum to nodeGPUs: GPU and software faults
// hit it through its own GPUs, host faults through its whole nodes.
func (f Failures) JobMTBF(gpus, nodeGPUs int) float64 {
	r := f.PerGPURate() * ((f.GPUShare+f.SoftwareShare)*float64(gpus) + f.HostShare*float64(nodeGPUs))
	if r <= 0 {
		return math.Inf(1)
	}
	return 1 / r
}

// DalyInterval is the checkpoint interval (seconds of work between
// checkpoints) that minimises expected wall time for a checkpoint cost
// delta and a mean time between failures m: Daly's higher-order estimate
// (FGCS 2006) of Young's sqrt(2·delta·m), or m when delta ≥ 2m.
func DalyInterval(delta, m float64) float64 {
	if math.IsInf(m, 1) {
		return math.Inf(1)
	}
	if delta <= 0 {
		return 0
	}
	if delta >= 2*m {
		return m
	}
	x := delta / (2 * m)
	return math.Sqrt(2*delta*m)*(1+math.Sqrt(x)/3+x/9) - delta
}

// ExpectedGoodput is the first-order fraction of wall time a job spends on
// useful work with checkpoint interval tau, checkpoint cost delta, restart
// cost r and MTBF m: each failure loses half an interval (plus the
// checkpoint in flight) and the restart.
func ExpectedGoodput(tau, delta, r, m float64) float64 {
	if math.IsInf(m, 1) {
		if tau <= 0 {
			return 1
		}
		return tau / (tau + delta)
	}
	if tau <= 0 {
		return 0
	}
	waste := delta/(tau+delta) + ((tau+delta)/2+r)/m
	return max(0, 1-waste)
}

// Checkpointing is how running jobs save state.
type Checkpointing struct {
	// Every is a fixed interval in seconds of work; 0 with Auto false
	// means no periodic checkpoints (a failure loses the whole run).
	Every float64 `json:"every_s,omitempty"`
	// Auto picks each job's interval with DalyInterval from its size,
	// the failure model and Cost: gangway's recommendation.
	Auto bool `json:"auto,omitempty"`
	// Scale multiplies the automatic interval (1 when 0), for sweeps
	// that show the recommendation is the best.
	Scale float64 `json:"scale,omitempty"`
	// Cost is how long writing one checkpoint stalls training, seconds.
	Cost float64 `json:"cost_s"`
}

// interval is the checkpoint interval for a gang of gpus GPUs on nodes
// holding nodeGPUs GPUs.
func (c Checkpointing) interval(f *Failures, gpus, nodeGPUs int) float64 {
	switch {
	case c.Auto && f != nil:
		tau := DalyInterval(c.Cost, f.JobMTBF(gpus, nodeGPUs))
		if c.Scale > 0 {
			tau *= c.Scale
		}
		if math.IsInf(tau, 1) {
			return 0
		}
		return tau
	case c.Auto:
		return 0
	}
	return c.Every
}

// HeliosPreemptCost is the Helios simulator's checkpoint-and-restore cost
// of one preemption: 7 s for one GPU, 30 s up to 8 GPUs, 60 s beyond.
func HeliosPreemptCost(gpus int) float64 {
	switch {
	case gpus <= 1:
		return 7
	case gpus <= 8:
		return 30
	}
	return 60
}
