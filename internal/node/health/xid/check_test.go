package xid

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

// fakeSource hands out the events queued since the last Read.
type fakeSource struct {
	queue []Event
	err   error
}

func (s *fakeSource) Read(context.Context) ([]Event, error) {
	ev := s.queue
	s.queue = nil
	return ev, s.err
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestCheck(t *testing.T) {
	type step struct {
		events []Event
		err    error
		clear  *int
		after  time.Duration // since t0
		want   []api.HealthCheck
	}
	ok := func(gpu int, at time.Duration) api.HealthCheck {
		return api.HealthCheck{Check: "xid", Status: api.CheckOK, GPU: gpu, At: t0.Add(at)}
	}
	two := 2
	bus := map[string]int{"00000000:18:00.0": 0, "00000000:2A:00.0": 1, "00000000:3A:00.0": 2}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "fatal xid stays until cleared",
			steps: []step{
				{events: []Event{{GPU: -1, BusID: "0000:3a:00", Xid: 79, Detail: "GPU has fallen off the bus."}}, want: []api.HealthCheck{
					ok(0, 0), ok(1, 0),
					{Check: "xid", Status: api.CheckFatal, Action: api.ActionCordonNode, GPU: 2, Code: 79, Message: "Xid 79: GPU has fallen off the bus (GPU has fallen off the bus.)", Since: t0, At: t0},
				}},
				{after: time.Hour, want: []api.HealthCheck{
					ok(0, time.Hour), ok(1, time.Hour),
					{Check: "xid", Status: api.CheckFatal, Action: api.ActionCordonNode, GPU: 2, Code: 79, Message: "Xid 79: GPU has fallen off the bus (GPU has fallen off the bus.)", Since: t0, At: t0.Add(time.Hour)},
				}},
				{clear: &two, after: time.Hour, want: []api.HealthCheck{ok(0, time.Hour), ok(1, time.Hour), ok(2, time.Hour)}},
			},
		},
		{
			name: "a worse fatal replaces a milder one, not the other way",
			steps: []step{
				{events: []Event{{GPU: 1, Xid: 48}, {GPU: 1, Xid: 64}, {GPU: 1, Xid: 94}}, want: []api.HealthCheck{
					ok(0, 0),
					{Check: "xid", Status: api.CheckFatal, Action: api.ActionCordonGPU, GPU: 1, Code: 64, Message: "Xid 64: Row remapping failure", Since: t0, At: t0},
					ok(2, 0),
				}},
			},
		},
		{
			name: "counted xids warn for a while",
			steps: []step{
				{events: []Event{{GPU: 0, Xid: 13}, {GPU: 0, Xid: 13}, {GPU: 0, Xid: 63}}, want: []api.HealthCheck{
					{Check: "xid", Status: api.CheckWarn, Action: api.ActionResetGPU, GPU: 0, Code: 63, Message: "Xid 13 ×2, Xid 63 ×1; last: Xid 63: Row remapping pending", Since: t0, At: t0},
					ok(1, 0), ok(2, 0),
				}},
				{after: 11 * time.Minute, want: []api.HealthCheck{
					{Check: "xid", Status: api.CheckOK, GPU: 0, Message: "earlier: Xid 13 ×2, Xid 63 ×1", At: t0.Add(11 * time.Minute)},
					ok(1, 11*time.Minute), ok(2, 11*time.Minute),
				}},
			},
		},
		{
			name: "an unknown bus is counted on the node, never fatal",
			steps: []step{
				{events: []Event{{GPU: -1, BusID: "0000:ff:00", Xid: 79}}, want: []api.HealthCheck{
					{Check: "xid", Status: api.CheckWarn, Action: api.ActionCount, GPU: -1, Code: 79, Message: "Xid 79 ×1; last: Xid 79: GPU has fallen off the bus on 0000:ff:00, which is no GPU of this node's", Since: t0, At: t0},
					ok(0, 0), ok(1, 0), ok(2, 0),
				}},
			},
		},
		{
			name: "a read error is the node's and leaves the sticky findings",
			steps: []step{
				{events: []Event{{GPU: 2, Xid: 48}}, err: errors.New("open kernel log: permission denied"), want: []api.HealthCheck{
					{Check: "xid", Status: api.CheckError, GPU: -1, Message: "open kernel log: permission denied", At: t0},
					ok(0, 0), ok(1, 0),
					{Check: "xid", Status: api.CheckFatal, Action: api.ActionResetGPU, GPU: 2, Code: 48, Message: "Xid 48: Double Bit ECC Error", Since: t0, At: t0},
				}},
			},
		},
		{
			name: "a reset event clears its GPU",
			steps: []step{
				{events: []Event{{GPU: 1, Xid: 74}, {GPU: 2, Xid: 74}, {GPU: 1, Reset: true}}, want: []api.HealthCheck{
					ok(0, 0), ok(1, 0),
					{Check: "xid", Status: api.CheckFatal, Action: api.ActionResetGPU, GPU: 2, Code: 74, Message: "Xid 74: NVLink Error", Since: t0, At: t0},
				}},
				{events: []Event{{GPU: -1, Reset: true}}, want: []api.HealthCheck{ok(0, 0), ok(1, 0), ok(2, 0)}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			src := &fakeSource{}
			c, err := New(src, Options{GPUs: 3, BusIDs: bus, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				now = t0.Add(s.after)
				src.queue, src.err = s.events, s.err
				if s.clear != nil {
					c.Clear(*s.clear)
				}
				if diff := cmp.Diff(s.want, c.Run(context.Background())); diff != "" {
					t.Errorf("step %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{
		{GPUs: -1},
		{GPUs: 2, BusIDs: map[string]int{"bogus": 0}},
		{GPUs: 2, BusIDs: map[string]int{"0000:18:00.0": 2}},
	} {
		if _, err := New(nil, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	var c *Check
	c.Clear(0) // nil-safe
}
