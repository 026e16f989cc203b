package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// JobSpec is what a user submits: a gang of ranks that start together or not
// at all. Zero values mean "use the default" (see Default).
type JobSpec struct {
	// Name is a label for people; it need not be unique.
	Name string `json:"name,omitempty"`
	// Queue is the tenant line the job waits in. Default "default".
	Queue string `json:"queue,omitempty"`
	// Priority orders jobs within the scheduler; higher goes first.
	Priority int `json:"priority,omitempty"`
	// Ranks is the world size: how many processes the gang has.
	Ranks int `json:"ranks"`
	// GPUsPerRank is how many whole GPUs each rank gets. Default 1.
	GPUsPerRank int `json:"gpusPerRank,omitempty"`
	// RanksPerNode fixes how many ranks share a node. Zero lets the
	// scheduler pack the gang onto the fewest nodes.
	RanksPerNode int `json:"ranksPerNode,omitempty"`
	// Command is the program and its arguments, run once per rank.
	Command []string `json:"command"`
	// Env is added to every rank's environment after gangway's variables.
	Env map[string]string `json:"env,omitempty"`
	// WorkingDir is where ranks start. Default: the agent's task directory
	// (gangway submit -- CMD sets the submitter's).
	WorkingDir string `json:"workingDir,omitempty"`
	// NodeSelector restricts placement to nodes carrying all these labels.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Labels are the job's, for people and for selecting jobs (gangway
	// get jobs -l team=nlp): keys and values as Kubernetes' labels.
	Labels map[string]string `json:"labels,omitempty"`
	// MaxRestarts bounds new attempts after failures. Default 3; 0 means
	// never restart.
	MaxRestarts *int `json:"maxRestarts,omitempty"`
	// RestartBackoff is the wait before the first restart; it doubles per
	// restart up to 5m. Default 1s.
	RestartBackoff Duration `json:"restartBackoff,omitempty"`
	// HangTimeout fails an attempt whose progress file stays silent this
	// long once the first line arrived. Zero disables the check.
	HangTimeout Duration `json:"hangTimeout,omitempty"`
	// StragglerCheck "off" exempts the job from the server's straggler
	// check (--straggler-action): pipeline stages of uneven cost, or
	// ranks with work of different kinds, would read as stragglers. ""
	// or "on": checked.
	StragglerCheck string `json:"stragglerCheck,omitempty"`
	// TerminationGracePeriod is how long ranks get between SIGTERM and
	// SIGKILL when stopped. Default 10s.
	TerminationGracePeriod Duration `json:"terminationGracePeriod,omitempty"`
	// CheckpointDir is where ranks write checkpoints; it must be on a file
	// system every node shares. Default: the server's checkpoint root
	// joined with the job ID.
	CheckpointDir string `json:"checkpointDir,omitempty"`
	// Resources limits each rank's memory and CPU where the node's cgroups
	// allow it.
	Resources *Resources `json:"resources,omitempty"`
	// Launch is how ranks become processes: "per-rank" (default: gangway
	// starts every rank), "per-node" (one process per node; the command is
	// a launcher that starts the node's ranks), "torchrun" or "deepspeed"
	// (per node, with the launcher's node-level arguments inserted).
	Launch LaunchMode `json:"launch,omitempty"`
	// Parallelism is the tensor/pipeline/data-parallel grid, or "auto" to
	// let the planner choose it for Model.
	Parallelism *Parallelism `json:"parallelism,omitempty"`
	// Model names the model being trained, for the planner.
	Model *ModelRef `json:"model,omitempty"`
	// Owner names what created the job ("deployment/NAME"); empty for
	// jobs users submit.
	Owner string `json:"owner,omitempty"`
	// User is who submitted the job; set by the server from the caller's
	// credentials, never by the spec.
	User string `json:"user,omitempty"`
	// RunAs is the Unix account the ranks run under; set by the server from
	// the caller's credentials. Nil: the agent's own (an admin's job).
	RunAs *RunAs `json:"runAs,omitempty"`
	// SecretEnv adds variables whose values the server reads, when it
	// starts each attempt, from files under its --secrets-dir (the
	// submitting user's directory there): NAME: file. The values never sit
	// in the spec, and only agents see them.
	SecretEnv map[string]string `json:"secretEnv,omitempty"`
	// Topology constrains how far the gang may spread: required and
	// preferred levels (nvlink-domain, leaf, spine).
	Topology *TopologySpec `json:"topology,omitempty"`
	// TimeLimit is how long an attempt may run; it also tells backfill
	// when the job's GPUs come free. Zero: unlimited.
	TimeLimit Duration `json:"timeLimit,omitempty"`
	// Preemptible lets the scheduler stop the job for a higher-priority
	// gang or a queue reclaiming its guarantee. Default true.
	Preemptible *bool `json:"preemptible,omitempty"`
	// CheckpointSignal is sent to every rank when the job is preempted,
	// PreemptionGracePeriod before it is stopped. Default SIGUSR1, 30s.
	CheckpointSignal      string   `json:"checkpointSignal,omitempty"`
	PreemptionGracePeriod Duration `json:"preemptionGracePeriod,omitempty"`
	// GPUMilli asks for a time-shared fraction of one GPU per rank, in
	// thousandths (250 = a quarter); MIGProfile for a MIG instance
	// ("1g.10gb"). Either replaces gpusPerRank.
	GPUMilli   int    `json:"gpuMilli,omitempty"`
	MIGProfile string `json:"migProfile,omitempty"`
	// Output is what happens to the ranks' stdout and stderr: "keep"
	// (default: a log file each, for gangway logs) or "discard" (both to
	// /dev/null, as sbatch -o /dev/null; for jobs that log elsewhere).
	Output string `json:"output,omitempty"`
	// Logs bounds what each rank's kept stdout and stderr leave on the
	// node's disk. Absent: the node's bounds (5 files of 10 MiB).
	Logs *LogSpec `json:"logs,omitempty"`
	// Hold submits the job held: it waits, placed by nothing, until
	// `gangway release` (sbatch --hold).
	Hold bool `json:"hold,omitempty"`
	// Dependency holds the job back until other jobs have started,
	// ended or succeeded, in Slurm's syntax: "afterok:12:13",
	// "afterany:14,afterok:15", "singleton" (ParseDependency). A job whose
	// dependency can no longer hold (afterok on a job that failed) is
	// cancelled, saying why, as Slurm's kill_invalid_depend does.
	Dependency string `json:"dependency,omitempty"`
	// Slurm puts gangway's stand-ins for srun and scontrol (show
	// hostnames) first in the ranks' PATH, for a batch script written for
	// Slurm: each rank runs the script, and its srun line runs the step's
	// command in that rank. `gangway submit script.sh` sets it.
	Slurm bool `json:"slurm,omitempty"`
	// Array submits one job per index, as Slurm's --array does:
	// "0-999", "1,3,5-9", "0-15:4", with "%N" to run at most N at once.
	// Each task gets GANGWAY_ARRAY_TASK_ID; see ParseArray.
	Array string `json:"array,omitempty"`
	// Image runs every rank in a container of this image through the
	// node's Docker engine ("nvcr.io/nvidia/pytorch:24.05-py3"); empty:
	// ranks are plain processes. The command is the container's, run
	// with the rank's environment, GPUs, checkpoint and working
	// directories (see docs/design.md, "Containers").
	Image string `json:"image,omitempty"`
	// ImagePullPolicy is when the node pulls Image: "IfNotPresent"
	// (default), "Always" or "Never" (as Kubernetes spells them).
	ImagePullPolicy string `json:"imagePullPolicy,omitempty"`
	// ContainerNetwork is the containers' network: "host" (default: NCCL
	// over IB/RoCE wants the host's interfaces) or "bridge".
	ContainerNetwork string `json:"containerNetwork,omitempty"`
}

