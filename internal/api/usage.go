package api

import (
	"strconv"
	"strings"
	"time"
)

// UsageBy is what a usage report groups jobs by.
type UsageBy string

// The groupings of a usage report.
const (
	UsageByQueue UsageBy = "queue"
	UsageByUser  UsageBy = "user"
	UsageByJob   UsageBy = "job"
)

// ParseUsageBy reads a --by value; "" is by queue. The error names the
// flag and the choices.
func ParseUsageBy(s string) (UsageBy, error) {
	switch b := UsageBy(s); b {
	case "":
		return UsageByQueue, nil
	case UsageByQueue, UsageByUser, UsageByJob:
		return b, nil
	}
	return "", ErrorForField("--by", "%q is not one of queue, user, job", s)
}

// CauseOther charges an attempt whose cause is not recorded and cannot be
// read from its outcome (a usage report's key, never an attempt's).
const CauseOther Cause = "other"

// UsageReport is GET /v1/reports/usage: GPU-hours by queue, user or job
// over [Since, Until), split into useful work and work lost by cause.
type UsageReport struct {
	// Since is zero for "from the first attempt on".
	Since time.Time  `json:"since,omitzero"`
	Until time.Time  `json:"until"`
	By    UsageBy    `json:"by"`
	Rows  []UsageRow `json:"rows"`
	Total UsageRow   `json:"total"`
}

// UsageRow is the usage of one queue, user or job (Key), or of all of
// them (the report's Total, Key "TOTAL").
//
// GPUHours, held by attempts within the window, is UsefulGPUHours plus
// every LostGPUHours plus RunningGPUHours. Work is useful when it reached
// a result: an attempt that succeeded, or the part of an interrupted one
// up to the checkpoint the next attempt resumed from. What an attempt did
// after its last such checkpoint is lost, charged to the cause it ended
// with. RunningGPUHours are attempts still running, not yet either.
type UsageRow struct {
	Key            string            `json:"key"`
	Jobs           int               `json:"jobs"`
	GPUHours       float64           `json:"gpuHours"`
	UsefulGPUHours float64           `json:"usefulGPUHours"`
	LostGPUHours   map[Cause]float64 `json:"lostGPUHours,omitempty"`
	// RunningGPUHours are held by attempts not yet ended.
	RunningGPUHours float64 `json:"runningGPUHours,omitempty"`
	// RestartBackoffGangHours is the wall time between an attempt's end
	// and the next one's start (the restart backoff, then the wait to be
	// placed again) times the GPUs the job asks for. No GPU is held
	// meanwhile, so it is not in GPUHours: it is what the gang went
	// without, not what the cluster spent.
	RestartBackoffGangHours float64 `json:"restartBackoffGangHours,omitempty"`
	// Goodput is UsefulGPUHours over the GPU-hours settled (useful plus
	// lost); 0 when none are.
	Goodput float64 `json:"goodput"`
}

// LostTotal is the row's GPU-hours lost, all causes together.
func (r *UsageRow) LostTotal() float64 {
	var n float64
	for _, v := range r.LostGPUHours {
		n += v
	}
	return n
}

// maxSinceDays bounds a --since in days: a century, far inside what a
// time.Duration holds (292 years).
const maxSinceDays = 36500

// ParseSince reads a --since value relative to now: a duration ago ("24h",
// "90m", "7d", "1.5d") or a time: RFC 3339 ("2026-12-01T10:00:00Z") or a
// date ("2026-12-01", midnight UTC). The error names the flag and what it
// takes, and wraps ErrInvalid.
func ParseSince(s string, now time.Time) (time.Time, error) {
	bad := func() (time.Time, error) {
		return time.Time{}, ErrorForField("--since", "%q is not a duration (e.g. 30m, 24h, 7d), a date (2026-12-01) or an RFC 3339 time (2026-12-01T10:00:00Z)", s)
	}
	if s == "" || strings.TrimSpace(s) != s {
		return bad()
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || days == "" || (days[0] != '.' && (days[0] < '0' || days[0] > '9')) {
			return bad()
		}
		if n > maxSinceDays {
			return time.Time{}, ErrorForField("--since", "%q is more than %d days", s, maxSinceDays)
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		v, err := time.ParseDuration(s)
		if err != nil {
			return bad()
		}
		d = v
	}
	switch {
	case d < 0:
		return time.Time{}, ErrorForField("--since", "%q is negative: give how long ago (7d) or a date (2026-12-01)", s)
	case d > maxSinceDays*24*time.Hour:
		return time.Time{}, ErrorForField("--since", "%q is more than %d days", s, maxSinceDays)
	}
	return now.Add(-d), nil
}
