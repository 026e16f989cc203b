package fastjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

// The documents gangway decodes on its hot paths, as its own code writes
// them.
func sampleJob() *api.Job {
	t0 := time.Date(2026, 12, 1, 16, 0, 0, 123456789, time.UTC)
	j := &api.Job{ID: "1042", SubmittedAt: t0, ModRevision: 77}
	j.Spec.Name = "llama-7b"
	j.Spec.Queue = "team-a"
	j.Spec.Ranks = 16
	j.Spec.GPUsPerRank = 8
	j.Spec.Command = []string{"python3", "train.py", "--steps=100", "ünïcode ✓"}
	j.Spec.Env = map[string]string{"NCCL_DEBUG": "INFO", "EMPTY": ""}
	j.Spec.Parallelism = &api.Parallelism{TP: 8, PP: 2, DP: 1}
	j.Status.Phase = api.JobRunning
	j.Status.Reason = "running on n1, n2"
	j.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning, CreatedAt: t0.Add(time.Second), MasterAddr: "10.0.0.1", MasterPort: 29500,
		Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}}
	return j
}

func sampleHeartbeat() *api.Heartbeat {
	t0 := time.Date(2026, 12, 1, 16, 0, 0, 5, time.UTC)
	return &api.Heartbeat{Node: "n3", AckRevision: 991, SentAt: t0, Ranks: []api.RankStatus{
		{JobID: "7", Attempt: 1, Rank: 0, Node: "n3", State: api.RankRunning, PID: 4242, StartedAt: t0},
		{JobID: "8", Attempt: 2, Rank: 1, Node: "n3", State: api.RankExited, ExitCode: 137, Signal: "SIGKILL",
			Message: "killed: \"oom\"\n", StartedAt: t0, FinishedAt: t0.Add(time.Hour)},
	}, Telemetry: &api.GPUTelemetry{At: t0, GPUs: []api.GPUSample{{Index: 0, UtilPercent: 97, MemUsedMiB: 61440.5, TempC: 71, PowerW: -1}}}}
}

func sampleAssignments() *api.AssignmentList {
	return &api.AssignmentList{Revision: 12, Delta: true, Unchanged: []string{"5/1/0"}, Assignments: []api.Assignment{{
		JobID: "9", Attempt: 1, Rank: 3, Node: "n1", Command: []string{"true"},
		Env: map[string]string{"RANK": "3", "WORLD_SIZE": "16", "MASTER_ADDR": "10.0.0.1"}, GPUs: []int{3},
		Grace: api.Duration(30 * time.Second), CheckpointD: "/ckpt/9", Files: map[string]string{"hostfile": "n1 slots=8\n"},
		Resources: &api.Resources{MemoryBytes: 1 << 30, CPUMillis: 1500}, DiscardOutput: true,
	}}}
}

// sample is one document to decode and a zero value of its type.
type sample struct {
	name string
	v    any
	new  func() any
}

func samples() []sample {
	return []sample{
		{"job", sampleJob(), func() any { return new(api.Job) }},
		{"heartbeat", sampleHeartbeat(), func() any { return new(api.Heartbeat) }},
		{"assignments", sampleAssignments(), func() any { return new(api.AssignmentList) }},
	}
}

func TestUnmarshalDecodesAsEncodingJSON(t *testing.T) {
	all := append(samples(), sample{"map", map[string]any{"a": 1.5, "b": []any{"x", nil, true}}, func() any { return new(map[string]any) }})
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			want, got := tc.new(), tc.new()
			if err := json.Unmarshal(data, want); err != nil {
				t.Fatal(err)
			}
			if err := Unmarshal(data, got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("differs from encoding/json (-want +got):\n%s", d)
			}
		})
	}
}

func TestUnmarshalErrorsAreEncodingJSONs(t *testing.T) {
	for _, doc := range []string{
		`{"id":"1","spec":`,                // truncated
		`{"id":1}`,                         // wrong type
		`{"spec":{"ranks":"two"}}`,         // wrong type, nested
		`{"submittedAt":"yesterday"}`,      // a time that does not parse
		`{"id":"1"} trailing`,              // trailing data
		`[1,2]`,                            // not an object
		`{"spec":{"timeLimit":"forever"}}`, // a Duration that does not parse
		`{"status":{"attempts":[{"number":1.5}]}}`,
	} {
		var want, got api.Job
		werr := json.Unmarshal([]byte(doc), &want)
		gerr := Unmarshal([]byte(doc), &got)
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Errorf("%s: error %v, want encoding/json's %v", doc, gerr, werr)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: value left differs from encoding/json's (-want +got):\n%s", doc, d)
		}
	}
}

// A value that is not zero is merged into as encoding/json does.
func TestUnmarshalMergesIntoNonZero(t *testing.T) {
	got := api.Job{ID: "keep", ModRevision: 5}
	if err := Unmarshal([]byte(`{"modRevision":6}`), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "keep" || got.ModRevision != 6 {
		t.Errorf("got ID %q rev %d, want keep and 6", got.ID, got.ModRevision)
	}
	if err := Unmarshal([]byte(`{}`), nil); err == nil {
		t.Error("nil target: want an error")
	}
}

func TestDecodeReadsOneDocument(t *testing.T) {
	var l api.AssignmentList
	if err := Decode(strings.NewReader(`{"revision":3,"assignments":[]}`+"\n"), &l); err != nil || l.Revision != 3 {
		t.Fatalf("got %+v, %v", l, err)
	}
	if err := Decode(errReader{}, &l); err == nil {
		t.Error("a failing reader: want its error")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

// FuzzUnmarshal: on any input, Unmarshal accepts what encoding/json
// accepts, gives the same value, and fails where it fails.
func FuzzUnmarshal(f *testing.F) {
	for _, tc := range samples() {
		b, _ := json.Marshal(tc.v)
		f.Add(b)
	}
	f.Add([]byte(`{"id":"\ud800","spec":{"ranks":1e3}}`))
	f.Add([]byte("{\"id\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tc := range samples() {
			want, got := tc.new(), tc.new()
			werr := json.Unmarshal(data, want)
			gerr := Unmarshal(data, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%q: error %v, encoding/json's %v", data, gerr, werr)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("%q: differs from encoding/json (-want +got):\n%s", data, d)
			}
		}
	})
}

// BenchmarkUnmarshal compares the two decoders on the hot documents.
func BenchmarkUnmarshal(b *testing.B) {
	for _, tc := range samples() {
		data, _ := json.Marshal(tc.v)
		b.Run(tc.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := json.Unmarshal(data, tc.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/fastjson", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := Unmarshal(data, tc.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
