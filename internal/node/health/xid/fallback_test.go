package xid

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// closingSource is a fakeSource that records its Close.
type closingSource struct {
	fakeSource
	closed int
}

func (s *closingSource) Close() error { s.closed++; return nil }

func TestFallback(t *testing.T) {
	kmsgXid := Event{GPU: -1, BusID: "0000:18:00", Xid: 79, Detail: "pid=1, GPU has fallen off the bus."}
	nvmlXid := Event{GPU: 0, Xid: 79}
	errLog := errors.New("open kernel log: permission denied")
	errNVML := errors.New("nvml: wait for events: Unknown Error")
	tests := []struct {
		name          string
		primary       fakeSource
		fallback      fakeSource
		want          []Event
		wantErr       []error
		fallbackEmpty bool
	}{
		{"primary reads: its events only", fakeSource{queue: []Event{kmsgXid}}, fakeSource{queue: []Event{nvmlXid}}, []Event{kmsgXid}, nil, true},
		{"primary fails: fallback's events, no error", fakeSource{err: errLog}, fakeSource{queue: []Event{nvmlXid}}, []Event{nvmlXid}, nil, true},
		{"primary fails after some events: fallback's only", fakeSource{queue: []Event{kmsgXid}, err: errLog}, fakeSource{queue: []Event{nvmlXid}}, []Event{nvmlXid}, nil, true},
		{"both fail: both errors", fakeSource{err: errLog}, fakeSource{err: errNVML}, nil, []error{errLog, errNVML}, true},
		{"fallback fails while primary reads: no error", fakeSource{queue: []Event{kmsgXid}}, fakeSource{err: errNVML}, []Event{kmsgXid}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, f := tt.primary, tt.fallback
			got, err := Fallback(&p, &f).Read(context.Background())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for _, e := range tt.wantErr {
				if !errors.Is(err, e) {
					t.Errorf("err = %v, want it to wrap %v", err, e)
				}
			}
			if tt.wantErr == nil && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			if len(f.queue) != 0 {
				t.Errorf("the fallback was not drained: %v", f.queue)
			}
		})
	}
}

// TestFallbackFeedsCheck: a node whose kernel log cannot be opened still
// gets its fatal Xid from the fallback, once.
func TestFallbackFeedsCheck(t *testing.T) {
	fb := &closingSource{fakeSource: fakeSource{queue: []Event{{GPU: 1, Xid: 48}}}}
	src := Fallback(NewKmsg(filepath.Join(t.TempDir(), "no-such-log")), fb)
	c, err := New(src, Options{GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Run(context.Background())
	if len(got) != 2 || !got[1].Fatal() || got[1].Code != 48 || got[0].Fatal() {
		t.Fatalf("findings %+v; want GPU 1 fatal with Xid 48, GPU 0 not", got)
	}
	if err := c.Close(); err != nil || fb.closed != 1 {
		t.Errorf("Close = %v, fallback closed %d times; want nil, once", err, fb.closed)
	}
}
