package api

import (
	"strings"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"USR1", "SIGUSR1"}, {"SIGUSR1", "SIGUSR1"}, {"usr2", "SIGUSR2"}, {"10", "SIGUSR1"},
		{"15", "SIGTERM"}, {"TERM", "SIGTERM"}, {"int", "SIGINT"}, {"2", "SIGINT"}, {"SIGHUP", "SIGHUP"}, {" 1 ", "SIGHUP"},
	} {
		got, err := ParseSignal(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSignal(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "KILL", "SIGKILL", "9", "0", "-10", "USR", "SIG", "SIGSIGUSR1", "10x", "USR1 " + "x"} {
		_, err := ParseSignal(bad)
		if err == nil || !strings.Contains(err.Error(), "want one of HUP, INT, USR1, USR2, TERM") {
			t.Errorf("ParseSignal(%q): %v; want an error listing the accepted signals", bad, err)
		}
	}
}

func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"USR1", "10", "sigterm", "KILL", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := ParseSignal(s)
		if err != nil {
			return
		}
		if again, err := ParseSignal(name); err != nil || again != name {
			t.Fatalf("ParseSignal(%q) = %q, which reads back as %q, %v", s, name, again, err)
		}
	})
}
