package api

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QueueSpec is a tenant's line: a guarantee of GPUs, how much more it may
// borrow from its cohort, and its weight in fair share.
type QueueSpec struct {
	Name string `json:"name"`
	// Cohort groups queues that lend each other idle guarantee. The
	// default queue in no cohort borrows every queue's idle guarantee;
	// given a cohort, only that cohort's.
	Cohort string `json:"cohort,omitempty"`
	// GuaranteeGPUs the queue gets whenever it asks, preempting borrowers.
	GuaranteeGPUs int `json:"guaranteeGPUs"`
	// BorrowLimitGPUs bounds borrowing above the guarantee; absent means
	// unbounded, 0 forbids borrowing.
	BorrowLimitGPUs *int `json:"borrowLimitGPUs,omitempty"`
	// Weight is the queue's share in fair share. Default 1.
	Weight float64 `json:"weight,omitempty"`
	// Users and Groups may submit to the queue; both empty: every user.
	// Admins always may.
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// AllowRoot lets users whose account is root (uid 0) run jobs here.
	AllowRoot bool `json:"allowRoot,omitempty"`
	// Policy orders the queue's pending jobs and decides which of its
	// running jobs yield to them: one of QueuePolicies; empty means
	// DefaultQueuePolicy. Job priorities rank above it, and guarantees
	// across queues still preempt borrowers.
	Policy string `json:"policy,omitempty"`
	// The policy's settings, each absent (zero) for the policy's default
	// and refused by a policy that does not use it (QueuePolicySettings).
	//
	// LaneShare is the share of the cluster's GPUs that gangway's overdue
	// lane may hold, in (0, 1]; default 0.25.
	LaneShare float64 `json:"laneShare,omitempty"`
	// OverdueAfter is how long a job waits in one go before it is
	// overdue: gangway's lane takes it, gangway-4h and las rank it above
	// every level. Default 4h.
	OverdueAfter Duration `json:"overdueAfter,omitempty"`
	// LevelBase is the GPU-time a job attains before it leaves the first
	// level, as a duration of one GPU ("1h": one GPU-hour, or 8 GPUs for
	// 7m30s); each next level doubles it, 13 levels in all. Default 1h.
	LevelBase Duration `json:"levelBase,omitempty"`
	// MinRun is how long a started job is not preempted for the policy,
	// so that it can checkpoint. Default 2m.
	MinRun Duration `json:"minRun,omitempty"`
	// LaneTurn is how long a job started in gangway's overdue lane runs
	// there before it leaves it for its level, where it may be preempted
	// (and, overdue again, queues for the lane anew). Default 4h.
	LaneTurn Duration `json:"laneTurn,omitempty"`
}

// QueuePolicySettings lists, for each queue policy that has settings, the
// QueueSpec fields (JSON names) it uses; a policy not listed uses none.
// internal/scheduler/policy's tests check that it configures exactly
// these.
var QueuePolicySettings = map[string][]string{
	"gangway":    {"laneShare", "overdueAfter", "levelBase", "minRun", "laneTurn"},
	"gangway-4h": {"overdueAfter", "levelBase", "minRun"},
	"las":        {"overdueAfter", "levelBase", "minRun"},
}

// The ranges Validate accepts for the policy settings.
const (
	MinOverdueAfter = time.Second
	MaxOverdueAfter = 90 * 24 * time.Hour
	MinLevelBase    = time.Second
	MaxLevelBase    = 10000 * time.Hour
	MinMinRun       = time.Second
	MaxMinRun       = 24 * time.Hour
	MinLaneTurn     = time.Second
	MaxLaneTurn     = 90 * 24 * time.Hour
)

// QueuePolicies lists the queue policies, as internal/scheduler/policy
// registers them (its tests check that the two agree): fifo (submit
// order, strictly), backfill (submit order; later gangs pass a blocked
// one where they cannot delay it), greedy (submit order; any gang that
// fits starts), gangway and its synonym las (least attained GPU-service
// first, with aging, preempting).
var QueuePolicies = []string{"backfill", "fifo", "gangway", "gangway-4h", "greedy", "las"}

// DefaultQueuePolicy is the policy of a queue that names none.
const DefaultQueuePolicy = "gangway"

// Admits reports whether a user in groups may submit to the queue.
func (q *QueueSpec) Admits(user string, groups []string) bool {
	if len(q.Users) == 0 && len(q.Groups) == 0 {
		return true
	}
	for _, u := range q.Users {
		if u == user {
			return true
		}
	}
	for _, g := range q.Groups {
		for _, h := range groups {
			if g == h {
				return true
			}
		}
	}
	return false
}

// Default fills zero fields.
func (q *QueueSpec) Default() {
	if q.Weight == 0 {
		q.Weight = 1
	}
	q.Policy = strings.ToLower(strings.TrimSpace(q.Policy))
}

