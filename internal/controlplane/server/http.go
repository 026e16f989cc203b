package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// maxBody bounds request bodies.
const maxBody = 4 << 20

// maxWritten bounds the memory of rank statuses already stored.
const maxWritten = 200000

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		leader := s.leader
		s.mu.Unlock()
		writeJSON(w, r, http.StatusOK, map[string]any{"ok": true, "leader": leader})
	})
	mux.HandleFunc("POST /v1/jobs", s.submitJob)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.cancelJob)
	mux.HandleFunc("GET /v1/jobs/{id}/logs", s.jobLogs)
	mux.HandleFunc("GET /v1/nodes", s.listNodes)
	mux.HandleFunc("GET /v1/nodes/{name}", s.getNode)
	mux.HandleFunc("POST /v1/nodes/{name}/{action}", s.nodeAction)
	s.deploymentRoutes(mux)
	s.queueRoutes(mux)
	mux.HandleFunc("POST /v1/agent/register", s.register)
	mux.HandleFunc("POST /v1/agent/heartbeat", s.heartbeat)
	mux.HandleFunc("GET /v1/agent/assignments", s.assignments)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// writeJSON writes v compact, or indented for a person: ?pretty, or a
// curl or wget client (as the Kubernetes API server does). Indenting every
// answer cost the CLI and agents, which parse it, a second encoding pass.
// r may be nil (compact).
func writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	if r != nil && pretty(r) {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func pretty(r *http.Request) bool {
	if v, ok := r.URL.Query()["pretty"]; ok && (len(v) == 0 || v[0] != "0" && v[0] != "false") {
		return true
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl/") || strings.HasPrefix(ua, "Wget/")
}

func writeError(w http.ResponseWriter, code int, err error) {
	body := api.ErrorBody{Error: err.Error()}
	var ve *api.ValidationError
	if errors.As(err, &ve) {
		body.Fields = ve.Fields
	}
	writeJSON(w, nil, code, body)
}

func statusFor(err error) int {
	switch {
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, errConflict):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

var errConflict = errors.New("conflict")

// decodeBody reads the request body and decodes it with decode; on failure
// it has written the error response and ok is false.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (v T, ok bool) {
	b, err := readBody(w, r)
	if err == nil {
		v, err = decode(b)
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return v, false
	}
	return v, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, &api.ValidationError{Fields: []*api.FieldError{{Msg: "reading body: " + err.Error()}}}
	}
	return b, nil
}

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	spec, ok := decodeBody(w, r, api.DecodeJobSpec)
	if !ok {
		return
	}
	nodes, err := s.capacityNodes(r.Context())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if err := checkCapacity(&spec, nodes); err != nil {
		writeError(w, http.StatusUnprocessableEntity, err)
		return
	}
	if err := s.checkQueue(r, spec.Queue); err != nil {
		writeError(w, http.StatusUnprocessableEntity, err)
		return
	}
	if err := admitParallelism(&spec, nodes, s.catalog); err != nil {
		writeError(w, http.StatusUnprocessableEntity, err)
		return
	}
	if spec.Array != "" {
		s.submitArray(w, r, spec)
		return
	}
	j, err := s.createJob(r.Context(), spec)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("job submitted", "job_id", j.ID, "name", spec.Name, "ranks", spec.Ranks)
	writeJSON(w, r, http.StatusCreated, j)
}

// passTakeWait bounds how long a new job or a heartbeat's rank statuses
// wait for the controller's next pass to take them before the handler
// stores them itself.
const passTakeWait = 5 * time.Millisecond

