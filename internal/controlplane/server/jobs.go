package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
)

func (s *Server) jobRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/jobs", s.submitJob)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.cancelJob)
	mux.HandleFunc("GET /v1/jobs/{id}/logs", s.jobLogs)
	mux.HandleFunc("POST /v1/jobs/{id}/priority", s.setPriority)
	mux.HandleFunc("POST /v1/jobs/{id}/hold", s.holdJob)
	mux.HandleFunc("POST /v1/jobs/{id}/release", s.releaseJob)
	mux.HandleFunc("POST /v1/jobs/{id}/requeue", s.requeueJob)
	mux.HandleFunc("POST /v1/jobs/{id}/signal", s.signalJob)
}

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	b, err := readRaw(w, r) // the spec decoder runs api.CheckShape first
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	k, err := keyOf(r, b)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	spec, err := api.DecodeJobSpec(b)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if code, err := s.admitJob(ctx, who(r), &spec); err != nil {
		// The first try of a retried submission passed; a change since
		// (a queue's limits, a node gone) does not undo what it created.
		if k != nil && s.replay(w, r, k) {
			return
		}
		writeError(w, code, err)
		return
	}
	var claim *store.Claim
	if k != nil {
		if claim, err = s.st.ClaimKey(ctx, k.owner, k.key, k.hash, http.StatusCreated, time.Now()); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
	}
	if spec.Array != "" {
		s.submitArray(w, r, spec, claim, k)
		return
	}
	j, err := s.createJob(ctx, spec, claim)
	if err != nil {
		s.refuse(w, r, k, err)
		return
	}
	s.log.Info("job submitted", "job_id", j.ID, "name", spec.Name, "ranks", spec.Ranks)
	writeJSON(w, r, http.StatusCreated, j)
}

// admitJob checks a submission against what the cluster admits, and may
// fill in its spec (its owner, its queue's defaults); on a refusal it
// returns the status to answer.
func (s *Server) admitJob(ctx context.Context, wh *api.Who, spec *api.JobSpec) (int, error) {
	if err := admitOwner(spec); err != nil {
		return http.StatusUnprocessableEntity, err
	}
	if err := admitCheckpointDir(spec, s.cfg.CheckpointDirRoots); err != nil {
		return http.StatusUnprocessableEntity, err
	}
	if err := admitSize(spec); err != nil {
		return http.StatusUnprocessableEntity, err
	}
	if err := s.admitDependency(ctx, spec); err != nil {
		return admitStatus(err), err
	}
	if err := s.admitUser(ctx, wh, spec); err != nil {
		return admitStatus(err), err
	}
	nodes, err := s.capacityNodes(ctx)
	if err != nil {
		return statusFor(err), err
	}
	if err := checkCapacity(spec, nodes); err != nil {
		return http.StatusUnprocessableEntity, err
	}
	if err := admitParallelism(spec, nodes, s.catalog); err != nil {
		return http.StatusUnprocessableEntity, err
	}
	return 0, nil
}

// passTakeWait bounds how long a new job or a heartbeat's rank statuses
// wait for the controller's next pass to take them before the handler
// stores them itself.
const passTakeWait = 5 * time.Millisecond

// createJob stores a new job, taking claim's idempotency key with it (nil:
// none; store.ErrKeyTaken: another submission took it, and nothing was
// stored). On the leader it goes through the controller's next pass,
// which stores it already placed, in one write, when it can start now
// (otherwise pending, as a plain create would); elsewhere, or when no pass
// takes it soon, it is stored here.
func (s *Server) createJob(ctx context.Context, spec api.JobSpec, claim *store.Claim) (*api.Job, error) {
	ctl := s.controller()
	for ctl == nil {
		j, err := s.st.NewJob(ctx, spec, time.Now())
		if err != nil {
			return nil, err
		}
		// A conflict is an ID taken: a store whose jobs are ahead of its
		// sequence. The next ID may be free.
		switch err := s.st.CreateJobAs(ctx, j, claim); {
		case err == nil:
			return j, nil
		case !errors.Is(err, store.ErrConflict) || ctx.Err() != nil:
			return nil, err
		}
	}
	j, err := s.st.NewJob(ctx, spec, time.Now())
	if err != nil {
		return nil, err
	}
	stored, err := ctl.Submit(ctx, []*api.Job{j}, claim, passTakeWait)
	switch {
	case err == nil:
		return stored[0], nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, store.ErrKeyTaken):
		return nil, err
	case !errors.Is(err, controller.ErrNotTaken):
		s.log.Warn("submitting through the controller failed; storing the job directly", "job_id", j.ID, "err", err)
	}
	// Not taken, or its outcome unknown: an ID that exists now was stored
	// by the pass (and its key with it: ErrKeyTaken, whose record names
	// this job).
	switch err := s.st.CreateJobAs(ctx, j, claim); {
	case err == nil:
		return j, nil
	case !errors.Is(err, store.ErrConflict):
		return nil, err
	}
	return s.st.Job(ctx, j.ID)
}