// Image pull policies (spec.imagePullPolicy).
const (
	PullIfNotPresent = "IfNotPresent"
	PullAlways       = "Always"
	PullNever        = "Never"
)

// Container networks (spec.containerNetwork).
const (
	NetworkHost   = "host"
	NetworkBridge = "bridge"
)

// TopologySpec is a gang's placement constraint.
type TopologySpec struct {
	Required  string `json:"required,omitempty"`
	Preferred string `json:"preferred,omitempty"`
}

// LogSpec bounds one rank's kept output: each stream keeps its current
// file and rotated ones, at most MaxFiles files of at most MaxFileBytes,
// the oldest dropped (as kubelet's container-log-max-size and -max-files).
// A zero field takes the node's default (10 MiB, 5 files).
type LogSpec struct {
	MaxFileBytes int64 `json:"maxFileBytes,omitempty"`
	MaxFiles     int   `json:"maxFiles,omitempty"`
}

// Log streams of GET /v1/jobs/{id}/logs: one of a rank's two, or
// LogStreamBoth, both merged line by line with every stderr line after
// StderrMark. The two are kept apart on the node, without timestamps: the
// merge gives what each held when asked, stdout's lines first, then the
// lines in the order they are read (within a fraction of a second of
// when they were written) while following.
const (
	LogStreamStdout = "stdout"
	LogStreamStderr = "stderr"
	LogStreamBoth   = "both"
	StderrMark      = "[stderr] "
)

// Limits of a LogSpec: up to 100 GiB per stream, and files no smaller
// than 1 KiB (smaller ones would rotate at every few writes).
const (
	MinLogFileBytes = 1 << 10
	MaxLogFileBytes = 1 << 30
	MaxLogFiles     = 100
)

// Output modes.
const (
	OutputKeep    = "keep"
	OutputDiscard = "discard"
)

// IsPreemptible applies the default.
func (s *JobSpec) IsPreemptible() bool { return s.Preemptible == nil || *s.Preemptible }

// Signal returns the checkpoint signal's name, defaulted.
func (s *JobSpec) Signal() string {
	if s.CheckpointSignal == "" {
		return "SIGUSR1"
	}
	return s.CheckpointSignal
}

// PreemptionGrace returns the grace period, defaulted.
func (s *JobSpec) PreemptionGrace() time.Duration {
	if s.PreemptionGracePeriod == 0 {
		return 30 * time.Second
	}
	return s.PreemptionGracePeriod.D()
}

// LaunchMode says how ranks become processes.
type LaunchMode string

// Launch modes.
const (
	LaunchPerRank   LaunchMode = "per-rank"
	LaunchPerNode   LaunchMode = "per-node"
	LaunchTorchrun  LaunchMode = "torchrun"
	LaunchDeepSpeed LaunchMode = "deepspeed"
)

// PerNode reports whether the mode starts one process per node.
func (m LaunchMode) PerNode() bool { return m != "" && m != LaunchPerRank }

// Parallelism is a gang's parallel grid over its ranks: TP*PP*DP equals
// ranks. A zero size is derived (TP and PP default to 1; DP fills the rest).
type Parallelism struct {
	// Auto asks the planner for the grid at admission (needs Model).
	Auto bool `json:"auto,omitempty"`
	TP   int  `json:"tp,omitempty"`
	PP   int  `json:"pp,omitempty"`
	DP   int  `json:"dp,omitempty"`
	// Order numbers the grid: "tp-pp-dp" (default; Megatron's
	// --use-tp-pp-dp-mapping, torch DeviceMesh) or "tp-dp-pp" (Megatron's
	// default order).
	Order string `json:"order,omitempty"`
	// Predicted figures the planner recorded at admission.
	Predicted *Prediction `json:"predicted,omitempty"`
}

