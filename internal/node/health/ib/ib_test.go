package ib

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/nic"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		trees []string // testdata trees the node goes through, in turn
		want  api.HealthCheck
	}{
		{"healthy", []string{"healthy"}, api.HealthCheck{Status: api.CheckOK, Message: "8 of 8 ports ACTIVE"}},
		{"a port goes down", []string{"healthy", "port-down"},
			api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: "down: mlx5_3 port 1 DOWN/Disabled (was ACTIVE)"}},
		{"a port down from the start is not held against the node", []string{"port-down"},
			api.HealthCheck{Status: api.CheckOK, Message: "never up: mlx5_3 port 1"}},
		{"it comes back", []string{"healthy", "port-down", "healthy"}, api.HealthCheck{Status: api.CheckOK, Message: "8 of 8 ports ACTIVE"}},
		{"every port goes down", []string{"healthy", "all-down"},
			api.HealthCheck{Status: api.CheckFatal, Action: api.ActionCordonNode,
				Message: "every port is down; down: mlx5_0 port 1 DOWN/Polling (was ACTIVE), mlx5_1 port 1 DOWN/Polling (was ACTIVE), mlx5_2 port 1 DOWN/Polling (was ACTIVE), mlx5_3 port 1 DOWN/Polling (was ACTIVE), mlx5_4 port 1 DOWN/Polling (was ACTIVE), mlx5_5 port 1 DOWN/Polling (was ACTIVE), mlx5_6 port 1 DOWN/Polling (was ACTIVE), mlx5_7 port 1 DOWN/Polling (was ACTIVE)"}},
		{"no port up from the start", []string{"all-down"},
			api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: "never up: mlx5_0 port 1, mlx5_1 port 1, mlx5_2 port 1, mlx5_3 port 1, mlx5_4 port 1, mlx5_5 port 1, mlx5_6 port 1, mlx5_7 port 1"}},
		{"a port retrains slower", []string{"healthy", "slow"},
			api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: "slow: mlx5_6 port 1 at 200 Gb/sec, below the 400 Gb/sec it had"}},
		{"slow from the start", []string{"slow"}, api.HealthCheck{Status: api.CheckOK, Message: "8 of 8 ports ACTIVE"}},
		{"missing files", []string{"missing"},
			api.HealthCheck{Status: api.CheckError, Message: "unreadable: mlx5_2 port 1: read rate: no such file or directory, mlx5_5 port 1: read state: no such file or directory"}},
		{"missing files beside a port down", []string{"healthy", "missing", "port-down"},
			api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: "down: mlx5_3 port 1 DOWN/Disabled (was ACTIVE)"}},
		{"no RDMA devices", []string{"absent"}, api.HealthCheck{Status: api.CheckOK, Message: "no RDMA devices"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "infiniband")
			c := New(root)
			var got []api.HealthCheck
			for _, tree := range tt.trees {
				if err := os.RemoveAll(root); err != nil {
					t.Fatal(err)
				}
				if tree != "absent" {
					if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", tree))); err != nil {
						t.Fatal(err)
					}
				}
				got = c.Run(context.Background())
			}
			want := tt.want
			want.Check, want.GPU = "ib", -1
			if diff := cmp.Diff([]api.HealthCheck{want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		mbps int64
		ok   bool
	}{
		{"400 Gb/sec (4X NDR)", 400_000, true},
		{"2.5 Gb/sec (1X SDR)", 2500, true},
		{"fast", 0, false},
		{"NaN Gb/sec", 0, false},
	} {
		got, err := nic.ParseRate(tt.in)
		if got != tt.mbps || (err == nil) != tt.ok {
			t.Errorf("nic.ParseRate(%q) = %d, %v", tt.in, got, err)
		}
	}
	for _, in := range []string{"ACTIVE", "4:", "x: ACTIVE"} {
		if _, err := nic.ParsePortState(in); err == nil {
			t.Errorf("nic.ParsePortState(%q) accepted", in)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"400 Gb/sec (4X NDR)", "4: ACTIVE", "5: LinkUp", "1e7 Gb/sec", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if mbps, err := nic.ParseRate(s); err == nil && (mbps < 0 || mbps > 1e10) {
			t.Fatalf("nic.ParseRate(%q) = %d", s, mbps)
		}
		if name, err := nic.ParsePortState(s); err == nil && name == "" {
			t.Fatalf("nic.ParsePortState(%q) = empty name", s)
		}
	})
}
