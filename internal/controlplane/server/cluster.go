package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// ClusterIDFile, under DataDir, records the ID of the cluster (its store's
// store.ClusterIDKey) the data directory belongs to: its CA, its admin
// configuration and its leader session are that cluster's.
const ClusterIDFile = "cluster-id"

// checkCluster makes sure the data directory and the store belong to one
// cluster, and returns the cluster's ID. The first server to start on a
// store gives it an ID; a data directory records the ID of the store it
// first started with, and refuses any other store after: one that names
// another cluster, or none (an empty etcd, or another one, or a restored
// backup from before IDs were kept). Without a data directory there is
// nothing to compare.
func (s *Server) checkCluster(ctx context.Context) (string, error) {
	stored, err := s.st.ClusterID(ctx)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("server: %w", err)
	}
	if s.cfg.DataDir == "" {
		if stored != "" {
			return stored, nil
		}
		return s.initClusterID(ctx)
	}
	path := filepath.Join(s.cfg.DataDir, ClusterIDFile)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("server: read the cluster ID: %w", err)
	}
	local := strings.TrimSpace(string(b))
	switch {
	case local != "" && stored == "":
		return "", fmt.Errorf("server: --data-dir %s belongs to cluster %s (%s), but %s has no cluster ID: it is empty or another cluster's; "+
			"point --etcd-endpoints at the etcd of cluster %s, or start this store with a new --data-dir (or remove %s to adopt it)",
			s.cfg.DataDir, local, path, s.storeName(), local, path)
	case local != "" && local != stored:
		return "", fmt.Errorf("server: --data-dir %s belongs to cluster %s (%s), but %s belongs to cluster %s; "+
			"point --etcd-endpoints at the etcd of cluster %s, or give cluster %s a --data-dir of its own",
			s.cfg.DataDir, local, path, s.storeName(), stored, local, stored)
	case local != "":
		return local, nil
	}
	// A first start: of the cluster, or of this replica on it.
	id := stored
	if id == "" {
		if id, err = s.initClusterID(ctx); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("server: --data-dir: %w", err)
	}
	if err := pki.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("server: record the cluster ID: %w", err)
	}
	s.log.Info("cluster ID recorded", "cluster_id", id, "file", path)
	return id, nil
}

func (s *Server) initClusterID(ctx context.Context) (string, error) {
	id, err := s.st.InitClusterID(ctx, strings.ToLower(rand.Text()))
	if err != nil {
		return "", fmt.Errorf("server: %w", err)
	}
	return id, nil
}

// storeName names the store for messages, by the flag that chose it.
func (s *Server) storeName() string {
	if len(s.cfg.EtcdEndpoints) > 0 {
		return "the etcd at --etcd-endpoints " + strings.Join(s.cfg.EtcdEndpoints, ",")
	}
	return "the embedded etcd in " + filepath.Join(s.cfg.DataDir, "etcd")
}