// createJob stores a new job. On the leader it goes through the
// controller's next pass, which stores it already placed, in one write,
// when it can start now (otherwise pending, as a plain create would);
// elsewhere, or when no pass takes it soon, it is stored here.
func (s *Server) createJob(ctx context.Context, spec api.JobSpec) (*api.Job, error) {
	ctl := s.controller()
	if ctl == nil {
		return s.st.CreateJob(ctx, spec, time.Now())
	}
	j, err := s.st.NewJob(ctx, spec, time.Now())
	if err != nil {
		return nil, err
	}
	stored, err := ctl.Submit(ctx, []*api.Job{j}, passTakeWait)
	if err == nil {
		return stored[0], nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if !errors.Is(err, controller.ErrNotTaken) {
		s.log.Warn("submitting through the controller failed; storing the job directly", "job_id", j.ID, "err", err)
	}
	// Not taken, or its outcome unknown: an ID that exists now was stored
	// by the pass.
	switch err := s.st.CreateJobAs(ctx, j); {
	case err == nil:
		return j, nil
	case !errors.Is(err, store.ErrConflict):
		return nil, err
	}
	return s.st.Job(ctx, j.ID)
}

// submitArray stores one job per index of spec.Array (validated already).
func (s *Server) submitArray(w http.ResponseWriter, r *http.Request, spec api.JobSpec) {
	a, err := api.ParseArray(spec.Array)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("spec.array", "%s", err))
		return
	}
	jobs, err := s.st.CreateJobs(r.Context(), spec, a, time.Now())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	out := api.ArraySubmission{ArrayID: jobs[0].ID, Count: len(jobs), Jobs: make([]string, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = j.ID
	}
	s.log.Info("job array submitted", "array_id", out.ArrayID, "name", spec.Name, "tasks", out.Count)
	writeJSON(w, r, http.StatusCreated, out)
}

// checkCapacity rejects a gang that no set of registered nodes could ever
// hold. With no nodes registered yet, everything waits.
func checkCapacity(spec *api.JobSpec, nodes []*api.Node) error {
	if len(nodes) == 0 {
		return nil
	}
	largest, total := 0, 0
	for _, n := range nodes {
		if n.Status.State == api.NodeLost {
			continue
		}
		largest = max(largest, len(n.GPUs))
		total += len(n.GPUs)
	}
	ve := &api.ValidationError{}
	if spec.GPUsPerRank > largest {
		ve.Fields = append(ve.Fields, &api.FieldError{Field: "spec.gpusPerRank",
			Msg: fmt.Sprintf("%d GPUs per rank, but the largest node has %d", spec.GPUsPerRank, largest)})
	} else if spec.RanksPerNode > 0 && spec.RanksPerNode*spec.GPUsPerRank > largest {
		ve.Fields = append(ve.Fields, &api.FieldError{Field: "spec.ranksPerNode",
			Msg: fmt.Sprintf("%d ranks × %d GPUs per node, but the largest node has %d", spec.RanksPerNode, spec.GPUsPerRank, largest)})
	} else if need := spec.MilliGPUs(); need > int64(total)*1000 {
		per := fmt.Sprintf("%d GPUs", spec.GPUsPerRank)
		if spec.GPUMilli > 0 || spec.MIGProfile != "" {
			per = fmt.Sprintf("%.3g GPU", float64(need)/float64(spec.Ranks)/1000)
		}
		ve.Fields = append(ve.Fields, &api.FieldError{Field: "spec.ranks",
			Msg: fmt.Sprintf("%d ranks × %s = %.4g GPUs, but the cluster has %d", spec.Ranks, per, float64(need)/1000, total)})
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}

// blockingParams reads ?index=N&wait=D (index 0 when absent: answer at
// once; wait 30s by default, at most 5m).
func blockingParams(r *http.Request) (int64, time.Duration, error) {
	q := r.URL.Query()
	wait := 30 * time.Second
	if q.Get("index") == "" {
		return 0, wait, nil
	}
	idx, err := strconv.ParseInt(q.Get("index"), 10, 64)
	if err != nil || idx < 0 {
		return 0, 0, &api.ValidationError{Fields: []*api.FieldError{{Field: "index", Msg: "must be a non-negative integer"}}}
	}
	if ws := q.Get("wait"); ws != "" {
		if wait, err = time.ParseDuration(ws); err != nil || wait < 0 {
			return 0, 0, &api.ValidationError{Fields: []*api.FieldError{{Field: "wait", Msg: "must be a duration such as 30s"}}}
		}
		wait = min(wait, 5*time.Minute)
	}
	return idx, wait, nil
}

// blockingIndex implements ?index=N&wait=D: wait until something under
// prefix changed after N.
func (s *Server) blockingIndex(r *http.Request, prefix string) error {
	idx, wait, err := blockingParams(r)
	if err != nil || idx == 0 {
		return err
	}
	_, err = s.st.WaitChange(r.Context(), prefix, idx, wait)
	return err
}

// listJobs lists jobs, oldest first: all of them, or with ?live=1 only
// those not finished (from the cache, as squeue shows), and with
// ?limit=N only the newest N (by submission).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var fields []*api.FieldError
	live := false
	switch v := q.Get("live"); v {
	case "", "0", "false":
	case "1", "true":
		live = true
	default:
		fields = append(fields, &api.FieldError{Field: "live", Msg: fmt.Sprintf("%q: want true or false", v)})
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fields = append(fields, &api.FieldError{Field: "limit", Msg: fmt.Sprintf("%q: want a positive integer", v)})
		}
		limit = n
	}
	if len(fields) > 0 {
		writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: fields})
		return
	}
	if err := s.blockingIndex(r, store.JobsPrefix); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var jobs []*api.Job
	var rev int64
	var err error
	switch {
	case live:
		jobs, rev, err = s.liveJobs(r.Context())
		if limit > 0 && len(jobs) > limit {
			jobs = jobs[len(jobs)-limit:]
		}
	case limit > 0:
		jobs, rev, err = s.st.RecentJobs(r.Context(), limit)
	default:
		jobs, rev, err = s.st.Jobs(r.Context())
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	writeJSON(w, r, http.StatusOK, api.JobList{Index: rev, Jobs: jobs})
}

