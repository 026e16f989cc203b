package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Submit sends a job spec (YAML or JSON) without an array and returns the
// stored job.
func (c *Client) Submit(ctx context.Context, spec []byte) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs", spec, specHeader, &j)
}

// SubmitAny submits a spec that may have an array: the answer is the job,
// or the array's jobs.
func (c *Client) SubmitAny(ctx context.Context, spec []byte) (*api.Job, *api.ArraySubmission, error) {
	var raw json.RawMessage
	if err := c.post(ctx, "/v1/jobs", spec, specHeader, &raw); err != nil {
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

// SubmitID submits a spec without an array and decodes only the new job's
// ID (as sbatch --parsable prints it): for callers that submit many jobs
// and read them later.
func (c *Client) SubmitID(ctx context.Context, spec []byte) (string, error) {
	var j struct {
		ID string `json:"id"`
	}
	return j.ID, c.post(ctx, "/v1/jobs", spec, specHeader, &j)
}

// JobQuery narrows GET /v1/jobs. The zero value lists every job at once.
type JobQuery struct {
	// Live lists only jobs not finished.
	Live bool
	// Limit > 0 lists only the newest Limit jobs.
	Limit int
	// User, if set, keeps only that user's jobs (of those listed).
	User string
	// Index > 0 makes it a blocking query: the answer waits until jobs
	// changed after store revision Index, or Wait (the server's default
	// when 0) ends.
	Index int64
	Wait  time.Duration
}

// Jobs lists jobs, oldest first.
func (c *Client) Jobs(ctx context.Context, q JobQuery) (api.JobList, error) {
	v := url.Values{}
	if q.Live {
		v.Set("live", "true")
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.User != "" {
		v.Set("user", q.User)
	}
	r := &request{method: http.MethodGet, path: "/v1/jobs"}
	if q.Index > 0 {
		v.Set("index", strconv.FormatInt(q.Index, 10))
		r.wait = 30 * time.Second // the server's default
		if q.Wait > 0 {
			v.Set("wait", q.Wait.String())
			r.wait = q.Wait
		}
	}
	if len(v) > 0 {
		r.path += "?" + v.Encode()
	}
	var l api.JobList
	return l, c.do(ctx, r, &l)
}

// Job returns a job's detail: attempts, rank statuses, checkpoints and
// progress (or the archived record of a job retention deleted).
func (c *Client) Job(ctx context.Context, id string) (*api.JobDetail, error) {
	var d api.JobDetail
	return &d, c.Get(ctx, "/v1/jobs/"+esc(id), &d)
}

// Cancel asks for a job to be stopped for good; a finished job answers an
// *APIError with status 409.
func (c *Client) Cancel(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/cancel", nil, nil, &j)
}

// CancelArray cancels every unfinished task of the array job id is in.
func (c *Client) CancelArray(ctx context.Context, id string) (*api.ArrayCancel, error) {
	var a api.ArrayCancel
	return &a, c.post(ctx, "/v1/jobs/"+esc(id)+"/cancel?array=1", nil, nil, &a)
}

// SetPriority changes a job's priority.
func (c *Client) SetPriority(ctx context.Context, id string, p int) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/priority?priority="+strconv.Itoa(p), nil, nil, &j)
}

// LogQuery picks one rank's log.
type LogQuery struct {
	Rank int
	// Attempt is 1-based; 0: the newest.
	Attempt int
	// Stream is "stdout" or "stderr".
	Stream string
	// Follow keeps the answer open while the rank writes.
	Follow bool
}

// Logs copies a rank's log into w until it ends (with Follow, until the
// rank ends or ctx does). It has no timeout but ctx's and is not retried.
func (c *Client) Logs(ctx context.Context, id string, q LogQuery, w io.Writer) error {
	path := fmt.Sprintf("/v1/jobs/%s/logs?rank=%d&stream=%s", esc(id), q.Rank, url.QueryEscape(q.Stream))
	if q.Attempt > 0 {
		path += "&attempt=" + strconv.Itoa(q.Attempt)
	}
	if q.Follow {
		path += "&follow=1"
	}
	resp, err := c.send(ctx, &request{method: http.MethodGet, path: path})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := readAll(resp.Body, nil, 1<<20)
		return newAPIError(resp.StatusCode, b)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
