package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/inference/autoscale"
	"github.com/gangway/gangway/internal/inference/gateway"
)

// gatewayScaler sizes autoscaled deployments from the gateway's view of
// their replicas: engine metrics (waiting requests, KV usage) and the
// gateway's own in-flight tokens and queued prefill, against each
// replica's capacity.
type gatewayScaler struct {
	gw *gateway.Gateway

	mu      sync.Mutex // guards scalers
	scalers map[string]*scalerEntry
}

type scalerEntry struct {
	min, max int
	grace    time.Duration
	a        *autoscale.Autoscaler
}

var _ controller.Scaler = (*gatewayScaler)(nil)

func newGatewayScaler(gw *gateway.Gateway) *gatewayScaler {
	return &gatewayScaler{gw: gw, scalers: map[string]*scalerEntry{}}
}

// Desired feeds one sample to the deployment's autoscaler and returns its
// decision.
func (s *gatewayScaler) Desired(d *api.Deployment, now time.Time) (int, string) {
	spec := &d.Spec
	s.mu.Lock()
	e := s.scalers[spec.Name]
	grace := spec.ScaleToZeroAfter.D()
	if e == nil || e.min != spec.MinReplicas || e.max != spec.MaxReplicas || e.grace != grace {
		a, err := autoscale.New(autoscale.Config{Min: spec.MinReplicas, Max: max(spec.MaxReplicas, 1), ScaleToZeroGrace: grace})
		if err != nil {
			s.mu.Unlock()
			return spec.MinReplicas, fmt.Sprintf("autoscaler: %v; holding the minimum", err)
		}
		e = &scalerEntry{min: spec.MinReplicas, max: spec.MaxReplicas, grace: grace, a: a}
		s.scalers[spec.Name] = e
	}
	s.mu.Unlock()

	// Requests the gateway holds (every replica full, or none ready) are
	// demand the replicas' figures do not show; at zero replicas they are
	// what starts one.
	var sample autoscale.Sample
	sample.Held, sample.HeldTokens = s.gw.Held(spec.ServedModelName)
	current := 0
	for _, r := range d.Status.Replicas {
		if r.Retiring {
			continue
		}
		current++
		if !r.Ready {
			sample.Replicas = append(sample.Replicas, autoscale.Replica{})
		}
	}
	for _, c := range s.gw.Replicas(spec.ServedModelName, now) {
		sample.Replicas = append(sample.Replicas, autoscale.Replica{
			Ready: true, Running: c.Engine.Running, Waiting: c.Engine.Waiting, KVUsage: c.Engine.KVUsage,
			InFlightTokens: c.InFlightTokens, PendingPrefillSeconds: c.PendingPrefill, CapacityTokens: c.Capacity.KVTokens,
		})
	}
	e.a.Observe(now, sample)
	dec := e.a.Decide(now, current)
	return dec.Desired, dec.Reason
}
