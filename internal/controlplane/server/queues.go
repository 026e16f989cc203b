package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

func (s *Server) queueRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/queues", s.applyQueue)
	mux.HandleFunc("GET /v1/queues", s.listQueues)
	mux.HandleFunc("DELETE /v1/queues/{name}", s.deleteQueue)
	mux.HandleFunc("POST /v1/jobs/{id}/priority", s.setPriority)
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
	writeJSON(w, r, http.StatusOK, map[string]string{"deleted": name})
}

// liveJobs returns the jobs not yet finished, from the cache once it holds
// everything written before the call (up to the store revision it also
// returns): a queue's usage costs what runs and waits, not every job the
// store still keeps.
func (s *Server) liveJobs(ctx context.Context) ([]*api.Job, int64, error) {
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return nil, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cache.WaitRevision(wctx, rev); err != nil {
		return nil, 0, fmt.Errorf("server: the cache is behind the store: %w", err)
	}
	return s.cache.LiveJobs(), rev, nil
}

// checkQueue rejects a job for a queue nobody created (but "default").
func (s *Server) checkQueue(r *http.Request, name string) error {
	if name == api.DefaultQueue {
		return nil
	}
	_, err := s.st.Queue(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return api.ErrorForField("spec.queue", "no queue %q; create it with 'gangway queue set %s --guarantee N' or use the default queue", name, name)
	}
	return err
}

func (s *Server) setPriority(w http.ResponseWriter, r *http.Request) {
	p, err := strconv.Atoi(r.URL.Query().Get("priority"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("priority", "must be an integer"))
		return
	}
	j, err := s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if j.Status.Phase.Final() {
			return fmt.Errorf("job %s already %s: %w", j.ID, j.Status.Phase, errConflict)
		}
		j.Spec.Priority = p
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, j)
}
