package gpucheck

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

// board is a hand-written Provider: one answer per GPU, or an error.
type board struct {
	ecc     []ECC
	thermal []Thermal
	power   []Power
	links   [][]Link
	pcie    []PCIe
	err     map[int]error
}

func (b *board) ECC(_ context.Context, gpu int) (ECC, error) { return b.ecc[gpu], b.err[gpu] }
func (b *board) Thermal(_ context.Context, gpu int) (Thermal, error) {
	return b.thermal[gpu], b.err[gpu]
}
func (b *board) Power(_ context.Context, gpu int) (Power, error)    { return b.power[gpu], b.err[gpu] }
func (b *board) NVLinks(_ context.Context, gpu int) ([]Link, error) { return b.links[gpu], b.err[gpu] }
func (b *board) PCIe(_ context.Context, gpu int) (PCIe, error)      { return b.pcie[gpu], b.err[gpu] }

var _ Provider = (*board)(nil)

type checker interface {
	Name() string
	Run(ctx context.Context) []api.HealthCheck
}

// statuses runs c and returns each GPU's status, action and message.
func statuses(c checker) []api.HealthCheck {
	var out []api.HealthCheck
	for _, h := range c.Run(context.Background()) {
		out = append(out, api.HealthCheck{Check: h.Check, GPU: h.GPU, Status: h.Status, Action: h.Action, Message: h.Message})
	}
	return out
}

func find(check string, gpu int, s api.CheckStatus, a api.HealthAction, msg string) api.HealthCheck {
	return api.HealthCheck{Check: check, GPU: gpu, Status: s, Action: a, Message: msg}
}

