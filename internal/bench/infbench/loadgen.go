package infbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/base/stats"
)

// The overhead scenario's load generator: a minimal HTTP/1.1 client that
// writes pre-rendered requests on keep-alive connections it dials once,
// one connection per worker, and reads each answer (Content-Length or
// chunked) without allocating. It exists so that the client's own CPU,
// which net/http's Transport spends on a writer and a reader goroutine
// and their hand-offs per request, does not crowd out the servers it
// measures on a small machine.

// loadTarget is one server the load goes to, with its requests rendered.
type loadTarget struct {
	addr  string   // host:port
	heads [][]byte // request line and headers for each body, in order
}

// newLoadTarget renders a POST of each body to path on base
// (http://host:port).
func newLoadTarget(base, path string, bodies [][]byte) (loadTarget, error) {
	addr, ok := bytes.CutPrefix([]byte(base), []byte("http://"))
	if !ok {
		return loadTarget{}, fmt.Errorf("target %q: want http://host:port", base)
	}
	t := loadTarget{addr: string(addr)}
	for _, b := range bodies {
		t.heads = append(t.heads, fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, len(b)))
	}
	return t, nil
}

// rawConn is one keep-alive connection; not safe for concurrent use.
type rawConn struct {
	addr string
	nc   net.Conn
	br   *bufio.Reader
}

func (c *rawConn) close() {
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

// roundTrip sends head and body and reads the answer, dialing first if
// the connection is closed. first is when the first byte of the answer's
// body arrived. A non-200 answer is an error (its body read, the
// connection kept).
func (c *rawConn) roundTrip(head, body []byte) (first time.Time, err error) {
	if c.nc == nil {
		nc, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return first, err
		}
		c.nc, c.br = nc, bufio.NewReaderSize(nc, 64<<10)
	}
	bufs := net.Buffers{head, body}
	if _, err := bufs.WriteTo(c.nc); err != nil {
		c.close()
		return first, err
	}
	first, status, err := c.readAnswer()
	if err != nil {
		c.close()
		return first, err
	}
	if status != 200 {
		return first, fmt.Errorf("status %d", status)
	}
	return first, nil
}

var errBadAnswer = errors.New("malformed HTTP answer")

func (c *rawConn) readAnswer() (first time.Time, status int, err error) {
	br := c.br
	line, err := br.ReadSlice('\n')
	if err != nil {
		return first, 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return first, 0, errBadAnswer
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return first, 0, errBadAnswer
	}
	length, chunked, closeAfter := int64(-1), false, false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return first, status, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return first, status, errBadAnswer
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(v), 10, 64); err != nil || length < 0 {
				return first, status, errBadAnswer
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closeAfter = bytes.EqualFold(v, []byte("close"))
		}
	}
	if length != 0 || chunked {
		if _, err := br.Peek(1); err != nil {
			return first, status, err
		}
	}
	first = time.Now()
	switch {
	case chunked:
		for {
			line, err = br.ReadSlice('\n')
			if err != nil {
				return first, status, err
			}
			size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
			n, err := strconv.ParseInt(string(size), 16, 64)
			if err != nil || n < 0 {
				return first, status, errBadAnswer
			}
			if n == 0 {
				for { // trailers, then the empty line
					line, err = br.ReadSlice('\n')
					if err != nil {
						return first, status, err
					}
					if len(bytes.TrimRight(line, "\r\n")) == 0 {
						break
					}
				}
				break
			}
			if _, err := br.Discard(int(n)); err != nil {
				return first, status, err
			}
			if line, err = br.ReadSlice('\n'); err != nil || len(bytes.TrimRight(line, "\r\n")) != 0 {
				return first, status, errBadAnswer
			}
		}
	case length > 0:
		if _, err := br.Discard(int(length)); err != nil {
			return first, status, err
		}
	case length < 0:
		return first, status, errors.New("answer without a length: not supported")
	}
	if closeAfter {
		c.close()
	}
	return first, status, nil
}

// loadShape is one run of the load generator.
type loadShape struct {
	rate  float64 // open loop at this many requests/s when > 0,
	conns int     // over this many connections per target
	// concurrency, without a rate, is a closed loop of this many workers
	// in all, spread over the targets.
	concurrency int
	requests    int
	seed        uint64 // of the open loop's arrival times
}

// loadResult holds one run's latencies in ms, sorted.
type loadResult struct {
	ttft, e2e []float64
	errors    int
	firstErr  error
	wall      time.Duration
	// lateP99 is the 99th percentile of how late the sender released a
	// request after its scheduled time (open loop), in ms.
	lateP99 float64
}

func (r *loadResult) merge(o loadResult) {
	r.ttft = append(r.ttft, o.ttft...)
	r.e2e = append(r.e2e, o.e2e...)
	r.errors += o.errors
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	r.wall += o.wall
	r.lateP99 = max(r.lateP99, o.lateP99)
}

