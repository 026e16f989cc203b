package server

import (
	"fmt"
	"net/http"

	"github.com/gangway/gangway/internal/api"
)

// requeueJob is POST /v1/jobs/{id}/requeue, as Slurm's scontrol requeue:
// the running attempt is sent its checkpoint signal and stopped as a
// preemption stops one, and the job waits again under its ID, its attempt
// counted as ended for "requeued" (using up no restart). A job that
// waits already or has finished is refused, the latter saying to
// resubmit it.
func (s *Server) requeueJob(w http.ResponseWriter, r *http.Request) {
	wh := who(r)
	j, err := s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if err := mayAct(wh, "job "+j.ID, j.Spec.User); err != nil {
			return err
		}
		st := &j.Status
		switch {
		case st.Phase.Final():
			return fmt.Errorf("job %s has finished (%s); resubmit it: %w", j.ID, st.Phase, errConflict)
		case st.CancelRequested:
			return fmt.Errorf("job %s is being cancelled: %w", j.ID, errConflict)
		case st.Phase == api.JobPending || st.Phase == api.JobRestarting:
			return fmt.Errorf("job %s is %s, waiting to be placed: only a running job can be requeued: %w", j.ID, st.Phase, errConflict)
		case st.Phase == api.JobStopping:
			return fmt.Errorf("job %s is stopping already (%s); it is requeued or finishes once it has stopped: %w", j.ID, st.Reason, errConflict)
		}
		st.RequeueRequested = true
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("job requeue requested", "job_id", j.ID)
	writeJSON(w, r, http.StatusAccepted, j)
}

// signalJob is POST /v1/jobs/{id}/signal?signal=SIG, as Slurm's scancel
// --signal: every rank of the running attempt is sent SIG once (see
// api.ParseSignal for the names taken), and the job runs on. Refused for
// a job whose ranks are not all running yet, since a rank not started
// would miss it.
func (s *Server) signalJob(w http.ResponseWriter, r *http.Request) {
	sig, err := api.ParseSignal(r.URL.Query().Get("signal"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("signal", "%s", err))
		return
	}
	wh := who(r)
	j, err := s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if err := mayAct(wh, "job "+j.ID, j.Spec.User); err != nil {
			return err
		}
		a := j.Status.Current()
		switch {
		case j.Status.Phase.Final():
			return fmt.Errorf("job %s has finished (%s); nothing to signal: %w", j.ID, j.Status.Phase, errConflict)
		case j.Status.Phase != api.JobRunning || a == nil || a.Phase != api.AttemptRunning:
			return fmt.Errorf("job %s is %s: only a running job's ranks can be signalled: %w", j.ID, j.Status.Phase, errConflict)
		case a.Preflight != nil:
			return fmt.Errorf("job %s runs its placement's preflight test; signal it once its command runs: %w", j.ID, errConflict)
		case a.RunningAt.IsZero():
			return fmt.Errorf("job %s's ranks are still starting; signal it once every rank runs (gangway describe job %s): %w", j.ID, j.ID, errConflict)
		}
		a.Signal = sig
		a.SignalSeq = a.NextSignalSeq()
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("job signal requested", "job_id", j.ID, "signal", sig)
	writeJSON(w, r, http.StatusAccepted, j)
}
