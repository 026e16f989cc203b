package launch

import (
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

func TestEnv(t *testing.T) {
	j := &api.Job{ID: "12", Spec: api.JobSpec{Name: "llm", Env: map[string]string{"NCCL_DEBUG": "INFO", "MASTER_PORT": "1"}}}
	a := &api.Attempt{
		Number: 3, MasterAddr: "10.0.0.1", MasterPort: 29600,
		ResumeFrom: &api.Checkpoint{Step: 40, Path: "/ck/12/40"},
		Placement: []api.RankPlacement{
			{Rank: 0, Node: "a", NodeRank: 0, LocalRank: 0, GPUs: []int{0, 1}},
			{Rank: 1, Node: "a", NodeRank: 0, LocalRank: 1, GPUs: []int{2, 3}},
			{Rank: 2, Node: "b", NodeRank: 1, LocalRank: 0, GPUs: []int{4, 5}},
		},
	}
	got := Env(Input{Job: j, Attempt: a, Rank: 2, NodeAddr: map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}, CheckpointDir: "/ck/12"})
	want := map[string]string{
		"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "1", "GROUP_RANK": "1",
		"NNODES": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1", "CUDA_VISIBLE_DEVICES": "4,5",
		"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29600",
		"GANGWAY_JOB_ID": "12", "GANGWAY_JOB_NAME": "llm", "GANGWAY_ATTEMPT": "3", "GANGWAY_NODE": "b", "GANGWAY_NODE_ADDR": "10.0.0.2",
		"GANGWAY_CHECKPOINT_DIR": "/ck/12", "GANGWAY_RESUME_FROM": "/ck/12/40", "GANGWAY_RESUME_STEP": "40",
		"GANGWAY_TP_RANK": "0", "GANGWAY_TP_SIZE": "1", "GANGWAY_PP_RANK": "0", "GANGWAY_PP_SIZE": "1",
		"GANGWAY_DP_RANK": "2", "GANGWAY_DP_SIZE": "3",
		"NCCL_DEBUG": "INFO",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
}

func TestCheckpointDir(t *testing.T) {
	j := &api.Job{ID: "5"}
	if got := CheckpointDir(j, "/shared/ck"); got != "/shared/ck/5" {
		t.Errorf("default = %q", got)
	}
	j.Spec.CheckpointDir = "/mine"
	if got := CheckpointDir(j, "/shared/ck"); got != "/mine" {
		t.Errorf("spec = %q", got)
	}
}
