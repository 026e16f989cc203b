package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLogSpecBounds(t *testing.T) {
	const base = "ranks: 1\ncommand: [a]\n"
	for _, tt := range []struct {
		name   string
		in     string
		want   *LogSpec
		errHas []string // nil: valid
	}{
		{name: "absent: the node's bounds", in: base},
		{name: "both", in: base + "logs: {maxFileBytes: 1048576, maxFiles: 3}\n", want: &LogSpec{MaxFileBytes: 1 << 20, MaxFiles: 3}},
		{name: "one, the other defaulted", in: base + "logs: {maxFiles: 2}\n", want: &LogSpec{MaxFiles: 2}},
		{name: "json", in: `{"ranks": 1, "command": ["a"], "logs": {"maxFileBytes": 1073741824, "maxFiles": 100}}`,
			want: &LogSpec{MaxFileBytes: MaxLogFileBytes, MaxFiles: MaxLogFiles}},
		{name: "negative size", in: base + "logs: {maxFileBytes: -1}\n", errHas: []string{"spec.logs.maxFileBytes", "1 KiB"}},
		{name: "tiny files", in: base + "logs: {maxFileBytes: 100}\n", errHas: []string{"spec.logs.maxFileBytes", "got 100"}},
		{name: "huge files", in: base + "logs: {maxFileBytes: 1073741825}\n", errHas: []string{"spec.logs.maxFileBytes", "1 GiB"}},
		{name: "negative count", in: base + "logs: {maxFiles: -3}\n", errHas: []string{"spec.logs.maxFiles", "got -3"}},
		{name: "too many files", in: base + "logs: {maxFiles: 101}\n", errHas: []string{"spec.logs.maxFiles", "1 to 100"}},
		{name: "both wrong", in: base + "logs: {maxFileBytes: 1, maxFiles: 1000}\n", errHas: []string{"spec.logs.maxFileBytes", "spec.logs.maxFiles"}},
		{name: "unknown field", in: base + "logs:\n  maxSize: 10\n", errHas: []string{"maxSize", "unknown field"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeJobSpec([]byte(tt.in))
			if tt.errHas == nil {
				if err != nil {
					t.Fatalf("DecodeJobSpec: %v", err)
				}
				if diff := cmp.Diff(tt.want, got.Logs); diff != "" {
					t.Errorf("logs (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v; want one wrapping ErrInvalid", err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestJobCloneCopiesLogs(t *testing.T) {
	j := &Job{Spec: JobSpec{Logs: &LogSpec{MaxFiles: 2}}}
	c := j.Clone()
	c.Spec.Logs.MaxFiles = 9
	if j.Spec.Logs.MaxFiles != 2 {
		t.Fatal("Clone shares spec.logs with the original")
	}
}
