package client

import (
	"context"
	"net/http"

	"github.com/gangway/gangway/internal/api"
)

// SetQueue creates a queue or replaces its spec.
func (c *Client) SetQueue(ctx context.Context, q api.QueueSpec) (*api.Queue, error) {
	var out api.Queue
	return &out, c.postJSON(ctx, "/v1/queues", q, &out)
}

// Queues lists queues with their usage.
func (c *Client) Queues(ctx context.Context) (api.QueueList, error) {
	var l api.QueueList
	return l, c.Get(ctx, "/v1/queues", &l)
}

// DeleteQueue removes a queue no unfinished job uses.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.do(ctx, &request{method: http.MethodDelete, path: "/v1/queues/" + esc(name)}, nil)
}
