package trace

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// heliosColumns are the columns of Helios' cluster_log.csv the reader
// understands; others (start_time, end_time, node_num, ...) are ignored.
var heliosOptional = []string{"job_id", "jobname", "user", "vc", "cpu_num", "state", "node_num", "start_time", "end_time", "queue"}

// ReadHelios reads the Helios trace format (cluster_log.csv of the Helios
// SC'21 artifact, and its Philly conversion): submit_time (a date-time, or
// seconds), duration (seconds) and gpu_num are required; job_id or jobname
// name the job, vc becomes Queue, cpu_num is cores. Jobs with gpu_num 0 are
// skipped unless opt.KeepCPUJobs, as the Helios simulator does.
func ReadHelios(r io.Reader, src string, opt Options) (*Trace, error) {
	t, err := newTable(r, src, []string{"submit_time", "duration", "gpu_num"}, heliosOptional, false)
	if err != nil {
		return nil, err
	}
	out := &Trace{}
	var abs []float64
	wall := false
	for n := 0; ; n++ {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var at float64
		if v, perr := strconv.ParseFloat(t.str("submit_time"), 64); perr == nil {
			if n > 0 && wall {
				return nil, t.fail("submit_time", "a number, but earlier rows hold date-times")
			}
			at = v
		} else {
			if n > 0 && !wall {
				return nil, t.fail("submit_time", "a date-time, but earlier rows hold seconds")
			}
			wall = true
			ts, err := t.instant("submit_time")
			if err != nil {
				return nil, err
			}
			if !opt.inWindow(ts) {
				out.Skipped++
				continue
			}
			at = unixSeconds(ts)
		}
		dur, err := t.float("duration", 0)
		if err != nil {
			return nil, err
		}
		gpus, err := t.int("gpu_num", 0, maxGPUs)
		if err != nil {
			return nil, err
		}
		cpus, err := t.optInt("cpu_num", 0, 0, 1<<30)
		if err != nil {
			return nil, err
		}
		if gpus == 0 && !opt.KeepCPUJobs {
			out.Skipped++
			continue
		}
		id := t.str("job_id")
		if id == "" {
			id = t.str("jobname")
		}
		if id == "" {
			id = "j" + strconv.Itoa(t.line)
		}
		out.Jobs = append(out.Jobs, Job{
			ID: id, Duration: dur, GPUs: int(gpus), GPUMilli: 1000, CPUMilli: cpus * 1000,
			Queue: t.str("vc"), User: t.str("user"), Line: t.line,
		})
		abs = append(abs, at)
	}
	return finish(out, abs, wall)
}

// LogRecord is one row of a per-job log written by the Helios simulator
// (the reference runs under shared/data/traces/reference).
type LogRecord struct {
	Name        string
	GPUs        int
	Submit      float64
	Duration    float64
	Start       float64
	End         float64
	Queue       float64
	JCT         float64
	Preemptions int
	// Nodes is the last placement: node index → GPUs, in log order.
	Nodes []NodeGPUs
	Line  int
}

// NodeGPUs is part of a placement in a Helios log.
type NodeGPUs struct {
	Node, GPUs int
}

// parseHeliosNodes parses Helios' placement column, a Python list of
// one-entry dicts: "[{21: 8}, {22: 8}]".
func parseHeliosNodes(s string) ([]NodeGPUs, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "[]" {
		return nil, nil
	}
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("%q is not a list like [{0: 1}]", truncate(s, 40))
	}
	var out []NodeGPUs
	for _, part := range strings.Split(s[1:len(s)-1], "}") {
		part = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), ","))
		if part == "" {
			continue
		}
		part = strings.TrimPrefix(part, "{")
		k, v, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want {node: gpus}", truncate(part, 40))
		}
		n, err1 := strconv.Atoi(strings.TrimSpace(k))
		g, err2 := strconv.Atoi(strings.TrimSpace(v))
		if err1 != nil || err2 != nil || n < 0 || g < 0 {
			return nil, fmt.Errorf("%q: want {node: gpus} with non-negative integers", truncate(part, 40))
		}
		out = append(out, NodeGPUs{Node: n, GPUs: g})
	}
	return out, nil
}

// ReadHeliosJobLog reads a Helios simulator job log (columns jobname,
// gpu_num, submit_time, duration, start_time, end_time, queue, jct,
// ckpt_times; others ignored). Rows keep file order.
func ReadHeliosJobLog(r io.Reader, src string) ([]LogRecord, error) {
	t, err := newTable(r, src, []string{"jobname", "gpu_num", "submit_time", "duration", "start_time", "end_time"},
		[]string{"queue", "jct", "ckpt_times", "nodes"}, false)
	if err != nil {
		return nil, err
	}
	var out []LogRecord
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		rec := LogRecord{Name: t.str("jobname"), Line: t.line}
		g, err := t.int("gpu_num", 0, maxGPUs)
		if err != nil {
			return nil, err
		}
		rec.GPUs = int(g)
		for _, f := range []struct {
			name string
			dst  *float64
		}{{"submit_time", &rec.Submit}, {"duration", &rec.Duration}, {"start_time", &rec.Start}, {"end_time", &rec.End}} {
			if *f.dst, err = t.float(f.name, 0); err != nil {
				return nil, err
			}
		}
		if t.str("queue") != "" {
			if rec.Queue, err = t.float("queue", 0); err != nil {
				return nil, err
			}
		}
		rec.JCT = rec.End - rec.Submit
		if t.str("jct") != "" {
			if rec.JCT, err = t.float("jct", 0); err != nil {
				return nil, err
			}
		}
		c, err := t.optInt("ckpt_times", 0, 0, 1<<30)
		if err != nil {
			return nil, err
		}
		rec.Preemptions = int(c)
		if rec.Nodes, err = parseHeliosNodes(t.str("nodes")); err != nil {
			return nil, t.fail("nodes", "%v", err)
		}
		out = append(out, rec)
	}
}
