package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/inference/gateway"
)

func (s *Server) gatewayRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/gateway/stats", s.gatewayStats)
}

// gatewayStats answers this replica's gateway's counters per model (the
// dashboard's TTFT, TPOT and requests a second).
func (s *Server) gatewayStats(w http.ResponseWriter, r *http.Request) {
	out := api.GatewayStats{At: time.Now().UTC(), Models: []api.ModelStats{}}
	st, err := s.gw.Stats()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	for _, m := range st {
		out.Models = append(out.Models, api.ModelStats(m))
	}
	writeJSON(w, r, http.StatusOK, out)
}

// deploymentSource feeds the gateway the ready replicas of every
// deployment, by served model name, from the server's cache: the gateway
// asks ten times a second, which is no reason to read etcd.
type deploymentSource struct {
	c *store.Cache
}

var (
	_ gateway.Source      = deploymentSource{}
	_ gateway.ModelSource = deploymentSource{}
)

// Endpoints lists ready, not retiring replicas.
func (s deploymentSource) Endpoints(ctx context.Context) ([]gateway.Endpoint, error) {
	ds := s.c.Deployments()
	var out []gateway.Endpoint
	for _, d := range ds {
		if d.Status.Deleting {
			continue
		}
		for _, r := range d.Status.Replicas {
			if r.Ready && !r.Retiring && r.Endpoint != "" {
				out = append(out, gateway.Endpoint{URL: r.Endpoint, Model: d.Spec.ServedModelName})
			}
		}
	}
	return out, nil
}

// Models lists the served model names of every deployment not being
// deleted, replicas or not: the gateway holds a request for one with no
// ready replica (scaled to zero, starting) instead of answering 404.
func (s deploymentSource) Models(ctx context.Context) ([]string, error) {
	ds := s.c.Deployments()
	var out []string
	for _, d := range ds {
		if !d.Status.Deleting {
			out = append(out, d.Spec.ServedModelName)
		}
	}
	return out, nil
}
