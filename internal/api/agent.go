package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RegisterRequest is sent by an agent when it starts and whenever the
// server has forgotten it.
type RegisterRequest struct {
	Node Node `json:"node"`
}

// RegisterResponse tells the agent the timing contract it must keep.
type RegisterResponse struct {
	HeartbeatInterval Duration `json:"heartbeatInterval"`
	// FenceAfter: if no heartbeat succeeds for this long, the agent kills
	// its ranks, so that a node the server declares lost runs nothing.
	FenceAfter Duration `json:"fenceAfter"`
	// CheckpointRoot is the default parent of job checkpoint directories.
	CheckpointRoot string `json:"checkpointRoot"`
	// Witnesses are the other nodes the agent asks, once the server has
	// been silent for WitnessDown, whether they hear it either. If every
	// one answers that it does not, the control plane is down (not this
	// node cut off) and the agent keeps its ranks past FenceAfter, for up
	// to MaxOutage. Empty: the agent fences after FenceAfter whatever
	// happens (too few nodes to tell).
	Witnesses []Witness `json:"witnesses,omitempty"`
	// WitnessDown is how long a witness must have gone without a
	// successful heartbeat for its answer to count as "the server is
	// down": longer than any gap in a run of heartbeats the server counts
	// as unbroken.
	WitnessDown Duration `json:"witnessDown,omitempty"`
	// MaxOutage bounds how long an agent keeps ranks while no server
	// answers; the server declares a silent node lost after it whatever
	// the witnesses say.
	MaxOutage Duration `json:"maxOutage,omitempty"`
}

// Witness is another node an agent asks about the server.
type Witness struct {
	Node string `json:"node"`
	// URL is the witness's agent endpoint (https).
	URL string `json:"url"`
}

// ServerContact is a witness's answer: how long ago its last heartbeat
// succeeded (in its own clock, so no clocks are compared), and whether it
// has ever had one.
type ServerContact struct {
	Node    string   `json:"node"`
	SinceOK Duration `json:"sinceOK"`
	Never   bool     `json:"never,omitempty"`
}

// Heartbeat is the agent's periodic, level-triggered report: everything it
// knows, so a lost message is repaired by the next one.
type Heartbeat struct {
	Node string `json:"node"`
	// AckRevision is the newest assignments revision whose removals the
	// agent has fully carried out (every rank no longer assigned is dead).
	AckRevision int64              `json:"ackRevision"`
	Ranks       []RankStatus       `json:"ranks,omitempty"`
	Checkpoints []CheckpointReport `json:"checkpoints,omitempty"`
	Progress    []Progress         `json:"progress,omitempty"`
	SentAt      time.Time          `json:"sentAt"`
	// Witnesses are the nodes the agent now asks whether the server is
	// down (RegisterResponse.Witnesses): the server learns from them which
	// set it holds.
	Witnesses []string `json:"witnesses,omitempty"`
	// Health is every health check's latest result, sent when one of them
	// changed status since the last answered heartbeat (and in the first
	// after registering); nil means "as before".
	Health []HealthCheck `json:"health,omitempty"`
	// Telemetry is the GPUs' newest readings, sent when the agent has
	// read them since its last answered heartbeat (every
	// --gpu-metrics-interval); nil means "none newer".
	Telemetry *GPUTelemetry `json:"telemetry,omitempty"`
}

// GPUTelemetry is a node's GPUs' readings at one time: what `gangway top`
// shows. The agent's /metrics has more, in dcgm-exporter's names.
type GPUTelemetry struct {
	At   time.Time   `json:"at"`
	GPUs []GPUSample `json:"gpus"`
}

// GPUSample is one GPU's readings. A reading the device does not give is
// -1.
type GPUSample struct {
	Index int `json:"index"`
	// UtilPercent is the GPU's utilisation, 0–100 (DCGM_FI_DEV_GPU_UTIL).
	UtilPercent float64 `json:"util"`
	// MemUsedMiB is its frame buffer in use (DCGM_FI_DEV_FB_USED).
	MemUsedMiB float64 `json:"memUsedMiB"`
	TempC      float64 `json:"tempC"`
	PowerW     float64 `json:"powerW"`
}