// findJob reads job id from the store or, once retention has deleted it,
// from this server's job archive (Archived set). A job in neither, under
// an ID the sequence gave out, gets an error saying retention may have
// deleted it.
func (s *Server) findJob(ctx context.Context, id string) (*api.JobDetail, error) {
	j, err := s.st.Job(ctx, id)
	if err == nil {
		return &api.JobDetail{Job: *j}, nil
	}
	if !errors.Is(err, store.ErrNotFound) || !s.st.Issued(ctx, id) {
		return nil, err
	}
	const deleted = "if it ran, it has been deleted: the server keeps finished jobs for --job-retention and at most --max-finished-jobs of them"
	if s.cfg.JobArchive == "" {
		return nil, fmt.Errorf("%w (%s; --job-archive keeps the rest)", err, deleted)
	}
	d, aerr := readArchived(s.cfg.JobArchive, id)
	if aerr != nil {
		return nil, fmt.Errorf("job %s is no longer in the store, and reading the job archive failed: %w", id, aerr)
	}
	if d == nil {
		return nil, fmt.Errorf("%w (%s; this server's --job-archive %s does not hold it either: another replica that led then may)", err, deleted, s.cfg.JobArchive)
	}
	d.Archived = true
	return d, nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d, err := s.findJob(ctx, r.PathValue("id"))
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if d.Archived {
		writeJSON(w, r, http.StatusOK, d)
		return
	}
	id := d.Job.ID
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
	j, err := s.st.ModifyJob(r.Context(), r.PathValue("id"), func(j *api.Job) error {
		if j.Status.Phase.Final() {
			return fmt.Errorf("job %s already %s: %w", j.ID, j.Status.Phase, errConflict)
		}
		j.Status.CancelRequested = true
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusAccepted, j)
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

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if err := s.blockingIndex(r, store.NodesPrefix); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	nodes, rev, err := s.st.Nodes(r.Context())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	for _, n := range nodes {
		s.fillHeartbeat(n)
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	writeJSON(w, r, http.StatusOK, api.NodeList{Index: rev, Nodes: nodes})
}

func (s *Server) fillHeartbeat(n *api.Node) {
	if at, _ := s.liveness().Get(n.Name); !at.IsZero() {
		n.Status.LastHeartbeat = at
	}
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.st.Node(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.fillHeartbeat(n)
	writeJSON(w, r, http.StatusOK, n)
}

func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	var fn func(n *api.Node)
	switch action {
	case "cordon":
		fn = func(n *api.Node) { n.Status.Cordoned = true }
	case "uncordon":
		fn = func(n *api.Node) { n.Status.Cordoned, n.Status.Draining = false, false }
	case "drain":
		fn = func(n *api.Node) { n.Status.Cordoned, n.Status.Draining = true, true }
	default:
		writeError(w, http.StatusNotFound, fmt.Errorf("unknown node action %q (want cordon, uncordon or drain)", action))
		return
	}
	n, err := s.st.ModifyNode(r.Context(), r.PathValue("name"), func(n *api.Node) error { fn(n); return nil })
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("node "+action, "node", n.Name)
	writeJSON(w, r, http.StatusOK, n)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(w, r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var req api.RegisterRequest
	if err := json.Unmarshal(b, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("register: %w", err))
		return
	}
	n := req.Node
	if !api.ValidNodeName(n.Name) {
		writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: []*api.FieldError{{Field: "node.name", Msg: fmt.Sprintf("%q: use letters, digits, '-', '_' and '.'", n.Name)}}})
		return
	}
	if n.Address == "" {
		writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: []*api.FieldError{{Field: "node.address", Msg: "missing"}}})
		return
	}
	ctx := r.Context()
	now := time.Now()
	for {
		old, err := s.st.Node(ctx, n.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			writeError(w, statusFor(err), err)
			return
		}
		reg := n
		reg.Status = api.NodeStatus{State: api.NodeReady, RegisteredAt: now}
		if old != nil {
			// Keep what operators set.
			reg.Status.Cordoned, reg.Status.Draining = old.Status.Cordoned, old.Status.Draining
			reg.ModRevision = old.ModRevision
		}
		err = s.st.PutNode(ctx, &reg)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		break
	}
	s.liveness().Beat(n.Name, 0, now)
	s.log.Info("node registered", "node", n.Name, "address", n.Address, "gpus", len(n.GPUs))
	writeJSON(w, r, http.StatusOK, api.RegisterResponse{
		HeartbeatInterval: api.Duration(s.cfg.HeartbeatInterval),
		// Fence a heartbeat before the server could declare the node lost,
		// so its ranks are dead before any replacement starts.
		FenceAfter:     api.Duration(s.cfg.NodeTimeout - s.cfg.HeartbeatInterval),
		CheckpointRoot: s.cfg.CheckpointRoot,
	})
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(w, r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var hb api.Heartbeat
	if err := fastjson.Unmarshal(b, &hb); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("heartbeat: %w", err))
		return
	}
	ctx := r.Context()
	n, err := s.node(ctx, hb.Node)
	if errors.Is(err, store.ErrNotFound) {
		writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{Reregister: true})
		return
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if n.Status.State == api.NodeLost {
		// A lost node that speaks again re-registers; its old work was
		// fenced on its side and reassigned on ours.
		writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{Reregister: true})
		return
	}
	s.liveness().Beat(hb.Node, hb.AckRevision, time.Now())
	if err := s.storeReports(ctx, &hb); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{})
}

