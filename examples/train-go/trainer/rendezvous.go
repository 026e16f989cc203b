package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Rendezvous, in three moves:
//
//  1. Every rank listens on an ephemeral port on GANGWAY_NODE_ADDR (its
//     ring port).
//  2. Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank dials it
//     (retrying with backoff, so ranks may start before rank 0) and sends a
//     hello with its rank and ring address. When all WORLD_SIZE-1 have
//     registered, rank 0 answers each with the ring order: the ring
//     addresses indexed by rank.
//  3. Each rank dials rank+1's ring port and accepts rank-1's connection,
//     which starts with a fixed-size handshake naming the sender.
//
// Everything is bounded by --rendezvous-timeout. Job ID and attempt are in
// every hello and handshake, so a straggler from an earlier attempt is
// turned away instead of joining the new ring.

// hello is a rank's registration with rank 0, one JSON object.
type hello struct {
	Rank      int    `json:"rank"`
	WorldSize int    `json:"world_size"`
	JobID     string `json:"job_id"`
	Attempt   int    `json:"attempt"`
	Addr      string `json:"addr"` // ring listener, host:port
}

// ringOrder is rank 0's answer, one JSON object: either the ring addresses
// indexed by rank, or why the hello was refused.
type ringOrder struct {
	Addrs []string `json:"addrs,omitempty"`
	Error string   `json:"error,omitempty"`
}

const maxHelloBytes = 4096

// decodeHello reads one hello from r, rejecting unknown fields and
// anything longer than maxHelloBytes.
func decodeHello(r io.Reader) (hello, error) {
	dec := json.NewDecoder(io.LimitReader(r, maxHelloBytes))
	dec.DisallowUnknownFields()
	var h hello
	if err := dec.Decode(&h); err != nil {
		return hello{}, fmt.Errorf("decode hello: %w", err)
	}
	return h, nil
}

// check reports whether h may join the ring that l describes.
func (h hello) check(l launch) error {
	switch {
	case h.WorldSize != l.WorldSize:
		return fmt.Errorf("rank %d has WORLD_SIZE=%d, rank 0 has %d", h.Rank, h.WorldSize, l.WorldSize)
	case h.Rank < 1 || h.Rank >= l.WorldSize:
		return fmt.Errorf("rank %d is out of range [1, %d)", h.Rank, l.WorldSize)
	case h.JobID != l.JobID:
		return fmt.Errorf("rank %d is from job %q, this is job %q", h.Rank, h.JobID, l.JobID)
	case h.Attempt != l.Attempt:
		return fmt.Errorf("rank %d is from attempt %d, this is attempt %d", h.Rank, h.Attempt, l.Attempt)
	}
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return fmt.Errorf("rank %d ring address %q: %w", h.Rank, h.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return fmt.Errorf("rank %d ring address %q: want a reachable IP address", h.Rank, h.Addr)
	}
	return nil
}

