package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// The inference part of a run: a deployment of gangway's engine simulator
// (`gangway engine-sim`, which answers as vLLM does), Engines replicas of
// one GPU each, behind every server replica's gateway, and a client that
// sends it streamed chat completions throughout the run.
const (
	inferDeployment = "chaos-infer"
	inferModel      = "Qwen3-8B"
)

// inferOwner is the Owner of the deployment's replica jobs, which are not
// the workload's: they run until the end.
var inferOwner = api.OwnerLabel(inferDeployment)

// deploy creates the deployment and waits, at most bound, until its
// engines are ready and a request through one of the gateways is
// answered.
func deploy(ctx context.Context, c *client.Client, gateways []string, engines int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	spec := fmt.Sprintf(`{"name": %q, "engine": "sim", "model": %q, "replicas": %d}`, inferDeployment, inferModel, engines)
	if err := wait.Until(ctx, time.Second, func() (bool, error) {
		_, err := c.Deploy(ctx, []byte(spec))
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status/100 == 4 {
			return false, fmt.Errorf("deploy %s: %w", inferDeployment, err)
		}
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("deploy %s: %w", inferDeployment, err)
	}
	q := &requester{gateways: gateways, hc: &http.Client{}}
	defer q.hc.CloseIdleConnections()
	var last error
	if err := wait.Until(ctx, 500*time.Millisecond, func() (bool, error) {
		d, err := c.Deployment(ctx, inferDeployment)
		if err != nil || d.Status.Ready < engines {
			return false, nil
		}
		last = q.try(ctx, q.next(), "warm up", 5*time.Second)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("%d engines of %s serving through the gateways (last request: %v): %w", engines, inferDeployment, last, err)
	}
	return nil
}

// requester sends streamed chat completions through the gateways, as a
// client with retries does: a request that fails is tried again on the
// next gateway, after a backoff, until it succeeds or Budget (from its
// first try) is spent; then it counts as failed.
type requester struct {
	gateways []string
	budget   time.Duration
	hc       *http.Client

	mu       sync.Mutex // guards the fields below
	turn     int        // the gateway the next try goes to
	requests int        // completed: succeeded or failed
	failed   int
	retries  int
	failures []string // the first few failed requests' last errors
}

// maxFailures bounds requester.failures.
const maxFailures = 5

// run sends requests from workers goroutines, each pausing between its
// requests, until ctx ends; it returns once they have stopped. A request
// that ctx cuts short counts neither way.
func (q *requester) run(ctx context.Context, workers int, pause time.Duration) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				// A shared prefix, as chat turns have, for the routing's
				// prefix affinity.
				q.one(ctx, fmt.Sprintf("chaos client %d, request %d: say something about gangs", w, i))
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	wg.Wait()
	q.hc.CloseIdleConnections()
}

// Backoff between the tries of one request: doubled from the first to the
// last.
const (
	requestBackoff    = 200 * time.Millisecond
	requestBackoffMax = 2 * time.Second
	// tryTimeout bounds one try (a gateway holds a request while no
	// engine is ready).
	tryTimeout = 15 * time.Second
)

// one sends one request until it is answered or its budget is spent.
func (q *requester) one(ctx context.Context, prompt string) {
	deadline := time.Now().Add(q.budget)
	backoff := requestBackoff
	for {
		err := q.try(ctx, q.next(), prompt, min(time.Until(deadline), tryTimeout))
		if ctx.Err() != nil {
			return
		}
		q.mu.Lock()
		if err == nil {
			q.requests++
			q.mu.Unlock()
			return
		}
		if time.Until(deadline) <= backoff {
			q.requests++
			q.failed++
			if len(q.failures) < maxFailures {
				q.failures = append(q.failures, fmt.Sprintf("%s: %v", stamp(time.Now()), err))
			}
			q.mu.Unlock()
			return
		}
		q.retries++
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, requestBackoffMax)
	}
}

// next is the gateway the next try goes to: each in turn.
func (q *requester) next() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	gw := q.gateways[q.turn%len(q.gateways)]
	q.turn++
	return gw
}

// counts returns the requests completed, failed and retried, and the
// first failures.
func (q *requester) counts() (requests, failed, retries int, failures []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.requests, q.failed, q.retries, append([]string(nil), q.failures...)
}

// try sends one streamed chat completion to the gateway at base and reads
// the whole answer: it succeeds when the stream carried chunks and ended
// with [DONE].
func (q *requester) try(ctx context.Context, base, prompt string, timeout time.Duration) error {
	if timeout <= 0 {
		return errors.New("no time left")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := fmt.Sprintf(`{"model": %q, "stream": true, "max_tokens": 8, "messages": [{"role": "user", "content": %q}]}`, inferModel, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := q.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", base, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, done := 0, false
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			chunks++
		}
	}
	if !done || chunks == 0 {
		return fmt.Errorf("%s: the stream ended after %d chunks without [DONE] (%v)", base, chunks, sc.Err())
	}
	return nil
}

// The inference client's load: requestWorkers requests at a time, each
// worker pausing requestPause between two.
const (
	requestWorkers = 2
	requestPause   = 250 * time.Millisecond
)
