package trainer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"time"
)

// ring is one rank's place in the all-reduce ring: it sends to rank+1 and
// receives from rank-1 (mod world size). A ring of one rank has no
// connections and all-reduce is the identity.
//
// A ring is used by one goroutine at a time; close may be called from any
// goroutine (to abort a blocked all-reduce) and more than once.
type ring struct {
	rank, world int
	next, prev  net.Conn // next: written by allReduce's sender; prev: read by allReduce
	ioTimeout   time.Duration
	seq         uint64 // messages sent so far; the receiver expects the same count

	closeOnce sync.Once
}

// Wire format of one ring message: a 16-byte header (magic, sequence
// number, float count) and the floats, all little-endian.
const (
	ringMagic     = 0x52415747 // "GWAR"
	ringHeaderLen = 16
)

// chunk is the half-open range of v that chunk c of w covers; chunk sizes
// differ by at most one and may be zero when len(v) < w.
func chunk(n, c, w int) (lo, hi int) { return n * c / w, n * (c + 1) / w }

func mod(a, w int) int { return ((a % w) + w) % w }

// allReduce replaces v on every rank with the element-wise sum of v over
// all ranks, with a ring reduce-scatter followed by a ring all-gather
// (2·(W−1) messages of about len(v)/W floats each). Every rank must call it
// with the same len(v). The additions happen in an order fixed by the
// world size, so results are reproducible run to run.
//
// It blocks until done, until a peer has been silent for ioTimeout, or
// until ctx is cancelled; a ring that failed must be closed.
func (r *ring) allReduce(ctx context.Context, v []float64) error {
	if r.world == 1 {
		return nil
	}
	stop := context.AfterFunc(ctx, r.close)
	defer stop()
	w, n := r.world, len(v)
	maxChunk := n/w + 1
	sendBuf := make([]byte, ringHeaderLen+8*maxChunk)
	recvBuf := make([]byte, ringHeaderLen+8*maxChunk)
	for phase := range 2 * (w - 1) {
		var sendC, recvC int
		reduce := phase < w-1
		if reduce { // reduce-scatter: after w-1 phases rank r holds the sum of chunk r+1
			k := phase
			sendC, recvC = mod(r.rank-k, w), mod(r.rank-k-1, w)
		} else { // all-gather: pass the finished chunks around
			k := phase - (w - 1)
			sendC, recvC = mod(r.rank+1-k, w), mod(r.rank-k, w)
		}
		slo, shi := chunk(n, sendC, w)
		rlo, rhi := chunk(n, recvC, w)
		out := encodeRingMsg(sendBuf, r.seq, v[slo:shi])
		in := recvBuf[:ringHeaderLen+8*(rhi-rlo)]

		sent := make(chan error, 1)
		go func() { // owned by this phase: joined below before out is reused
			if err := r.next.SetWriteDeadline(time.Now().Add(r.ioTimeout)); err != nil {
				sent <- err
				return
			}
			_, err := r.next.Write(out)
			sent <- err
		}()
		var recvErr error
		if err := r.prev.SetReadDeadline(time.Now().Add(r.ioTimeout)); err != nil {
			recvErr = err
		} else if _, err := io.ReadFull(r.prev, in); err != nil {
			recvErr = err
		}
		if recvErr != nil {
			r.close() // unblocks the sender; a failed ring is not reused
		}
		sendErr := <-sent
		if recvErr != nil {
			return r.explain(ctx, "receive from", mod(r.rank-1, w), recvErr)
		}
		if sendErr != nil {
			return r.explain(ctx, "send to", mod(r.rank+1, w), sendErr)
		}
		if err := decodeRingMsg(in, r.seq, v[rlo:rhi], reduce); err != nil {
			return fmt.Errorf("message from rank %d: %w", mod(r.rank-1, w), err)
		}
		r.seq++
	}
	return nil
}

// explain turns a connection error into one a person can act on.
func (r *ring) explain(ctx context.Context, what string, peer int, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("all-reduce stopped: %w", context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("all-reduce: %s rank %d: nothing for %v (--io-timeout); the peer is hung or unreachable: %w", what, peer, r.ioTimeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("all-reduce: %s rank %d: connection closed; the peer probably exited: %w", what, peer, err)
	default:
		return fmt.Errorf("all-reduce: %s rank %d: %w", what, peer, err)
	}
}

func encodeRingMsg(buf []byte, seq uint64, v []float64) []byte {
	binary.LittleEndian.PutUint32(buf[0:], ringMagic)
	binary.LittleEndian.PutUint64(buf[4:], seq)
	binary.LittleEndian.PutUint32(buf[12:], uint32(len(v)))
	for i, f := range v {
		binary.LittleEndian.PutUint64(buf[ringHeaderLen+8*i:], math.Float64bits(f))
	}
	return buf[:ringHeaderLen+8*len(v)]
}

// decodeRingMsg checks msg's header and adds its floats to dst (add) or
// copies them over dst.
func decodeRingMsg(msg []byte, seq uint64, dst []float64, add bool) error {
	if m := binary.LittleEndian.Uint32(msg[0:]); m != ringMagic {
		return fmt.Errorf("bad magic %#x; not a trainer ring message", m)
	}
	if s := binary.LittleEndian.Uint64(msg[4:]); s != seq {
		return fmt.Errorf("sequence number %d, want %d; the ranks are out of step", s, seq)
	}
	if c := binary.LittleEndian.Uint32(msg[12:]); int(c) != len(dst) {
		return fmt.Errorf("%d floats, want %d; the ranks disagree on the model size", c, len(dst))
	}
	for i := range dst {
		f := math.Float64frombits(binary.LittleEndian.Uint64(msg[ringHeaderLen+8*i:]))
		if add {
			dst[i] += f
		} else {
			dst[i] = f
		}
	}
	return nil
}

// close closes both connections; it is safe to call concurrently and more
// than once.
func (r *ring) close() {
	r.closeOnce.Do(func() {
		if r.next != nil {
			r.next.Close()
		}
		if r.prev != nil {
			r.prev.Close()
		}
	})
}
