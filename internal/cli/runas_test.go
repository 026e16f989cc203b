package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// TestJobRunsAsItsUser: through the whole stack, a job submitted with a
// token mapped to uid 64011 runs as that uid and gid, and `gangway logs`
// as its owner shows it; another user may not read those logs.
func TestJobRunsAsItsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the agent to switch users; run the tests as root (CI does)")
	}
	cl := startCluster(t, 1, 1)
	// Ranks of another user must be able to walk to their task
	// directories (t.TempDir makes its directories 0700).
	for d := cl.dir; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			os.Chmod(d, 0o755)
		}
	}
	ctx := context.Background()
	uid, gid := 64011, 64012
	tok, err := cl.c.CreateToken(ctx, &api.TokenRequest{User: "alice", Role: api.RoleUser, UID: &uid, GID: &gid})
	if err != nil {
		t.Fatal(err)
	}
	alice := newTestClient(t, client.Config{Server: cl.url, Token: tok.Secret, CAFile: cl.admin.CAFile})
	id, err := alice.SubmitID(ctx, []byte(`{"ranks": 1, "command": ["sh", "-c", "id -u; id -g; id -G"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	var out strings.Builder
	if err := alice.Logs(ctx, id, client.LogQuery{}, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out.String()); len(got) != 3 || got[0] != "64011" || got[1] != "64012" || got[2] != "64012" {
		t.Errorf("the rank's id -u, -g, -G: %q; want 64011 64012 64012 (no root group)", out.String())
	}
	bobTok, err := cl.c.CreateToken(ctx, &api.TokenRequest{User: "bob", Role: api.RoleUser, UID: &gid})
	if err != nil {
		t.Fatal(err)
	}
	bob := newTestClient(t, client.Config{Server: cl.url, Token: bobTok.Secret, CAFile: cl.admin.CAFile})
	if err := bob.Logs(ctx, id, client.LogQuery{}, &out); err == nil || !strings.Contains(err.Error(), "belongs to alice") {
		t.Errorf("bob reads alice's logs: %v; want refused", err)
	}
}
