package trace

import (
	"fmt"
	"io"
)

// ReadPhilly reads the Pollux-derived Philly CSV: columns timestamp
// (submit time, "YYYY-MM-DD HH:MM:SS" UTC), duration (seconds), num_gpus,
// gpu_time (= duration × num_gpus, checked loosely) and cluster (the
// virtual cluster, kept as Queue). Jobs are named j<line>.
func ReadPhilly(r io.Reader, src string, opt Options) (*Trace, error) {
	t, err := newTable(r, src, []string{"timestamp", "duration", "num_gpus"}, []string{"gpu_time", "cluster"}, false)
	if err != nil {
		return nil, err
	}
	out := &Trace{}
	var abs []float64
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		at, err := t.instant("timestamp")
		if err != nil {
			return nil, err
		}
		dur, err := t.float("duration", 0)
		if err != nil {
			return nil, err
		}
		gpus, err := t.int("num_gpus", 0, maxGPUs)
		if err != nil {
			return nil, err
		}
		if t.has("gpu_time") && t.str("gpu_time") != "" {
			gt, err := t.float("gpu_time", 0)
			if err != nil {
				return nil, err
			}
			if want := dur * float64(gpus); gt > want*1.001+1 || gt < want*0.999-1 {
				return nil, t.fail("gpu_time", "%v does not equal duration × num_gpus = %v", gt, want)
			}
		}
		if !opt.inWindow(at) || (gpus == 0 && !opt.KeepCPUJobs) {
			out.Skipped++
			continue
		}
		out.Jobs = append(out.Jobs, Job{
			ID:       fmt.Sprintf("j%d", t.line),
			Duration: dur,
			GPUs:     int(gpus),
			GPUMilli: 1000,
			Queue:    t.str("cluster"),
			Line:     t.line,
		})
		abs = append(abs, unixSeconds(at))
	}
	return finish(out, abs, true)
}
