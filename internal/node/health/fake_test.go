package health

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

func TestFakeHealthy(t *testing.T) {
	f := NewFake(8, "")
	ctx := context.Background()
	for gpu := range 8 {
		th, _ := f.Thermal(ctx, gpu)
		p, _ := f.Power(ctx, gpu)
		pc, _ := f.PCIe(ctx, gpu)
		links, _ := f.NVLinks(ctx, gpu)
		ecc, _ := f.ECC(ctx, gpu)
		if th.TempC < 35 || th.TempC > 45 || th.SlowdownC != 87 {
			t.Errorf("GPU %d: %+v; want 35-45 C, slowdown 87 C", gpu, th)
		}
		if p.LimitMilliwatts != 700_000 || p.DrawMilliwatts <= 0 || p.DrawMilliwatts > 200_000 {
			t.Errorf("GPU %d: %+v; want an idle draw under a 700 W limit", gpu, p)
		}
		if pc != (gpucheck.PCIe{Gen: 5, MaxGen: 5, Width: 16, MaxWidth: 16}) {
			t.Errorf("GPU %d: %+v; want gen 5 x16", gpu, pc)
		}
		if len(links) != 18 {
			t.Errorf("GPU %d: %d links; want 18", gpu, len(links))
		}
		for _, l := range links {
			if !l.Up || l.Errors != 0 {
				t.Errorf("GPU %d: link %+v", gpu, l)
			}
		}
		if ecc != (gpucheck.ECC{}) {
			t.Errorf("GPU %d: %+v; want no ECC errors", gpu, ecc)
		}
	}
	if _, err := f.ECC(ctx, 8); err == nil {
		t.Error("GPU 8 of 8 answered")
	}
}

// runAll runs checks once and returns their findings that are not ok.
func runAll(checks []Check) []api.HealthCheck {
	var out []api.HealthCheck
	for _, c := range checks {
		for _, h := range c.Run(context.Background()) {
			if h.Status != api.CheckOK {
				out = append(out, api.HealthCheck{Check: h.Check, GPU: h.GPU, Status: h.Status, Action: h.Action, Code: h.Code})
			}
		}
	}
	return out
}

