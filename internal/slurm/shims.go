package slurm

import (
	"fmt"
	"io"
	"strings"
)

// The stand-ins for srun and scontrol that a rank of a job with
// spec.slurm finds first in its PATH. Each rank is already one task of
// the job, placed and given its GPUs and SLURM_* variables, so `srun CMD`
// inside the script runs CMD in that rank; `scontrol show hostnames`
// prints the job's nodes; `scontrol requeue|hold|release ID` are gangway's
// requeue, hold and release.

// srunValued are srun's options that take a value when not written as
// --name=value; the others (-l, --label, -u, --exclusive, ...) take none.
var srunValued = map[string]bool{
	"-n": true, "--ntasks": true, "-N": true, "--nodes": true, "-c": true, "--cpus-per-task": true,
	"-G": true, "--gpus": true, "--gpus-per-task": true, "--gpus-per-node": true, "--gres": true,
	"-t": true, "--time": true, "-J": true, "--job-name": true, "-p": true, "--partition": true,
	"-o": true, "--output": true, "-e": true, "--error": true, "-i": true, "--input": true,
	"-D": true, "--chdir": true, "-w": true, "--nodelist": true, "-x": true, "--exclude": true,
	"-C": true, "--constraint": true, "-m": true, "--distribution": true, "-A": true, "--account": true,
	"-q": true, "--qos": true, "--ntasks-per-node": true, "--mem": true, "--mem-per-cpu": true,
	"--mem-per-gpu": true, "--export": true, "--mpi": true, "--cpu-bind": true, "--gpu-bind": true,
	"--jobid": true, "--het-group": true, "--container-image": true, "--container-mounts": true,
	"--container-workdir": true, "--container-name": true, "--signal": true, "-W": true, "--wait": true,
	"--network": true, "--kill-on-bad-exit": false, "-K": false,
}

// SrunCommand is the command `srun ARGS` runs in a rank: ARGS without
// srun's own options. Options are read up to the first word that is not
// one (or after --).
func SrunCommand(args []string) ([]string, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 == len(args) {
				return nil, fmt.Errorf("srun: no command after --")
			}
			return args[i+1:], nil
		case !strings.HasPrefix(a, "-") || a == "-":
			return args[i:], nil
		case strings.HasPrefix(a, "--container-image") || strings.HasPrefix(a, "--container-mounts"):
			return nil, fmt.Errorf("srun %s: pyxis options are not read by gangway's srun; give the job an image: instead", a)
		case strings.Contains(a, "="):
		case len(a) > 2 && !strings.HasPrefix(a, "--"):
			// -n4: the value is attached.
		case srunValued[a]:
			i++
		}
	}
	return nil, fmt.Errorf("srun: no command to run")
}

// Scontrol answers `scontrol show hostnames [LIST]` (and hostname),
// with LIST defaulting to nodelist; addr maps a node to its address,
// printed instead of the name where known, since a job's nodes' names
// need not resolve where gangway runs. Anything else is refused, saying
// what to use.
func Scontrol(args []string, nodelist string, addr map[string]string, stdout, stderr io.Writer) int {
	if len(args) >= 2 && args[0] == "show" && (args[1] == "hostnames" || args[1] == "hostname") {
		list := nodelist
		if len(args) > 2 {
			list = strings.Join(args[2:], ",")
		}
		names, err := ExpandHosts(list)
		if err != nil {
			fmt.Fprintf(stderr, "scontrol: %v\n", err)
			return 1
		}
		for _, n := range names {
			if a := addr[n]; a != "" {
				n = a
			}
			fmt.Fprintln(stdout, n)
		}
		return 0
	}
	fmt.Fprintf(stderr, "scontrol %s: gangway's stand-in answers only \"scontrol show hostnames\" and \"scontrol requeue|hold|release JOBID\"; see gangway describe job $SLURM_JOB_ID\n", strings.Join(args, " "))
	return 1
}

// ScontrolJobs reads `scontrol requeue|hold|release JOBLIST...`, which the
// stand-in runs as `gangway requeue|hold|release ID...`: the verb and the
// IDs, JOBLIST's commas split as Slurm's are. ok false for any other
// scontrol command, or one that names no job.
func ScontrolJobs(args []string) (verb string, ids []string, ok bool) {
	if len(args) < 2 {
		return "", nil, false
	}
	switch args[0] {
	case "requeue", "hold", "release":
	default:
		return "", nil, false
	}
	for _, a := range args[1:] {
		for _, id := range strings.Split(a, ",") {
			if id != "" {
				ids = append(ids, id)
			}
		}
	}
	return args[0], ids, len(ids) > 0
}

// ParseHostAddrs reads GANGWAY_SLURM_HOSTS ("name=addr,name=addr").
func ParseHostAddrs(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out[k] = v
		}
	}
	return out
}
