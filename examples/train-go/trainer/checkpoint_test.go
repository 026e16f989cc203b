package trainer

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	s := state{Step: 42, Seed: 7, Loss: 0.125, Params: []float64{1, -2.5, math.SmallestNonzeroFloat64}, Velocity: []float64{0, math.Copysign(0, -1), 3}}
	got, err := decodeState(encodeState(s))
	must(t, err)
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if math.Signbit(got.Velocity[1]) != true {
		t.Fatal("negative zero lost its sign")
	}
}

func TestDecodeStateRejectsDamage(t *testing.T) {
	t.Parallel()
	good := encodeState(state{Step: 3, Seed: 1, Params: []float64{1, 2}, Velocity: []float64{3, 4}})
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{name: "empty", b: nil, want: "shorter than"},
		{name: "truncated", b: good[:len(good)-9], want: "checksum"},
		{name: "flipped bit", b: flip(good, 50), want: "checksum"},
		{name: "other format", b: flip(good, 7), want: "bad magic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeState(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decodeState: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

func TestWriteCheckpointCommitsLast(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s := state{Step: 9, Seed: 1, Loss: 1, Params: []float64{1}, Velocity: []float64{2}}
	dir, already, err := writeCheckpoint(root, s, checkpointMeta{Step: 9})
	must(t, err)
	if already || dir != filepath.Join(root, "9") {
		t.Fatalf("dir %s already %v", dir, already)
	}
	got, err := readCheckpoint(dir)
	must(t, err)
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatalf("read back (-want +got):\n%s", diff)
	}
	// A committed checkpoint is never rewritten: the agent may already
	// have reported it.
	_, already, err = writeCheckpoint(root, state{Step: 9, Params: []float64{5}, Velocity: []float64{5}}, checkpointMeta{})
	must(t, err)
	if !already {
		t.Fatal("rewrote a committed checkpoint")
	}
	got, err = readCheckpoint(dir)
	must(t, err)
	if got.Params[0] != 1 {
		t.Fatal("committed checkpoint changed")
	}
}

func TestParseLaunch(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
		"GANGWAY_NODE_ADDR": "10.0.0.2", "GANGWAY_JOB_ID": "j-1", "GANGWAY_ATTEMPT": "2",
		"GANGWAY_CHECKPOINT_DIR": "/ck", "GANGWAY_RESUME_FROM": "/ck/40", "GANGWAY_PROGRESS_FILE": "/p",
	}
	got, err := parseLaunch(func(k string) string { return env[k] })
	must(t, err)
	want := launch{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: "29500", NodeAddr: "10.0.0.2",
		JobID: "j-1", Attempt: 2, CheckpointDir: "/ck", ResumeFrom: "/ck/40", ProgressFile: "/p"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("parseLaunch (-want +got):\n%s", diff)
	}
	// By hand, with nothing set: one rank on this machine.
	got, err = parseLaunch(func(string) string { return "" })
	must(t, err)
	if diff := cmp.Diff(launch{WorldSize: 1, Attempt: 1, NodeAddr: "127.0.0.1"}, got); diff != "" {
		t.Fatalf("empty environment (-want +got):\n%s", diff)
	}
}

func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState(state{Step: 1, Seed: 2, Loss: 3, Params: []float64{4}, Velocity: []float64{5}}))
	f.Add(encodeState(state{}))
	f.Add([]byte("GWTRAIN\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		if len(s.Params) != len(s.Velocity) {
			t.Fatalf("%d params, %d velocities", len(s.Params), len(s.Velocity))
		}
		if !bytes.Equal(encodeState(s), b) {
			t.Fatal("decode then encode changed the bytes")
		}
	})
}
