package api

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeJobSpec(t *testing.T) {
	three := 3
	tests := []struct {
		name    string
		in      string
		want    *JobSpec
		errHas  []string // substrings of the error; nil means success
		errLine int
	}{
		{
			name: "yaml with defaults",
			in:   "name: t\nranks: 8\nranksPerNode: 4\ncommand: [python3, train.py]\nrestartBackoff: 2s\n",
			want: &JobSpec{Name: "t", Queue: "default", Ranks: 8, RanksPerNode: 4, GPUsPerRank: 1,
				Command: []string{"python3", "train.py"}, MaxRestarts: &three,
				RestartBackoff: Duration(2 * time.Second), TerminationGracePeriod: Duration(DefaultGrace)},
		},
		{
			name: "json body",
			in:   `{"ranks": 2, "gpusPerRank": 4, "command": ["x"], "hangTimeout": 30}`,
			want: &JobSpec{Queue: "default", Ranks: 2, GPUsPerRank: 4, Command: []string{"x"}, MaxRestarts: &three,
				RestartBackoff: Duration(DefaultRestartBackoff), HangTimeout: Duration(30 * time.Minute), // a bare number: minutes
				TerminationGracePeriod: Duration(DefaultGrace)},
		},
		{name: "unknown field", in: "ranks: 2\ncommand: [a]\ngpus: 4\n", errHas: []string{"gpus", "unknown field"}, errLine: 3},
		{name: "unknown nested field", in: "ranks: 2\ncommand: [a]\nresources:\n  mem: 1\n", errHas: []string{"mem", "unknown field"}, errLine: 4},
		{name: "zero ranks", in: "ranks: 0\ncommand: [a]\n", errHas: []string{"spec.ranks", "at least 1"}},
		{name: "negative gpus", in: "ranks: 1\ngpusPerRank: -2\ncommand: [a]\n", errHas: []string{"spec.gpusPerRank", "at least 1"}},
		{name: "missing command", in: "ranks: 1\n", errHas: []string{"spec.command", "missing"}},
		{name: "wrong type", in: "ranks: two\ncommand: [a]\n", errHas: []string{"line 1"}},
		{name: "malformed yaml", in: "ranks: 2\ncommand: [a\n", errHas: []string{"line"}},
		{name: "empty", in: "  \n", errHas: []string{"empty document"}},
		{name: "two documents", in: "ranks: 1\ncommand: [a]\n---\nranks: 2\ncommand: [b]\n", errHas: []string{"more than one document"}},
		{name: "ranksPerNode must divide", in: "ranks: 6\nranksPerNode: 4\ncommand: [a]\n", errHas: []string{"spec.ranksPerNode", "does not divide"}},
		{name: "bad duration", in: "ranks: 1\ncommand: [a]\nrestartBackoff: soon\n", errHas: []string{"invalid duration"}},
		{name: "relative checkpoint dir", in: "ranks: 1\ncommand: [a]\ncheckpointDir: ckpt\n", errHas: []string{"spec.checkpointDir", "absolute"}},
		{name: "every wrong field at once", in: "ranks: 0\ngpusPerRank: 0\n", errHas: []string{"spec.ranks", "spec.gpusPerRank", "spec.command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeJobSpec([]byte(tt.in))
			if tt.errHas == nil {
				if err != nil {
					t.Fatalf("DecodeJobSpec: %v", err)
				}
				if diff := cmp.Diff(*tt.want, got); diff != "" {
					t.Errorf("spec mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeJobSpec succeeded; want error containing %q", tt.errHas)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tt.errLine > 0 {
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Fields[0].Line != tt.errLine {
					t.Errorf("error %q: want line %d", err, tt.errLine)
				}
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	d := Duration(90 * time.Second)
	b, err := d.MarshalJSON()
	if err != nil || string(b) != `"1m30s"` {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
	var back Duration
	if err := back.UnmarshalJSON(b); err != nil || back != d {
		t.Fatalf("round trip = %v, %v", back, err)
	}
}

func TestTaskKeyRoundTrip(t *testing.T) {
	k := TaskKey("42", 3, 7)
	job, att, rank, err := ParseTaskKey(k)
	if err != nil || job != "42" || att != 3 || rank != 7 {
		t.Fatalf("ParseTaskKey(%q) = %q %d %d %v", k, job, att, rank, err)
	}
	for _, bad := range []string{"", "a/b", "a/1/x", "a/x/1", "a/1/2/3"} {
		if _, _, _, err := ParseTaskKey(bad); err == nil {
			t.Errorf("ParseTaskKey(%q) succeeded", bad)
		}
	}
}

func TestJobCloneIsDeep(t *testing.T) {
	n := 2
	j := &Job{ID: "1", Spec: JobSpec{Command: []string{"a"}, Env: map[string]string{"K": "V"}, MaxRestarts: &n},
		Status: JobStatus{Attempts: []Attempt{{Number: 1, Placement: []RankPlacement{{Node: "n1"}}}}}}
	c := j.Clone()
	c.Spec.Command[0] = "b"
	c.Spec.Env["K"] = "W"
	*c.Spec.MaxRestarts = 9
	c.Status.Attempts[0].Placement[0].Node = "n2"
	if j.Spec.Command[0] != "a" || j.Spec.Env["K"] != "V" || *j.Spec.MaxRestarts != 2 || j.Status.Attempts[0].Placement[0].Node != "n1" {
		t.Fatalf("Clone shares memory with the original: %+v", j)
	}
}

// FuzzDecodeJobSpec checks the decoder never panics and that whatever it
// accepts is valid and survives a JSON round trip unchanged.
func FuzzDecodeJobSpec(f *testing.F) {
	for _, s := range []string{
		"ranks: 8\nranksPerNode: 4\ncommand: [python3, train.py]\n",
		`{"ranks": 2, "command": ["x"], "env": {"A": "b"}}`,
		"ranks: 1\ncommand: [a]\nresources: {memoryBytes: 100}\nmaxRestarts: 0\n",
		"ranks: [\n", "- 1\n- 2\n", "ranks: 1e99\ncommand: [a]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := DecodeJobSpec(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("accepted an invalid spec: %v", err)
		}
	})
}

// TestTypeErrorsInUsersWords: a value of the wrong type is named by the
// spec's own field name and what was wanted, never by Go's names.
func TestTypeErrorsInUsersWords(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ranks: two\ncommand: [a]\n", "line 1, column 8: ranks: want an integer, got a string"},
		{"ranks: 2\ncommand: a\n", "line 2, column 10: command: want a list, got a string"},
		{"ranks: 2\ncommand: [a]\nenv: {A: [1]}\n", "line 3, column 10: env.A: want a string, got a list"},
		{"ranks: 2\ncommand: [a]\npreemptible: 3\n", "line 3, column 14: preemptible: want true or false, got an integer"},
		{"ranks: 2\ncommand: [a]\nresources: {memoryBytes: lots}\n", "line 3, column 26: resources.memoryBytes: want an integer, got a string"},
		{"ranks: 2\ncommand: [a]\nparallelism: {tp: x}\n", "parallelism.tp: want an integer, got a string"},
	} {
		_, err := DecodeJobSpec([]byte(tt.in))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 {
			t.Errorf("%q: err = %v; want one field error", tt.in, err)
			continue
		}
		if got := ve.Fields[0].Error(); got != tt.want {
			t.Errorf("%q:\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestNoQuietConversions: a quoted number for an integer field, or a
// fraction for one, is refused naming the field; the YAML decoder would
// take "2" as 2 and 1.5 as 1.
func TestNoQuietConversions(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"command":["x"],"ranks":"2"}`, `ranks: want an integer, got a string ("2")`},
		{"command: [x]\nranks: \"2\"\n", `ranks: want an integer, got a string ("2")`},
		{"command: [x]\nranks: 1\nresources: {memoryBytes: 1.5}\n", "resources.memoryBytes: want an integer, got 1.5"},
		{`{"command":["x"],"ranks":1,"resources":{"memoryBytes":1.5}}`, "resources.memoryBytes: want an integer, got 1.5"},
		{"command: [x]\nranks: 2\npreemptible: \"yes\"\n", `preemptible: want true or false, got a string`},
	}
	for _, tt := range tests {
		_, err := DecodeJobSpec([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v; want %q", tt.in, err, tt.want)
		}
	}
	// What reads as meant still goes: integral numbers, names and env
	// values that look like numbers, durations.
	for _, in := range []string{
		"command: [x]\nranks: 2\nresources: {memoryBytes: 1073741824}\n",
		"name: 2024\nranks: 1\ncommand: [x, 1]\nenv: {SEED: 7}\ntimeLimit: 1h\n",
	} {
		if _, err := DecodeJobSpec([]byte(in)); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}