// Validate checks a defaulted queue spec.
func (q *QueueSpec) Validate() error {
	var fe FieldErrors
	if !validIdent(q.Name) {
		fe.Add("name", "%q: use letters, digits, '-', '_' and '.' (at most 63)", q.Name)
	}
	if q.Cohort != "" && !validIdent(q.Cohort) {
		fe.Add("cohort", "%q: use letters, digits, '-', '_' and '.'", q.Cohort)
	}
	if q.GuaranteeGPUs < 0 {
		fe.Add("guaranteeGPUs", "must not be negative (got %d)", q.GuaranteeGPUs)
	}
	if q.BorrowLimitGPUs != nil && *q.BorrowLimitGPUs < 0 {
		fe.Add("borrowLimitGPUs", "must not be negative (got %d)", *q.BorrowLimitGPUs)
	}
	for i, u := range q.Users {
		if !validIdent(u) {
			fe.Add(fmt.Sprintf("users[%d]", i), "%q: use letters, digits, '-', '_' and '.'", u)
		}
	}
	for i, g := range q.Groups {
		if !validIdent(g) {
			fe.Add(fmt.Sprintf("groups[%d]", i), "%q: use letters, digits, '-', '_' and '.'", g)
		}
	}
	if len(q.Users)+len(q.Groups) > 10000 {
		fe.Add("users", "at most 10000 users and groups together")
	}
	if q.Weight <= 0 || q.Weight > 1e6 {
		fe.Add("weight", "must be in (0, 1e6] (got %g)", q.Weight)
	}
	if q.Policy != "" && !slices.Contains(QueuePolicies, q.Policy) {
		fe.Add("policy", "%q is not a queue policy; use one of %s", q.Policy, strings.Join(QueuePolicies, ", "))
	}
	q.validateSettings(&fe)
	return fe.Err()
}

// validateSettings checks the policy settings' ranges, and that the
// queue's policy uses each one given.
func (q *QueueSpec) validateSettings(fe *FieldErrors) {
	pol := q.Policy
	if pol == "" {
		pol = DefaultQueuePolicy
	}
	uses := QueuePolicySettings[pol]
	check := func(field string, set bool, value string, ok bool, want string) {
		switch {
		case !set:
		case !slices.Contains(uses, field):
			also := ""
			if len(uses) > 0 {
				also = "; it takes " + strings.Join(uses, ", ")
			}
			fe.Add(field, "%s: policy %s does not use it (used by %s%s)", value, pol, policiesWith(field), also)
		case !ok:
			fe.Add(field, "%s: must be %s", value, want)
		}
	}
	check("laneShare", q.LaneShare != 0, strconv.FormatFloat(q.LaneShare, 'g', -1, 64),
		q.LaneShare > 0 && q.LaneShare <= 1, "in (0, 1], a share of the cluster's GPUs")
	dur := func(field string, d Duration, lo, hi time.Duration, what string) {
		check(field, d != 0, d.D().String(), d.D() >= lo && d.D() <= hi, fmt.Sprintf("%s, from %s to %s", what, lo, hi))
	}
	dur("overdueAfter", q.OverdueAfter, MinOverdueAfter, MaxOverdueAfter, "a wait")
	dur("levelBase", q.LevelBase, MinLevelBase, MaxLevelBase, "GPU-time as a duration of one GPU")
	dur("minRun", q.MinRun, MinMinRun, MaxMinRun, "a run time")
	dur("laneTurn", q.LaneTurn, MinLaneTurn, MaxLaneTurn, "a run time")
}

// policiesWith names the policies that use a setting, as "a and b".
func policiesWith(field string) string {
	var ps []string
	for p, fs := range QueuePolicySettings {
		if slices.Contains(fs, field) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

// DecodeQueueSpec parses, defaults and validates a queue strictly.
func DecodeQueueSpec(data []byte) (QueueSpec, error) {
	var q QueueSpec
	if err := decodeStrict(data, &q); err != nil {
		return QueueSpec{}, err
	}
	q.Default()
	if err := q.Validate(); err != nil {
		return QueueSpec{}, err
	}
	return q, nil
}

// Queue is a stored queue with its usage, computed when read.
type Queue struct {
	Spec        QueueSpec   `json:"spec"`
	CreatedAt   time.Time   `json:"createdAt"`
	Status      QueueStatus `json:"status"`
	ModRevision int64       `json:"modRevision,omitempty"`
	// Warnings, in the answer to setting a queue only, say what of the
	// spec the cluster cannot honour now (a guarantee above its GPUs).
	Warnings []string `json:"warnings,omitempty"`
}

// QueueStatus is the queue's usage now.
type QueueStatus struct {
	UsedGPUs     int `json:"usedGPUs"`
	BorrowedGPUs int `json:"borrowedGPUs"`
	RunningJobs  int `json:"runningJobs"`
	PendingJobs  int `json:"pendingJobs"`
	PendingGPUs  int `json:"pendingGPUs"`
}
