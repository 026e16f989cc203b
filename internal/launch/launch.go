// Package launch computes the contract each rank receives: torchrun's
// variables, Kubeflow's PET_* aliases, Slurm's SLURM_* (spec.slurm),
// CUDA_VISIBLE_DEVICES, NCCL settings
// from the node's NICs, gangway's own GANGWAY_* variables, and in per-node
// mode the node-level arguments of torchrun or DeepSpeed. It is pure.
//
// It imports the standard library, internal/api and internal/slurm.
package launch

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/slurm"
)

// Input is what the contract is computed from.
type Input struct {
	Job     *api.Job
	Attempt *api.Attempt
	// Rank is the rank (per-rank launch) or the node's first rank
	// (per-node launch).
	Rank int
	// Nodes maps node name to its record (address, launch env).
	Nodes map[string]*api.Node
	// CheckpointDir is the job's checkpoint directory (already resolved).
	CheckpointDir string
}

// Processes returns the ranks that get a process of their own: every rank,
// or in per-node modes and in a preflight test (one probe per node) the
// first rank of each node, in node-rank order.
func Processes(j *api.Job, a *api.Attempt) []int {
	if !j.Spec.Launch.PerNode() && a.Preflight == nil {
		out := make([]int, len(a.Placement))
		for i := range out {
			out[i] = i
		}
		return out
	}
	first := map[int]int{}
	for _, p := range a.Placement {
		if r, ok := first[p.NodeRank]; !ok || p.Rank < r {
			first[p.NodeRank] = p.Rank
		}
	}
	out := make([]int, len(first))
	for nr, r := range first {
		out[nr] = r
	}
	return out
}

