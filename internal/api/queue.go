package api

import (
	"fmt"
	"slices"
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
}

// QueuePolicies lists the queue policies, as internal/scheduler/policy
// registers them (its tests check that the two agree): fifo (submit
// order, strictly), backfill (submit order; later gangs pass a blocked
// one where they cannot delay it), greedy (submit order; any gang that
// fits starts), gangway and its synonym las (least attained GPU-service
// first, with aging, preempting).
var QueuePolicies = []string{"backfill", "fifo", "gangway", "gangway-4h", "greedy", "las"}

// DefaultQueuePolicy is the policy of a queue that names none.
const DefaultQueuePolicy = "backfill"

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
	return fe.Err()
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
