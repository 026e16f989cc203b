package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/inference/openai"
)

// vllmPaths are the POST paths a vLLM server serves outside /v1, routed
// like those under it.
var vllmPaths = []string{openai.PathTokenize, "/detokenize", "/score", "/rerank", "/v2/rerank", "/pooling", "/classify", "/invocations"}

// getPaths are the paths the gateway answers GET on, for 405s.
var getPaths = []string{openai.PathModels, openai.PathHealth, openai.PathMetrics}

// noRoute answers what no route took: 405 with Allow for a path the
// gateway serves with another method, 404 otherwise, in OpenAI's shape.
func noRoute(w http.ResponseWriter, r *http.Request) {
	path, allow := r.URL.Path, ""
	switch {
	case slices.Contains(getPaths, path) || strings.HasPrefix(path, openai.PathModels+"/"):
		allow = http.MethodGet
	case strings.HasPrefix(path, "/v1/") || slices.Contains(vllmPaths, path):
		allow = http.MethodPost
	}
	openai.WriteNoRoute(w, r, allow)
}

// models lists the models a caller with key may use, each as its
// replicas' /v1/models describes it (the first replica that answered),
// with what the gateway knows where none has.
func (g *Gateway) models(key KeyInfo) []openai.Model {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Models scaled to zero are served too: their requests are held.
	set := maps.Clone(g.known)
	for m := range g.pools {
		set[m] = struct{}{}
	}
	byModel := map[string]openai.Model{}
	for _, e := range g.eps {
		if e.info != nil && e.model != "" {
			if _, ok := byModel[e.model]; !ok {
				info := *e.info
				info.ID = e.model // the name clients send, as the source knows it
				byModel[e.model] = info
			}
		}
	}
	out := []openai.Model{}
	for _, m := range slices.Sorted(maps.Keys(set)) {
		if !key.allows(m) {
			continue
		}
		info, ok := byModel[m]
		if !ok {
			info = openai.Model{ID: m, Created: g.started.Unix(), OwnedBy: "gangway", Root: m}
		}
		info.Object = "model"
		out = append(out, info)
	}
	return out
}

func (g *Gateway) handleModels(w http.ResponseWriter, r *http.Request) {
	key, _, ok := g.authenticate(w, r, time.Now())
	if !ok {
		return
	}
	openai.WriteJSON(w, http.StatusOK, openai.ModelList{Object: "list", Data: g.models(key)})
}

// handleModel is GET /v1/models/{id}; model ids may hold slashes
// (Qwen/Qwen3-8B).
func (g *Gateway) handleModel(w http.ResponseWriter, r *http.Request) {
	key, _, ok := g.authenticate(w, r, time.Now())
	if !ok {
		return
	}
	id := r.PathValue("id")
	for _, m := range g.models(key) {
		if m.ID == id {
			openai.WriteJSON(w, http.StatusOK, m)
			return
		}
	}
	openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", id))
}