// storeReports writes the rank statuses that changed, new checkpoints and
// progress lines.
// putStatuses stores rank statuses: on the leader through the controller's
// next pass, which stores an attempt's last exit with the attempt's end in
// one write; elsewhere, or when no pass takes them soon, group-committed.
func (s *Server) putStatuses(ctx context.Context, rs []api.RankStatus) error {
	if ctl := s.controller(); ctl != nil && len(rs) > 0 {
		err := ctl.Report(ctx, rs, passTakeWait)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, controller.ErrNotTaken) {
			s.log.Warn("storing rank statuses through the controller failed; storing them directly", "err", err)
		}
	}
	return s.statuses.put(ctx, rs)
}

func (s *Server) storeReports(ctx context.Context, hb *api.Heartbeat) error {
	// A rank's last checkpoint and progress lines come in the heartbeat
	// that reports its exit: store them first, so that the pass the exit
	// wakes restarts from that checkpoint and a finished job shows its
	// final progress.
	for _, c := range hb.Checkpoints {
		if err := s.st.PutCheckpoint(ctx, c.JobID, c.Checkpoint); err != nil {
			return err
		}
	}
	byJob := map[string][]api.Progress{}
	var order []string
	for _, p := range hb.Progress {
		if _, ok := byJob[p.JobID]; !ok {
			order = append(order, p.JobID)
		}
		byJob[p.JobID] = append(byJob[p.JobID], p)
	}
	for _, job := range order {
		if err := s.st.AppendProgress(ctx, job, byJob[job]); err != nil {
			return err
		}
	}
	var changed []api.RankStatus
	s.mu.Lock()
	for _, rs := range hb.Ranks {
		rs.Node = hb.Node
		k := api.TaskKey(rs.JobID, rs.Attempt, rs.Rank)
		if old, ok := s.written[k]; ok && old == rs {
			continue
		}
		changed = append(changed, rs)
	}
	s.mu.Unlock()
	if err := s.putStatuses(ctx, changed); err != nil {
		return err
	}
	s.mu.Lock()
	if len(s.written)+len(changed) > maxWritten {
		// Forget it all now and then; the cost is one rewrite of each
		// rank status agents still report.
		clear(s.written)
	}
	for _, rs := range changed {
		s.written[api.TaskKey(rs.JobID, rs.Attempt, rs.Rank)] = rs
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) assignments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	node := q.Get("node")
	if node == "" {
		writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: []*api.FieldError{{Field: "node", Msg: "missing"}}})
		return
	}
	after, wait, err := blockingParams(r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	// From the cache: no etcd watch and read per poll, and the list's
	// revision covers every change up to it.
	b, rev, err := s.cache.Assignments(r.Context(), node, after, wait, q.Get("delta") == "1")
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// node reads a node for a heartbeat from the cache, and from etcd when the
// cache does not have it or has it lost (it may not have seen a fresh
// registration yet).
func (s *Server) node(ctx context.Context, name string) (*api.Node, error) {
	if n, ok := s.cache.Node(name); ok && n.Status.State != api.NodeLost {
		return n, nil
	}
	return s.st.Node(ctx, name)
}

// jobLogs streams one rank's log from the agent that ran it.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	d, err := s.findJob(ctx, r.PathValue("id"))
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	j := &d.Job // an archived job's logs stay on its nodes for their --task-retention
	if len(j.Status.Attempts) == 0 {
		writeError(w, http.StatusConflict, fmt.Errorf("job %s has not started yet: %s", j.ID, j.Status.Reason))
		return
	}
	if j.Spec.Output == api.OutputDiscard {
		writeError(w, http.StatusNotFound, fmt.Errorf("job %s keeps no logs: its spec has output: discard (stdout and stderr go to /dev/null)", j.ID))
		return
	}
	rank, attempt := 0, len(j.Status.Attempts)
	if v := q.Get("rank"); v != "" {
		if rank, err = strconv.Atoi(v); err != nil || rank < 0 || rank >= j.Spec.Ranks {
			writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: []*api.FieldError{{Field: "rank", Msg: fmt.Sprintf("must be 0..%d", j.Spec.Ranks-1)}}})
			return
		}
	}
	if v := q.Get("attempt"); v != "" {
		if attempt, err = strconv.Atoi(v); err != nil || attempt < 1 || attempt > len(j.Status.Attempts) {
			writeError(w, http.StatusBadRequest, &api.ValidationError{Fields: []*api.FieldError{{Field: "attempt", Msg: fmt.Sprintf("must be 1..%d", len(j.Status.Attempts))}}})
			return
		}
	}
	a := j.Status.Attempts[attempt-1]
	node := a.Placement[rank].Node
	n, err := s.st.Node(ctx, node)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if n.AgentURL == "" {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("node %s serves no logs", node))
		return
	}
	u := fmt.Sprintf("%s/v1/logs?task=%s&stream=%s&follow=%s", strings.TrimRight(n.AgentURL, "/"),
		api.TaskKey(j.ID, attempt, rank), q.Get("stream"), q.Get("follow"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Errorf("node %s: %w", node, err))
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	copyFlush(w, resp.Body)
}

// copyFlush copies src to w, flushing after every read so followers see
// lines as they come.
func copyFlush(w http.ResponseWriter, src io.Reader) {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }

// capacityNodes returns the node list for the submit-time capacity check,
// re-read at most once a second: the check is advisory (the scheduler has
// the final word), and reading every node per submission costs more than
// the submission itself.
func (s *Server) capacityNodes(ctx context.Context) ([]*api.Node, error) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.capNodes != nil && time.Since(s.capAt) < time.Second {
		return s.capNodes, nil
	}
	nodes, _, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	s.capNodes, s.capAt = nodes, time.Now()
	return nodes, nil
}
