package server

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/controlplane/store"
)

// TestCheckClusterRefusesAnotherClustersStore: a data directory and a
// store are used together only when they name the same cluster, or when
// one of them is new (a cluster's first start; a replica's first start on
// it); a refusal says why and which flags to fix, and writes nothing.
func TestCheckClusterRefusesAnotherClustersStore(t *testing.T) {
	ctx := context.Background()
	e, err := store.StartEmbedded(ctx, store.EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli := e.Client()
	defer cli.Close()
	st := store.New(cli)
	for _, c := range []struct {
		name          string
		noDataDir     bool
		local, stored string // "": none
		wantErr       []string
		wantID        string // "": a new one, the same in both
	}{
		{name: "first start of the cluster"},
		{name: "first start of a replica", stored: "abc", wantID: "abc"},
		{name: "restart", local: "abc", stored: "abc", wantID: "abc"},
		{name: "another cluster's store", local: "abc", stored: "xyz",
			wantErr: []string{"--data-dir", "belongs to cluster abc", "belongs to cluster xyz", "--etcd-endpoints"}},
		{name: "an empty or another etcd", local: "abc",
			wantErr: []string{"--data-dir", "belongs to cluster abc", "has no cluster ID", "--etcd-endpoints"}},
		{name: "no data directory, first start", noDataDir: true},
		{name: "no data directory", noDataDir: true, stored: "abc", wantID: "abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := cli.Delete(ctx, store.ClusterIDKey); err != nil {
				t.Fatal(err)
			}
			if c.stored != "" {
				if _, err := st.InitClusterID(ctx, c.stored); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(t.TempDir(), "data")
			file := filepath.Join(dir, ClusterIDFile)
			if c.local != "" {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(c.local+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{DataDir: dir, EtcdEndpoints: []string{"https://etcd-1:2379"}}, log: slog.New(slog.DiscardHandler), st: st}
			if c.noDataDir {
				s.cfg.DataDir = ""
			}
			id, err := s.checkCluster(ctx)
			stored, serr := st.ClusterID(ctx)
			if serr != nil && !errors.Is(serr, store.ErrNotFound) {
				t.Fatal(serr)
			}
			b, ferr := os.ReadFile(file)
			if ferr != nil && !errors.Is(ferr, fs.ErrNotExist) {
				t.Fatal(ferr)
			}
			local := strings.TrimSpace(string(b))
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("checkCluster = %q; want a refusal", id)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
				if stored != c.stored || local != c.local {
					t.Errorf("after a refusal the store has %q, the data dir %q; want them untouched (%q, %q)", stored, local, c.stored, c.local)
				}
				return
			}
			if err != nil {
				t.Fatalf("checkCluster: %v", err)
			}
			if id == "" || (c.wantID != "" && id != c.wantID) || stored != id {
				t.Errorf("checkCluster = %q with the store's %q; want %q in both", id, stored, c.wantID)
			}
			if !c.noDataDir && local != id {
				t.Errorf("the data dir records %q; want %q", local, id)
			}
		})
	}
}

// TestRunRefusesADataDirOfAnotherStore: Run stops at the check, before
// it serves or writes anything to the store.
func TestRunRefusesADataDirOfAnotherStore(t *testing.T) {
	s := newTestServer(t)
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.cfg.DataDir, ClusterIDFile), []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context(), ln)
	if err == nil || !strings.Contains(err.Error(), "has no cluster ID") || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("Run = %v; want a refusal naming --data-dir", err)
	}
	if _, err := os.Stat(filepath.Join(s.cfg.DataDir, AdminConfigFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s made before the refusal (%v)", AdminConfigFile, err)
	}
}