// UnmarshalJSON accepts the string "auto" as well as an object.
func (p *Parallelism) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "auto" {
			return fmt.Errorf("parallelism %q: want \"auto\" or {tp, pp, dp}", s)
		}
		*p = Parallelism{Auto: true}
		return nil
	}
	type plain Parallelism
	var v plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("parallelism: %w", err)
	}
	*p = Parallelism(v)
	return nil
}

// Prediction is what the planner expects of a job's configuration.
type Prediction struct {
	TokensPerSecPerGPU float64 `json:"tokensPerSecPerGPU"`
	StepSeconds        float64 `json:"stepSeconds"`
	MFU                float64 `json:"mfu"`
	MemoryPerGPUBytes  int64   `json:"memoryPerGPUBytes"`
	MicroBatch         int     `json:"microBatch,omitempty"`
	Summary            string  `json:"summary,omitempty"`
}

// ModelRef names a model from the planner's catalog and the run's shape.
type ModelRef struct {
	Name        string `json:"name"`
	Seq         int    `json:"seq,omitempty"`
	GlobalBatch int    `json:"globalBatch,omitempty"`
}

// Resources are per-rank limits, enforced through cgroups when available.
type Resources struct {
	// Memory is MemoryBytes with a unit ("64G"); Default moves it there.
	Memory      ByteSize `json:"memory,omitempty"`
	MemoryBytes int64    `json:"memoryBytes,omitempty"`
	CPUMillis   int64    `json:"cpuMillis,omitempty"`
}

// Defaults for a JobSpec's optional fields.
const (
	DefaultQueue          = "default"
	DefaultMaxRestarts    = 3
	DefaultRestartBackoff = time.Second
	MaxRestartBackoff     = 5 * time.Minute
	DefaultGrace          = 10 * time.Second
)

// Default fills the zero fields of s with their defaults.
func (s *JobSpec) Default() {
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if s.GPUsPerRank == 0 {
		s.GPUsPerRank = 1
	}
	if s.MaxRestarts == nil {
		n := DefaultMaxRestarts
		s.MaxRestarts = &n
	}
	if s.RestartBackoff == 0 {
		s.RestartBackoff = Duration(DefaultRestartBackoff)
	}
	if s.TerminationGracePeriod == 0 {
		s.TerminationGracePeriod = Duration(DefaultGrace)
	}
	if r := s.Resources; r != nil && r.Memory > 0 && r.MemoryBytes == 0 {
		r.MemoryBytes, r.Memory = int64(r.Memory), 0
	}
}

// RestartLimit is how many restarts the job may have: MaxRestarts, or
// DefaultMaxRestarts where it is not set (a spec Default has not filled
// in). Read the limit through it, never through MaxRestarts itself.
func (s *JobSpec) RestartLimit() int {
	if s.MaxRestarts == nil {
		return DefaultMaxRestarts
	}
	return *s.MaxRestarts
}

// GPUs is the gang's total GPU count.
func (s *JobSpec) GPUs() int { return s.Ranks * s.GPUsPerRank }

// MilliGPUs is the job's whole demand in thousandths of a GPU: whole GPUs,
// time slices (gpuMilli), or MIG instances at their compute slices out of
// 7 (rounded up), the way quotas count them.
func (s *JobSpec) MilliGPUs() int64 {
	switch {
	case s.GPUMilli > 0:
		return int64(s.Ranks) * int64(s.GPUMilli)
	case s.MIGProfile != "":
		slices := 0
		for _, c := range s.MIGProfile {
			if c < '0' || c > '9' {
				break
			}
			slices = slices*10 + int(c-'0')
		}
		return int64(s.Ranks) * int64((min(slices, 7)*1000+6)/7)
	}
	return int64(s.Ranks) * int64(s.GPUsPerRank) * 1000
}

// ShareGPUs is MilliGPUs in GPUs, rounded up: what a queue report counts.
func (s *JobSpec) ShareGPUs() int { return int((s.MilliGPUs() + 999) / 1000) }

// JobPhase is where a job is in its life.
type JobPhase string

// Job phases. Pending and Restarting wait for placement; Running has a
// placed attempt; Stopping tears an attempt down; the rest are final.
const (
	JobPending    JobPhase = "Pending"
	JobRunning    JobPhase = "Running"
	JobStopping   JobPhase = "Stopping"
	JobRestarting JobPhase = "Restarting"
	JobSucceeded  JobPhase = "Succeeded"
	JobFailed     JobPhase = "Failed"
	JobCancelled  JobPhase = "Cancelled"
)

// Final reports whether the phase is terminal.
func (p JobPhase) Final() bool {
	return p == JobSucceeded || p == JobFailed || p == JobCancelled
}

// Job is a submitted spec and what gangway has done with it.
type Job struct {
	ID          string    `json:"id"`
	Spec        JobSpec   `json:"spec"`
	Status      JobStatus `json:"status"`
	SubmittedAt time.Time `json:"submittedAt"`
	// Array is set on the tasks of a job array.
	Array *ArrayTask `json:"array,omitempty"`
	// ModRevision is the store revision of this copy; set on read, used
	// for compare-and-swap, never stored.
	ModRevision int64 `json:"modRevision,omitempty"`
}