// nodeRanks returns the placements on node, in local-rank order.
func nodeRanks(a *api.Attempt, node string) []api.RankPlacement {
	var out []api.RankPlacement
	for _, p := range a.Placement {
		if p.Node == node {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LocalRank < out[j].LocalRank })
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Env returns the process's environment: gangway's variables, then the
// node's launch env (NCCL), then the user's spec.env, which may tune the
// node's NCCL settings but set none of gangway's (validation refuses the
// names api.LaunchEnv and api.LaunchEnvPrefixes give; a test holds Env
// to them).
func Env(in Input) map[string]string {
	a := in.Attempt
	p := a.Placement[in.Rank]
	nodes := a.Nodes()
	local := nodeRanks(a, p.Node)
	itoa := strconv.Itoa
	env := map[string]string{
		"WORLD_SIZE":       itoa(len(a.Placement)),
		"LOCAL_WORLD_SIZE": itoa(len(local)),
		"NODE_RANK":        itoa(p.NodeRank),
		"GROUP_RANK":       itoa(p.NodeRank),
		"NNODES":           itoa(len(nodes)),
		"MASTER_ADDR":      a.MasterAddr,
		"MASTER_PORT":      itoa(a.MasterPort),
		// Kubeflow's training-operator names, for scripts written for it.
		"PET_NNODES":             itoa(len(nodes)),
		"PET_NODE_RANK":          itoa(p.NodeRank),
		"PET_NPROC_PER_NODE":     itoa(len(local)),
		"PET_MASTER_ADDR":        a.MasterAddr,
		"PET_MASTER_PORT":        itoa(a.MasterPort),
		"GANGWAY_JOB_ID":         in.Job.ID,
		"GANGWAY_JOB_NAME":       in.Job.Spec.Name,
		"GANGWAY_ATTEMPT":        itoa(a.Number),
		"GANGWAY_NODE":           p.Node,
		"GANGWAY_CHECKPOINT_DIR": in.CheckpointDir,
		"GANGWAY_RESUME_FROM":    "",
	}
	if n := in.Nodes[p.Node]; n != nil {
		env["GANGWAY_NODE_ADDR"] = n.Address
		if len(n.GPUs) > 0 {
			env["GANGWAY_GPU_MODEL"] = n.GPUs[0].Model
		}
	}
	if t := in.Job.Array; t != nil {
		env["GANGWAY_ARRAY_JOB_ID"] = t.ID
		env["GANGWAY_ARRAY_TASK_ID"] = itoa(t.Index)
		env["GANGWAY_ARRAY_TASK_COUNT"] = itoa(t.Count)
	}
	if a.ResumeFrom != nil {
		env["GANGWAY_RESUME_FROM"] = a.ResumeFrom.Path
		env["GANGWAY_RESUME_STEP"] = strconv.FormatInt(a.ResumeFrom.Step, 10)
	}
	tp, pp, dp := 1, 1, len(a.Placement)
	if g := a.Grid; g != nil {
		tp, pp, dp = g.TP, g.PP, g.DP
	}
	env["GANGWAY_TP_SIZE"], env["GANGWAY_PP_SIZE"], env["GANGWAY_DP_SIZE"] = itoa(tp), itoa(pp), itoa(dp)
	if in.Job.Spec.Launch.PerNode() {
		// The launcher numbers the node's ranks itself; it gets every GPU
		// of the node's ranks.
		var gpus []int
		for _, q := range local {
			gpus = append(gpus, q.GPUs...)
		}
		env["CUDA_VISIBLE_DEVICES"] = joinInts(gpus)
	} else {
		env["RANK"] = itoa(in.Rank)
		env["LOCAL_RANK"] = itoa(p.LocalRank)
		env["CUDA_VISIBLE_DEVICES"] = joinInts(p.GPUs)
		env["GANGWAY_TP_RANK"], env["GANGWAY_PP_RANK"], env["GANGWAY_DP_RANK"] = itoa(p.TP), itoa(p.PP), itoa(p.DP)
		if a.Grid == nil {
			env["GANGWAY_DP_RANK"] = itoa(in.Rank)
		}
		if p.Milli > 0 {
			// A time-shared slice of one GPU; MPS honours the percentage.
			env["GANGWAY_GPU_MILLI"] = itoa(p.Milli)
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = itoa(max(1, p.Milli/10))
		}
		if p.MIGProfile != "" {
			env["GANGWAY_MIG_PROFILE"] = p.MIGProfile
			env["GANGWAY_MIG_START"] = itoa(p.MIGStart)
		}
	}
	if in.Job.Spec.Slurm {
		slurmEnv(env, in, p, local)
	}
	if n := in.Nodes[p.Node]; n != nil {
		for k, v := range n.LaunchEnv {
			env[k] = v
		}
	}
	for k, v := range in.Job.Spec.Env {
		env[k] = v
	}
	return env
}

// Command returns the process's command line and any files to write next
// to it. Per-rank and per-node launches run the spec's command as is;
// torchrun and deepspeed get their node-level arguments inserted after the
// launcher.
func Command(in Input) (cmd []string, files map[string]string) {
	spec := &in.Job.Spec
	cmd = append([]string(nil), spec.Command...)
	i := api.LauncherIndex(cmd)
	if i < 0 || (spec.Launch != api.LaunchTorchrun && spec.Launch != api.LaunchDeepSpeed) {
		return cmd, nil
	}
	a := in.Attempt
	p := a.Placement[in.Rank]
	nproc := len(nodeRanks(a, p.Node))
	nnodes := len(a.Nodes())
	var args []string
	switch spec.Launch {
	case api.LaunchTorchrun:
		args = []string{
			"--nnodes=" + strconv.Itoa(nnodes), "--node_rank=" + strconv.Itoa(p.NodeRank),
			"--nproc_per_node=" + strconv.Itoa(nproc),
			"--master_addr=" + a.MasterAddr, "--master_port=" + strconv.Itoa(a.MasterPort),
		}
	case api.LaunchDeepSpeed:
		var hf strings.Builder
		for _, node := range a.Nodes() {
			addr := node
			if n := in.Nodes[node]; n != nil && n.Address != "" {
				addr = n.Address
			}
			fmt.Fprintf(&hf, "%s slots=%d\n", addr, len(nodeRanks(a, node)))
		}
		files = map[string]string{"hostfile": hf.String()}
		args = []string{
			"--hostfile=${GANGWAY_TASK_DIR}/hostfile", "--no_ssh",
			"--num_nodes=" + strconv.Itoa(nnodes), "--num_gpus=" + strconv.Itoa(nproc),
			"--node_rank=" + strconv.Itoa(p.NodeRank),
			"--master_addr=" + a.MasterAddr, "--master_port=" + strconv.Itoa(a.MasterPort),
		}
	}
	out := append(append(append([]string(nil), cmd[:i+1]...), args...), cmd[i+1:]...)
	return out, files
}

// CheckpointDir resolves a job's checkpoint directory: the spec's, or root
// joined with the job ID.
func CheckpointDir(j *api.Job, root string) string {
	if j.Spec.CheckpointDir != "" {
		return j.Spec.CheckpointDir
	}
	return filepath.Join(root, IDBucket(j.ID, 1000), j.ID)
}

// IDBucket groups sequential ids by the thousand (or by per): directories
// holding one entry per job stay small, since creating an entry in a
// directory of many thousands costs a millisecond of CPU on ext4 without
// directory indexes, and the directory never shrinks. Ids that are not
// numbers share the bucket "other".
func IDBucket(id string, per int64) string {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 0 || per <= 0 {
		return "other"
	}
	return strconv.FormatInt(n/per, 10)
}

// slurmEnv adds the SLURM_* variables a batch script and the libraries
// that read them (Lightning, NeMo, submitit) expect of a task, each rank
// being one: per node (torchrun, per-node), a node's process is its task.
func slurmEnv(env map[string]string, in Input, p api.RankPlacement, local []api.RankPlacement) {
	a, j := in.Attempt, in.Job
	itoa := strconv.Itoa
	nodes := a.Nodes()
	procID, localID, tasks, perNode := in.Rank, p.LocalRank, len(a.Placement), len(local)
	if j.Spec.Launch.PerNode() {
		procID, localID, tasks, perNode = p.NodeRank, 0, len(nodes), 1
	}
	gpus := 0
	for _, q := range local {
		gpus += len(q.GPUs)
	}
	list := slurm.CompressHosts(nodes)
	for k, v := range map[string]string{
		"SLURM_JOB_ID": j.ID, "SLURM_JOBID": j.ID, "SLURM_JOB_NAME": j.Spec.Name,
		"SLURM_JOB_PARTITION": j.Spec.Queue, "SLURM_CLUSTER_NAME": "gangway",
		"SLURM_PROCID": itoa(procID), "SLURM_LOCALID": itoa(localID), "SLURM_NODEID": itoa(p.NodeRank),
		"SLURM_NTASKS": itoa(tasks), "SLURM_NPROCS": itoa(tasks),
		"SLURM_NNODES": itoa(len(nodes)), "SLURM_JOB_NUM_NODES": itoa(len(nodes)),
		"SLURM_JOB_NODELIST": list, "SLURM_NODELIST": list, "SLURMD_NODENAME": p.Node,
		"SLURM_NTASKS_PER_NODE": itoa(perNode), "SLURM_TASKS_PER_NODE": fmt.Sprintf("%d(x%d)", perNode, len(nodes)),
		"SLURM_GPUS_ON_NODE": itoa(gpus), "SLURM_STEP_ID": "0", "SLURM_RESTART_COUNT": itoa(a.Number - 1),
		"SLURM_SUBMIT_DIR": j.Spec.WorkingDir,
	} {
		env[k] = v
	}
	// Where the nodes are, for the stand-in `scontrol show hostnames`.
	var addrs []string
	for _, n := range nodes {
		if nd := in.Nodes[n]; nd != nil && nd.Address != "" {
			addrs = append(addrs, n+"="+nd.Address)
		}
	}
	env["GANGWAY_SLURM_HOSTS"] = strings.Join(addrs, ",")
	if r := j.Spec.Resources; r != nil && r.CPUMillis > 0 {
		env["SLURM_CPUS_PER_TASK"] = itoa(int((r.CPUMillis + 999) / 1000))
	}
	if t := j.Array; t != nil {
		env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"] = t.ID, itoa(t.Index)
		env["SLURM_ARRAY_TASK_COUNT"] = itoa(t.Count)
	}
}
