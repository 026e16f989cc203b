package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Probe is gangway's preflight probe, one per node of a gang about to
// start (the hidden `gangway preflight-rank`): the probes meet in the
// trainer's ring, time each link in turn (node i sends --bytes to node
// i+1 while every other link is idle, so each measure is that link's
// alone; --rounds times, keeping the fastest) and then run one all-reduce
// of the same size. It writes
// {"inGBps": ..., "allReduceGBps": ...} to $GANGWAY_TASK_DIR/preflight.json
// (the link into this node, from the previous one) and exits 0, or
// exits 1 saying what failed.
func Probe(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight-rank", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.Int("bytes", 16<<20, "bytes each link carries, and the all-reduce reduces")
	rounds := fs.Int("rounds", 3, "times each link is timed; the fastest counts (a busy host only ever slows a measure)")
	timeout := fs.Duration("timeout", time.Minute, "bound on the whole probe")
	slowFile := fs.String("slow-file", "", "a file naming nodes (one per line) whose links run at --slow-gbps (tests)")
	slowGBps := fs.Float64("slow-gbps", 0.05, "the links' rate on a node --slow-file names")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *size < 8 || *rounds < 1 {
		fmt.Fprintln(stderr, "preflight-rank: --bytes must be at least 8 and --rounds at least 1")
		return 2
	}
	l, err := parseLaunch(env)
	if err != nil {
		fmt.Fprintln(stderr, "preflight-rank:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rate := 0.0
	if *slowFile != "" && slowNode(*slowFile, l.Node) {
		rate = *slowGBps * 1e9
	}
	res, err := probe(ctx, l, *size, *rounds, rate, *timeout)
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 1
	}
	b, _ := json.Marshal(res)
	if dir := env("GANGWAY_TASK_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "preflight.json"), b, 0o644); err != nil {
			fmt.Fprintln(stderr, "preflight:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "preflight: node %s link in %.2f GB/s, all-reduce %.2f GB/s\n", l.Node, res.InGBps, res.AllReduceGBps)
	return 0
}

// probeResult is what Probe writes (api.PreflightResult's fields).
type probeResult struct {
	InGBps        float64 `json:"inGBps"`
	AllReduceGBps float64 `json:"allReduceGBps,omitempty"`
}

func probe(ctx context.Context, l launch, size, rounds int, rate float64, timeout time.Duration) (probeResult, error) {
	var res probeResult
	r, err := rendezvous(ctx, l, timeout, timeout)
	if err != nil {
		return res, err
	}
	defer r.close()
	if r.world == 1 {
		return probeResult{InGBps: 1}, nil // no link to test
	}
	stop := context.AfterFunc(ctx, r.close)
	defer stop()
	buf := make([]byte, size)
	// Each round the token goes round once: rank 0 sends first, every
	// other rank receives (timing its in-link), then sends on.
	var best time.Duration
	for range rounds {
		if r.rank == 0 {
			if err := sendTimed(r.next, buf, rate); err != nil {
				return res, fmt.Errorf("send to rank 1: %w", err)
			}
		}
		d, err := recvTimed(r.prev, buf, rate)
		if err != nil {
			return res, fmt.Errorf("receive from rank %d: %w", mod(r.rank-1, r.world), err)
		}
		if best == 0 || d < best {
			best = d
		}
		if r.rank != 0 {
			if err := sendTimed(r.next, buf, rate); err != nil {
				return res, fmt.Errorf("send to rank %d: %w", mod(r.rank+1, r.world), err)
			}
		}
	}
	res.InGBps = float64(size) / best.Seconds() / 1e9
	v := make([]float64, size/8)
	for i := range v {
		v[i] = float64(r.rank)
	}
	start := time.Now()
	if err := r.allReduce(ctx, v); err != nil {
		return res, err
	}
	w := float64(r.world)
	// nccl-tests' bus bandwidth: what each link carried, over the time.
	res.AllReduceGBps = 2 * (w - 1) / w * float64(8*len(v)) / time.Since(start).Seconds() / 1e9
	if want := w * (w - 1) / 2; v[0] != want {
		return res, fmt.Errorf("all-reduce summed %g, want %g: the ring corrupts data", v[0], want)
	}
	return res, nil
}

// probeChunk is how much a throttled link moves between its pauses.
const probeChunk = 256 << 10

// sendTimed writes an 8-byte length and buf to c, at most rate bytes/s
// when rate > 0.
func sendTimed(c net.Conn, buf []byte, rate float64) error {
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], uint64(len(buf)))
	if _, err := c.Write(h[:]); err != nil {
		return err
	}
	start := time.Now()
	for off := 0; off < len(buf); off += probeChunk {
		end := min(off+probeChunk, len(buf))
		if _, err := c.Write(buf[off:end]); err != nil {
			return err
		}
		throttle(start, end, rate)
	}
	return nil
}

// recvTimed reads what sendTimed sent into buf, and returns the time from
// the first byte of the payload to the last, at most rate bytes/s.
func recvTimed(c net.Conn, buf []byte, rate float64) (time.Duration, error) {
	var h [8]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, err
	}
	if n := binary.LittleEndian.Uint64(h[:]); n != uint64(len(buf)) {
		return 0, fmt.Errorf("peer sends %d bytes, want %d", n, len(buf))
	}
	start := time.Now()
	for off := 0; off < len(buf); off += probeChunk {
		end := min(off+probeChunk, len(buf))
		if _, err := io.ReadFull(c, buf[off:end]); err != nil {
			return 0, err
		}
		throttle(start, end, rate)
	}
	d := time.Since(start)
	if d <= 0 {
		return 0, errors.New("link timed at zero")
	}
	return d, nil
}

// throttle sleeps until done bytes since start keep within rate bytes/s.
func throttle(start time.Time, done int, rate float64) {
	if rate <= 0 {
		return
	}
	if ahead := time.Duration(float64(done)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
		time.Sleep(ahead)
	}
}