// JobStatus is written by the controller only.
type JobStatus struct {
	Phase JobPhase `json:"phase"`
	// Reason says why the job is pending, stopping or failed, in words a
	// person can act on.
	Reason string `json:"reason,omitempty"`
	// Attempts is the history; the last one is current.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Restarts counts attempts started after a failure.
	Restarts int `json:"restarts"`
	// NotBefore holds a restart back until its backoff has passed.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// CancelRequested asks the controller to stop the job for good.
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// RequeueRequested asks the controller to stop the running attempt
	// (checkpoint signal first, as a preemption) and put the job back to
	// wait under its ID (gangway requeue, Slurm's scontrol requeue).
	RequeueRequested bool `json:"requeueRequested,omitempty"`
	// Held keeps a waiting job from being placed until it is released
	// (gangway hold / release, Slurm's scontrol hold / release); Released
	// says a job submitted held (spec.hold) was let go.
	Held     bool `json:"held,omitempty"`
	Released bool `json:"released,omitempty"`
	// Avoid are nodes kept out of this job's placements: by its
	// preflight tests, or for a fault of theirs one of its ranks met
	// (RankStatus.NodeFault: a container engine down).
	Avoid      []string  `json:"avoid,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// ReasonNew is the reason a job is stored with until a controller pass
// has looked at it.
const ReasonNew = "waiting for the scheduler"

// Current returns the newest attempt, or nil before the first placement.
func (s *JobStatus) Current() *Attempt {
	if len(s.Attempts) == 0 {
		return nil
	}
	return &s.Attempts[len(s.Attempts)-1]
}

// AttemptPhase is where one run of a job is.
type AttemptPhase string

// Attempt phases: Running from placement until something ends it, Stopping
// while ranks are being killed, Ended once no rank can be alive.
const (
	AttemptRunning  AttemptPhase = "Running"
	AttemptStopping AttemptPhase = "Stopping"
	AttemptEnded    AttemptPhase = "Ended"
)

// Outcome is how an attempt ended.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeInterrupted: stopped for a reason that is not the job's
	// fault (a drained node); it restarts without using up maxRestarts.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomePreempted: stopped so another gang could run; requeued, and
	// restarts do not count against maxRestarts.
	OutcomePreempted Outcome = "preempted"
	// OutcomeTimedOut: ran past spec.timeLimit; the job fails for good.
	OutcomeTimedOut Outcome = "timed-out"
	// OutcomeSuperseded: stopped because an earlier attempt turned out to
	// have succeeded (its ranks' exits arrived late, from a node lost as
	// they finished); the job succeeds with that attempt's result.
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeRequeued: stopped because a user asked (gangway requeue);
	// the job waits again, using up no restart.
	OutcomeRequeued Outcome = "requeued"
)

// Cause is why an attempt ended, in the terms accounting charges lost
// GPU-hours to (`gangway report usage`) and the simulator's goodput model
// uses. Empty on attempts that ended before causes were recorded; readers
// derive one from Outcome and Reason (CauseOf).
type Cause string

// The causes.
const (
	CauseSucceeded Cause = "succeeded"
	CauseCancelled Cause = "cancelled"
	CauseNodeLost  Cause = "node-lost"
	CauseGPUFault  Cause = "gpu-fault"
	// CauseNodeFault: a node-wide health finding (fabric port down,
	// checkpoint disk full, memory pressure) took its node out of service.
	CauseNodeFault Cause = "node-fault"
	CauseHang      Cause = "hang"
	CauseStraggler Cause = "straggler"
	CausePreempted Cause = "preemption"
	CauseDrain     Cause = "drain"
	CauseTimeLimit Cause = "time-limit"
	// CauseUserError: a rank failed to start or exited non-zero.
	CauseUserError Cause = "user-error"
	// CauseFenced: a node's agent (or its supervisor) killed its ranks
	// because it heard nothing from the server for its lease.
	CauseFenced Cause = "fenced"
	// CauseRequeued: a user asked for the job to be requeued.
	CauseRequeued Cause = "requeued"
)

// Charged reports whether an attempt that ended for c uses up one of the
// job's maxRestarts and counts toward its restart backoff: only the job's
// own failures (a rank's exit or failed start, a hang) do. A lost node, a
// fault, a fence, a preemption or a drain is no fault of the program's.
func (c Cause) Charged() bool { return c == CauseUserError || c == CauseHang }

// Attempt is one run of a job on one placement.
type Attempt struct {
	Number  int          `json:"number"`
	Phase   AttemptPhase `json:"phase"`
	Outcome Outcome      `json:"outcome,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	Cause   Cause        `json:"cause,omitempty"`
	// Charged: the attempt's end used up one of maxRestarts (its cause
	// was the job's own failure); given back if the cause turns out to
	// have been something else (a node lost just before, a fault).
	Charged   bool            `json:"charged,omitempty"`
	Placement []RankPlacement `json:"placement"`
	// Grid is the parallel grid the ranks were numbered in.
	Grid *Grid `json:"grid,omitempty"`
	// Span is how far the placement spreads over the topology.
	Span       *Span  `json:"span,omitempty"`
	MasterAddr string `json:"masterAddr"`
	MasterPort int    `json:"masterPort"`
	// Lane: the attempt started in its queue's overdue lane (the gangway
	// policy), where it is not preempted for the policy for its turn
	// (QueueSpec.LaneTurn).
	Lane bool `json:"lane,omitempty"`
	// ResumeFrom is the checkpoint this attempt was told to resume from.
	ResumeFrom *Checkpoint `json:"resumeFrom,omitempty"`
	CreatedAt  time.Time   `json:"createdAt"`
	// RunningAt is when every rank had reported running.
	RunningAt time.Time `json:"runningAt,omitzero"`
	// StopRevision is the store revision of the transaction that removed
	// this attempt's assignments; agents acknowledge it once they have
	// killed what they ran. Written by earlier versions only: the
	// controller now reads it off the deletions (store.View.Stops).
	StopRevision int64 `json:"stopRevision,omitempty"`
	// PreemptedAt is when the ranks got the checkpoint signal because
	// PreemptedFor needed the GPUs.
	PreemptedAt  time.Time `json:"preemptedAt,omitzero"`
	PreemptedFor string    `json:"preemptedFor,omitempty"`
	// RequeuedAt is when the ranks got the checkpoint signal because a
	// user asked for the job to be requeued (gangway requeue).
	RequeuedAt time.Time `json:"requeuedAt,omitzero"`
	// SignalSeq counts the signals asked of this attempt's ranks: the
	// checkpoint signal of a preemption or a requeue, and users' (gangway
	// cancel --signal, whose newest is Signal). SignalSent is the count
	// the controller has written into the attempt's assignments; agents
	// send an assignment's signal each time its SignalSeq rises.
	Signal     string    `json:"signal,omitempty"`
	SignalSeq  int       `json:"signalSeq,omitempty"`
	SignalSent int       `json:"signalSent,omitempty"`
	StoppingAt time.Time `json:"stoppingAt,omitzero"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	// Preflight is set on an attempt that tests its placement before the
	// job's command runs (see PreflightRun).
	Preflight *PreflightRun `json:"preflight,omitempty"`
}

// NextSignalSeq is the SignalSeq of the next signal asked of the
// attempt's ranks. An attempt preempted before SignalSeq was recorded
// sent its checkpoint signal as 1.
func (a *Attempt) NextSignalSeq() int {
	if a.SignalSeq == 0 && !a.PreemptedAt.IsZero() {
		return 2
	}
	return a.SignalSeq + 1
}

// Nodes returns the distinct nodes of the placement in rank order.
func (a *Attempt) Nodes() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range a.Placement {
		if !seen[p.Node] {
			seen[p.Node] = true
			out = append(out, p.Node)
		}
	}
	return out
}

// RankPlacement is where one rank runs.
type RankPlacement struct {
	Rank      int    `json:"rank"`
	Node      string `json:"node"`
	NodeRank  int    `json:"nodeRank"`
	LocalRank int    `json:"localRank"`
	// GPUs are device indices on the node.
	GPUs []int `json:"gpus"`
	// TP, PP and DP are the rank's coordinates in the parallel grid.
	TP int `json:"tp"`
	PP int `json:"pp"`
	DP int `json:"dp"`
	// Milli is set for a time-shared rank: the thousandths of GPUs[0] it
	// holds. MIGProfile and MIGStart are set for a MIG instance on GPUs[0].
	Milli      int    `json:"milli,omitempty"`
	MIGProfile string `json:"migProfile,omitempty"`
	MIGStart   int    `json:"migStart,omitempty"`
}

// Grid is an attempt's resolved parallel grid and how well the placement
// suits it.
type Grid struct {
	TP    int    `json:"tp"`
	PP    int    `json:"pp"`
	DP    int    `json:"dp"`
	Order string `json:"order"`
	// TPGroupsCrossingDomain counts tensor-parallel groups split across
	// NVLink domains (0 unless the placement left no choice).
	TPGroupsCrossingDomain int `json:"tpGroupsCrossingDomain"`
	// RailMismatches counts ranks off the rail their local index uses on
	// other nodes.
	RailMismatches int `json:"railMismatches"`
	// PPStepsCrossingLeaf counts adjacent pipeline stages under different
	// leaves.
	PPStepsCrossingLeaf int `json:"ppStepsCrossingLeaf"`
}

// Span is how far an attempt's placement spreads.
type Span struct {
	Nodes      int  `json:"nodes"`
	Leaves     int  `json:"leaves"`
	Spines     int  `json:"spines"`
	Backfilled bool `json:"backfilled,omitempty"`
}

// Checkpoint is a committed checkpoint directory.
type Checkpoint struct {
	Step    int64     `json:"step"`
	Path    string    `json:"path"`
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
}

// Progress is one line a workload appended to $GANGWAY_PROGRESS_FILE.
type Progress struct {
	Step   int64     `json:"step"`
	Loss   *float64  `json:"loss,omitempty"`
	Tokens int64     `json:"tokens,omitempty"`
	Final  bool      `json:"final,omitempty"`
	Time   time.Time `json:"time,omitzero"`
	// JobID, Attempt and Rank say who wrote it; filled in by the agent.
	JobID   string `json:"jobId,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Rank    int    `json:"rank"`
	// ComputeS is the rank's own work per step, in seconds, since its
	// previous line: the step's time less what it waited for the others
	// (in a collective). In a synchronous gang every rank's step takes the
	// same time, so the straggler check compares this across ranks. 0:
	// not measured.
	ComputeS float64 `json:"computeS,omitempty"`
}

