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
