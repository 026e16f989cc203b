package xid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultKmsgPath is the kernel log device.
const DefaultKmsgPath = "/dev/kmsg"

const xidMarker = "NVRM: Xid ("

// ErrMalformed is wrapped by ParseKmsg's errors: the line is the driver's
// Xid line but not in a form this package reads.
var ErrMalformed = errors.New("xid: malformed Xid line")

// nvlink5 matches the unit and severity NVLink5 Xids print before the
// link ("NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x...)").
var nvlink5 = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*) (Fatal|Nonfatal) XC\d+ i\d+ Link -?\d+`)

// ParseKmsg reads one kernel-log line. It accepts a /dev/kmsg record
// ("4,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=..."), dmesg's
// forms with a timestamp in front, and older drivers' addresses without
// "PCI:". Only the first line of a multi-line record is read. ok is false,
// with a nil error, for a line that is not an Xid; an Xid line that cannot
// be read is an error wrapping ErrMalformed. The event has GPU -1 and the
// address in BusID.
func ParseKmsg(line string) (e Event, ok bool, err error) {
	line, _, _ = strings.Cut(line, "\n")
	i := strings.Index(line, xidMarker)
	if i < 0 {
		return Event{}, false, nil
	}
	rest := line[i+len(xidMarker):]
	addr, rest, found := strings.Cut(rest, "): ")
	if !found {
		return Event{}, false, fmt.Errorf("%w: no \"): \" after the address: %q", ErrMalformed, line)
	}
	bus, err := NormalizeBusID(strings.TrimPrefix(addr, "PCI:"))
	if err != nil {
		return Event{}, false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	num, detail, _ := strings.Cut(rest, ",")
	num = strings.TrimSpace(num)
	code, err := strconv.Atoi(num)
	if err != nil || code <= 0 || code > 99999 || num[0] == '+' {
		return Event{}, false, fmt.Errorf("%w: code %q: want a number from 1 to 99999", ErrMalformed, num)
	}
	e = Event{GPU: -1, BusID: bus, Xid: code, Detail: strings.TrimSpace(detail)}
	if code >= XidNVLink5First && code <= XidNVLink5Last {
		if m := nvlink5.FindStringSubmatch(e.Detail); m != nil {
			e.Unit, e.Severity = m[1], m[2]
		}
	}
	return e, true, nil
}

// NormalizeBusID writes a PCI address the way ParseKmsg reports it,
// "dddd:bb:dd" in lower case without the function, from NVML's form
// ("00000000:18:00.0"), the kernel's ("0000:18:00.0", "0000:18:00") or
// the short "18:00.0".
func NormalizeBusID(s string) (string, error) {
	orig := s
	s = strings.TrimSpace(s)
	if dev, fn, ok := strings.Cut(s, "."); ok {
		if !isHex(fn, 1) {
			return "", fmt.Errorf("pci address %q: bad function %q", orig, fn)
		}
		s = dev
	}
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0"}, parts...)
	case 3:
	default:
		return "", fmt.Errorf("pci address %q: want [domain:]bus:device[.function]", orig)
	}
	var v [3]uint64
	for i, max := range []int{8, 2, 2} {
		if !isHex(parts[i], max) {
			return "", fmt.Errorf("pci address %q: %q is not 1 to %d hex digits", orig, parts[i], max)
		}
		v[i], _ = strconv.ParseUint(parts[i], 16, 32)
	}
	if v[2] > 0x1f {
		return "", fmt.Errorf("pci address %q: device %#x above 0x1f", orig, v[2])
	}
	return fmt.Sprintf("%04x:%02x:%02x", v[0], v[1], v[2]), nil
}

func isHex(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// Kmsg is a [Source] that reads the kernel log from /dev/kmsg (or a file
// or FIFO of kmsg lines, in tests).
//
// It opens the file at its first Read, and again after a read error,
// skipping the records already there: an agent that restarts does not
// replay Xids from before (the server kept what it was told of them).
// /dev/kmsg hands out one record per read; Read takes every record
// waiting and then waits at most a few milliseconds for more.
type Kmsg struct {
	path string
	wait time.Duration

	mu        sync.Mutex // guards the fields below
	f         *os.File
	buf       []byte
	partial   []byte // a regular file's last line, until its newline comes
	malformed int
	lost      int
}

// maxRecords bounds what one Read takes, so that an Xid storm cannot hold
// a check past its timeout.
const maxRecords = 10000

// NewKmsg returns a source reading path (DefaultKmsgPath when "").
// It opens nothing yet.
func NewKmsg(path string) *Kmsg {
	if path == "" {
		path = DefaultKmsgPath
	}
	return &Kmsg{path: path, wait: 10 * time.Millisecond}
}

// Read returns the Xid events logged since the previous Read. An error
// (the log cannot be opened or read) comes back on every Read until the
// log opens again.
func (k *Kmsg) Read(ctx context.Context) ([]Event, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.f == nil {
		// O_NONBLOCK: a FIFO opens without a writer; /dev/kmsg and FIFOs
		// go to the runtime poller, so a read deadline bounds each Read.
		f, err := os.OpenFile(k.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("open kernel log: %w", err)
		}
		_, _ = f.Seek(0, io.SeekEnd) // not seekable (a FIFO): nothing to skip
		k.f, k.partial = f, nil
		if k.buf == nil {
			k.buf = make([]byte, 16<<10) // above a kmsg record's 8 KiB limit
		}
	}
	// A file not on the poller (a regular file) has no deadlines: its
	// reads end at EOF instead.
	_ = k.f.SetReadDeadline(time.Now().Add(k.wait))
	var events []Event
	for records := 0; records < maxRecords && ctx.Err() == nil; records++ {
		n, err := k.f.Read(k.buf)
		events = k.consumeLocked(k.buf[:n], events)
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.EAGAIN):
			return events, nil
		case errors.Is(err, syscall.EPIPE):
			// The kernel overwrote records before we read them.
			k.lost++
		default:
			_ = k.f.Close()
			k.f = nil
			return events, fmt.Errorf("read kernel log %s: %w", k.path, err)
		}
	}
	return events, nil
}

// consumeLocked parses the complete lines of data (plus what an earlier
// read left over) and appends their Xid events.
func (k *Kmsg) consumeLocked(data []byte, events []Event) []Event {
	if len(data) == 0 {
		return events
	}
	if len(k.partial) > 0 {
		data = append(k.partial, data...)
		k.partial = nil
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(data) <= len(k.buf) {
				k.partial = append([]byte(nil), data...)
			}
			return events
		}
		line := string(data[:i])
		data = data[i+1:]
		e, ok, err := ParseKmsg(line)
		switch {
		case err != nil:
			k.malformed++
		case ok:
			events = append(events, e)
		}
	}
}

// Malformed counts the Xid lines that could not be read, and Lost the
// times the kernel overwrote records before they were read.
func (k *Kmsg) Malformed() int { k.mu.Lock(); defer k.mu.Unlock(); return k.malformed }

// Lost: see Malformed.
func (k *Kmsg) Lost() int { k.mu.Lock(); defer k.mu.Unlock(); return k.lost }

// Close closes the log if it is open. A later Read opens it again.
func (k *Kmsg) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.f == nil {
		return nil
	}
	err := k.f.Close()
	k.f = nil
	return err
}