func gpuChecks(t *testing.T, f *Fake) ([]Check, *xid.Check) {
	t.Helper()
	checks, xc, err := DefaultChecks(NodeOptions{GPUs: f.GPUs(), GPUHealth: true, Fake: f, IBRoot: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	return checks[:6], xc // xid and the five NVML-shaped checks
}

func TestFakeInjectionFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inject")
	f := NewFake(4, path)
	checks, xc := gpuChecks(t, f)
	if got := runAll(checks); len(got) != 0 {
		t.Fatalf("before injection: %+v", got)
	}

	write(t, path, `{"gpu":2,"xid":79}`+"\n", os.O_CREATE|os.O_TRUNC)
	want := []api.HealthCheck{{Check: "xid", GPU: 2, Status: api.CheckFatal, Action: api.ActionCordonNode, Code: 79}}
	if diff := cmp.Diff(want, runAll(checks)); diff != "" {
		t.Fatalf("after Xid 79 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, runAll(checks)); diff != "" {
		t.Fatalf("the Xid did not stay (-want +got):\n%s", diff)
	}

	write(t, path, "# comment\n"+`{"gpu":1,"ecc_dbe":1}`+"\nnot json\n"+`{"gpu":9,"temp":90}`+"\n"+
		`{"gpu":0,"temp":95,"throttle":["hw_slowdown"]}`+"\n"+`{"gpu":3,"nvlink_down":1}`+"\n"+
		`{"gpu":0,"pcie_width":8}`+"\n"+`{"gpu":3,"power":750}`+"\n", os.O_APPEND)
	want = []api.HealthCheck{
		{Check: "xid", GPU: 2, Status: api.CheckFatal, Action: api.ActionCordonNode, Code: 79},
		{Check: "ecc", GPU: 1, Status: api.CheckFatal, Action: api.ActionResetGPU},
		{Check: "thermal", GPU: 0, Status: api.CheckWarn, Action: api.ActionCount},
		{Check: "power", GPU: 3, Status: api.CheckWarn, Action: api.ActionCount},
		{Check: "nvlink", GPU: 3, Status: api.CheckFatal, Action: api.ActionResetGPU},
		{Check: "pcie", GPU: 0, Status: api.CheckWarn, Action: api.ActionCount},
	}
	if diff := cmp.Diff(want, runAll(checks)); diff != "" {
		t.Fatalf("after the faults (-want +got):\n%s", diff)
	}
	if f.BadLines() != 2 {
		t.Errorf("BadLines = %d; want 2", f.BadLines())
	}

	write(t, path, `{"clear":true}`+"\n", os.O_TRUNC)
	if got := runAll(checks); len(got) != 0 {
		t.Fatalf("after clear: %+v", got)
	}

	// In process, and the agent's Clear after a reset.
	if err := f.Inject(`{"gpu":0,"xid":48}`); err != nil {
		t.Fatal(err)
	}
	if got := runAll(checks); len(got) != 1 || got[0].Code != 48 {
		t.Fatalf("after Inject: %+v", got)
	}
	xc.Clear(0)
	if got := runAll(checks); len(got) != 0 {
		t.Fatalf("after Clear: %+v", got)
	}
	if err := f.Inject(`{"gpu":0,"bogus":1}`); err == nil {
		t.Error("Inject accepted an unknown key")
	}
}

func write(t *testing.T, path, s string, flag int) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_WRONLY|flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestParseInjection(t *testing.T) {
	tests := []struct {
		line string
		ok   bool
	}{
		{`{"gpu":2,"xid":79}`, true},
		{`{"gpu":1,"ecc_sbe":5}`, true},
		{`{"gpu":0,"throttle":[]}`, true},
		{`{"clear":true}`, true},
		{`{"gpu":3,"clear":true}`, true},
		{`  # a comment`, true},
		{``, true},
		{`{"xid":79}`, false},
		{`{"gpu":4,"xid":79}`, false},
		{`{"gpu":-1,"xid":79}`, false},
		{`{"gpu":0}`, false},
		{`{"gpu":0,"xid":79,"clear":true}`, false},
		{`{"gpu":0,"throttle":["warp_drive"]}`, false},
		{`{"gpu":0,"nvlink_down":19}`, false},
		{`{"gpu":0,"pcie_width":0}`, false},
		{`{"gpu":0,"xid":79} {"gpu":1,"xid":79}`, false},
		{`{"gpu":0,"XID":79,"extra":1}`, false},
		{`[1]`, false},
	}
	for _, tt := range tests {
		_, _, err := parseInjection(tt.line, 4)
		if (err == nil) != tt.ok {
			t.Errorf("parseInjection(%q) = %v; want ok %v", tt.line, err, tt.ok)
		}
	}
}

func FuzzParseInjection(f *testing.F) {
	for _, s := range []string{`{"gpu":2,"xid":79}`, `{"gpu":0,"throttle":["hw_slowdown"],"temp":95}`, `{"clear":true}`, `# x`, `{"gpu":1,"ecc_dbe":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		in, skip, err := parseInjection(line, 8)
		if err != nil || skip {
			return
		}
		data, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		again, skip, err := parseInjection(string(data), 8)
		if err != nil || skip {
			t.Fatalf("re-parse of %s: %v", data, err)
		}
		if diff := cmp.Diff(in, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		NewFake(8, "").applyLocked(in) // never panics
	})
}

func TestDefaultChecks(t *testing.T) {
	names := func(cs []Check) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name())
		}
		return out
	}
	tests := []struct {
		name    string
		o       NodeOptions
		want    []string
		wantXid bool
		wantErr bool
	}{
		{"no gpu health", NodeOptions{GPUs: 8}, []string{"ib", "memory"}, false, false},
		{"kernel log only", NodeOptions{GPUs: 8, GPUHealth: true, KmsgPath: DefaultKmsgPath}, []string{"xid", "ib", "memory"}, true, false},
		{"no kernel log, no reader", NodeOptions{GPUs: 8, GPUHealth: true}, []string{"ib", "memory"}, false, false},
		{"fake, disk and clock", NodeOptions{GPUs: 2, GPUHealth: true, Fake: NewFake(2, ""), CheckpointRoot: "/ckpt", ClockOffset: func() (time.Duration, bool) { return 0, false }},
			[]string{"xid", "ecc", "thermal", "power", "nvlink", "pcie", "ib", "memory", "disk", "clock"}, true, false},
		{"fake of the wrong size", NodeOptions{GPUs: 2, GPUHealth: true, Fake: NewFake(4, "")}, nil, false, true},
		{"bad bus id", NodeOptions{GPUs: 2, GPUHealth: true, KmsgPath: "/dev/kmsg", BusIDs: map[string]int{"x": 0}}, nil, false, true},
		{"kernel log and NVML events", NodeOptions{GPUs: 2, GPUHealth: true, KmsgPath: DefaultKmsgPath, Events: NewFake(2, "")}, []string{"xid", "ib", "memory"}, true, false},
		{"NVML events only", NodeOptions{GPUs: 2, GPUHealth: true, Events: NewFake(2, "")}, []string{"xid", "ib", "memory"}, true, false},
		{"provider and events", NodeOptions{GPUs: 2, GPUHealth: true, KmsgPath: DefaultKmsgPath, Provider: &closingProvider{Fake: NewFake(2, "")}, Events: NewFake(2, "")},
			[]string{"xid", "ecc", "thermal", "power", "nvlink", "pcie", "ib", "memory"}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, xc, err := DefaultChecks(tt.o)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if diff := cmp.Diff(tt.want, names(cs)); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			if (xc != nil) != tt.wantXid {
				t.Errorf("xid check = %v", xc)
			}
			xc.Clear(0) // nil-safe
		})
	}
}

// TestRunnerWithFake is the agent's loop: an Xid written to the fake's
// file shows in Results at the next run, and Changed fires.
func TestRunnerWithFake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "inject")
		f := NewFake(4, path)
		checks, xc, err := DefaultChecks(NodeOptions{GPUs: 4, GPUHealth: true, Fake: f, IBRoot: filepath.Join(t.TempDir(), "none")})
		if err != nil {
			t.Fatal(err)
		}
		r := NewRunner(checks, Options{Interval: time.Second})
		stop := start(t, r)
		defer stop()
		synctest.Wait()
		<-r.Changed() // the first results
		time.Sleep(500 * time.Millisecond)
		write(t, path, `{"gpu":2,"xid":79}`+"\n", os.O_CREATE)
		time.Sleep(time.Second)
		synctest.Wait()
		if !changed(r) {
			t.Error("Changed did not fire after the Xid")
		}
		var fatal []api.HealthCheck
		for _, h := range r.Results() {
			if h.Fatal() {
				fatal = append(fatal, h)
			}
		}
		if len(fatal) != 1 || fatal[0].Check != "xid" || fatal[0].GPU != 2 || fatal[0].Action != api.ActionCordonNode {
			t.Fatalf("fatal findings: %+v; want xid cordon-node on GPU 2", fatal)
		}
		xc.Clear(2)
		time.Sleep(time.Second)
		synctest.Wait()
		for _, h := range r.Results() {
			if h.Status != api.CheckOK && h.Check != "memory" {
				t.Errorf("after Clear: %+v", h)
			}
		}
	})
}

// closingProvider is a Provider with a Close, as NVML's is.
type closingProvider struct {
	*Fake
	closed atomic.Int32
}

func (p *closingProvider) Close() error { p.closed.Add(1); return nil }

// TestRunnerWithProviderAndEvents is a real GPU node's setup: a kernel
// log the agent cannot read, NVML's events and counters. The Xid comes
// through the events, once; the Provider is closed once, when Run ends.
func TestRunnerWithProviderAndEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		counters, events := &closingProvider{Fake: NewFake(2, "")}, NewFake(2, "")
		checks, _, err := DefaultChecks(NodeOptions{
			GPUs: 2, GPUHealth: true, KmsgPath: filepath.Join(t.TempDir(), "unreadable-kmsg"),
			Provider: counters, Events: events, IBRoot: filepath.Join(t.TempDir(), "none"),
		})
		if err != nil {
			t.Fatal(err)
		}
		r := NewRunner(checks, Options{Interval: time.Second})
		stop := start(t, r)
		synctest.Wait()
		if err := events.Inject(`{"gpu":1,"xid":48}`); err != nil {
			t.Fatal(err)
		}
		if err := counters.Inject(`{"gpu":0,"ecc_dbe":1}`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		var fatal []string
		for _, h := range r.Results() {
			if h.Fatal() {
				fatal = append(fatal, fmt.Sprintf("%s GPU %d code %d", h.Check, h.GPU, h.Code))
			}
			if h.Check == "xid" && h.GPU == -1 {
				t.Errorf("node finding %+v: the unreadable kernel log should be covered by the events", h)
			}
		}
		if diff := cmp.Diff([]string{"ecc GPU 0 code 0", "xid GPU 1 code 48"}, fatal); diff != "" {
			t.Errorf("fatal findings (-want +got):\n%s", diff)
		}
		if n := counters.closed.Load(); n != 0 {
			t.Errorf("provider closed %d times while running", n)
		}
		stop()
		if n := counters.closed.Load(); n != 1 {
			t.Errorf("provider closed %d times after Run; want once", n)
		}
	})
}
