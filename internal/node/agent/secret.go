package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/gangway/gangway/internal/api/client"
)

// nodeSecretFile, in the data directory, holds the secret the server
// issued this node at its first registration (api.NodeSecretHeader). Only
// the agent reads it: mode 0600.
const nodeSecretFile = "node-secret"

// readNodeSecret returns the node secret kept in dataDir, "" if none is.
func readNodeSecret(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, nodeSecretFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("agent: read node secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeNodeSecret keeps secret in dataDir, replacing the file whole so
// that a crash leaves the old secret or the new one.
func writeNodeSecret(dataDir, secret string) error {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("write node secret: %w", err)
	}
	f, err := os.CreateTemp(dataDir, nodeSecretFile+".*")
	if err != nil {
		return fmt.Errorf("write node secret: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	// CreateTemp makes it 0600.
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write node secret: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write node secret: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write node secret: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dataDir, nodeSecretFile)); err != nil {
		return fmt.Errorf("write node secret: %w", err)
	}
	return nil
}

// isForbidden reports whether the server refused a request as not this
// node's to make (403).
func isForbidden(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusForbidden
}
