package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// admitDependency refuses a dependency on a job that does not exist, or
// one that can already never hold (afterok on a job that failed), as
// the reason a person can act on.
func (s *Server) admitDependency(ctx context.Context, spec *api.JobSpec) error {
	deps, err := api.ParseDependency(spec.Dependency)
	if err != nil {
		return api.ErrorForField("spec.dependency", "%s", err)
	}
	for _, d := range deps {
		for _, id := range d.Jobs {
			j, err := s.st.Job(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return api.ErrorForField("spec.dependency", "job %s does not exist", id)
			}
			if err != nil {
				return fmt.Errorf("read job %s for the dependency: %w", id, err)
			}
			if d.Holds(j.Status.Phase, len(j.Status.Attempts) > 0) == api.DepNever {
				return api.ErrorForField("spec.dependency", "%s:%s can never hold: job %s ended %s", d.Kind, id, id, j.Status.Phase)
			}
		}
	}
	return nil
}