// rendezvous meets the other ranks and returns this rank's ring. With one
// rank it returns a ring that needs no connections.
func rendezvous(ctx context.Context, l launch, timeout, ioTimeout time.Duration) (*ring, error) {
	if l.WorldSize == 1 {
		return &ring{rank: 0, world: 1, ioTimeout: ioTimeout}, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("rendezvous timed out after %v (--rendezvous-timeout)", timeout))
	defer cancel()

	ringLn, err := net.Listen("tcp", net.JoinHostPort(l.NodeAddr, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for ring peers on GANGWAY_NODE_ADDR=%s: %w", l.NodeAddr, err)
	}
	defer ringLn.Close()
	defer context.AfterFunc(ctx, func() { ringLn.Close() })()
	self := ringLn.Addr().String()

	var addrs []string
	if l.Rank == 0 {
		addrs, err = gather(ctx, l, self)
	} else {
		addrs, err = register(ctx, l, self)
	}
	if err != nil {
		return nil, err
	}
	return connectRing(ctx, l, ringLn, addrs, ioTimeout)
}

// listenMaster opens rank 0's rendezvous listener on MASTER_ADDR, or on
// every interface when MASTER_ADDR is not an address of this host (as
// torch's TCPStore does). A port still held by a dying earlier attempt is
// retried until ctx ends.
func listenMaster(ctx context.Context, l launch) (net.Listener, error) {
	backoff := 20 * time.Millisecond
	for {
		ln, err := net.Listen("tcp", l.masterHostPort())
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			ln, err = net.Listen("tcp", net.JoinHostPort("", l.MasterPort))
		}
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("rank 0: listen for rendezvous on %s: %w", l.masterHostPort(), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rank 0: listen for rendezvous on %s: %w (last error: %v)", l.masterHostPort(), context.Cause(ctx), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// gather is rank 0's side of rendezvous: collect a hello from every other
// rank, then send each the ring order.
func gather(ctx context.Context, l launch, self string) ([]string, error) {
	ln, err := listenMaster(ctx, l)
	if err != nil {
		return nil, err
	}
	gctx, gcancel := context.WithCancel(ctx)
	type arrival struct {
		conn net.Conn
		h    hello
		err  error
	}
	arrivals := make(chan arrival)
	var wg sync.WaitGroup
	// The acceptor and one reader per connection live until gcancel; the
	// deferred cleanup cancels and waits for them.
	defer func() {
		gcancel()
		ln.Close()
		wg.Wait()
	}()
	context.AfterFunc(gctx, func() { ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				context.AfterFunc(gctx, func() { c.Close() })
				h, err := decodeHello(c)
				select {
				case arrivals <- arrival{c, h, err}:
				case <-gctx.Done():
				}
			})
		}
	})

	addrs := make([]string, l.WorldSize)
	addrs[0] = self
	conns := make([]net.Conn, l.WorldSize)
	missing := func() []int {
		var m []int
		for r := 1; r < l.WorldSize; r++ {
			if conns[r] == nil {
				m = append(m, r)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		var a arrival
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rank 0: %w; still waiting for ranks %v at %s", context.Cause(ctx), missing(), l.masterHostPort())
		case a = <-arrivals:
		}
		if a.err != nil { // a port scanner or a rank that died mid-hello; it will retry
			a.conn.Close()
			continue
		}
		err := a.h.check(l)
		if err == nil && conns[a.h.Rank] != nil {
			err = fmt.Errorf("rank %d registered twice; are two attempts running?", a.h.Rank)
		}
		if err != nil {
			sendJSON(a.conn, ringOrder{Error: err.Error()})
			a.conn.Close()
			continue
		}
		conns[a.h.Rank], addrs[a.h.Rank] = a.conn, a.h.Addr
	}
	for r, c := range conns[1:] {
		if err := sendJSON(c, ringOrder{Addrs: addrs}); err != nil {
			return nil, fmt.Errorf("rank 0: send ring order to rank %d: %w", r+1, err)
		}
	}
	return addrs, nil
}

// sendJSON writes v as one JSON object with no trailing newline: the
// reader's json.Decoder stops at the closing brace, and bytes left unread
// when the reader closes would turn its close into a reset that can
// destroy the reply in flight.
func sendJSON(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := c.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	_, err = c.Write(b)
	return err
}

// register is the side of rendezvous of a rank other than 0: dial rank 0,
// send the hello, read the ring order. A connection that fails before the
// order arrives (rank 0 not up yet, or restarting, or something else on
// the port) is retried until ctx ends; a refusal is final.
func register(ctx context.Context, l launch, self string) ([]string, error) {
	master := l.masterHostPort()
	h := hello{Rank: l.Rank, WorldSize: l.WorldSize, JobID: l.JobID, Attempt: l.Attempt, Addr: self}
	var order ringOrder
	err := retry(ctx, func() error {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", master)
		if err != nil {
			return err
		}
		defer c.Close()
		defer context.AfterFunc(ctx, func() { c.Close() })()
		if err := sendJSON(c, h); err != nil {
			return fmt.Errorf("send hello: %w", err)
		}
		if err := c.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&order); err != nil {
			return fmt.Errorf("wait for the ring order: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d: reach rank 0 at %s: %w", l.Rank, master, err)
	}
	if order.Error != "" {
		return nil, fmt.Errorf("rank %d: rank 0 refused this rank: %s", l.Rank, order.Error)
	}
	if len(order.Addrs) != l.WorldSize || order.Addrs[l.Rank] != self {
		return nil, fmt.Errorf("rank %d: rank 0 sent a ring order of %d ranks that does not list this rank at %s", l.Rank, len(order.Addrs), self)
	}
	return order.Addrs, nil
}

// retry calls f with exponential backoff (20 ms to 500 ms) until it succeeds
// or ctx ends; the error then carries ctx's cause and f's last error.
func retry(ctx context.Context, f func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// The ring handshake: magic, sender rank, world size, attempt (uint32
// each) and the FNV-1a hash of the job ID (uint64), little-endian.
const (
	handshakeMagic = 0x48525747 // "GWRH"
	handshakeLen   = 24
)

func jobHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

func encodeHandshake(l launch) []byte {
	b := make([]byte, handshakeLen)
	binary.LittleEndian.PutUint32(b[0:], handshakeMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(l.Rank))
	binary.LittleEndian.PutUint32(b[8:], uint32(l.WorldSize))
	binary.LittleEndian.PutUint32(b[12:], uint32(l.Attempt))
	binary.LittleEndian.PutUint64(b[16:], jobHash(l.JobID))
	return b
}

// checkHandshake reports whether b comes from rank `from` of the job and
// attempt l describes.
func checkHandshake(b []byte, l launch, from int) error {
	want := launch{Rank: from, WorldSize: l.WorldSize, Attempt: l.Attempt, JobID: l.JobID}
	if !slices.Equal(b, encodeHandshake(want)) {
		return fmt.Errorf("ring handshake is not from rank %d of job %q attempt %d", from, l.JobID, l.Attempt)
	}
	return nil
}

// connectRing dials rank+1 and accepts rank-1 on ringLn.
func connectRing(ctx context.Context, l launch, ringLn net.Listener, addrs []string, ioTimeout time.Duration) (*ring, error) {
	nextRank, prevRank := (l.Rank+1)%l.WorldSize, mod(l.Rank-1, l.WorldSize)
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	type dialed struct {
		c   net.Conn
		err error
	}
	dialDone := make(chan dialed, 1)
	go func() { // joined below on every path through dialDone
		var c net.Conn
		err := retry(dctx, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(dctx, "tcp", addrs[nextRank])
			if err != nil {
				return err
			}
			c.SetWriteDeadline(time.Now().Add(ioTimeout))
			if _, err := c.Write(encodeHandshake(l)); err != nil {
				c.Close()
				return err
			}
			return c.SetWriteDeadline(time.Time{})
		})
		if err != nil {
			err = fmt.Errorf("rank %d: connect to rank %d at %s: %w", l.Rank, nextRank, addrs[nextRank], err)
		}
		dialDone <- dialed{c, err}
	}()

	prev, err := acceptPrev(ctx, l, ringLn, prevRank)
	if err != nil {
		dcancel()
		if d := <-dialDone; d.c != nil {
			d.c.Close()
		}
		return nil, err
	}
	d := <-dialDone
	if d.err != nil {
		prev.Close()
		return nil, d.err
	}
	return &ring{rank: l.Rank, world: l.WorldSize, next: d.c, prev: prev, ioTimeout: ioTimeout}, nil
}

// acceptPrev accepts connections on ringLn until one carries rank prevRank's
// handshake; others are closed.
func acceptPrev(ctx context.Context, l launch, ringLn net.Listener, prevRank int) (net.Conn, error) {
	for {
		c, err := ringLn.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return nil, fmt.Errorf("rank %d: wait for rank %d to connect: %w", l.Rank, prevRank, err)
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		b := make([]byte, handshakeLen)
		_, err = io.ReadFull(c, b)
		if err == nil {
			err = checkHandshake(b, l, prevRank)
		}
		if !stop() || err != nil {
			c.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("rank %d: wait for rank %d to connect: %w", l.Rank, prevRank, context.Cause(ctx))
			}
			continue
		}
		return c, nil
	}
}
