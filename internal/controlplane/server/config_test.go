package server

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"defaults with a data dir", Config{DataDir: "/var/lib/gangway"}, ""},
		{"external etcd with a checkpoint root and a CA", Config{EtcdEndpoints: []string{"http://e:2379"}, CheckpointRoot: "/shared/ckpt", TLSCA: "ca.crt", TLSCAKey: "ca.key"}, ""},
		{"external etcd, no CA and no data dir", Config{EtcdEndpoints: []string{"http://e:2379"}, CheckpointRoot: "/shared/ckpt"}, "--data-dir (where the cluster CA is made) or --tls-ca is required"},
		{"a CA without its key", Config{DataDir: "d", TLSCA: "ca.crt"}, "give --tls-ca and --tls-ca-key together"},
		{"a certificate without its key", Config{DataDir: "d", TLSCert: "s.crt"}, "give --tls-cert and --tls-key together"},
		{"no data dir", Config{}, "--data-dir is required"},
		{"external etcd, no checkpoint root", Config{EtcdEndpoints: []string{"http://e:2379"}}, "--checkpoint-root is required"},
		{"heartbeats too slow for the timeout", Config{DataDir: "d", NodeTimeout: 3 * time.Second, HeartbeatInterval: 2 * time.Second}, "--node-timeout 3s must be at least twice --heartbeat-interval 2s"},
		{"default timeout against a slow heartbeat", Config{DataDir: "d", HeartbeatInterval: 3 * time.Second}, "--node-timeout 4.5s"},
		{"negative max outage", Config{DataDir: "d", MaxOutage: -time.Minute}, "--max-outage -1m0s is negative"},
		{"negative retention", Config{DataDir: "d", JobRetention: -time.Hour}, "--job-retention -1h0m0s is negative"},
		{"negative max finished", Config{DataDir: "d", MaxFinishedJobs: -5}, "--max-finished-jobs -5 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if _, nerr := New(tc.cfg); (nerr == nil) != (err == nil) {
				t.Errorf("New and Validate disagree: %v vs %v", nerr, err)
			}
		})
	}
}

// TestRelativeDataDirGivesAbsoluteCheckpointRoot: agents in other
// directories and the report screen (which accepts only checkpoints under
// the job's absolute directory) need the default root absolute, or every
// checkpoint of a server started with --data-dir data is refused.
func TestRelativeDataDirGivesAbsoluteCheckpointRoot(t *testing.T) {
	s, err := New(Config{DataDir: "data"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs("data/checkpoints")
	if s.cfg.CheckpointRoot != want || len(s.cfg.CheckpointDirRoots) != 1 || s.cfg.CheckpointDirRoots[0] != want {
		t.Errorf("CheckpointRoot %q, CheckpointDirRoots %q; want %q for both", s.cfg.CheckpointRoot, s.cfg.CheckpointDirRoots, want)
	}
}
