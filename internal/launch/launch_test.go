package launch

import (
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

func testAttempt() *api.Attempt {
	return &api.Attempt{
		Number: 3, MasterAddr: "10.0.0.1", MasterPort: 29600,
		ResumeFrom: &api.Checkpoint{Step: 40, Path: "/ck/12/40"},
		Grid:       &api.Grid{TP: 2, PP: 1, DP: 2},
		Placement: []api.RankPlacement{
			{Rank: 0, Node: "a", NodeRank: 0, LocalRank: 0, GPUs: []int{0}, TP: 0, DP: 0},
			{Rank: 1, Node: "a", NodeRank: 0, LocalRank: 1, GPUs: []int{1}, TP: 1, DP: 0},
			{Rank: 2, Node: "b", NodeRank: 1, LocalRank: 0, GPUs: []int{4}, TP: 0, DP: 1},
			{Rank: 3, Node: "b", NodeRank: 1, LocalRank: 1, GPUs: []int{5}, TP: 1, DP: 1},
		},
	}
}

var testNodes = map[string]*api.Node{
	"a": {Name: "a", Address: "10.0.0.1", LaunchEnv: map[string]string{"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0:1"}},
	"b": {Name: "b", Address: "10.0.0.2", LaunchEnv: map[string]string{"NCCL_SOCKET_IFNAME": "=eth1"}},
}

func TestEnvPerRank(t *testing.T) {
	j := &api.Job{ID: "12", Spec: api.JobSpec{Name: "llm", Env: map[string]string{"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=ib0"}}}
	got := Env(Input{Job: j, Attempt: testAttempt(), Rank: 3, Nodes: testNodes, CheckpointDir: "/ck/12"})
	want := map[string]string{
		"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1", "GROUP_RANK": "1",
		"NNODES": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600", "CUDA_VISIBLE_DEVICES": "5",
		"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29600",
		"GANGWAY_JOB_ID": "12", "GANGWAY_JOB_NAME": "llm", "GANGWAY_ATTEMPT": "3", "GANGWAY_NODE": "b", "GANGWAY_NODE_ADDR": "10.0.0.2",
		"GANGWAY_CHECKPOINT_DIR": "/ck/12", "GANGWAY_RESUME_FROM": "/ck/12/40", "GANGWAY_RESUME_STEP": "40",
		"GANGWAY_TP_RANK": "1", "GANGWAY_TP_SIZE": "2", "GANGWAY_PP_RANK": "0", "GANGWAY_PP_SIZE": "1",
		"GANGWAY_DP_RANK": "1", "GANGWAY_DP_SIZE": "2",
		// The node's NCCL settings, then the user's env on top.
		"NCCL_SOCKET_IFNAME": "=ib0", "NCCL_DEBUG": "INFO",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	if got := Processes(j, testAttempt()); !cmp.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("Processes = %v, want every rank", got)
	}
	// An array task also learns its place in the array; other jobs do not.
	if _, ok := got["GANGWAY_ARRAY_TASK_ID"]; ok {
		t.Error("a job outside any array got GANGWAY_ARRAY_TASK_ID")
	}
	j.Array = &api.ArrayTask{ID: "10", Index: 7, Count: 20}
	got = Env(Input{Job: j, Attempt: testAttempt(), Rank: 3, Nodes: testNodes, CheckpointDir: "/ck/12"})
	if got["GANGWAY_ARRAY_JOB_ID"] != "10" || got["GANGWAY_ARRAY_TASK_ID"] != "7" || got["GANGWAY_ARRAY_TASK_COUNT"] != "20" {
		t.Errorf("array task env = %q %q %q", got["GANGWAY_ARRAY_JOB_ID"], got["GANGWAY_ARRAY_TASK_ID"], got["GANGWAY_ARRAY_TASK_COUNT"])
	}
}

func TestPerNodeLaunchers(t *testing.T) {
	a := testAttempt()
	tests := []struct {
		name      string
		launch    api.LaunchMode
		cmd       []string
		wantCmd   []string
		wantFiles map[string]string
	}{
		{
			name: "torchrun", launch: api.LaunchTorchrun, cmd: []string{"torchrun", "train.py", "--lr", "3e-4"},
			wantCmd: []string{"torchrun", "--nnodes=2", "--node_rank=1", "--nproc_per_node=2", "--master_addr=10.0.0.1",
				"--master_port=29600", "train.py", "--lr", "3e-4"},
		},
		{
			name: "python -m torch.distributed.run", launch: api.LaunchTorchrun, cmd: []string{"python3", "-m", "torch.distributed.run", "t.py"},
			wantCmd: []string{"python3", "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=1", "--nproc_per_node=2",
				"--master_addr=10.0.0.1", "--master_port=29600", "t.py"},
		},
		{
			name: "deepspeed", launch: api.LaunchDeepSpeed, cmd: []string{"/opt/bin/deepspeed", "train.py"},
			wantCmd: []string{"/opt/bin/deepspeed", "--hostfile=${GANGWAY_TASK_DIR}/hostfile", "--no_ssh", "--num_nodes=2", "--num_gpus=2",
				"--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29600", "train.py"},
			wantFiles: map[string]string{"hostfile": "10.0.0.1 slots=2\n10.0.0.2 slots=2\n"},
		},
		{name: "per-node as is", launch: api.LaunchPerNode, cmd: []string{"./launch.sh"}, wantCmd: []string{"./launch.sh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &api.Job{ID: "1", Spec: api.JobSpec{Launch: tt.launch, Command: tt.cmd}}
			procs := Processes(j, a)
			if !cmp.Equal(procs, []int{0, 2}) {
				t.Fatalf("Processes = %v, want the first rank of each node", procs)
			}
			in := Input{Job: j, Attempt: a, Rank: 2, Nodes: testNodes}
			cmd, files := Command(in)
			if diff := cmp.Diff(tt.wantCmd, cmd); diff != "" {
				t.Errorf("Command (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantFiles, files); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			env := Env(in)
			if env["CUDA_VISIBLE_DEVICES"] != "4,5" || env["LOCAL_WORLD_SIZE"] != "2" || env["NODE_RANK"] != "1" {
				t.Errorf("node env: CUDA_VISIBLE_DEVICES=%q LOCAL_WORLD_SIZE=%q NODE_RANK=%q", env["CUDA_VISIBLE_DEVICES"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"])
			}
			if _, ok := env["RANK"]; ok {
				t.Errorf("per-node env sets RANK; the launcher numbers ranks")
			}
		})
	}
}

func TestCheckpointDir(t *testing.T) {
	j := &api.Job{ID: "5"}
	if got := CheckpointDir(j, "/shared/ck"); got != "/shared/ck/0/5" {
		t.Errorf("default = %q", got)
	}
	j.ID = "12345"
	if got := CheckpointDir(j, "/shared/ck"); got != "/shared/ck/12/12345" {
		t.Errorf("default for job 12345 = %q", got)
	}
	j.Spec.CheckpointDir = "/mine"
	if got := CheckpointDir(j, "/shared/ck"); got != "/mine" {
		t.Errorf("spec = %q", got)
	}
	for _, c := range []struct {
		id   string
		per  int64
		want string
	}{{"0", 100, "0"}, {"99", 100, "0"}, {"100", 100, "1"}, {"123456", 1000, "123"}, {"-4", 100, "other"}, {"x1", 100, "other"}, {"7", 0, "other"}} {
		if got := IDBucket(c.id, c.per); got != c.want {
			t.Errorf("IDBucket(%q, %d) = %q; want %q", c.id, c.per, got, c.want)
		}
	}
}

// TestEnvIsTheContract: every variable Env sets, in every mode, is one
// api.InLaunchContract names, so that a spec's env is refused any of them
// (the node's NCCL settings aside, which a user may tune).
func TestEnvIsTheContract(t *testing.T) {
	a := testAttempt()
	a.Placement[2].Milli, a.Placement[3].MIGProfile = 250, "1g.10gb"
	for _, launch := range []api.LaunchMode{api.LaunchPerRank, api.LaunchPerNode} {
		j := &api.Job{ID: "12", Spec: api.JobSpec{Launch: launch, Slurm: true, Resources: &api.Resources{CPUMillis: 2000}}, Array: &api.ArrayTask{ID: "10", Index: 1, Count: 2}}
		for rank := range a.Placement {
			for k := range Env(Input{Job: j, Attempt: a, Rank: rank, Nodes: testNodes}) {
				if _, fromNode := testNodes[a.Placement[rank].Node].LaunchEnv[k]; !fromNode && !api.InLaunchContract(k) {
					t.Errorf("%s rank %d: Env sets %s, which api.LaunchEnv does not name", launch, rank, k)
				}
			}
		}
	}
}

// TestSlurmEnv: a job with spec.slurm gets, per rank, the variables a
// Slurm task has, as Lightning's SLURMEnvironment and scripts read them;
// a job without it gets none (Lightning would take them over torchrun's).
func TestSlurmEnv(t *testing.T) {
	j := &api.Job{ID: "12", Spec: api.JobSpec{Name: "llm", Queue: "gpu", Slurm: true, WorkingDir: "/home/u/p"}}
	got := Env(Input{Job: j, Attempt: testAttempt(), Rank: 3, Nodes: testNodes})
	for k, want := range map[string]string{
		"SLURM_JOB_ID": "12", "SLURM_JOB_NAME": "llm", "SLURM_JOB_PARTITION": "gpu", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
		"SLURM_NODEID": "1", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a,b", "SLURMD_NODENAME": "b",
		"SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_GPUS_ON_NODE": "2", "SLURM_RESTART_COUNT": "2",
		"SLURM_SUBMIT_DIR": "/home/u/p",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	j.Spec.Launch = api.LaunchTorchrun
	got = Env(Input{Job: j, Attempt: testAttempt(), Rank: 2, Nodes: testNodes})
	if got["SLURM_PROCID"] != "1" || got["SLURM_NTASKS"] != "2" || got["SLURM_LOCALID"] != "0" {
		t.Errorf("per node: PROCID %s NTASKS %s LOCALID %s; want the node as the task (1, 2, 0)", got["SLURM_PROCID"], got["SLURM_NTASKS"], got["SLURM_LOCALID"])
	}
	j.Spec.Slurm = false
	for k := range Env(Input{Job: j, Attempt: testAttempt(), Rank: 0, Nodes: testNodes}) {
		if strings.HasPrefix(k, "SLURM") {
			t.Errorf("%s set for a job without spec.slurm", k)
		}
	}
}
