package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// TestDeepBodiesRefusedBeforeDecoding sends the measured attack (100 KB of
// "[[[[…", which took the server past 3 GiB) as JSON and as YAML to every
// endpoint that decodes a body: each answers 400 naming the depth, and
// refusing it allocates under 1 MiB, so no decoder ran.
func TestDeepBodiesRefusedBeforeDecoding(t *testing.T) {
	h := newTestServer(t).routes()
	bodies := map[string][]byte{
		"json": []byte(strings.Repeat("[", 100_000)),
		"yaml": []byte("ranks: 1\ncommand:\n  - " + strings.Repeat("[", 100_000)),
	}
	for _, path := range []string{"/v1/jobs", "/v1/deployments", "/v1/queues", "/v1/agent/register", "/v1/agent/heartbeat"} {
		for kind, body := range bodies {
			w := httptest.NewRecorder()
			wh := &api.Who{Kind: kindUser, Name: "admin", Role: api.RoleAdmin}
			if strings.HasPrefix(path, "/v1/agent/") {
				wh = &api.Who{Kind: kindNode, Name: "n1"}
			}
			allocated := testenv.BytesAllocated(func() {
				h.ServeHTTP(w, asWho(httptest.NewRequest("POST", path, bytes.NewReader(body)), wh))
			})
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "levels deep; at most 64") {
				t.Errorf("POST %s (%s): %d %s; want 400 naming the depth", path, kind, w.Code, w.Body)
			}
			if allocated > 1<<20 {
				t.Errorf("POST %s (%s): refusing it allocated %d bytes; want under 1 MiB (did a decoder run?)", path, kind, allocated)
			}
		}
	}
}

// TestBodyCapUnderTransactionLimit: a spec of maxBody bytes fits the
// store's transaction with room for the job around it.
func TestBodyCapUnderTransactionLimit(t *testing.T) {
	if maxBody*4 > store.MaxRequestBytes {
		t.Errorf("maxBody %d is more than a quarter of the store's transaction limit %d", maxBody, store.MaxRequestBytes)
	}
}

// TestAdmissionRefusesBeforeTheStore: a checkpointDir outside the
// server's roots, and a command too big to copy into every rank, are
// refused (422, naming the field) before the store is read (absent here).
func TestAdmissionRefusesBeforeTheStore(t *testing.T) {
	s := newTestServer(t)
	h := s.routes()
	for _, c := range []struct{ body, field string }{
		{"ranks: 1\ncommand: [x]\ncheckpointDir: /etc\n", "spec.checkpointDir"},
		{`{"ranks": 1024, "command": ["sh", "-c", "` + strings.Repeat("x", 100<<10) + `"]}`, "spec.command"},
		{"ranks: 1\ncommand: [x]\nowner: deployment/llama\n", "spec.owner"}, // a user's job posing as a replica
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, asWho(httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(c.body)), &api.Who{Kind: kindUser, Name: "admin", Role: api.RoleAdmin}))
		if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), `"field":"`+c.field+`"`) {
			t.Errorf("%.40s: %d %.300s; want 422 naming %s", c.body, w.Code, w.Body, c.field)
		}
	}
	if len(s.cfg.CheckpointDirRoots) != 1 || s.cfg.CheckpointDirRoots[0] != s.cfg.CheckpointRoot {
		t.Errorf("CheckpointDirRoots = %q; want the checkpoint root %q alone", s.cfg.CheckpointDirRoots, s.cfg.CheckpointRoot)
	}
}
