package gpu

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFakeTelemetryFollowsLoad: a fake GPU a rank holds reads busy (high
// utilisation, memory, temperature, power and clock, NVLink traffic
// growing) and an idle one idle; memory used and free add up to the
// model's; two fakes made alike read alike.
func TestFakeTelemetryFollowsLoad(t *testing.T) {
	mk := func() Sampler {
		d, err := NewFake(2, "H100-SXM-80GB", WithSeed("n1"))
		if err != nil {
			t.Fatal(err)
		}
		return d.(Sampler)
	}
	busy := func(i int) bool { return i == 1 }
	a, b := mk(), mk()
	var first []Telemetry
	for n := range 3 {
		got, err := a.Sample(context.Background(), busy)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := b.Sample(context.Background(), busy)
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("two fakes made alike read differently (-a +b):\n%s", diff)
		}
		if n == 0 {
			first = got
		}
		idle, hot := got[0], got[1]
		total := float64(80 * 1024) // MiB, about: NVML's total for the model
		for _, c := range []struct {
			name string
			ok   bool
		}{
			{"busy utilisation ≥ 90 %", hot.UtilPercent >= 90 && hot.UtilPercent <= 100},
			{"idle utilisation 0", idle.UtilPercent == 0},
			{"busy memory over half", hot.FBUsedMiB > total/2},
			{"idle memory under 1 GiB", idle.FBUsedMiB < 1024},
			{"used + free is the model's memory", hot.FBUsedMiB+hot.FBFreeMiB == idle.FBUsedMiB+idle.FBFreeMiB},
			{"busy hotter", hot.TempC > idle.TempC+20},
			{"busy draws more power", hot.PowerW > 500 && idle.PowerW < 100},
			{"busy clocks higher", hot.SMClockMHz > idle.SMClockMHz},
			{"NVLink traffic only when busy", hot.NVLinkBandwidthTotal > 0 && idle.NVLinkBandwidthTotal == 0},
			{"UUIDs are the inventory's", hot.UUID == fakeUUID("n1", 1)},
		} {
			if !c.ok {
				t.Errorf("sample %d: want %s; idle %+v, busy %+v", n, c.name, idle, hot)
			}
		}
		if n == 2 && got[1].NVLinkBandwidthTotal <= first[1].NVLinkBandwidthTotal {
			t.Errorf("NVLink counter did not grow: %g then %g", first[1].NVLinkBandwidthTotal, got[1].NVLinkBandwidthTotal)
		}
	}
}