// submitArray stores one job per index of spec.Array (validated already),
// taking claim's idempotency key (nil: none) with it.
func (s *Server) submitArray(w http.ResponseWriter, r *http.Request, spec api.JobSpec, claim *store.Claim, k *keyed) {
	a, err := api.ParseArray(spec.Array)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("spec.array", "%s", err))
		return
	}
	jobs, err := s.st.CreateJobs(r.Context(), spec, a, time.Now(), claim)
	switch {
	case errors.Is(err, store.ErrUnfinished):
		// Committed: its IDs are final, and the leader writes the rest.
		s.log.Warn("job array committed but not all written; the leader's sweep writes the rest", "array_id", jobs[0].ID, "err", err)
	case err != nil:
		s.refuse(w, r, k, err)
		return
	}
	out := arraySubmission(jobs[0].ID, len(jobs))
	s.log.Info("job array submitted", "array_id", out.ArrayID, "name", spec.Name, "tasks", out.Count)
	writeJSON(w, r, http.StatusCreated, out)
}

// arraySubmission is the answer for an array of count tasks from first.
func arraySubmission(first string, count int) api.ArraySubmission {
	out := api.ArraySubmission{ArrayID: first, Count: count, Jobs: make([]string, count)}
	n, _ := strconv.ParseInt(first, 10, 64)
	for i := range out.Jobs {
		out.Jobs[i] = strconv.FormatInt(n+int64(i), 10)
	}
	return out
}

// findJob reads job id from the store or, once retention has deleted it,
// from this server's job archive (Archived set). A job in neither, under
// an ID the sequence gave out, gets an error saying retention may have
// deleted it.
func (s *Server) findJob(ctx context.Context, id string) (*api.JobDetail, error) {
	j, err := s.st.Job(ctx, id)
	if err == nil {
		return &api.JobDetail{Job: *j, Stragglers: s.stragglersOf(ctx, id)}, nil
	}
	if !errors.Is(err, store.ErrNotFound) || !s.st.Issued(ctx, id) {
		return nil, err
	}
	const deleted = "if it ran, it has been deleted: the server keeps finished jobs for --job-retention and at most --max-finished-jobs of them"
	if s.archive == nil {
		return nil, fmt.Errorf("%w (%s; --job-archive keeps the rest)", err, deleted)
	}
	d, aerr := s.archive.Lookup(id)
	if aerr != nil {
		return nil, fmt.Errorf("job %s is no longer in the store, and reading the job archive failed: %w", id, aerr)
	}
	if d == nil {
		return nil, fmt.Errorf("%w (%s; this server's --job-archive %s does not hold it either: another replica that led then may)", err, deleted, s.archive.Path())
	}
	d.Archived = true
	return d, nil
}

// getJob answers a job's detail. ?index=N&wait=D waits for the job or its
// ranks, checkpoints, progress or stragglers to change after N; the
// X-Gangway-Index answered is the store's revision before they were read.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	rev, err := s.blockedIndex(r, func(ctx context.Context, after int64, wait time.Duration) (int64, error) {
		return s.st.WaitJobChange(ctx, id, after, wait)
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	d, err := s.findJob(ctx, id)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if !seesSecrets(who(r), d.Job.Spec.User) {
		d.Job = *redactJob(&d.Job)
	}
	if d.Archived {
		writeJSON(w, r, http.StatusOK, d)
		return
	}
	if d.Ranks, err = s.st.RankStatuses(ctx, id); err == nil {
		if d.Checkpoints, err = s.st.Checkpoints(ctx, id); err == nil {
			d.Progress, err = s.st.Progress(ctx, id)
		}
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, d)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	if a := r.URL.Query().Get("array"); a == "1" || a == "true" {
		s.cancelArray(w, r)
		return
	}
	j, err := s.changeOwnJob(r, func(j *api.Job) { j.Status.CancelRequested = true })
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusAccepted, j)
}