// TimingOnly reports whether p carries nothing but the straggler check's
// timing: such lines from ranks other than 0 are not stored.
func (p *Progress) TimingOnly() bool {
	return p.Rank != 0 && p.Loss == nil && p.Tokens == 0 && !p.Final
}

// maxRateLines bounds the progress lines TokenRate measures over: the
// recent rate, not the attempt's average.
const maxRateLines = 10

// TokenRate is tokens a second over the newest of lines (oldest first)
// that attempt's ranks wrote with a token count: at most the last
// maxRateLines of the rank that wrote the newest. 0 when there are not
// two such lines apart in time.
func TokenRate(lines []Progress, attempt int) float64 {
	var last *Progress
	n := 0
	first := -1
	for i := len(lines) - 1; i >= 0 && n < maxRateLines; i-- {
		p := &lines[i]
		if p.Attempt != attempt || p.Tokens <= 0 || p.Time.IsZero() || (last != nil && p.Rank != last.Rank) {
			continue
		}
		if last == nil {
			last = p
		}
		first, n = i, n+1
	}
	if n < 2 {
		return 0
	}
	f := &lines[first]
	dt := last.Time.Sub(f.Time).Seconds()
	if dt <= 0 || last.Tokens < f.Tokens {
		return 0
	}
	return float64(last.Tokens-f.Tokens) / dt
}

