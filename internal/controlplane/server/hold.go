package server

import (
	"fmt"
	"net/http"

	"github.com/gangway/gangway/internal/api"
)

// holdJob is POST /v1/jobs/{id}/hold: a waiting job is placed by nothing
// until released, as Slurm's scontrol hold. A job that runs is refused:
// holding it would not stop it.
func (s *Server) holdJob(w http.ResponseWriter, r *http.Request) {
	s.setHeld(w, r, true)
}

// releaseJob is POST /v1/jobs/{id}/release: a held job waits to be placed
// again.
func (s *Server) releaseJob(w http.ResponseWriter, r *http.Request) {
	s.setHeld(w, r, false)
}

func (s *Server) setHeld(w http.ResponseWriter, r *http.Request, held bool) {
	wh := who(r)
	j, err := s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if err := mayAct(wh, "job "+j.ID, j.Spec.User); err != nil {
			return err
		}
		if held && j.Status.Phase != api.JobPending {
			return fmt.Errorf("job %s is %s: only a waiting job can be held (cancel it, or hold it before it starts): %w", j.ID, j.Status.Phase, errConflict)
		}
		if !held && !j.IsHeld() {
			return fmt.Errorf("job %s is not held: %w", j.ID, errConflict)
		}
		j.Status.Held = held
		if !held {
			j.Status.Released = true
		}
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, j)
}
