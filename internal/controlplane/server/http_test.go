package server

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

func TestCheckCapacity(t *testing.T) {
	nodes := []*api.Node{
		{Name: "a", GPUs: make([]api.GPU, 8)},
		{Name: "b", GPUs: make([]api.GPU, 8)},
		{Name: "lost", GPUs: make([]api.GPU, 8), Status: api.NodeStatus{State: api.NodeLost}},
	}
	for _, c := range []struct {
		name      string
		spec      api.JobSpec
		wantField string // "" when it fits
		wantMsg   string
	}{
		{"fits", api.JobSpec{Ranks: 16, GPUsPerRank: 1}, "", ""},
		{"too many whole GPUs", api.JobSpec{Ranks: 17, GPUsPerRank: 1}, "spec.ranks", "17 ranks × 1 GPUs = 17 GPUs, but the cluster has 16"},
		{"rank wider than a node", api.JobSpec{Ranks: 1, GPUsPerRank: 9}, "spec.gpusPerRank", "the largest node has 8"},
		{"fractional ranks beyond the GPU count fit", api.JobSpec{Ranks: 80, GPUsPerRank: 1, GPUMilli: 200}, "", ""},
		{"fractional over capacity", api.JobSpec{Ranks: 81, GPUsPerRank: 1, GPUMilli: 200}, "spec.ranks", "81 ranks × 0.2 GPU = 16.2 GPUs, but the cluster has 16"},
	} {
		err := checkCapacity(&c.spec, nodes)
		if c.wantField == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var ve *api.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != c.wantField || !strings.Contains(ve.Fields[0].Msg, c.wantMsg) {
			t.Errorf("%s: err = %v; want %s: %q", c.name, err, c.wantField, c.wantMsg)
		}
	}
}

// TestBodiesKeepTheirBytes: the typed bodies that replaced maps encode as
// the maps did.
func TestBodiesKeepTheirBytes(t *testing.T) {
	for _, c := range []struct {
		typed, was any
	}{
		{api.Health{OK: true, Leader: true}, map[string]any{"ok": true, "leader": true}},
		{api.Health{OK: true}, map[string]any{"ok": true, "leader": false}},
		{api.Deleted{Deleted: "q"}, map[string]string{"deleted": "q"}},
	} {
		a, b := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(a, nil, 200, c.typed)
		writeJSON(b, nil, 200, c.was)
		if a.Body.String() != b.Body.String() {
			t.Errorf("%T encodes as %q; the map was %q", c.typed, a.Body, b.Body)
		}
	}
}

func TestWriteJSONIndentsOnlyForPeople(t *testing.T) {
	for _, c := range []struct {
		url, ua string
		indent  bool
	}{
		{"/v1/jobs", "Go-http-client/1.1", false},
		{"/v1/jobs", "curl/8.5.0", true},
		{"/v1/jobs", "Wget/1.21", true},
		{"/v1/jobs?pretty", "Go-http-client/1.1", true},
		{"/v1/jobs?pretty=0", "curl/8.5.0", true}, // curl still gets it
		{"/v1/jobs?pretty=false", "gangway", false},
	} {
		r := httptest.NewRequest("GET", c.url, nil)
		r.Header.Set("User-Agent", c.ua)
		w := httptest.NewRecorder()
		writeJSON(w, r, 200, map[string]int{"a": 1})
		if got := strings.Contains(w.Body.String(), "\n  "); got != c.indent {
			t.Errorf("%s as %s: indented %v; want %v (%q)", c.url, c.ua, got, c.indent, w.Body.String())
		}
	}
}