// Straggler is a rank whose own work per step stayed well behind its
// gang's median for the straggler window.
type Straggler struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"`
	Node    string `json:"node"`
	// ComputeS is the rank's work per step, MedianS the gang's median and
	// StepS the gang's median step time, in seconds.
	ComputeS float64 `json:"computeS"`
	MedianS  float64 `json:"medianS"`
	StepS    float64 `json:"stepS"`
	// Since is when it first fell behind; At when it was declared.
	Since time.Time `json:"since"`
	At    time.Time `json:"at"`
}

// RankState is what an agent reports about one rank's process.
type RankState string

// Rank states.
const (
	RankStarting RankState = "starting"
	RankRunning  RankState = "running"
	RankExited   RankState = "exited"
	// RankFailedStart: the process could not be started at all.
	RankFailedStart RankState = "failed-start"
)

// Terminal reports whether the rank can no longer run.
func (s RankState) Terminal() bool { return s == RankExited || s == RankFailedStart }

// RankStatus is the agent's view of one rank of one attempt.
type RankStatus struct {
	JobID      string    `json:"jobId"`
	Attempt    int       `json:"attempt"`
	Rank       int       `json:"rank"`
	Node       string    `json:"node"`
	State      RankState `json:"state"`
	ExitCode   int       `json:"exitCode"`
	Signal     string    `json:"signal,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Fenced: the node's fence killed the rank (its agent or supervisor
	// heard nothing from the server for the lease); Message says for how
	// long.
	Fenced bool `json:"fenced,omitempty"`
	// StderrTail is the last lines of a failed rank's stderr (at most
	// MaxStderrTailBytes), sent with its exit so that the attempt's reason
	// can say what went wrong.
	StderrTail string `json:"stderrTail,omitempty"`
	// Preflight is what a preflight probe measured, with its exit.
	Preflight *PreflightResult `json:"preflight,omitempty"`
	// NodeFault: the rank could not start for its node's fault, not the
	// job's (the node's container engine down or not answering); Message
	// says what. The attempt is then no user error: it ends with
	// CauseNodeFault and the job is placed again without that node.
	NodeFault bool `json:"nodeFault,omitempty"`
	// Pulling says how far the pull of a container rank's image has got
	// while the rank waits for it ("image X on node N: 3 of 7 layers
	// done, 1.2GB of 3.4GB downloaded"); "" when it is not pulling.
	Pulling string `json:"pulling,omitempty"`
}

// MaxStderrTailBytes bounds RankStatus.StderrTail.
const MaxStderrTailBytes = 512

// Assignment is one rank the controller wants a node to run, with
// everything the agent needs to start it.
type Assignment struct {
	JobID       string            `json:"jobId"`
	Attempt     int               `json:"attempt"`
	Rank        int               `json:"rank"`
	Node        string            `json:"node"`
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env"`
	WorkingDir  string            `json:"workingDir,omitempty"`
	GPUs        []int             `json:"gpus"`
	Resources   *Resources        `json:"resources,omitempty"`
	Grace       Duration          `json:"grace"`
	WatchCkpt   bool              `json:"watchCheckpoints,omitempty"`
	CheckpointD string            `json:"checkpointDir"`
	// Signal, when SignalSeq rises, is sent once to the rank's process
	// group (the checkpoint signal before a preemption).
	Signal    string `json:"signal,omitempty"`
	SignalSeq int    `json:"signalSeq,omitempty"`
	// Files are written into the task directory before the process starts
	// (a DeepSpeed hostfile); "${GANGWAY_TASK_DIR}" in Command and Env
	// expands to that directory.
	Files map[string]string `json:"files,omitempty"`
	// DiscardOutput sends stdout and stderr to /dev/null (spec.output).
	DiscardOutput bool `json:"discardOutput,omitempty"`
	// Logs bounds kept output (spec.logs); nil: the node's bounds.
	Logs *LogSpec `json:"logs,omitempty"`
	// RunAs is the account the rank runs under; nil: the agent's own.
	RunAs *RunAs `json:"runAs,omitempty"`
	// Queue and User are the job's, for the labels of the node's GPU
	// metrics (as dcgm-exporter labels a GPU with its pod or HPC job).
	Queue string `json:"queue,omitempty"`
	User  string `json:"user,omitempty"`
	// Container runs the rank in a container (spec.image); nil: a plain
	// process.
	Container *ContainerSpec `json:"container,omitempty"`
}

// ContainerSpec is how an agent runs a rank in a container: the job's
// image, pull policy and network, defaulted.
type ContainerSpec struct {
	Image      string `json:"image"`
	PullPolicy string `json:"pullPolicy"`
	Network    string `json:"network"`
}

// ContainerOf is the container a job's ranks run in; nil when the job
// gives no image.
func (s *JobSpec) ContainerOf() *ContainerSpec {
	if s.Image == "" {
		return nil
	}
	c := &ContainerSpec{Image: s.Image, PullPolicy: s.ImagePullPolicy, Network: s.ContainerNetwork}
	if c.PullPolicy == "" {
		c.PullPolicy = PullIfNotPresent
	}
	if c.Network == "" {
		c.Network = NetworkHost
	}
	return c
}

