package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
// stored job. Like every submission it carries a new random idempotency
// key, and is sent again with it when a try got no answer: the job is
// created once however many tries reach the server.
func (c *Client) Submit(ctx context.Context, spec []byte) (*api.Job, error) {
	var j api.Job
	return &j, c.submit(ctx, spec, "", &j)
}

// SubmitAny submits a spec that may have an array: the answer is the job,
// or the array's jobs.
func (c *Client) SubmitAny(ctx context.Context, spec []byte) (*api.Job, *api.ArraySubmission, error) {
	return c.SubmitKeyed(ctx, spec, "")
}

// SubmitKeyed is SubmitAny with the caller's own idempotency key ("": a
// new random one), for a caller that may send the same submission again
// after its own restart: the server answers a key it has seen (for a day)
// with what the first submission created.
func (c *Client) SubmitKeyed(ctx context.Context, spec []byte, key string) (*api.Job, *api.ArraySubmission, error) {
	var raw json.RawMessage
	if err := c.submit(ctx, spec, key, &raw); err != nil {
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
	return j.ID, c.submit(ctx, spec, "", &j)
}

// submit posts spec to /v1/jobs with key (a new random one if "") as its
// idempotency key.
func (c *Client) submit(ctx context.Context, spec []byte, key string, out any) error {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return c.do(ctx, &request{method: http.MethodPost, path: "/v1/jobs", body: spec, contentType: specHeader, key: []string{key}}, out)
}

// NewIdempotencyKey draws a random key (a version 4 UUID).
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// JobQuery narrows GET /v1/jobs. The zero value lists every job at once.
type JobQuery struct {
	// Live lists only jobs not finished.
	Live bool
	// Limit > 0 lists only the newest Limit jobs.
	Limit int
	// User, if set, keeps only that user's jobs (of those listed).
	User string
	// Since keeps only the jobs not finished or finished since then: a
	// duration ago ("7d", "12h") or a time (RFC 3339, or a date), as
	// api.ParseSince reads it on the server's clock. "": no bound.
	Since string
	// All adds the finished jobs retention moved to the server's job
	// archive, and lists newest first.
	All bool
	// Selector, if set, keeps only the jobs whose labels it selects
	// (api.ParseSelector's syntax: team=nlp,tier!=low,gpu,!spot).
	Selector string
	// Index > 0 makes it a blocking query: the answer waits until jobs
	// changed after store revision Index, or Wait (the server's default
	// when 0) ends.
	Index int64
	Wait  time.Duration
}

// Jobs lists jobs, oldest first (with All, newest first).
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
	if q.Since != "" {
		v.Set("since", q.Since)
	}
	if q.All {
		v.Set("all", "true")
	}
	if q.Selector != "" {
		v.Set("selector", q.Selector)
	}
	r := blockingGet("/v1/jobs", v, q.Index, q.Wait)
	var l api.JobList
	return l, c.do(ctx, r, &l)
}

// blockingGet is a GET of path with the query v and, with index > 0, a
// blocking query's: it waits on the server until something changed after
// index, or wait (the server's default, 30s, when 0) passed.
func blockingGet(path string, v url.Values, index int64, wait time.Duration) *request {
	r := &request{method: http.MethodGet, path: path}
	if index > 0 {
		v.Set("index", strconv.FormatInt(index, 10))
		r.wait = 30 * time.Second // the server's default
		if wait > 0 {
			v.Set("wait", wait.String())
			r.wait = wait
		}
	}
	if len(v) > 0 {
		r.path += "?" + v.Encode()
	}
	return r
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
	// Stream is api.LogStreamStdout, api.LogStreamStderr or
	// api.LogStreamBoth.
	Stream string
	// Follow keeps the answer open while the rank writes.
	Follow bool
	// WholeNode asks, in per-node launches, for the node's whole launcher
	// output rather than the rank's lines of it.
	WholeNode bool
	// Tail, when above 0, asks for only the last Tail lines of what is
	// retained (then, with Follow, everything after).
	Tail int
	// Timestamps puts the time each line was written before it (RFC 3339
	// with nanoseconds, UTC).
	Timestamps bool
	// Since, when not zero, leaves out the lines written before it.
	Since time.Time
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
	if q.WholeNode {
		path += "&node=1"
	}
	if q.Tail > 0 {
		path += "&tail=" + strconv.Itoa(q.Tail)
	}
	if q.Timestamps {
		path += "&timestamps=1"
	}
	if !q.Since.IsZero() {
		path += "&since=" + url.QueryEscape(q.Since.UTC().Format(time.RFC3339Nano))
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

// Hold keeps a waiting job from being placed until Release.
func (c *Client) Hold(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/hold", nil, nil, &j)
}

// Requeue stops a running job's attempt (checkpoint signal first) and
// puts the job back to wait under its ID.
func (c *Client) Requeue(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/requeue", nil, nil, &j)
}

// Signal sends sig (api.ParseSignal's forms) to every rank of a running
// job.
func (c *Client) Signal(ctx context.Context, id, sig string) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/signal?signal="+url.QueryEscape(sig), nil, nil, &j)
}

// Release lets a held job be placed again.
func (c *Client) Release(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	return &j, c.post(ctx, "/v1/jobs/"+esc(id)+"/release", nil, nil, &j)
}
