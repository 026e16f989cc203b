package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Register tells the server a node is up, with its GPUs, and returns the
// timing contract (heartbeat interval, fence lease) the agent must keep.
// The client must present the node's certificate.
func (c *Client) Register(ctx context.Context, req *api.RegisterRequest) (api.RegisterResponse, error) {
	var resp api.RegisterResponse
	return resp, c.postJSON(ctx, "/v1/agent/register", req, &resp)
}

// Join trades a join token (or an admin's token: the client's Token) and a
// certificate request for the node's certificate and the cluster CA.
func (c *Client) Join(ctx context.Context, req *api.JoinRequest) (api.JoinAnswer, error) {
	var resp api.JoinAnswer
	return resp, c.postJSON(ctx, "/v1/agent/join", req, &resp)
}

// Renew trades a certificate request for a new certificate of the node
// whose certificate the client presents.
func (c *Client) Renew(ctx context.Context, req *api.JoinRequest) (api.JoinAnswer, error) {
	var resp api.JoinAnswer
	return resp, c.postJSON(ctx, "/v1/agent/renew", req, &resp)
}

// Heartbeat sends an agent's report: its ranks' statuses, new checkpoints
// and progress, and the assignments revision it has carried out. It is
// never retried: the next heartbeat repeats what this one carried.
func (c *Client) Heartbeat(ctx context.Context, hb *api.Heartbeat) (api.HeartbeatResponse, error) {
	var resp api.HeartbeatResponse
	b, err := json.Marshal(hb)
	if err != nil {
		return resp, fmt.Errorf("POST /v1/agent/heartbeat: encode: %w", err)
	}
	// A heartbeat carries the node's whole state: a try that did not reach
	// a replica (one just killed) is sent to the next at once, not a
	// heartbeat later, which could be past the ranks' lease.
	return resp, c.do(ctx, &request{method: http.MethodPost, path: "/v1/agent/heartbeat", body: b, contentType: jsonHeader, repeatable: true}, &resp)
}

// AssignmentQuery asks for a node's assignments.
type AssignmentQuery struct {
	Node string
	// Index > 0 makes it a long poll: the answer waits until the node's
	// assignments changed after revision Index, or Wait ends.
	Index int64
	Wait  time.Duration
	// Delta (with Index) asks for only what changed after Index in full,
	// and the rest by task key (api.AssignmentList.Unchanged).
	Delta bool
}

// Assignments returns the ranks the node should run.
func (c *Client) Assignments(ctx context.Context, q AssignmentQuery) (api.AssignmentList, error) {
	// Built by hand: url.Values would cost a map per poll, and a node name
	// is letters, digits, '-', '_' and '.' (api.ValidNodeName).
	path := "/v1/agent/assignments?node=" + esc(q.Node)
	r := &request{method: http.MethodGet}
	if q.Index > 0 {
		path += "&index=" + strconv.FormatInt(q.Index, 10)
		if q.Wait > 0 {
			path += "&wait=" + q.Wait.String()
			r.wait = q.Wait
		}
		if q.Delta {
			path += "&delta=1"
		}
	}
	r.path = path
	var l api.AssignmentList
	return l, c.do(ctx, r, &l)
}
