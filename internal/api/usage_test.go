package api

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 8, 15, 30, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "24h", want: now.Add(-24 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "1.5d", want: now.Add(-36 * time.Hour)},
		{in: "0", want: now},
		{in: "2026-12-01", want: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T10:00:00Z", want: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T10:00:00+02:00", want: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)},
		{in: "7x", wantErr: `--since: "7x" is not a duration (e.g. 30m, 24h, 7d), a date (2026-12-01) or an RFC 3339 time (2026-12-01T10:00:00Z)`},
		{in: "", wantErr: `--since: "" is not a duration`},
		{in: "d", wantErr: `--since: "d" is not a duration`},
		{in: "+7d", wantErr: `--since: "+7d" is not a duration`},
		{in: "NaNd", wantErr: `--since: "NaNd" is not a duration`},
		{in: " 7d", wantErr: `--since: " 7d" is not a duration`},
		{in: "2026-13-01", wantErr: `is not a duration`},
		{in: "-24h", wantErr: `--since: "-24h" is negative`},
		{in: "99999999d", wantErr: `--since: "99999999d" is more than 36500 days`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSince(tt.in, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSince(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("error %v does not wrap ErrInvalid", err)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) {
				t.Errorf("ParseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseUsageBy(t *testing.T) {
	for in, want := range map[string]UsageBy{"": UsageByQueue, "queue": UsageByQueue, "user": UsageByUser, "job": UsageByJob} {
		if got, err := ParseUsageBy(in); err != nil || got != want {
			t.Errorf("ParseUsageBy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := ParseUsageBy("team")
	if err == nil || err.Error() != `--by: "team" is not one of queue, user, job` {
		t.Errorf("ParseUsageBy(team) = %v", err)
	}
}

// FuzzParseSince: any input is a time no later than now (a duration ago,
// or a date) or an error that names the flag; never a panic.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"24h", "7d", "1.5d", "2026-12-01", "2026-12-01T10:00:00Z", "7x", "-1d", "1e9d", "0x1p3d", ".5d", "9223372036854775807ns"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 8, 15, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSince(s, now)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--since: ") || !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseSince(%q): error %q does not name the flag or wrap ErrInvalid", s, err)
			}
			return
		}
		if _, perr := time.Parse(time.RFC3339, s); perr == nil {
			return // an absolute time may be in the future
		}
		if _, perr := time.Parse(time.DateOnly, s); perr == nil {
			return
		}
		if got.After(now) || now.Sub(got) > maxSinceDays*24*time.Hour+time.Hour {
			t.Fatalf("ParseSince(%q) = %v: want a time at most %d days before %v", s, got, maxSinceDays, now)
		}
	})
}