func TestECC(t *testing.T) {
	tests := []struct {
		name string
		ecc  ECC
		err  error
		want api.HealthCheck
	}{
		{"clean", ECC{AggregateSBE: 40, AggregateDBE: 1}, nil, find("ecc", 0, api.CheckOK, "", "")},
		{"corrected errors", ECC{VolatileSBE: 5}, nil, find("ecc", 0, api.CheckWarn, api.ActionCount, "5 corrected (single-bit) ECC errors since the last reset")},
		{"remap pending", ECC{VolatileSBE: 5, RemapPending: true}, nil, find("ecc", 0, api.CheckWarn, api.ActionResetGPU, "memory rows wait for a reset to be remapped")},
		{"double bit error", ECC{VolatileDBE: 1, RemapPending: true}, nil, find("ecc", 0, api.CheckFatal, api.ActionResetGPU, "1 uncorrected (double-bit) ECC errors since the last reset")},
		{"remap failure", ECC{VolatileDBE: 2, RemapFailure: true}, nil, find("ecc", 0, api.CheckFatal, api.ActionCordonGPU, "a memory row could not be remapped: no spare rows left")},
		{"reader fails", ECC{}, errors.New("NVML: GPU is lost"), find("ecc", 0, api.CheckError, "", "read ECC counters: NVML: GPU is lost")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &board{ecc: []ECC{tt.ecc}, err: map[int]error{0: tt.err}}
			if diff := cmp.Diff([]api.HealthCheck{tt.want}, statuses(NewECCCheck(b, 1))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestThermal(t *testing.T) {
	tests := []struct {
		name string
		th   Thermal
		want api.HealthCheck
	}{
		{"cool and busy at its power cap", Thermal{TempC: 60, SlowdownC: 87, Throttle: ThrottleSWPowerCap | ThrottleSyncBoost}, find("thermal", 0, api.CheckOK, "", "")},
		{"idle", Thermal{TempC: 35, SlowdownC: 87, Throttle: ThrottleGPUIdle}, find("thermal", 0, api.CheckOK, "", "")},
		{"at slowdown", Thermal{TempC: 87, SlowdownC: 87}, find("thermal", 0, api.CheckWarn, api.ActionCount, "87 C, at or above the slowdown temperature 87 C")},
		{"no threshold from NVML", Thermal{TempC: 90}, find("thermal", 0, api.CheckWarn, api.ActionCount, "90 C, at or above the slowdown temperature 87 C")},
		{"hot and slowed", Thermal{TempC: 95, SlowdownC: 90, Throttle: ThrottleHWSlowdown | ThrottleHWThermalSlowdown | ThrottleSWPowerCap},
			find("thermal", 0, api.CheckWarn, api.ActionCount, "95 C, at or above the slowdown temperature 90 C; clocks held down: hw_slowdown, hw_thermal_slowdown")},
		{"power brake", Thermal{TempC: 50, SlowdownC: 87, Throttle: ThrottleHWPowerBrake}, find("thermal", 0, api.CheckWarn, api.ActionCount, "clocks held down: hw_power_brake_slowdown")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &board{thermal: []Thermal{tt.th}}
			if diff := cmp.Diff([]api.HealthCheck{tt.want}, statuses(NewThermalCheck(b, 1))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestThrottleNames(t *testing.T) {
	for _, tt := range throttleNames {
		bit, ok := ThrottleBit(tt.name)
		if !ok || bit != tt.bit || cmp.Diff([]string{tt.name}, ThrottleNames(bit)) != "" {
			t.Errorf("%s: ThrottleBit = %#x, %v; ThrottleNames = %v", tt.name, bit, ok, ThrottleNames(bit))
		}
	}
	if _, ok := ThrottleBit("overclocked"); ok {
		t.Error("ThrottleBit accepted an unknown name")
	}
}

func TestPowerAndPCIe(t *testing.T) {
	b := &board{
		power: []Power{{DrawMilliwatts: 650_000, LimitMilliwatts: 700_000}, {DrawMilliwatts: 720_500, LimitMilliwatts: 700_000}, {DrawMilliwatts: 90_000}},
		pcie:  []PCIe{{Gen: 5, MaxGen: 5, Width: 16, MaxWidth: 16}, {Gen: 5, MaxGen: 5, Width: 8, MaxWidth: 16}, {Gen: 1, MaxGen: 5, Width: 16, MaxWidth: 16}},
		err:   map[int]error{},
	}
	want := []api.HealthCheck{
		find("power", 0, api.CheckOK, "", ""),
		find("power", 1, api.CheckWarn, api.ActionCount, "drawing 720 W, above its 700 W limit"),
		find("power", 2, api.CheckOK, "", ""),
	}
	if diff := cmp.Diff(want, statuses(NewPowerCheck(b, 3))); diff != "" {
		t.Errorf("power (-want +got):\n%s", diff)
	}
	want = []api.HealthCheck{
		find("pcie", 0, api.CheckOK, "", ""),
		find("pcie", 1, api.CheckWarn, api.ActionCount, "PCIe link at x8 of x16 (gen 5 of 5)"),
		find("pcie", 2, api.CheckOK, "", ""), // an idle link drops its generation
	}
	if diff := cmp.Diff(want, statuses(NewPCIeCheck(b, 3))); diff != "" {
		t.Errorf("pcie (-want +got):\n%s", diff)
	}
	b.err[1] = errors.New("not supported")
	if got := statuses(NewPCIeCheck(b, 3))[1]; got.Status != api.CheckError {
		t.Errorf("pcie with a failing reader = %+v; want error", got)
	}
}

func TestNVLink(t *testing.T) {
	up := func(errs ...uint64) []Link {
		var l []Link
		for i, e := range errs {
			l = append(l, Link{Index: i, Up: true, Errors: e})
		}
		return l
	}
	down := func(l []Link, i int) []Link { l[i].Up = false; return l }
	tests := []struct {
		name  string
		steps [][]Link
		want  []api.HealthCheck // after the last step
	}{
		{"all up", [][]Link{up(0, 0, 0), up(0, 0, 0)}, []api.HealthCheck{find("nvlink", 0, api.CheckOK, "", "")}},
		{"no nvlink", [][]Link{nil}, []api.HealthCheck{find("nvlink", 0, api.CheckOK, "", "")}},
		{"a link goes down", [][]Link{up(0, 0, 0), down(up(0, 0, 0), 1)},
			[]api.HealthCheck{find("nvlink", 0, api.CheckFatal, api.ActionResetGPU, "links down that were up: 1")}},
		{"down from the start", [][]Link{down(up(0, 0), 0)},
			[]api.HealthCheck{find("nvlink", 0, api.CheckWarn, api.ActionCount, "links down since the check began: 0")}},
		{"back up after a reset", [][]Link{up(0, 0), down(up(0, 0), 1), up(0, 0)}, []api.HealthCheck{find("nvlink", 0, api.CheckOK, "", "")}},
		{"errors rising", [][]Link{up(3, 0), up(7, 0)},
			[]api.HealthCheck{find("nvlink", 0, api.CheckWarn, api.ActionCount, "link errors rising: 0 (+4)")}},
		{"errors steady", [][]Link{up(3, 0), up(7, 0), up(7, 0)}, []api.HealthCheck{find("nvlink", 0, api.CheckOK, "", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &board{links: make([][]Link, 1)}
			c := NewNVLinkCheck(b, 1)
			var got []api.HealthCheck
			for _, s := range tt.steps {
				b.links[0] = s
				got = statuses(c)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := NewECCCheck(&board{}, 8).Run(ctx); len(got) != 0 {
		t.Errorf("Run after cancel = %v; want nothing", got)
	}
}
