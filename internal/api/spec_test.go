package api

import "testing"

func TestMilliGPUs(t *testing.T) {
	for _, c := range []struct {
		name string
		spec JobSpec
		want int64
	}{
		{"whole", JobSpec{Ranks: 16, GPUsPerRank: 8}, 128_000},
		{"time-sliced", JobSpec{Ranks: 160, GPUsPerRank: 1, GPUMilli: 200}, 32_000},
		{"MIG 1g", JobSpec{Ranks: 7, GPUsPerRank: 1, MIGProfile: "1g.10gb"}, 7 * 143},
		{"MIG 3g", JobSpec{Ranks: 2, GPUsPerRank: 1, MIGProfile: "3g.40gb"}, 2 * 429},
		{"MIG 7g", JobSpec{Ranks: 1, GPUsPerRank: 1, MIGProfile: "7g.80gb"}, 1000},
	} {
		if got := c.spec.MilliGPUs(); got != c.want {
			t.Errorf("%s: MilliGPUs = %d; want %d", c.name, got, c.want)
		}
	}
	if got := (&JobSpec{Ranks: 3, GPUMilli: 250}).ShareGPUs(); got != 1 {
		t.Errorf("3 × 250 milli: ShareGPUs = %d; want 1 (rounded up)", got)
	}
}

func TestRestartLimit(t *testing.T) {
	zero, five := 0, 5
	for _, c := range []struct {
		name string
		max  *int
		want int
	}{
		{"unset takes the default", nil, DefaultMaxRestarts},
		{"zero never restarts", &zero, 0},
		{"set", &five, 5},
	} {
		s := JobSpec{MaxRestarts: c.max}
		if got := s.RestartLimit(); got != c.want {
			t.Errorf("%s: RestartLimit = %d; want %d", c.name, got, c.want)
		}
		s.Default()
		if s.MaxRestarts == nil || *s.MaxRestarts != c.want {
			t.Errorf("%s: after Default, MaxRestarts = %v; want %d", c.name, s.MaxRestarts, c.want)
		}
	}
}
