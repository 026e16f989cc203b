package gateway

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/gangway/gangway/internal/hardware"
)

// Endpoint is one engine replica the gateway may route to.
type Endpoint struct {
	URL   string // base URL, e.g. http://10.0.0.7:8000
	Model string // served model name; "" means ask the engine's /v1/models
	// Engine is the replica's hardware, model and limits, which size its
	// capacity. nil means read them from the engine's /metrics
	// (gangway:engine_info, else vllm:cache_config_info).
	Engine *hardware.Config
}

// Source lists the endpoints to route to. The gateway calls it on every
// refresh; the control plane implements it from its deployments.
type Source interface {
	Endpoints(ctx context.Context) ([]Endpoint, error)
}

// Static is a fixed list of endpoints.
type Static []Endpoint

// Endpoints returns the list.
func (s Static) Endpoints(context.Context) ([]Endpoint, error) { return s, nil }

// ParseEndpoints reads a comma-separated list of base URLs. Each must be
// http or https with a host; a trailing slash is dropped.
func ParseEndpoints(list string) (Static, error) {
	var out Static
	for i, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("endpoint %d %q: want a base URL such as http://127.0.0.1:8000", i+1, raw)
		}
		out = append(out, Endpoint{URL: strings.TrimRight(raw, "/")})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no endpoints in %q", list)
	}
	return out, nil
}
