package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gangway/gangway/internal/api"
)

// Deploy creates or updates a deployment from a spec (YAML or JSON).
func (c *Client) Deploy(ctx context.Context, spec []byte) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.post(ctx, "/v1/deployments", spec, specHeader, &d)
}

// Deployments lists deployments.
func (c *Client) Deployments(ctx context.Context) (api.DeploymentList, error) {
	var l api.DeploymentList
	return l, c.Get(ctx, "/v1/deployments", &l)
}

// Deployment returns one deployment.
func (c *Client) Deployment(ctx context.Context, name string) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.Get(ctx, "/v1/deployments/"+esc(name), &d)
}

// Scale sets a deployment's replica count.
func (c *Client) Scale(ctx context.Context, name string, replicas int) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.post(ctx, "/v1/deployments/"+esc(name)+"/scale?replicas="+strconv.Itoa(replicas), nil, nil, &d)
}

// DeleteDeployment stops a deployment's replicas and removes it.
func (c *Client) DeleteDeployment(ctx context.Context, name string) error {
	return c.do(ctx, &request{method: http.MethodDelete, path: "/v1/deployments/" + esc(name)}, nil)
}