// TaskKey names one rank of one attempt: "job/attempt/rank".
func (a *Assignment) TaskKey() string { return TaskKey(a.JobID, a.Attempt, a.Rank) }

// NodeState is the node's liveness as the control plane sees it.
type NodeState string

// Node states.
const (
	NodeReady NodeState = "Ready"
	NodeLost  NodeState = "Lost"
)

// Node is one machine running `gangway agent`.
type Node struct {
	Name string `json:"name"`
	// Address is the IP other ranks reach this node at (MASTER_ADDR).
	Address string `json:"address"`
	// AgentURL serves the agent's logs endpoint.
	AgentURL string `json:"agentURL,omitempty"`
	// Instance identifies the agent's data directory (random, made once
	// per --data-dir): a registration from another instance is refused
	// while the node's agent is alive, so that two agents on one machine
	// never become one node.
	Instance    string            `json:"instance,omitempty"`
	GPUs        []GPU             `json:"gpus"`
	GPUSource   string            `json:"gpuSource,omitempty"`
	GPUReason   string            `json:"gpuReason,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	CPUs        int               `json:"cpus,omitempty"`
	MemoryBytes int64             `json:"memoryBytes,omitempty"`
	Cgroups     string            `json:"cgroups,omitempty"`
	// NICs are the node's network interfaces as the agent found them.
	NICs []NIC `json:"nics,omitempty"`
	// LaunchEnv is added to every rank on the node (NCCL_SOCKET_IFNAME,
	// NCCL_IB_HCA from the discovered NICs); the job's env wins.
	LaunchEnv   map[string]string `json:"launchEnv,omitempty"`
	Status      NodeStatus        `json:"status"`
	ModRevision int64             `json:"modRevision,omitempty"`
}

// GPU is one device on a node.
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Model       string `json:"model"`
	MemoryBytes int64  `json:"memoryBytes"`
	Health      string `json:"health,omitempty"`
	// Fault is the finding that took the GPU out of service (Health
	// "fault"), and FaultAt when.
	Fault   string    `json:"fault,omitempty"`
	FaultAt time.Time `json:"faultAt,omitzero"`
	// NUMANode is the closest host NUMA node, -1 if unknown.
	NUMANode int `json:"numaNode"`
	// NVLinkPeers are the indices of GPUs reachable over NVLink.
	NVLinkPeers []int `json:"nvlinkPeers,omitempty"`
	// Rail is the index of the GPU's closest compute-fabric NIC, -1 if
	// unknown.
	Rail int `json:"rail"`
}

// NIC is one network interface of a node.
type NIC struct {
	Name      string `json:"name,omitempty"`
	Kind      string `json:"kind"`
	HCA       string `json:"hca,omitempty"`
	Port      int    `json:"port,omitempty"`
	SpeedMbps int64  `json:"speedMbps,omitempty"`
	NUMANode  int    `json:"numaNode"`
	Up        bool   `json:"up"`
	// Rail is the NIC's index in the compute fabric, or -1.
	Rail int `json:"rail"`
}

// DrainRequest is the body of POST /v1/nodes/{name}/drain (optional: no
// body is Now).
type DrainRequest struct {
	Reason string `json:"reason,omitempty"`
	// Timeout bounds a graceful drain: gangs still running then are
	// moved. 0: wait for them however long.
	Timeout Duration `json:"timeout,omitempty"`
	// Now moves the node's gangs elsewhere at once.
	Now bool `json:"now,omitempty"`
}

// Evicting reports whether a drain moves the node's gangs off it now.
func (s *NodeStatus) Evicting(now time.Time) bool {
	return s.Draining && (!s.DrainGraceful || (!s.DrainDeadline.IsZero() && !now.Before(s.DrainDeadline)))
}

// NodeStatus is written by the control plane.
type NodeStatus struct {
	State    NodeState `json:"state"`
	Cordoned bool      `json:"cordoned,omitempty"`
	Draining bool      `json:"draining,omitempty"`
	// DrainGraceful: the drain lets running gangs finish (until
	// DrainDeadline, when set), as Slurm's does; otherwise it moves them
	// at once (drain --now, and drains stored before there was a choice).
	DrainGraceful bool      `json:"drainGraceful,omitempty"`
	DrainReason   string    `json:"drainReason,omitempty"`
	DrainDeadline time.Time `json:"drainDeadline,omitzero"`
	Reason        string    `json:"reason,omitempty"`
	RegisteredAt  time.Time `json:"registeredAt,omitzero"`
	LostAt        time.Time `json:"lostAt,omitzero"`
	// LastSeenAt is the node's last heartbeat as the leader that declared
	// it lost heard it; stored with the loss, so that it survives a change
	// of leader (heartbeats themselves are kept in memory only).
	LastSeenAt time.Time `json:"lastSeenAt,omitzero"`
	// LastHeartbeat is filled in by the API from the server's memory;
	// heartbeats are not written to the store.
	LastHeartbeat time.Time `json:"lastHeartbeat,omitzero"`
	// Witnesses are the nodes this node's agent asks whether the server
	// is down (RegisterResponse.Witnesses): the server declares the node
	// lost quickly only while one of them is heard from.
	Witnesses []string `json:"witnesses,omitempty"`
	// PrevWitnesses are the witnesses before the last change, until the
	// agent's heartbeat shows it holds the new ones: until then either
	// set may be the one it asks.
	PrevWitnesses []string `json:"prevWitnesses,omitempty"`
	// Health is each health check's latest result as the agent reported
	// it (written when a status changes, not at every run).
	Health []HealthCheck `json:"health,omitempty"`
	// Fault says why the whole node is out of service for its health (a
	// fatal finding whose action is cordon-node); "" when it is not. Its
	// running gangs are stopped and restarted elsewhere; `gangway
	// uncordon` or a clean bill of health for the return delay clears it.
	Fault   string    `json:"fault,omitempty"`
	FaultAt time.Time `json:"faultAt,omitzero"`
	// FaultCause is the cause the gangs stopped for Fault end with:
	// gpu-fault (a GPU's finding that takes the node), node-fault or
	// straggler; "" reads as node-fault.
	FaultCause Cause `json:"faultCause,omitempty"`
	// HealthyAt is when the node's checks last all came out passing (or
	// warning) after a fault; the return delay counts from it.
	HealthyAt time.Time `json:"healthyAt,omitzero"`
	// Faults are the times of the node's recent fatal findings (GPU or
	// node), newest last, at most MaxFaultHistory.
	Faults []time.Time `json:"faults,omitempty"`
	// Lemon: the node faulted LemonFaults times within LemonWindow; it is
	// kept out of gangs that span several nodes until an operator
	// uncordons it.
	Lemon bool `json:"lemon,omitempty"`
	// UsedGPUs and FreeGPUs are filled in by the API from the jobs, never
	// stored: the GPUs ranks of an attempt not yet ended hold (a GPU
	// time-shared or cut into MIG instances counts once), and those in
	// service no rank holds, on a node that takes new ranks (0 on one
	// cordoned, draining, faulty or lost).
	UsedGPUs int `json:"usedGPUs,omitempty"`
	FreeGPUs int `json:"freeGPUs,omitempty"`
	// Telemetry is the GPUs' newest readings as the node's heartbeats
	// brought them to the server answering; filled in by the API from its
	// memory, never stored. nil: none heard since that server started.
	Telemetry *GPUTelemetry `json:"telemetry,omitempty"`
}

