package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/gateway"
)

// connsPerEngine is the connection budget per engine on both paths.
const connsPerEngine = 128

// overheadCase is one load shape of the overhead scenario.
type overheadCase struct {
	name        string
	rate        float64 // open loop when > 0
	concurrency int     // closed loop when > 0
	requests    int
	promptBytes int
	limitMS     float64 // the target for added p99; 0 when none
}

func overheadCases(quick bool) []overheadCase {
	if quick {
		return []overheadCase{
			{name: "one at a time, ~1 KB prompts", concurrency: 1, requests: 500, promptBytes: 1000},
			{name: "open-loop 300 req/s, ~1 KB prompts", rate: 300, requests: 600, promptBytes: 1000},
			{name: "closed-loop 20 concurrent, 220 KB prompts", concurrency: 20, requests: 100, promptBytes: 220_000},
		}
	}
	return []overheadCase{
		// Without load: what the gateway adds to one request.
		{name: "one at a time, ~1 KB prompts", concurrency: 1, requests: 2000, promptBytes: 1000},
		{name: "one at a time, 220 KB prompts", concurrency: 1, requests: 200, promptBytes: 220_000},
		// The targets.
		{name: "open-loop 5000 req/s, ~1 KB prompts", rate: 5000, requests: 15_000, promptBytes: 1000, limitMS: 1},
		{name: "open-loop 500 req/s, ~1 KB prompts", rate: 500, requests: 5000, promptBytes: 1000},
		{name: "closed-loop 150 concurrent, 220 KB prompts", concurrency: 150, requests: 1500, promptBytes: 220_000, limitMS: 20},
	}
}

// loopback serves h on a fresh 127.0.0.1 port until stop is called.
func loopback(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
	}, nil
}

// runOverhead measures what the gateway adds to a request, against
// zero-latency engines on 127.0.0.1: the same open- or closed-loop load
// is sent straight to the engines (round-robin) and then through the
// gateway, and the p99 latencies (first byte and whole answer) compared.
func runOverhead(ctx context.Context, cases []overheadCase, progress func(string, ...any)) ([]Summary, error) {
	cfg, err := enginesim.NewConfig("Qwen3-8B", "H100", 1, "bf16")
	if err != nil {
		return nil, err
	}
	cfg.MaxModelLen = 131072 // room for 220 KB prompts
	var urls []string
	var stops []func()
	defer func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}()
	for range 8 {
		s, err := enginesim.NewServer(enginesim.ServerConfig{Engine: cfg, Time: enginesim.TimeZero, ServedModelName: "sim"})
		if err != nil {
			return nil, err
		}
		u, stop, err := loopback(s)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
		stops = append(stops, stop)
	}
	var eps gateway.Static
	for _, u := range urls {
		eps = append(eps, gateway.Endpoint{URL: u, Model: "sim", Engine: &cfg})
	}
	g, err := gateway.New(gateway.Config{Source: eps, Seed: 1, MaxConnsPerEngine: connsPerEngine})
	if err != nil {
		return nil, err
	}
	gctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.Run(gctx) }()
	defer func() { cancel(); wg.Wait() }()
	if err := g.Refresh(ctx); err != nil {
		return nil, err
	}
	gwURL, stop, err := loopback(g)
	if err != nil {
		return nil, err
	}
	stops = append(stops, stop)

	// Both paths get the same connection budget per engine, so a request
	// the machine cannot serve yet waits for a connection (and the wait
	// counts, from its scheduled time) instead of opening a new one.
	direct := &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: connsPerEngine, MaxIdleConnsPerHost: connsPerEngine, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
	}}
	toGateway := &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: 8 * connsPerEngine, MaxIdleConnsPerHost: 8 * connsPerEngine, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
	}}
	defer direct.CloseIdleConnections()
	defer toGateway.CloseIdleConnections()

	var out []Summary
	for _, oc := range cases {
		bodies := overheadBodies(oc.promptBytes, 64)
		// Warm both paths' connection pools, then measure each.
		toEngine := func(i int) string { return urls[i%len(urls)] }
		toGW := func(int) string { return gwURL }
		warm := oc
		warm.requests = min(oc.requests/5, 500)
		if _, err := drive(ctx, direct, warm, bodies, toEngine); err != nil {
			return nil, err
		}
		if _, err := drive(ctx, toGateway, warm, bodies, toGW); err != nil {
			return nil, err
		}
		// Alternate direct and gateway rounds so that whatever else the
		// machine does falls on both alike.
		const rounds = 5
		var straight, via driveResult
		round := oc
		round.requests = oc.requests / rounds
		for range rounds {
			d, err := drive(ctx, direct, round, bodies, toEngine)
			if err != nil {
				return nil, fmt.Errorf("%s, direct: %w", oc.name, err)
			}
			v, err := drive(ctx, toGateway, round, bodies, toGW)
			if err != nil {
				return nil, fmt.Errorf("%s, through the gateway: %w", oc.name, err)
			}
			straight.merge(d)
			via.merge(v)
		}
		slices.Sort(straight.ttft)
		slices.Sort(straight.e2e)
		slices.Sort(via.ttft)
		slices.Sort(via.e2e)
		s := Summary{
			Scenario: ScenarioOverhead, Policy: gateway.PolicyPrefixAffinity, Requests: len(via.e2e),
			TTFTp50ms: percentile(via.ttft, .5), TTFTp90ms: percentile(via.ttft, .9), TTFTp99ms: percentile(via.ttft, .99), TTFTp999ms: percentile(via.ttft, .999),
			E2Ep50ms: percentile(via.e2e, .5), E2Ep99ms: percentile(via.e2e, .99), E2Ep999ms: percentile(via.e2e, .999),
			AddedP50ms:    percentile(via.e2e, .5) - percentile(straight.e2e, .5),
			AddedP99ms:    percentile(via.e2e, .99) - percentile(straight.e2e, .99),
			DirectP99ms:   percentile(straight.e2e, .99),
			LimitMS:       oc.limitMS,
			Load:          oc.name,
			Goodput:       float64(len(via.e2e)) / via.wall.Seconds(),
			SLOAttainment: 1,
			DurationS:     via.wall.Seconds(),
			Rate:          oc.rate,
		}
		s.Dropped = via.errors
		out = append(out, s)
		progress("  %-45s direct p99 %7.3f ms, gateway p99 %7.3f ms: added p99 %.3f ms (p50 %.3f ms), %d requests, %d errors",
			oc.name, s.DirectP99ms, s.E2Ep99ms, s.AddedP99ms, s.AddedP50ms, s.Requests, via.errors+straight.errors)
	}
	return out, nil
}

