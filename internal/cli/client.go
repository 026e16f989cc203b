package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Client talks to a gangway server's /v1 API.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient returns a client for base ("http://host:7070").
func NewClient(base string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{}}
}

// APIError is a non-2xx answer from the server.
type APIError struct {
	Status int
	Body   api.ErrorBody
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Body.Error)
	if e.Body.Error == "" {
		fmt.Fprintf(&b, "HTTP %d", e.Status)
	}
	return b.String()
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the gangway server at %s (set --server or GANGWAY_SERVER): %w", c.Base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		_ = json.Unmarshal(b, &e.Body)
		return e
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Submit sends a job spec (YAML or JSON).
func (c *Client) Submit(ctx context.Context, spec []byte) (*api.Job, error) {
	var j api.Job
	return &j, c.do(ctx, http.MethodPost, "/v1/jobs", spec, &j)
}

// SubmitAny submits a spec that may have an array: the answer is the job,
// or the array's jobs.
func (c *Client) SubmitAny(ctx context.Context, spec []byte) (*api.Job, *api.ArraySubmission, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/v1/jobs", spec, &raw); err != nil {
		return nil, nil, err
	}
	var a api.ArraySubmission
	if err := json.Unmarshal(raw, &a); err == nil && a.ArrayID != "" {
		return nil, &a, nil
	}
	var j api.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, nil, fmt.Errorf("submit: answer: %w", err)
	}
	return &j, nil, nil
}

// CancelArray cancels every unfinished task of the array job id is in.
func (c *Client) CancelArray(ctx context.Context, id string) (*api.ArrayCancel, error) {
	var a api.ArrayCancel
	return &a, c.do(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel?array=1", nil, &a)
}

// Jobs lists jobs; with index > 0 it blocks until they change or wait ends.
func (c *Client) Jobs(ctx context.Context, index int64, wait time.Duration) (api.JobList, error) {
	var l api.JobList
	path := "/v1/jobs"
	if index > 0 {
		path += fmt.Sprintf("?index=%d&wait=%s", index, wait)
	}
	return l, c.do(ctx, http.MethodGet, path, nil, &l)
}

// ListJobs lists jobs: with live only those not finished, with limit > 0
// only the newest limit.
func (c *Client) ListJobs(ctx context.Context, live bool, limit int) (api.JobList, error) {
	var l api.JobList
	q := url.Values{}
	if live {
		q.Set("live", "true")
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return l, c.do(ctx, http.MethodGet, path, nil, &l)
}

// Job returns a job's detail.
func (c *Client) Job(ctx context.Context, id string) (*api.JobDetail, error) {
	var d api.JobDetail
	return &d, c.do(ctx, http.MethodGet, "/v1/jobs/"+id, nil, &d)
}

// Cancel asks for a job to be stopped for good.
func (c *Client) Cancel(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	return &j, c.do(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil, &j)
}

// Nodes lists nodes.
func (c *Client) Nodes(ctx context.Context) (api.NodeList, error) {
	var l api.NodeList
	return l, c.do(ctx, http.MethodGet, "/v1/nodes", nil, &l)
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, name string) (*api.Node, error) {
	var n api.Node
	return &n, c.do(ctx, http.MethodGet, "/v1/nodes/"+name, nil, &n)
}

// NodeAction cordons, uncordons or drains a node.
func (c *Client) NodeAction(ctx context.Context, name, action string) (*api.Node, error) {
	var n api.Node
	return &n, c.do(ctx, http.MethodPost, "/v1/nodes/"+name+"/"+action, nil, &n)
}

// Logs streams a rank's log into w.
func (c *Client) Logs(ctx context.Context, id string, rank, attempt int, stream string, follow bool, w io.Writer) error {
	q := fmt.Sprintf("?rank=%d&stream=%s", rank, stream)
	if attempt > 0 {
		q += fmt.Sprintf("&attempt=%d", attempt)
	}
	if follow {
		q += "&follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/v1/jobs/"+id+"/logs"+q, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the gangway server at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, &e.Body) != nil {
			e.Body.Error = strings.TrimSpace(string(b))
		}
		return e
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Deploy creates or updates a deployment from a spec (YAML or JSON).
func (c *Client) Deploy(ctx context.Context, spec []byte) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.do(ctx, http.MethodPost, "/v1/deployments", spec, &d)
}

// Deployments lists deployments.
func (c *Client) Deployments(ctx context.Context) (api.DeploymentList, error) {
	var l api.DeploymentList
	return l, c.do(ctx, http.MethodGet, "/v1/deployments", nil, &l)
}

// Deployment returns one deployment.
func (c *Client) Deployment(ctx context.Context, name string) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.do(ctx, http.MethodGet, "/v1/deployments/"+name, nil, &d)
}

// Scale sets a deployment's replica count.
func (c *Client) Scale(ctx context.Context, name string, replicas int) (*api.Deployment, error) {
	var d api.Deployment
	return &d, c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/deployments/%s/scale?replicas=%d", name, replicas), nil, &d)
}

// DeleteDeployment stops a deployment's replicas and removes it.
func (c *Client) DeleteDeployment(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/deployments/"+name, nil, nil)
}

// SetQueue creates a queue or replaces its spec.
func (c *Client) SetQueue(ctx context.Context, q api.QueueSpec) (*api.Queue, error) {
	b, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	var out api.Queue
	return &out, c.do(ctx, http.MethodPost, "/v1/queues", b, &out)
}

// Queues lists queues with their usage.
func (c *Client) Queues(ctx context.Context) (api.QueueList, error) {
	var l api.QueueList
	return l, c.do(ctx, http.MethodGet, "/v1/queues", nil, &l)
}

// DeleteQueue removes an empty queue.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/queues/"+name, nil, nil)
}

// SetPriority changes a job's priority.
func (c *Client) SetPriority(ctx context.Context, id string, p int) (*api.Job, error) {
	var j api.Job
	return &j, c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/jobs/%s/priority?priority=%d", id, p), nil, &j)
}