// MaxFaultHistory bounds NodeStatus.Faults.
const MaxFaultHistory = 16

// Schedulable reports whether new ranks may be placed on the node.
func (n *Node) Schedulable() bool {
	return n.Status.State == NodeReady && !n.Status.Cordoned && !n.Status.Draining && n.Status.Fault == ""
}

// GPU health values: ok, or out of service for a fatal finding (GPU.Fault
// says which), or lost (NVML no longer answers for it).
const (
	GPUHealthy = "ok"
	GPUFaulty  = "fault"
	GPULost    = "lost"
)

// InService reports whether new ranks may use the GPU.
func (g *GPU) InService() bool { return g.Health == "" || g.Health == GPUHealthy }

// ProgressLog is a job's latest progress and a bounded tail of earlier lines
// for plotting.
type ProgressLog struct {
	Latest Progress   `json:"latest"`
	Recent []Progress `json:"recent,omitempty"`
}

// MaxRecentProgress bounds ProgressLog.Recent.
const MaxRecentProgress = 256

// JobDetail is everything `gangway describe job` shows.
type JobDetail struct {
	Job         Job          `json:"job"`
	Ranks       []RankStatus `json:"ranks,omitempty"`
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	Progress    *ProgressLog `json:"progress,omitempty"`
	// Stragglers are the ranks found falling behind their gang.
	Stragglers []Straggler `json:"stragglers,omitempty"`
	// Archived: read from the server's job archive, retention having
	// deleted the job from the store.
	Archived bool `json:"archived,omitempty"`
}

// Clone returns a deep copy of j.
func (j *Job) Clone() *Job {
	c := *j
	if j.Array != nil {
		a := *j.Array
		c.Array = &a
	}
	c.Spec.Command = append([]string(nil), j.Spec.Command...)
	c.Spec.Env = cloneMap(j.Spec.Env)
	c.Spec.NodeSelector = cloneMap(j.Spec.NodeSelector)
	c.Spec.Labels = cloneMap(j.Spec.Labels)
	if j.Spec.MaxRestarts != nil {
		n := *j.Spec.MaxRestarts
		c.Spec.MaxRestarts = &n
	}
	if j.Spec.Resources != nil {
		r := *j.Spec.Resources
		c.Spec.Resources = &r
	}
	if j.Spec.Logs != nil {
		l := *j.Spec.Logs
		c.Spec.Logs = &l
	}
	c.Status.Avoid = append([]string(nil), j.Status.Avoid...)
	c.Status.Attempts = make([]Attempt, len(j.Status.Attempts))
	for i, a := range j.Status.Attempts {
		a.Placement = append([]RankPlacement(nil), a.Placement...)
		if a.ResumeFrom != nil {
			ck := *a.ResumeFrom
			a.ResumeFrom = &ck
		}
		if a.Preflight != nil {
			pf := *a.Preflight
			pf.Nodes = append([]PreflightNode(nil), pf.Nodes...)
			a.Preflight = &pf
		}
		c.Status.Attempts[i] = a
	}
	return &c
}

// Clone returns a deep copy of n.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUs = append([]GPU(nil), n.GPUs...)
	c.Labels = cloneMap(n.Labels)
	c.Status.Witnesses = append([]string(nil), n.Status.Witnesses...)
	c.Status.PrevWitnesses = append([]string(nil), n.Status.PrevWitnesses...)
	c.Status.Health = append([]HealthCheck(nil), n.Status.Health...)
	c.Status.Faults = append([]time.Time(nil), n.Status.Faults...)
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// IsHeld reports whether a waiting job is held (gangway hold, or
// submitted with spec.hold and not released since).
func (j *Job) IsHeld() bool {
	return j.Status.Held || (j.Spec.Hold && !j.Status.Released)
}
