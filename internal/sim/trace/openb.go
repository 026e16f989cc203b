package trace

import (
	"fmt"
	"io"
	"strings"
)

// ReadOpenbNodes reads an Alibaba openb node list: sn, cpu_milli,
// memory_mib, gpu and model (empty or "nan" for CPU-only nodes).
func ReadOpenbNodes(r io.Reader, src string) ([]Node, error) {
	t, err := newTable(r, src, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, nil, false)
	if err != nil {
		return nil, err
	}
	var out []Node
	seen := map[string]int{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		n := Node{Name: t.str("sn"), Line: t.line}
		if n.Name == "" {
			return nil, t.fail("sn", "empty node name")
		}
		if prev, dup := seen[n.Name]; dup {
			return nil, t.fail("sn", "node %q already listed on line %d", n.Name, prev)
		}
		seen[n.Name] = t.line
		if n.CPUMilli, err = t.int("cpu_milli", 0, 1<<40); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.int("memory_mib", 0, 1<<40); err != nil {
			return nil, err
		}
		g, err := t.int("gpu", 0, 64)
		if err != nil {
			return nil, err
		}
		n.GPUs = int(g)
		n.GPUModel = t.str("model")
		if strings.EqualFold(n.GPUModel, "nan") {
			n.GPUModel = ""
		}
		if n.GPUs > 0 && n.GPUModel == "" {
			return nil, t.fail("model", "node has %d GPUs but no GPU model", n.GPUs)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", src, ErrEmpty)
	}
	return out, nil
}

// ReadOpenbPods reads an Alibaba openb pod list: name, cpu_milli,
// memory_mib, num_gpu, gpu_milli (per GPU, 0..1000), gpu_spec (allowed
// models separated by '|', empty or "nan" for any), qos, pod_phase,
// creation_time, deletion_time and scheduled_time (seconds; optional). A
// pod's Submit is its creation time (its row number when the list has no
// times) and Duration its deletion minus scheduled time. Pods asking for no GPU are kept
// only with opt.KeepCPUJobs.
func ReadOpenbPods(r io.Reader, src string, opt Options) (*Trace, error) {
	t, err := newTable(r, src,
		[]string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
		[]string{"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"}, false)
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
		j := Job{ID: t.str("name"), Line: t.line, Queue: t.str("qos")}
		if j.ID == "" {
			return nil, t.fail("name", "empty pod name")
		}
		if j.CPUMilli, err = t.int("cpu_milli", 0, 1<<40); err != nil {
			return nil, err
		}
		if j.MemoryMiB, err = t.int("memory_mib", 0, 1<<40); err != nil {
			return nil, err
		}
		g, err := t.int("num_gpu", 0, 64)
		if err != nil {
			return nil, err
		}
		j.GPUs = int(g)
		m, err := t.int("gpu_milli", 0, 1000)
		if err != nil {
			return nil, err
		}
		j.GPUMilli = int(m)
		switch {
		case j.GPUs == 0:
			j.GPUMilli = 0
		case j.GPUs > 1 && j.GPUMilli != 1000:
			return nil, t.fail("gpu_milli", "%d with num_gpu %d: only single-GPU pods may share a GPU", m, j.GPUs)
		case j.GPUMilli == 0:
			return nil, t.fail("gpu_milli", "0 with num_gpu %d: a GPU pod needs a share in 1..1000", j.GPUs)
		}
		if spec := t.str("gpu_spec"); spec != "" && !strings.EqualFold(spec, "nan") {
			for _, s := range strings.Split(spec, "|") {
				if s = strings.TrimSpace(s); s == "" {
					return nil, t.fail("gpu_spec", "empty model in %q", spec)
				}
				j.GPUModels = append(j.GPUModels, s)
			}
		}
		// Lists without times (the multigpu variants) keep file order.
		created := int64(len(out.Jobs) + out.Skipped)
		if t.has("creation_time") {
			if created, err = t.int("creation_time", 0, 1<<50); err != nil {
				return nil, err
			}
		}
		start := created
		if t.str("scheduled_time") != "" {
			if start, err = t.int("scheduled_time", 0, 1<<50); err != nil {
				return nil, err
			}
		}
		if t.str("deletion_time") != "" {
			del, err := t.int("deletion_time", 0, 1<<50)
			if err != nil {
				return nil, err
			}
			if del < start {
				return nil, t.fail("deletion_time", "%d is before the pod started at %d", del, start)
			}
			j.Duration = float64(del - start)
		}
		if j.GPUs == 0 && !opt.KeepCPUJobs {
			out.Skipped++
			continue
		}
		out.Jobs = append(out.Jobs, j)
		abs = append(abs, float64(created))
	}
	return finish(out, abs, false)
}

// GPUDemand is the job's GPU request in whole GPUs (fractions for shares).
func (j *Job) GPUDemand() float64 {
	if j.GPUMilli <= 0 || j.GPUMilli >= 1000 {
		return float64(j.GPUs)
	}
	return float64(j.GPUs) * float64(j.GPUMilli) / 1000
}
