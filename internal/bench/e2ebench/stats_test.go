package e2ebench

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr string
	}{
		{
			name: "agent",
			line: "4242 (gangway) S 1 4242 4242 0 -1 4194560 1234 5678 0 0 150 37 220 61 20 0 12 0 99 1000 100 18446744073709551615\n",
			want: procStat{utime: 150, stime: 37, cutime: 220, cstime: 61},
		},
		{
			name: "command name with spaces and parentheses",
			line: "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0",
			want: procStat{utime: 1, stime: 2, cutime: 3, cstime: 4},
		},
		{name: "no command name", line: "7 gangway S 1", wantErr: "no ')'"},
		{name: "truncated", line: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 1 2", wantErr: "13 fields after the command name, want at least 15"},
		{name: "not a number", line: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 1 two 3 4", wantErr: `field 15 is "two"`},
		{name: "negative", line: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 1 2 -3 4", wantErr: `field 16 is "-3"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.line))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(procStat{})); d != "" {
				t.Errorf("parseProcStat (-want +got):\n%s", d)
			}
		})
	}
}

func TestProcStatTotal(t *testing.T) {
	s := procStat{utime: 150, stime: 50, cutime: 100, cstime: 200}
	if got, want := s.total(), 5.0; got != want {
		t.Errorf("total = %v, want %v", got, want)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("4242 (gangway) S 1 4242 4242 0 -1 4194560 1234 5678 0 0 150 37 220 61 20 0 12 0"))
	f.Add([]byte("7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseProcStat(b)
		if err != nil {
			return
		}
		if s.utime < 0 || s.stime < 0 || s.cutime < 0 || s.cstime < 0 {
			t.Errorf("negative ticks %+v from %q", s, b)
		}
	})
}
