package xid

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/gangway/gangway/internal/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		e      Event
		status api.CheckStatus
		action api.HealthAction
	}{
		{"graphics exception is the application's", Event{Xid: 13}, api.CheckWarn, api.ActionCount},
		{"page fault is the application's", Event{Xid: 31}, api.CheckWarn, api.ActionCount},
		{"stopped processing", Event{Xid: 43}, api.CheckWarn, api.ActionCount},
		{"preemptive cleanup", Event{Xid: 45}, api.CheckWarn, api.ActionCount},
		{"double bit error", Event{Xid: 48}, api.CheckFatal, api.ActionResetGPU},
		{"row remap pending asks for a reset but stays in service", Event{Xid: 63}, api.CheckWarn, api.ActionResetGPU},
		{"row remap failure", Event{Xid: 64}, api.CheckFatal, api.ActionCordonGPU},
		{"nvlink", Event{Xid: 74}, api.CheckFatal, api.ActionResetGPU},
		{"fallen off the bus", Event{Xid: 79}, api.CheckFatal, api.ActionCordonNode},
		{"high sbe rate", Event{Xid: 92}, api.CheckWarn, api.ActionCount},
		{"contained ecc", Event{Xid: 94}, api.CheckFatal, api.ActionResetGPU},
		{"uncontained ecc", Event{Xid: 95}, api.CheckFatal, api.ActionResetGPU},
		{"gsp timeout", Event{Xid: 119}, api.CheckFatal, api.ActionResetGPU},
		{"gsp error", Event{Xid: 120}, api.CheckFatal, api.ActionResetGPU},
		{"nvlink5 fatal", Event{Xid: 149, Unit: "NETIR_LINK_EVT", Severity: "Fatal"}, api.CheckFatal, api.ActionResetGPU},
		{"nvlink5 nonfatal", Event{Xid: 145, Unit: "RLW_REMAP", Severity: "Nonfatal"}, api.CheckWarn, api.ActionCount},
		{"nvlink5 without subcode", Event{Xid: 144}, api.CheckFatal, api.ActionResetGPU},
		{"recovery action: reboot", Event{Xid: 154, Detail: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"}, api.CheckFatal, api.ActionCordonNode},
		{"recovery action: reset", Event{Xid: 154, Detail: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"}, api.CheckFatal, api.ActionResetGPU},
		{"recovery action: none", Event{Xid: 154, Detail: "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"}, api.CheckWarn, api.ActionCount},
		{"unknown code is counted", Event{Xid: 999}, api.CheckWarn, api.ActionCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Classify(tt.e)
			if c.Status != tt.status || c.Action != tt.action || c.Name == "" {
				t.Errorf("Classify(%+v) = %+v; want %s %s with a name", tt.e, c, tt.status, tt.action)
			}
		})
	}
}

func TestParseKmsg(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Event
		ok      bool
		wantErr bool
	}{
		{
			name: "kmsg record",
			line: "4,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
			want: Event{GPU: -1, BusID: "0000:18:00", Xid: 79, Detail: "pid=1234, name=python, GPU has fallen off the bus."},
			ok:   true,
		},
		{
			name: "older driver, unknown pid",
			line: "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
			want: Event{GPU: -1, BusID: "0000:3b:00", Xid: 48, Detail: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."},
			ok:   true,
		},
		{
			name: "dmesg timestamp, address without PCI:",
			line: "[  680.646286] NVRM: Xid (0000:03:00): 14, Channel 00000001",
			want: Event{GPU: -1, BusID: "0000:03:00", Xid: 14, Detail: "Channel 00000001"},
			ok:   true,
		},
		{
			name: "upper case address with function, no detail",
			line: "3,42,2000001,-;NVRM: Xid (PCI:0000:B9:00.0): 94\n SUBSYSTEM=pci",
			want: Event{GPU: -1, BusID: "0000:b9:00", Xid: 94},
			ok:   true,
		},
		{
			name: "nvlink5 with unit and severity",
			line: "4,9,1,-;NVRM: Xid (PCI:0008:01:00): 149, pid=2, name=torchrun, NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			want: Event{GPU: -1, BusID: "0008:01:00", Xid: 149, Unit: "NETIR_LINK_EVT", Severity: "Fatal",
				Detail: "pid=2, name=torchrun, NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"},
			ok: true,
		},
		{name: "not an xid", line: "6,100,2000,-;nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context"},
		{name: "empty", line: ""},
		{name: "continuation line", line: " DEVICE=+pci:0000:18:00.0"},
		{name: "no code", line: "NVRM: Xid (PCI:0000:18:00): , GPU has fallen off the bus.", wantErr: true},
		{name: "negative code", line: "NVRM: Xid (PCI:0000:18:00): -79, x", wantErr: true},
		{name: "bad address", line: "NVRM: Xid (PCI:zz:18:00): 79, x", wantErr: true},
		{name: "cut short", line: "NVRM: Xid (PCI:0000:18:00", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParseKmsg(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseKmsg error = %v; want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if ok != tt.ok {
				t.Fatalf("ok = %v; want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalizeBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000:18:00.0", "0000:18:00"},
		{"0000:18:00.0", "0000:18:00"},
		{"0000:18:00", "0000:18:00"},
		{"18:00.0", "0000:18:00"},
		{"00000001:DB:1F.7", "0001:db:1f"},
		{"0000:18:20.0", ""},
		{"0000:180:00.0", ""},
		{"0000:18:00.x", ""},
		{"18", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := NormalizeBusID(tt.in)
		if (err != nil) != (tt.want == "") || got != tt.want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// formatKmsg writes e the way the driver logs it.
func formatKmsg(e Event) string {
	s := "NVRM: Xid (PCI:" + e.BusID + "): " + strconv.Itoa(e.Xid)
	if e.Detail != "" {
		s += ", " + e.Detail
	}
	return s
}

func FuzzParseKmsg(f *testing.F) {
	for _, s := range []string{
		"4,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
		"NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)",
		"NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Nonfatal XC0 i0 Link -1 (0x0)",
		"NVRM: Xid (0000:03:00): 14, Channel 00000001",
		"NVRM: Xid (PCI:0000:b9:00): 94",
		"NVRM: Xid (",
		"6,1,2,-;hello",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, ok, err := ParseKmsg(line)
		if err != nil && ok {
			t.Fatalf("ok with an error: %v", err)
		}
		if !ok {
			return
		}
		again, ok, err := ParseKmsg(formatKmsg(e))
		if err != nil || !ok {
			t.Fatalf("re-parse of %q: ok %v, %v", formatKmsg(e), ok, err)
		}
		if diff := cmp.Diff(e, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", line, diff)
		}
	})
}

func TestKmsgFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(path, []byte("NVRM: Xid (PCI:0000:18:00): 79, logged before the agent started\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := NewKmsg(path)
	defer k.Close()
	ctx := context.Background()
	if ev, err := k.Read(ctx); err != nil || len(ev) != 0 {
		t.Fatalf("first Read = %v, %v; want nothing (old records skipped)", ev, err)
	}
	appendFile(t, path, "6,1,1,-;unrelated\n4,2,2,-;NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=x, DBE\n4,3,3,-;NVRM: Xid (PCI:0000:2a:00): 4")
	ev, err := k.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Xid != 48 || ev[0].BusID != "0000:2a:00" {
		t.Fatalf("Read = %+v; want the one complete Xid 48", ev)
	}
	appendFile(t, path, "8, rest\n4,4,4,-;NVRM: Xid (PCI:0000:2a:00): oops\n")
	ev, err = k.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Xid != 48 || ev[0].Detail != "rest" {
		t.Fatalf("Read = %+v; want the Xid 48 completed by the second write", ev)
	}
	if k.Malformed() != 1 {
		t.Errorf("Malformed = %d; want 1", k.Malformed())
	}
}

func TestKmsgMissing(t *testing.T) {
	k := NewKmsg(filepath.Join(t.TempDir(), "nope"))
	defer k.Close()
	if _, err := k.Read(context.Background()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read = %v; want not-exist", err)
	}
}

// TestKmsgFIFO reads through the runtime poller, as /dev/kmsg is read: a
// Read returns once the records waiting are taken, without a writer
// closing its end.
func TestKmsgFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	k := NewKmsg(path)
	defer k.Close()
	if _, err := k.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("4,2,2,-;NVRM: Xid (PCI:0000:2a:00): 74, link\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ev, err := k.Read(context.Background())
	if err != nil || len(ev) != 1 || ev[0].Xid != 74 {
		t.Fatalf("Read = %+v, %v; want Xid 74", ev, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Read took %v with the writer open", d)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestKmsgDevice reads the real kernel log where this test may: a Read
// must come back at once rather than wait for the next kernel message.
func TestKmsgDevice(t *testing.T) {
	f, err := os.Open(DefaultKmsgPath)
	if err != nil {
		t.Skipf("cannot read the kernel log here: %v", err)
	}
	f.Close()
	k := NewKmsg("")
	defer k.Close()
	for range 2 {
		start := time.Now()
		if _, err := k.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Read took %v", d)
		}
	}
}
