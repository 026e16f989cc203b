package slurm

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gangway/gangway/internal/api"
)

// BatchCommand runs a script as a rank's command: the script travels in
// the spec (no file system need be shared), is written into the rank's
// task directory and executed there, so its #! line picks the
// interpreter, with args after it as $1, $2, ...
func BatchCommand(script []byte, args []string) []string {
	cmd := []string{"/bin/sh", "-c",
		`f="$GANGWAY_TASK_DIR/batch-script" && printf '%s' "$1" > "$f" && chmod 700 "$f" && shift && exec "$f" "$@"`,
		"sbatch", string(script)}
	return append(cmd, args...)
}

// Spec turns sbatch options (and a script, or --wrap) into a job spec,
// with notes on what was read differently or left out. name is the
// script's file name (the job's default name, as sbatch's).
func Spec(o *Options, script *Script, name string, args []string) (*api.JobSpec, []string, error) {
	notes := append([]string(nil), o.Ignored...)
	spec := &api.JobSpec{Name: o.Name, Queue: o.Partition, Array: o.Array, Slurm: true}
	if spec.Name == "" && name != "" {
		spec.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	switch {
	case script != nil && o.Wrap != "":
		return nil, nil, fmt.Errorf("--wrap: give a script or --wrap, not both")
	case script != nil:
		spec.Command = BatchCommand(script.Body, args)
	case o.Wrap != "":
		spec.Command = []string{"/bin/sh", "-c", o.Wrap}
	default:
		return nil, nil, fmt.Errorf("no script and no --wrap: nothing to run")
	}

	// The gang: nodes × tasks per node, as sbatch lays tasks out.
	nodes := max(o.Nodes, 1)
	switch {
	case o.TasksPerNode > 0:
		spec.Ranks, spec.RanksPerNode = nodes*o.TasksPerNode, o.TasksPerNode
		if o.Tasks > 0 && o.Tasks != spec.Ranks {
			return nil, nil, fmt.Errorf("--ntasks=%d: --nodes=%d × --ntasks-per-node=%d makes %d", o.Tasks, nodes, o.TasksPerNode, spec.Ranks)
		}
	case o.Tasks > 0:
		spec.Ranks = o.Tasks
		if o.Nodes > 0 {
			if o.Tasks%o.Nodes != 0 {
				return nil, nil, fmt.Errorf("--ntasks=%d does not divide over --nodes=%d; gangway places the same number of ranks on every node: give --ntasks-per-node", o.Tasks, o.Nodes)
			}
			spec.RanksPerNode = o.Tasks / o.Nodes
		}
	default:
		spec.Ranks = nodes // one task per node, sbatch's default
		if nodes > 1 {
			spec.RanksPerNode = 1
		}
	}
	perNode := spec.RanksPerNode
	if perNode == 0 {
		perNode = spec.Ranks
	}
	switch {
	case o.GPUsPerTask > 0:
		spec.GPUsPerRank = o.GPUsPerTask
	case o.GPUsPerNode > 0:
		if o.GPUsPerNode%perNode != 0 {
			return nil, nil, fmt.Errorf("--gres=gpu:%d: %d GPUs per node do not divide over %d tasks per node", o.GPUsPerNode, o.GPUsPerNode, perNode)
		}
		spec.GPUsPerRank = o.GPUsPerNode / perNode
	case o.GPUs > 0:
		if o.GPUs%spec.Ranks != 0 {
			return nil, nil, fmt.Errorf("--gpus=%d do not divide over %d tasks", o.GPUs, spec.Ranks)
		}
		spec.GPUsPerRank = o.GPUs / spec.Ranks
	default:
		spec.GPUsPerRank = 1
		notes = append(notes, "no GPUs asked for (--gpus-per-task, --gres=gpu:N): each rank gets one, gangway's least")
	}
	if spec.GPUsPerRank == 0 {
		return nil, nil, fmt.Errorf("fewer GPUs than tasks: each of gangway's ranks holds at least one GPU")
	}

	if o.Time != "" {
		switch strings.ToUpper(o.Time) {
		case "UNLIMITED", "INFINITE":
		default:
			d, err := api.ParseDuration(o.Time)
			if err != nil {
				return nil, nil, fmt.Errorf("--time: %w", err)
			}
			spec.TimeLimit = api.Duration(d)
		}
	}
	r := &api.Resources{}
	if o.CPUsPerTask > 0 {
		r.CPUMillis = int64(o.CPUsPerTask) * 1000
	}
	switch {
	case o.Mem > 0:
		r.MemoryBytes = (o.Mem + int64(perNode) - 1) / int64(perNode) // --mem is per node
	case o.MemPerCPU > 0:
		r.MemoryBytes = o.MemPerCPU * int64(max(o.CPUsPerTask, 1))
	case o.MemPerGPU > 0:
		r.MemoryBytes = o.MemPerGPU * int64(spec.GPUsPerRank)
	}
	if r.CPUMillis > 0 || r.MemoryBytes > 0 {
		spec.Resources = r
	}
	if o.Requeue != nil && !*o.Requeue {
		zero := 0
		spec.MaxRestarts = &zero
	}
	if o.Signal != "" {
		sig, at, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(o.Signal, "R:"), "B:"), "@")
		if !strings.HasPrefix(sig, "SIG") {
			sig = "SIG" + sig
		}
		spec.CheckpointSignal = sig
		if at != "" {
			notes = append(notes, fmt.Sprintf("--signal=%s: gangway sends %s when it preempts the job, not %ss before its time limit", o.Signal, sig, at))
		}
	}
	if o.Constraint != "" {
		if strings.ContainsAny(o.Constraint, "|[]*") {
			return nil, nil, fmt.Errorf("--constraint=%s: gangway takes features joined by & or , (all required), not | or counts", o.Constraint)
		}
		spec.NodeSelector = map[string]string{}
		for _, f := range strings.FieldsFunc(o.Constraint, func(r rune) bool { return r == '&' || r == ',' }) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				v = "true" // a Slurm feature: a node label set to true
			}
			spec.NodeSelector[k] = v
		}
	}
	for _, f := range []struct{ flag, val string }{{"--output", o.Output}, {"--error", o.Error}} {
		switch f.val {
		case "":
		case "/dev/null":
			if o.Output == "/dev/null" && (o.Error == "" || o.Error == "/dev/null") {
				spec.Output = api.OutputDiscard
			}
		default:
			notes = append(notes, fmt.Sprintf("%s=%s: gangway keeps each rank's stdout and stderr itself; read them with gangway logs JOB", f.flag, f.val))
		}
	}
	if o.Exclusive {
		notes = append(notes, "--exclusive: gangway never shares a GPU unless a job asks for part of one (gpuMilli)")
	}
	if o.Dependency != "" {
		if _, err := api.ParseDependency(o.Dependency); err != nil {
			return nil, nil, fmt.Errorf("--dependency: %w", err)
		}
		spec.Dependency = o.Dependency
	}
	spec.Hold = o.Hold
	return spec, notes, nil
}
