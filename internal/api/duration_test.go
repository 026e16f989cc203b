package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"60", time.Hour}, // Slurm: a bare number is minutes
		{"1.5", 90 * time.Second},
		{"0", 0},
		{"30:00", 30 * time.Minute},    // MM:SS
		{"2:00:00", 2 * time.Hour},     // HH:MM:SS
		{"1-00:00:00", 24 * time.Hour}, // D-HH:MM:SS
		{"1-12", 36 * time.Hour},       // D-HH
		{"2-03:04", 2*24*time.Hour + 3*time.Hour + 4*time.Minute}, // D-HH:MM
		{" 10 ", 10 * time.Minute},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "soon", "1:2:3:4", "1-", "-5:00", "1e3", "Inf", "NaN", "1-2-3", "::", "99999999999999999", "a:00", "0x10", "1.2.3"} {
		if d, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", bad, d)
		} else if !strings.Contains(err.Error(), "minutes") && !strings.Contains(err.Error(), "too long") {
			t.Errorf("ParseDuration(%q): %v; want the accepted forms named", bad, err)
		}
	}
}

// A spec's durations read the same from YAML and JSON, numbers as minutes.
func TestDurationInSpecs(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want time.Duration
	}{
		{"ranks: 1\ncommand: [a]\ntimeLimit: 60\n", time.Hour},
		{"ranks: 1\ncommand: [a]\ntimeLimit: 2:00:00\n", 2 * time.Hour},
		{"ranks: 1\ncommand: [a]\ntimeLimit: \"1-00:00:00\"\n", 24 * time.Hour},
		{"ranks: 1\ncommand: [a]\ntimeLimit: 90s\n", 90 * time.Second},
		{`{"ranks": 1, "command": ["a"], "timeLimit": 30}`, 30 * time.Minute},
		{`{"ranks": 1, "command": ["a"], "timeLimit": "30:00"}`, 30 * time.Minute},
	} {
		spec, err := DecodeJobSpec([]byte(tc.doc))
		if err != nil || spec.TimeLimit.D() != tc.want {
			t.Errorf("%q: timeLimit %v, %v; want %v", tc.doc, spec.TimeLimit.D(), err, tc.want)
		}
	}
	if _, err := DecodeJobSpec([]byte("ranks: 1\ncommand: [a]\ntimeLimit: soon\n")); err == nil || !strings.Contains(err.Error(), "timeLimit") {
		t.Errorf("bad timeLimit: %v; want an error naming the field", err)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90s", "60", "2:00:00", "1-00:00:00", "1-12", "30:00", "1.5", "-1h", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		// What it read, written back in Go's form, reads the same.
		b, _ := json.Marshal(Duration(d))
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || back.D() != d {
			t.Fatalf("%q → %v → %s → %v, %v", s, d, b, back.D(), err)
		}
	})
}

func TestParseDependency(t *testing.T) {
	got, err := ParseDependency("afterok:12:13,afterany:14,singleton")
	if err != nil || len(got) != 3 || got[0].Kind != DepAfterOK || len(got[0].Jobs) != 2 || got[2].Kind != DepSingleton {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, bad := range []string{"afterok", "afterok:", "afterok:x", "after:1?after:2", "before:1", "singleton:3", "afterok:1,,afterany:2"} {
		if _, err := ParseDependency(bad); err == nil {
			t.Errorf("ParseDependency(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		kind    string
		phase   JobPhase
		started bool
		want    DependencyState
	}{
		{DepAfter, JobPending, false, DepWaiting}, {DepAfter, JobRunning, true, DepMet},
		{DepAfterAny, JobRunning, true, DepWaiting}, {DepAfterAny, JobFailed, true, DepMet},
		{DepAfterOK, JobSucceeded, true, DepMet}, {DepAfterOK, JobCancelled, false, DepNever},
		{DepAfterNotOK, JobFailed, true, DepMet}, {DepAfterNotOK, JobSucceeded, true, DepNever},
	} {
		if got := (Dependency{Kind: tc.kind}).Holds(tc.phase, tc.started); got != tc.want {
			t.Errorf("%s on %s: %v, want %v", tc.kind, tc.phase, got, tc.want)
		}
	}
}

func FuzzParseDependency(f *testing.F) {
	f.Add("afterok:12:13,afterany:14")
	f.Add("singleton")
	f.Fuzz(func(t *testing.T, s string) {
		deps, err := ParseDependency(s)
		if err != nil {
			return
		}
		for _, d := range deps {
			if d.Kind != DepSingleton && len(d.Jobs) == 0 {
				t.Fatalf("%q: %s names no job", s, d.Kind)
			}
		}
	})
}