// GPUSummary adds up the readings of several GPUs: how many gave any
// (Sampled), their mean utilisation, the memory they use and the power
// they draw together, and the hottest one's temperature; -1 where none
// gave that reading. Start from NewGPUSummary.
type GPUSummary struct {
	Sampled                                   int
	UtilPercent, MemUsedMiB, MaxTempC, PowerW float64
	utilSum                                   float64
	utilN                                     int
}

// NewGPUSummary is the summary of no readings.
func NewGPUSummary() GPUSummary {
	return GPUSummary{UtilPercent: -1, MemUsedMiB: -1, MaxTempC: -1, PowerW: -1}
}

// Add counts g in.
func (s *GPUSummary) Add(g *GPUSample) {
	s.Sampled++
	if g.UtilPercent >= 0 {
		s.utilSum += g.UtilPercent
		s.utilN++
		s.UtilPercent = s.utilSum / float64(s.utilN)
	}
	if g.MemUsedMiB >= 0 {
		s.MemUsedMiB = max(s.MemUsedMiB, 0) + g.MemUsedMiB
	}
	if g.PowerW >= 0 {
		s.PowerW = max(s.PowerW, 0) + g.PowerW
	}
	s.MaxTempC = max(s.MaxTempC, g.TempC)
}

// Sample is the node's reading of GPU index, nil when it has none.
func (t *GPUTelemetry) Sample(index int) *GPUSample {
	if t == nil {
		return nil
	}
	for i := range t.GPUs {
		if t.GPUs[i].Index == index {
			return &t.GPUs[i]
		}
	}
	return nil
}

// CheckpointReport says a rank's agent saw a committed checkpoint.
type CheckpointReport struct {
	JobID      string     `json:"jobId"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

// HeartbeatResponse tells the agent whether it must register again.
type HeartbeatResponse struct {
	// Reregister is true when the server has no record of the node, or
	// has it lost: the agent registers again (with its secret) before its
	// heartbeats count.
	Reregister bool `json:"reregister,omitempty"`
	// Refused counts the reports of this heartbeat the server refused and
	// did not store: rank statuses, progress and checkpoints of ranks not
	// assigned to this node, of jobs it does not know, and checkpoints
	// outside the job's checkpoint directory. A correct agent sees it
	// nonzero only in races (a job that finished meanwhile).
	Refused int `json:"refused,omitempty"`
	// Witnesses replace the agent's witnesses (the server picks new ones
	// when one is lost, or when a node that had too few finds more
	// peers); an agent whose registration said WitnessDown takes them
	// even when empty.
	Witnesses []Witness `json:"witnesses,omitempty"`
	// Unstored: the leader heard the beat (the node is alive to it) but
	// its store took no write in time (etcd without quorum): the agent
	// keeps its reports to send again, and its ranks' lease is renewed, as
	// no server can declare the node lost while nothing can be written.
	Unstored bool `json:"unstored,omitempty"`
}

// AssignmentList is a node's desired ranks at a store revision.
type AssignmentList struct {
	Revision    int64        `json:"revision"`
	Assignments []Assignment `json:"assignments"`
	// Delta (asked for with delta=1 and an index) means Assignments holds
	// only what changed after the index, and Unchanged names (by task key)
	// the rest of the list, as the agent had it at the index.
	Delta     bool     `json:"delta,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
}

// TaskKey names one rank of one attempt as "job/attempt/rank".
func TaskKey(job string, attempt, rank int) string {
	return job + "/" + strconv.Itoa(attempt) + "/" + strconv.Itoa(rank)
}

// ParseTaskKey splits a TaskKey.
func ParseTaskKey(k string) (job string, attempt, rank int, err error) {
	parts := strings.Split(k, "/")
	if len(parts) != 3 {
		return "", 0, 0, fmt.Errorf("task key %q: want job/attempt/rank", k)
	}
	if attempt, err = strconv.Atoi(parts[1]); err != nil {
		return "", 0, 0, fmt.Errorf("task key %q: attempt: %w", k, err)
	}
	if rank, err = strconv.Atoi(parts[2]); err != nil {
		return "", 0, 0, fmt.Errorf("task key %q: rank: %w", k, err)
	}
	return parts[0], attempt, rank, nil
}
