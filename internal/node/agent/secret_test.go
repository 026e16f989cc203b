package agent

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

func TestNodeSecretKeptPrivately(t *testing.T) {
	dir := t.TempDir()
	if s, err := readNodeSecret(dir); err != nil || s != "" {
		t.Fatalf("no file: %q, %v; want none", s, err)
	}
	for _, secret := range []string{"first", "second"} {
		if err := writeNodeSecret(dir, secret); err != nil {
			t.Fatal(err)
		}
		if s, err := readNodeSecret(dir); err != nil || s != secret {
			t.Fatalf("read back %q, %v; want %q", s, err, secret)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, nodeSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the data dir; want the secret alone", len(ents))
	}
}

// TestHeartbeatRefusedRegistersAgain: a server that refuses the agent's
// node secret (another agent claimed the node while it was lost), or has
// the node lost, sends the agent back to registering; its heartbeats
// carry the secret it was started with.
func TestHeartbeatRefusedRegistersAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"secret refused", http.StatusForbidden, `{"error":"not this node's"}`},
		{"node lost", http.StatusOK, `{"reregister":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = append(got, r.Header.Get(api.NodeSecretHeader))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := client.New(client.Config{Server: srv.URL, NodeSecret: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseIdleConnections()
			a := &Agent{cfg: Config{Name: "n1"}, server: c, tasks: map[string]*task{}, kick: make(chan struct{}, 1)}
			a.lease.HeartbeatInterval = api.Duration(time.Hour)
			a.log = slog.New(slog.DiscardHandler)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a.beatUntilReregister(ctx) // returns at the answer, not after an hour
			if ctx.Err() != nil {
				t.Fatal("beatUntilReregister did not return")
			}
			if len(got) != 1 || got[0] != "s1" {
				t.Errorf("heartbeats presented %q; want one with the agent's secret", got)
			}
		})
	}
}
