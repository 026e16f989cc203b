package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// EventQuery narrows GET /v1/events. The zero value lists every event the
// server keeps, at once.
type EventQuery struct {
	// Job, Node, Deployment and Queue keep that object's events (a node's
	// include those of the jobs placed on it).
	Job, Node, Deployment, Queue string
	// Kind keeps the events of objects of that kind: job, node,
	// deployment or queue.
	Kind api.ObjectKind
	// Since keeps the events from then on: a duration ago ("30m", "7d")
	// or a time (RFC 3339, or a date), as api.ParseSince reads it on the
	// server's clock.
	Since string
	// Limit > 0 keeps only the newest Limit of them.
	Limit int
	// Index > 0 makes it a blocking query: the answer waits until an
	// event past Index that the filters keep is there, or Wait (the
	// server's default when 0) ends, and then has none.
	Index int64
	Wait  time.Duration
}

// Events lists events, oldest first, with the index to follow them from.
func (c *Client) Events(ctx context.Context, q EventQuery) (api.EventList, error) {
	v := url.Values{}
	for k, s := range map[string]string{"job": q.Job, "node": q.Node, "deployment": q.Deployment, "queue": q.Queue, "kind": string(q.Kind), "since": q.Since} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var l api.EventList
	return l, c.do(ctx, blockingGet("/v1/events", v, q.Index, q.Wait), &l)
}
