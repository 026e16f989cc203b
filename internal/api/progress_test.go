package api

import (
	"testing"
	"time"
)

func TestTokenRate(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	line := func(attempt, rank int, sec float64, tokens int64) Progress {
		return Progress{Attempt: attempt, Rank: rank, Tokens: tokens, Time: t0.Add(time.Duration(sec * float64(time.Second)))}
	}
	var long []Progress
	for i := range 30 {
		rate := int64(1000)
		if i >= 20 {
			rate = 3000 // the last ten lines go faster
		}
		prev := int64(0)
		if i > 0 {
			prev = long[i-1].Tokens
		}
		long = append(long, line(1, 0, float64(i), prev+rate))
	}
	for _, tc := range []struct {
		name    string
		lines   []Progress
		attempt int
		want    float64
	}{
		{"two lines", []Progress{line(1, 0, 0, 1000), line(1, 0, 2, 5000)}, 1, 2000},
		{"one line", []Progress{line(1, 0, 0, 1000)}, 1, 0},
		{"another attempt's lines do not count", []Progress{line(1, 0, 0, 1000), line(1, 0, 1, 2000), line(2, 0, 5, 100)}, 2, 0},
		{"the newest line's rank only", []Progress{line(1, 0, 0, 1000), line(1, 1, 1, 900), line(1, 0, 2, 3000), line(1, 1, 3, 50900)}, 1, 25000},
		{"lines without tokens are skipped", []Progress{line(1, 0, 0, 1000), {Attempt: 1, Step: 7, Time: t0.Add(time.Second)}, line(1, 0, 4, 9000)}, 1, 2000},
		{"the recent rate, not the average", long, 1, 3000},
		{"no time between them", []Progress{line(1, 0, 1, 1000), line(1, 0, 1, 2000)}, 1, 0},
		{"a count that went back (a restart of the counter)", []Progress{line(1, 0, 0, 5000), line(1, 0, 1, 100)}, 1, 0},
	} {
		if got := TokenRate(tc.lines, tc.attempt); got != tc.want {
			t.Errorf("%s: TokenRate = %g; want %g", tc.name, got, tc.want)
		}
	}
}

func TestGPUSummary(t *testing.T) {
	s := NewGPUSummary()
	if s != (GPUSummary{UtilPercent: -1, MemUsedMiB: -1, MaxTempC: -1, PowerW: -1}) {
		t.Errorf("no readings: %+v; want -1 throughout", s)
	}
	tel := &GPUTelemetry{GPUs: []GPUSample{{Index: 0, UtilPercent: 90, MemUsedMiB: 60000, TempC: 70, PowerW: -1}, {Index: 3, UtilPercent: -1, MemUsedMiB: 512, TempC: 75, PowerW: 80}, {Index: 5, UtilPercent: 0, MemUsedMiB: -1, TempC: 33, PowerW: 70}}}
	for _, i := range []int{0, 3, 5, 7} {
		if g := tel.Sample(i); g != nil {
			s.Add(g)
		}
	}
	want := GPUSummary{Sampled: 3, UtilPercent: 45, MemUsedMiB: 60512, MaxTempC: 75, PowerW: 150, utilSum: 90, utilN: 2}
	if s != want {
		t.Errorf("summary %+v; want %+v", s, want)
	}
	if (*GPUTelemetry)(nil).Sample(0) != nil {
		t.Error("no telemetry has a sample")
	}
}