// changeOwnJob applies change to the unfinished job the request names,
// if the caller owns it (or is an admin).
func (s *Server) changeOwnJob(r *http.Request, change func(*api.Job)) (*api.Job, error) {
	wh := who(r)
	return s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if err := mayAct(wh, "job "+j.ID, j.Spec.User); err != nil {
			return err
		}
		if j.Status.Phase.Final() {
			return fmt.Errorf("job %s already %s: %w", j.ID, j.Status.Phase, errConflict)
		}
		change(j)
		return nil
	})
}

// jobCanceller is what cancelJobs needs of the store.
type jobCanceller interface {
	Job(ctx context.Context, id string) (*api.Job, error)
	UpdateJobWrite(j *api.Job) store.JobWrite
	Commit(ctx context.Context, ws []store.JobWrite) ([]int64, []error)
}

// cancelJobs asks each unfinished job of ids to stop, in one transaction
// per try. A job that changed since it was read (a conflict) is read again
// and retried, up to five tries; every other job's outcome is settled on
// the try that first saw it, so a job this call cancelled and the
// controller then finished still counts as cancelled, not as done. IDs not
// found (deleted by retention) count as neither.
func cancelJobs(ctx context.Context, st jobCanceller, ids []string) (cancelled, done int, err error) {
	const tries = 5
	for try := 0; len(ids) > 0; try++ {
		if try == tries {
			return cancelled, done, fmt.Errorf("jobs %s changed on each of %d tries to cancel them: %w", strings.Join(ids, ", "), tries, store.ErrConflict)
		}
		var ws []store.JobWrite
		var wIDs []string
		for _, id := range ids {
			t, err := st.Job(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return cancelled, done, err
			}
			switch {
			case t.Status.Phase.Final():
				done++
			case t.Status.CancelRequested:
				cancelled++
			default:
				t.Status.CancelRequested = true
				ws = append(ws, st.UpdateJobWrite(t))
				wIDs = append(wIDs, id)
			}
		}
		_, errs := st.Commit(ctx, ws)
		var changed []string
		for i, err := range errs {
			switch {
			case err == nil:
				cancelled++
			case errors.Is(err, store.ErrConflict):
				changed = append(changed, wIDs[i])
			default:
				return cancelled, done, err
			}
		}
		ids = changed
	}
	return cancelled, done, nil
}

// cancelArray cancels every unfinished task of the array job {id} belongs
// to, in shared transactions.
func (s *Server) cancelArray(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	j, err := s.st.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// The task that names the array may have finished and been
		// deleted by retention while later ones still run or wait.
		if live, _, lerr := s.liveJobs(ctx); lerr == nil {
			for _, l := range live {
				if l.Array != nil && l.Array.ID == id {
					j, err = l, nil
					break
				}
			}
		}
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if j.Array == nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("array", "job %s is not part of an array", j.ID))
		return
	}
	// An array's tasks share their submitter.
	if err := mayAct(who(r), "array "+j.Array.ID, j.Spec.User); err != nil {
		writeError(w, http.StatusForbidden, err)
		return
	}
	// An array whose submitter crashed part-way is written whole first,
	// or its tasks written later would escape the cancel.
	if err := s.st.FinishArray(ctx, j.Array.ID); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	first, err := strconv.ParseInt(j.Array.ID, 10, 64)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("array id %q: %w", j.Array.ID, err))
		return
	}
	out := api.ArrayCancel{ArrayID: j.Array.ID}
	ids := make([]string, j.Array.Count)
	for k := range ids {
		ids[k] = strconv.FormatInt(first+int64(k), 10)
	}
	if out.Cancelled, out.Done, err = cancelJobs(ctx, s.st, ids); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("job array cancelled", "array_id", out.ArrayID, "tasks", out.Cancelled)
	writeJSON(w, r, http.StatusAccepted, out)
}

// liveJobs returns the jobs not yet finished, from the cache once it holds
// everything written before the call (up to the store revision it also
// returns): a queue's usage costs what runs and waits, not every job the
// store still keeps.
func (s *Server) liveJobs(ctx context.Context) ([]*api.Job, int64, error) {
	rev, err := s.cacheCaughtUp(ctx)
	if err != nil {
		return nil, 0, err
	}
	return s.cache.LiveJobs(), rev, nil
}

func (s *Server) setPriority(w http.ResponseWriter, r *http.Request) {
	p, err := strconv.Atoi(r.URL.Query().Get("priority"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("priority", "must be an integer"))
		return
	}
	j, err := s.changeOwnJob(r, func(j *api.Job) { j.Spec.Priority = p })
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, j)
}
