// Package launch computes the environment contract each rank receives:
// torchrun's variables, Kubeflow's PET_* aliases, CUDA_VISIBLE_DEVICES and
// gangway's own GANGWAY_* variables. It is pure and imports only
// internal/api.
package launch

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/api"
)

// Input is what the contract is computed from.
type Input struct {
	Job     *api.Job
	Attempt *api.Attempt
	Rank    int
	// NodeAddr maps node name to the address other ranks reach it at.
	NodeAddr map[string]string
	// CheckpointDir is the job's checkpoint directory (already resolved).
	CheckpointDir string
}

// Env returns rank's environment variables: the user's spec.env last, so a
// user may override anything deliberately.
func Env(in Input) map[string]string {
	a := in.Attempt
	p := a.Placement[in.Rank]
	nodes := a.Nodes()
	localWorld := 0
	for _, q := range a.Placement {
		if q.Node == p.Node {
			localWorld++
		}
	}
	gpus := make([]string, len(p.GPUs))
	for i, g := range p.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	resume := ""
	if a.ResumeFrom != nil {
		resume = a.ResumeFrom.Path
	}
	itoa := strconv.Itoa
	env := map[string]string{
		"RANK":                 itoa(in.Rank),
		"LOCAL_RANK":           itoa(p.LocalRank),
		"WORLD_SIZE":           itoa(len(a.Placement)),
		"LOCAL_WORLD_SIZE":     itoa(localWorld),
		"NODE_RANK":            itoa(p.NodeRank),
		"GROUP_RANK":           itoa(p.NodeRank),
		"NNODES":               itoa(len(nodes)),
		"MASTER_ADDR":          a.MasterAddr,
		"MASTER_PORT":          itoa(a.MasterPort),
		"CUDA_VISIBLE_DEVICES": strings.Join(gpus, ","),
		// Kubeflow's training-operator names, for scripts written for it.
		"PET_NNODES":             itoa(len(nodes)),
		"PET_NODE_RANK":          itoa(p.NodeRank),
		"PET_NPROC_PER_NODE":     itoa(localWorld),
		"PET_MASTER_ADDR":        a.MasterAddr,
		"PET_MASTER_PORT":        itoa(a.MasterPort),
		"GANGWAY_JOB_ID":         in.Job.ID,
		"GANGWAY_JOB_NAME":       in.Job.Spec.Name,
		"GANGWAY_ATTEMPT":        itoa(a.Number),
		"GANGWAY_NODE":           p.Node,
		"GANGWAY_NODE_ADDR":      in.NodeAddr[p.Node],
		"GANGWAY_CHECKPOINT_DIR": in.CheckpointDir,
		"GANGWAY_RESUME_FROM":    resume,
		// Until the topology-aware scheduler assigns a grid, every rank is
		// a data-parallel replica.
		"GANGWAY_TP_RANK": "0", "GANGWAY_TP_SIZE": "1",
		"GANGWAY_PP_RANK": "0", "GANGWAY_PP_SIZE": "1",
		"GANGWAY_DP_RANK": itoa(in.Rank), "GANGWAY_DP_SIZE": itoa(len(a.Placement)),
	}
	if a.ResumeFrom != nil {
		env["GANGWAY_RESUME_STEP"] = strconv.FormatInt(a.ResumeFrom.Step, 10)
	}
	for k, v := range in.Job.Spec.Env {
		env[k] = v
	}
	return env
}

// CheckpointDir resolves a job's checkpoint directory: the spec's, or root
// joined with the job ID.
func CheckpointDir(j *api.Job, root string) string {
	if j.Spec.CheckpointDir != "" {
		return j.Spec.CheckpointDir
	}
	return filepath.Join(root, j.ID)
}
