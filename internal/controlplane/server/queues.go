package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

func (s *Server) queueRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/queues", s.applyQueue)
	mux.HandleFunc("GET /v1/queues", s.listQueues)
	mux.HandleFunc("DELETE /v1/queues/{name}", s.deleteQueue)
}

// applyQueue creates a queue or replaces its spec.
func (s *Server) applyQueue(w http.ResponseWriter, r *http.Request) {
	spec, ok := decodeBody(w, r, api.DecodeQueueSpec)
	if !ok {
		return
	}
	q := &api.Queue{Spec: spec, CreatedAt: time.Now().UTC()}
	if old, err := s.st.Queue(r.Context(), spec.Name); err == nil {
		q.CreatedAt = old.CreatedAt
	}
	if err := s.st.PutQueue(r.Context(), q); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, q)
}

// listQueues returns every queue with its usage now; the default queue is
// listed even when nobody created it.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qs, err := s.st.Queues(ctx)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	jobs, _, err := s.liveJobs(ctx)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	byName := map[string]*api.Queue{}
	for _, q := range qs {
		byName[q.Spec.Name] = q
	}
	if byName[api.DefaultQueue] == nil {
		q := &api.Queue{Spec: api.QueueSpec{Name: api.DefaultQueue, Weight: 1}}
		byName[api.DefaultQueue] = q
		qs = append([]*api.Queue{q}, qs...)
	}
	for _, j := range jobs {
		q := byName[j.Spec.Queue]
		if q == nil {
			continue
		}
		switch j.Status.Phase {
		case api.JobRunning, api.JobStopping:
			q.Status.RunningJobs++
			q.Status.UsedGPUs += j.Spec.ShareGPUs()
		case api.JobPending, api.JobRestarting:
			q.Status.PendingJobs++
			q.Status.PendingGPUs += j.Spec.ShareGPUs()
		}
	}
	for _, q := range qs {
		q.Status.BorrowedGPUs = max(0, q.Status.UsedGPUs-q.Spec.GuaranteeGPUs)
	}
	writeJSON(w, r, http.StatusOK, api.QueueList{Queues: qs})
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	jobs, _, err := s.liveJobs(r.Context())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	for _, j := range jobs {
		if j.Spec.Queue == name {
			writeError(w, http.StatusConflict, fmt.Errorf("queue %s still has job %s (%s): %w", name, j.ID, j.Status.Phase, errConflict))
			return
		}
	}
	if err := s.st.DeleteQueue(r.Context(), name); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, api.Deleted{Deleted: name})
}

// queueSpec is the spec of the queue a job names: nil for the default
// queue when nobody created it, an error for any other queue nobody
// created.
func (s *Server) queueSpec(ctx context.Context, name string) (*api.QueueSpec, error) {
	q, err := s.st.Queue(ctx, name)
	switch {
	case err == nil:
		return &q.Spec, nil
	case errors.Is(err, store.ErrNotFound) && name == api.DefaultQueue:
		return nil, nil
	case errors.Is(err, store.ErrNotFound):
		return nil, api.ErrorForField("spec.queue", "no queue %q; create it with 'gangway queue set %s --guarantee N' or use the default queue", name, name)
	}
	return nil, err
}