// overheadBodies returns n streamed completion bodies of about size
// bytes: 8 shared documents with a distinct question each.
func overheadBodies(size, n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"cluster", "gpu", "token", "cache", "replica", "queue", "prefill", "decode", "batch", "kernel"}
	docs := make([]string, 8)
	for d := range docs {
		var b strings.Builder
		for b.Len() < size-64 {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		docs[d] = b.String()
	}
	out := make([][]byte, n)
	for i := range out {
		prompt := fmt.Sprintf("%sQuestion %d: what does replica %d do?", docs[i%len(docs)], i, rng.IntN(1000))
		out[i] = fmt.Appendf(nil, `{"model":"sim","prompt":%q,"max_tokens":16,"stream":true,"ignore_eos":true}`, prompt)
	}
	return out
}

type driveResult struct {
	ttft, e2e []float64 // ms, sorted
	errors    int
	wall      time.Duration
}

func (r *driveResult) merge(o driveResult) {
	r.ttft = append(r.ttft, o.ttft...)
	r.e2e = append(r.e2e, o.e2e...)
	r.errors += o.errors
	r.wall += o.wall
}

// drive sends oc.requests requests, open loop at oc.rate (latency counted
// from each request's scheduled time, so a slow sender cannot hide
// queueing) or closed loop with oc.concurrency workers.
func drive(ctx context.Context, client *http.Client, oc overheadCase, bodies [][]byte, target func(int) string) (driveResult, error) {
	var mu sync.Mutex
	var res driveResult
	one := func(i int, sched time.Time) {
		ttft, e2e, err := send(ctx, client, target(i), bodies[i%len(bodies)], sched)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.errors++
			return
		}
		res.ttft = append(res.ttft, ms(ttft))
		res.e2e = append(res.e2e, ms(e2e))
	}
	start := time.Now()
	var wg sync.WaitGroup
	switch {
	case oc.rate > 0:
		rng := rand.New(rand.NewPCG(11, 13))
		next := start
		for i := range oc.requests {
			if ctx.Err() != nil {
				break
			}
			next = next.Add(time.Duration(rng.ExpFloat64() / oc.rate * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func(sched time.Time) { defer wg.Done(); one(i, sched) }(next)
		}
	default:
		jobs := make(chan int)
		for range oc.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					one(i, time.Now())
				}
			}()
		}
		for i := range oc.requests {
			if ctx.Err() != nil {
				break
			}
			jobs <- i
		}
		close(jobs)
	}
	wg.Wait()
	res.wall = time.Since(start)
	slices.Sort(res.ttft)
	slices.Sort(res.e2e)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if len(res.e2e) == 0 {
		return res, errors.New("every request failed")
	}
	if res.errors > len(res.e2e)/100 {
		return res, fmt.Errorf("%d of %d requests failed", res.errors, oc.requests)
	}
	return res, nil
}

func send(ctx context.Context, c *http.Client, base string, body []byte, sched time.Time) (ttft, e2e time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+enginesim.PathCompletions, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var buf [4096]byte
	n, err := resp.Body.Read(buf[:])
	ttft = time.Since(sched)
	if n == 0 && err != nil {
		return 0, 0, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, buf[:n])
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, 0, fmt.Errorf("read answer: %w", err)
	}
	return ttft, time.Since(sched), nil
}
