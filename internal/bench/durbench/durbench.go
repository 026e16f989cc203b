package durbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// Config is the shape of one run; zero fields take the defaults.
type Config struct {
	// Submissions is how many submissions are fired. Default 1,000.
	Submissions int
	// Concurrency is how many are in flight at once. Default 100.
	Concurrency int
	// KillAfter is how many success answers come before the server is
	// killed. Default a third of Submissions.
	KillAfter int
	// ArrayEvery makes every ArrayEvery-th submission an array of
	// ArrayTasks tasks. Defaults 10 and 300 (three of the store's
	// transactions, so that a kill can land between two); a negative
	// ArrayEvery submits none.
	ArrayEvery, ArrayTasks int
	// Exe is the gangway executable the server runs as (`Exe server`).
	// Default: this process's executable.
	Exe string
	// Dir holds the server's data directory and log. Default: a temporary
	// directory, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Timeout bounds the whole run. Default 10m.
	Timeout time.Duration
}

// Default fills the zero fields.
func (c *Config) Default() {
	if c.Submissions <= 0 {
		c.Submissions = 1000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 100
	}
	if c.KillAfter <= 0 {
		c.KillAfter = max(1, c.Submissions/3)
	}
	if c.ArrayEvery == 0 {
		c.ArrayEvery = 10
	}
	if c.ArrayTasks <= 0 {
		c.ArrayTasks = 300
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
}

// Validate reports a configuration that cannot run.
func (c *Config) Validate() error {
	switch {
	case c.KillAfter >= c.Submissions:
		return fmt.Errorf("--kill-after %d must be below --submissions %d: the server must die with submissions in flight", c.KillAfter, c.Submissions)
	case c.ArrayTasks > api.MaxArrayTasks:
		return fmt.Errorf("--array-tasks %d: at most %d", c.ArrayTasks, api.MaxArrayTasks)
	}
	return nil
}

// Result is what a run found.
type Result struct {
	// Submitted is how many submissions there were; Arrays how many of
	// them were arrays.
	Submitted int `json:"submitted"`
	Arrays    int `json:"arrays"`
	// Acknowledged got a success answer before the server died.
	Acknowledged int `json:"acknowledged"`
	// Present: acknowledged, and after the restart stored exactly once
	// under the ID answered (an array whole), which their key answers too.
	Present int `json:"present"`
	// Missing: acknowledged, and not stored under the ID answered.
	Missing int `json:"missing"`
	// KeyMismatch: acknowledged, and their key answers another ID.
	KeyMismatch int `json:"key_mismatch"`
	// Duplicated: submissions stored more than once after their retry.
	Duplicated int `json:"duplicated"`
	// Partial: arrays stored with tasks missing.
	Partial int `json:"partial"`
	// Unanswered got no answer before the server died (in flight, or not
	// sent yet); InFlightStored of them were stored anyway (found after
	// the restart, before any retry): their retry must not store them
	// again.
	Unanswered     int `json:"unanswered"`
	InFlightStored int `json:"in_flight_stored"`
	// RetryFailed: submissions whose retry with their key after the
	// restart got no success answer.
	RetryFailed int `json:"retry_failed"`
	// RestartS is from the SIGKILL to the restarted server answering as
	// leader; ServingS to its first answer (a replica that does not lead
	// yet stores submissions itself). The difference is mostly the dead
	// leader's election lease running out. SubmitPerS is the rate of
	// success answers before the kill.
	RestartS   float64 `json:"restart_s"`
	ServingS   float64 `json:"serving_s"`
	SubmitPerS float64 `json:"submit_per_s"`
	// OK: nothing missing, duplicated or partial, and every retry
	// answered.
	OK bool `json:"ok"`
	// Problems are the first few failures, in words.
	Problems []string `json:"problems,omitempty"`
}

// Run starts the server, fires the submissions, kills the server, starts
// it again, retries and checks, then stops the server and returns what it
// found. progress gets a line per step. An error means the run could not
// measure (ErrCannotRun: the executable did not start); a run that found
// losses returns a Result that is not OK, and no error.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Result, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(progress, "[%6.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	exe := cfg.Exe
	if exe == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: find this executable: %w", ErrCannotRun, err)
		}
		exe = p
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gangway-bench-durability-")
		if err != nil {
			return nil, fmt.Errorf("make working directory: %w", err)
		}
		dir = d
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make working directory: %w", err)
	}
	dataDir, logPath := filepath.Join(dir, "server"), filepath.Join(dir, "server.log")
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}

	srv, err := startServer(exe, dataDir, addr, logPath)
	if err != nil {
		return nil, err
	}
	alive := srv
	defer func() {
		if alive != nil {
			alive.stop()
		}
	}()
	adm, err := srv.waitLeader(ctx, dataDir, nil)
	if err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	say("server at %s, data in %s", adm.Server, dataDir)

	subs := make([]submission, cfg.Submissions)
	for i := range subs {
		s := &subs[i]
		s.name, s.key = fmt.Sprintf("durability-%d", i), client.NewIdempotencyKey()
		spec := api.JobSpec{Name: s.name, Ranks: 1, Command: []string{"true"}}
		if cfg.ArrayEvery > 0 && i%cfg.ArrayEvery == cfg.ArrayEvery-1 {
			s.tasks = cfg.ArrayTasks
			spec.Array = fmt.Sprintf("0-%d", cfg.ArrayTasks-1)
		}
		if s.body, err = json.Marshal(spec); err != nil {
			return nil, err
		}
	}

	// Fire them all, each tried once, and kill the server after
	// KillAfter success answers.
	first := adm
	first.Retries, first.MaxIdleConnsPerHost = -1, cfg.Concurrency
	c1, err := client.New(first)
	if err != nil {
		return nil, err
	}
	defer c1.CloseIdleConnections()
	say("firing %d submissions, %d at a time; SIGKILL after %d answers", cfg.Submissions, cfg.Concurrency, cfg.KillAfter)
	var answered atomic.Int64
	var killedAt time.Time
	killed := make(chan struct{})
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			srv.kill()
			killedAt = time.Now()
			alive = nil
			close(killed)
		})
	}
	fired := time.Now()
	forEach(ctx, len(subs), cfg.Concurrency, func(i int) {
		select {
		case <-killed:
			return // not sent: the server is gone
		default:
		}
		j, a, err := c1.SubmitKeyed(ctx, subs[i].body, subs[i].key)
		switch {
		case err != nil:
			return
		case a != nil:
			subs[i].acked = a.ArrayID
		default:
			subs[i].acked = j.ID
		}
		if answered.Add(1) == int64(cfg.KillAfter) {
			go kill()
		}
	})
	kill() // all answered before the kill took (a fast server): kill now
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	<-killed
	submitS := killedAt.Sub(fired).Seconds()
	say("killed the server after %d answers (%.0f/s)", answered.Load(), float64(answered.Load())/submitS)

	// Start it again on the same data directory and port.
	srv, err = startServer(exe, dataDir, addr, logPath)
	if err != nil {
		return nil, err
	}
	alive = srv
	var servingS float64
	if _, err := srv.waitLeader(ctx, dataDir, func() { servingS = time.Since(killedAt).Seconds() }); err != nil {
		return nil, fmt.Errorf("restart the server: %w", err)
	}
	restartS := time.Since(killedAt).Seconds()
	say("restarted: serving %.2fs and leading %.2fs after the kill", servingS, restartS)
	again := adm
	again.Retries, again.RetryBackoff, again.MaxIdleConnsPerHost = 5, 50*time.Millisecond, cfg.Concurrency
	c2, err := client.New(again)
	if err != nil {
		return nil, err
	}
	defer c2.CloseIdleConnections()
	before, err := c2.Jobs(ctx, client.JobQuery{})
	if err != nil {
		return nil, fmt.Errorf("list jobs after the restart: %w", err)
	}
	// Send every submission again with its key: the acknowledged ones
	// must answer what they answered, the others be stored at most once.
	forEach(ctx, len(subs), cfg.Concurrency, func(i int) {
		j, a, err := c2.SubmitKeyed(ctx, subs[i].body, subs[i].key)
		switch {
		case err != nil:
			subs[i].retryErr = err
		case a != nil:
			subs[i].retried = a.ArrayID
		default:
			subs[i].retried = j.ID
		}
	})
	after, err := c2.Jobs(ctx, client.JobQuery{})
	if err != nil {
		return nil, fmt.Errorf("list jobs after the retries: %w", err)
	}
	r := tally(subs, before.Jobs, after.Jobs)
	r.RestartS, r.ServingS, r.SubmitPerS = restartS, servingS, float64(answered.Load())/submitS
	say("%d acknowledged: %d present, %d missing, %d answered otherwise by their key; %d duplicated, %d partial; %d unanswered (%d stored anyway), %d retries failed",
		r.Acknowledged, r.Present, r.Missing, r.KeyMismatch, r.Duplicated, r.Partial, r.Unanswered, r.InFlightStored, r.RetryFailed)
	return &r, ctx.Err()
}

// forEach runs fn(0..n-1) on par goroutines and returns when all are done
// or ctx ended.
func forEach(ctx context.Context, n, par int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}
