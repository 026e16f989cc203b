package client

import (
	"context"
	"net/url"

	"github.com/gangway/gangway/internal/api"
)

// UsageQuery narrows GET /v1/reports/usage. The zero value reports every
// stored job's whole history by queue.
type UsageQuery struct {
	// By groups the rows: queue (""), user or job.
	By api.UsageBy
	// Since starts the window: a duration ago ("7d", "24h") or a time
	// (RFC 3339, or a date), as api.ParseSince reads it on the server's
	// clock. "": from the first attempt on.
	Since string
	// User keeps only that user's jobs (a user's token sees only its own).
	User string
	// Archived adds the jobs retention moved to the server's job archive.
	Archived bool
}

// Usage reports GPU-hours, useful and lost by cause, over q's window.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (api.UsageReport, error) {
	v := url.Values{}
	if q.By != "" {
		v.Set("by", string(q.By))
	}
	if q.Since != "" {
		v.Set("since", q.Since)
	}
	if q.User != "" {
		v.Set("user", q.User)
	}
	if q.Archived {
		v.Set("archived", "true")
	}
	path := "/v1/reports/usage"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var r api.UsageReport
	return r, c.Get(ctx, path, &r)
}

// TopJobs lists the running jobs (user's only, unless "") with the newest
// readings of their GPUs and their newest progress.
func (c *Client) TopJobs(ctx context.Context, user string) (api.JobTopList, error) {
	path := "/v1/top/jobs"
	if user != "" {
		path += "?" + url.Values{"user": {user}}.Encode()
	}
	var l api.JobTopList
	return l, c.Get(ctx, path, &l)
}
