package client

import (
	"context"
	"net/url"

	"github.com/gangway/gangway/internal/api"
)

// Nodes lists the registered nodes, with the store revision as Index.
func (c *Client) Nodes(ctx context.Context) (api.NodeList, error) {
	return c.NodesSelected(ctx, "")
}

// NodesSelected lists the nodes whose labels selector selects
// (api.ParseSelector's syntax); "" lists them all.
func (c *Client) NodesSelected(ctx context.Context, selector string) (api.NodeList, error) {
	var l api.NodeList
	path := "/v1/nodes"
	if selector != "" {
		path += "?selector=" + url.QueryEscape(selector)
	}
	return l, c.Get(ctx, path, &l)
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, name string) (*api.Node, error) {
	var n api.Node
	return &n, c.Get(ctx, "/v1/nodes/"+esc(name), &n)
}

// NodeAction cordons, uncordons or drains a node (action names which).
func (c *Client) NodeAction(ctx context.Context, name, action string) (*api.Node, error) {
	var n api.Node
	return &n, c.post(ctx, "/v1/nodes/"+esc(name)+"/"+esc(action), nil, nil, &n)
}

// Drain drains a node as req says: cordoned, its gangs let finish (until
// req.Timeout) or, with req.Now, moved elsewhere at once.
func (c *Client) Drain(ctx context.Context, name string, req api.DrainRequest) (*api.Node, error) {
	var n api.Node
	return &n, c.postJSON(ctx, "/v1/nodes/"+esc(name)+"/drain", req, &n)
}