// loadGen drives targets: request i goes to target i % len(targets) with
// body i % len(bodies), each worker over its own keep-alive connection;
// connections persist across runs.
type loadGen struct {
	targets []loadTarget
	bodies  [][]byte
	conns   [][]*rawConn // per target, grown on demand
}

func newLoadGen(targets []loadTarget, bodies [][]byte) *loadGen {
	return &loadGen{targets: targets, bodies: bodies, conns: make([][]*rawConn, len(targets))}
}

// dial opens the connections a run of shape will use, so that none is
// dialed while it is measured.
func (g *loadGen) dial(shape loadShape) error {
	workers := max(shape.conns, 1)
	if shape.rate <= 0 {
		workers = max(shape.concurrency, 1)
	}
	for t := range g.targets {
		for w := range workers {
			c := g.conn(t, w)
			if c.nc != nil {
				continue
			}
			nc, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
			if err != nil {
				return fmt.Errorf("dial %s: %w", c.addr, err)
			}
			c.nc, c.br = nc, bufio.NewReaderSize(nc, 64<<10)
		}
	}
	return nil
}

// conn returns target t's w-th connection.
func (g *loadGen) conn(t, w int) *rawConn {
	for len(g.conns[t]) <= w {
		g.conns[t] = append(g.conns[t], &rawConn{addr: g.targets[t].addr})
	}
	return g.conns[t][w]
}

func (g *loadGen) close() {
	for _, cs := range g.conns {
		for _, c := range cs {
			c.close()
		}
	}
}

type loadJob struct {
	i     int
	sched time.Time
}

// run sends shape.requests requests and returns their latencies, counted
// from each request's scheduled send time in an open loop (so a request
// that waits for a free connection, or for a late sender, is charged the
// wait) and from its send in a closed loop.
func (g *loadGen) run(ctx context.Context, shape loadShape) loadResult {
	res := loadResult{ttft: make([]float64, 0, shape.requests), e2e: make([]float64, 0, shape.requests)}
	var mu sync.Mutex // guards res
	record := func(sched, first time.Time, err error) {
		done := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.errors++
			if res.firstErr == nil {
				res.firstErr = err
			}
			return
		}
		res.ttft = append(res.ttft, ms(first.Sub(sched)))
		res.e2e = append(res.e2e, ms(done.Sub(sched)))
	}
	nt := len(g.targets)
	var wg sync.WaitGroup
	send := func(t, w int, j loadJob) {
		if shape.rate <= 0 {
			j.sched = time.Now()
		}
		b := j.i % len(g.bodies)
		first, err := g.conn(t, w).roundTrip(g.targets[t].heads[b], g.bodies[b])
		record(j.sched, first, err)
	}
	// Open loop: a queue per target with its own workers. Closed loop:
	// one queue, each worker sending job i to target i % nt on its own
	// connection there.
	queues := make([]chan loadJob, nt)
	if shape.rate > 0 {
		for t := range nt {
			queues[t] = make(chan loadJob, shape.requests)
			for w := range max(shape.conns, 1) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range queues[t] {
						send(t, w, j)
					}
				}()
			}
		}
	} else {
		q := make(chan loadJob, shape.requests)
		for t := range queues {
			queues[t] = q
		}
		for w := range max(shape.concurrency, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range q {
					send(j.i%nt, w, j)
				}
			}()
		}
	}
	start := time.Now()
	if shape.rate > 0 {
		late := make([]float64, 0, shape.requests)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			defer lockPreciseTimer()()
			rng := rand.New(rand.NewPCG(shape.seed, 0x9e3779b97f4a7c15))
			next := start
			for i := range shape.requests {
				if ctx.Err() != nil {
					return
				}
				next = next.Add(time.Duration(rng.ExpFloat64() / shape.rate * float64(time.Second)))
				sleepUntil(next)
				late = append(late, ms(max(time.Since(next), 0)))
				queues[i%nt] <- loadJob{i: i, sched: next}
			}
		}()
		<-sent
		slices.Sort(late)
		res.lateP99 = stats.Quantile(late, .99)
	} else {
		// Closed loop: all jobs queued at once, each worker sends its
		// next when its last is answered.
		for i := range shape.requests {
			queues[i%nt] <- loadJob{i: i}
		}
	}
	if shape.rate > 0 {
		for _, q := range queues {
			close(q)
		}
	} else {
		close(queues[0])
	}
	wg.Wait()
	res.wall = time.Since(start)
	slices.Sort(res.ttft)
	slices.Sort(res.e2e)
	return res
}

// parseSchedstat reads the first field of /proc/<pid>/task/<tid>/schedstat:
// nanoseconds the thread has run on a CPU.
func parseSchedstat(b []byte) (time.Duration, bool) {
	f := bytes.Fields(b)
	if len(f) < 1 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(f[0]), 10, 64)
	return time.Duration(ns), err == nil && ns >= 0
}
