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
	if warn, err := s.guaranteeWarning(r.Context(), spec); err == nil && warn != "" {
		q.Warnings = []string{warn}
	}
	writeJSON(w, r, http.StatusOK, q)
}

// guaranteeWarning says so when the guarantees, spec's included, add up to
// more GPUs than the registered nodes have, or returns "". It warns rather
// than refuses: a cluster grows, nodes are lost and come back, and queues
// are often set before the agents join.
func (s *Server) guaranteeWarning(ctx context.Context, spec api.QueueSpec) (string, error) {
	if spec.GuaranteeGPUs == 0 {
		return "", nil
	}
	nodes, err := s.capacityNodes(ctx)
	if err != nil || len(nodes) == 0 {
		return "", err
	}
	total := 0
	for _, n := range nodes {
		if n.Status.State != api.NodeLost {
			total += len(n.GPUs)
		}
	}
	qs, err := s.st.Queues(ctx)
	if err != nil {
		return "", err
	}
	sum := spec.GuaranteeGPUs
	for _, q := range qs {
		if q.Spec.Name != spec.Name {
			sum += q.Spec.GuaranteeGPUs
		}
	}
	if sum <= total {
		return "", nil
	}
	const holds = "it can be met only once nodes join; until then the default queue (in no cohort) runs on what the guarantees leave idle and is preempted when they are asked for, and other queues in no cohort borrow nothing"
	if sum == spec.GuaranteeGPUs {
		return fmt.Sprintf("guaranteeGPUs: %d is more than the %d GPUs this cluster has now: %s", sum, total, holds), nil
	}
	return fmt.Sprintf("guaranteeGPUs: with queue %s's %d, the queues' guarantees add up to %d GPUs, more than the %d this cluster has now: %s",
		spec.Name, spec.GuaranteeGPUs, sum, total, holds), nil
}

// listQueues returns every queue with its usage now; the default queue is
// listed even when nobody created it. ?index=N&wait=D waits for a queue
// or a job to change after N; the index answered is the store's revision
// before the queues were read.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rev, err := s.blockedIndex(r, s.st.WaitQueueChange)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
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
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	writeJSON(w, r, http.StatusOK, api.QueueList{Index: rev, Queues: qs})
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
