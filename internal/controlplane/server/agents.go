package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// errShuttingDown answers a long poll the server's shutdown ended.
var errShuttingDown = fmt.Errorf("%w: the server is shutting down; ask again", store.ErrUnavailable)

// maxWritten bounds the memory of rank statuses already stored.
const maxWritten = 200000

// agentRoutes are the endpoints only agents call.
func (s *Server) agentRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/agent/register", s.register)
	mux.HandleFunc("POST /v1/agent/heartbeat", s.heartbeat)
	mux.HandleFunc("GET /v1/agent/assignments", s.assignments)
	mux.HandleFunc("POST /v1/agent/join", s.join)
	mux.HandleFunc("POST /v1/agent/renew", s.renew)
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
		writeError(w, http.StatusBadRequest, api.ErrorForField("node.name", "%q: use letters, digits, '-', '_' and '.' (at most 63)", n.Name))
		return
	}
	if n.Address == "" {
		writeError(w, http.StatusBadRequest, api.ErrorForField("node.address", "missing"))
		return
	}
	ctx := r.Context()
	// Only the holder of the node's certificate registers its name (and so
	// sets its address, agent URL and launch environment).
	if err := s.authenticateNode(ctx, r, n.Name); err != nil {
		s.log.Warn("registration refused", "node", n.Name, "as", describeWho(who(r)), "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, fmt.Errorf("register node %s: %w", n.Name, err))
		return
	}
	if s.forwarded(w, r, b, n.Name) {
		return
	}
	now := time.Now()
	if err := s.claimedByAnother(ctx, &n, now); err != nil {
		code := statusFor(err)
		if errors.Is(err, errNameHeld) {
			code = http.StatusConflict
			s.log.Warn("registration refused: the node name is held by another live agent", "node", n.Name, "remote", r.RemoteAddr)
		}
		writeError(w, code, err)
		return
	}
	// Heard from now, before it is written Ready: a pass that sees it
	// Ready must not find it silent since its last life.
	s.liveness().Beat(n.Name, 0, now)
	// The agent holds no witnesses while it registers; it gets these.
	ws, _ := s.pickWitnesses(n.Name, nil)
	for {
		old, err := s.st.Node(ctx, n.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			writeError(w, statusFor(err), err)
			return
		}
		reg := n
		reg.Status = api.NodeStatus{State: api.NodeReady, RegisteredAt: now, Witnesses: ws}
		if old != nil {
			// Keep what operators set.
			reg.Status.Cordoned, reg.Status.Draining = old.Status.Cordoned, old.Status.Draining
			reg.Status.DrainGraceful, reg.Status.DrainReason, reg.Status.DrainDeadline = old.Status.DrainGraceful, old.Status.DrainReason, old.Status.DrainDeadline
			keepHealth(&reg, old)
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
	s.log.Info("node registered", "node", n.Name, "address", n.Address, "gpus", len(n.GPUs), "witnesses", len(ws))
	writeJSON(w, r, http.StatusOK, api.RegisterResponse{
		HeartbeatInterval: api.Duration(s.cfg.HeartbeatInterval),
		// Fence a heartbeat before the server could declare the node lost,
		// so its ranks are dead before any replacement starts.
		FenceAfter:     api.Duration(s.fence.FenceAfter),
		CheckpointRoot: s.cfg.CheckpointRoot,
		Witnesses:      s.witnessURLs(ws),
		WitnessDown:    api.Duration(s.fence.WitnessDown),
		MaxOutage:      api.Duration(s.fence.MaxOutage),
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
	began := time.Now()
	if err := s.authenticateNode(ctx, r, hb.Node); err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("heartbeat for node %s: %w", hb.Node, err))
		return
	}
	if hb.Telemetry != nil {
		s.readings.put(hb.Node, hb.Telemetry) // here too on a replica that forwards it: its top sees the agents speaking to it
	}
	if s.forwarded(w, r, b, hb.Node) {
		return
	}
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
		// fenced on its side and reassigned on ours. Its ranks that
		// exited 0 before it was cut off are facts the job needs (a gang
		// that finished as its node was lost must not run again):
		// stored, the rest dropped.
		s.storeLostNodeExits(ctx, &hb)
		writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{Reregister: true})
		return
	}
	// Screened before the beat is recorded: a rank's last status comes
	// with the acknowledgement that lets its attempt end and its job
	// leave the cache.
	refused, err := s.screenReports(ctx, &hb)
	if err != nil {
		writeError(w, statusFor(err), err) // 503: the wait timed out
		return
	}
	live := s.liveness()
	live.Beat(hb.Node, hb.AckRevision, time.Now())
	s.watchStragglers(ctx, &hb)
	// Every write below gets one heartbeat interval in all. When the
	// store takes no write (etcd lost quorum, or is slow) the beat is
	// still heard and answered, and the reports come again: answering
	// late would let the agent's lease lapse while its witnesses, whose
	// beats carry nothing to write, still hear this server, and it would
	// kill its ranks for a store outage.
	sctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
	defer cancel()
	unstored := func(err error) bool {
		// Past the bound, whatever the store answered is for want of
		// time, not of a bad report.
		if ctx.Err() != nil || statusFor(err) != http.StatusServiceUnavailable && sctx.Err() == nil {
			return false
		}
		s.log.Debug("heartbeat: reports not stored in time; the agent sends them again", "node", hb.Node, "err", err)
		writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{Unstored: true})
		return true
	}
	if err := s.storeReports(sctx, &hb); err != nil {
		if !unstored(err) {
			writeError(w, statusFor(err), err)
		}
		return
	}
	if hb.Health != nil || faultOutstanding(n) {
		if err := s.tendHealth(sctx, n, hb.Health); err != nil {
			// The agent sends its report again, as it got no answer.
			if !unstored(err) {
				writeError(w, statusFor(err), err)
			}
			return
		}
	}
	resp := api.HeartbeatResponse{Refused: refused}
	if s.fence.Witnesses > 0 {
		resp.Witnesses = s.witnessURLs(s.tendWitnesses(sctx, n, hb.Witnesses))
	}
	if time.Since(began) > s.cfg.HeartbeatInterval/4 {
		// Answered so late the agent may count it failed and tell a
		// witness-seeking peer the server is down: not an unbroken run.
		live.Break(hb.Node, time.Now())
	}
	writeJSON(w, r, http.StatusOK, resp)
}

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

// storeReports writes the rank statuses that changed, new checkpoints and
// progress lines.
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
		if p.TimingOnly() {
			continue // for the straggler check alone: one line per rank is no log
		}
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
		if s.writtenLocked(rs) {
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
		writeError(w, http.StatusBadRequest, api.ErrorForField("node", "missing"))
		return
	}
	if err := s.authenticateNode(r.Context(), r, node); err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("assignments of node %s: %w", node, err))
		return
	}
	after, wait, err := blockingParams(r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	// From the cache: no etcd watch and read per poll, and the list's
	// revision covers every change up to it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if after == 0 && s.cache.Revision() > 0 { // before its first load the cache says so itself
		// A whole list (an agent starting, or registered anew after its
		// node was lost) is answered from a view at least as new as the
		// store now: one a moment behind could still hold the ranks of
		// an attempt that ended as the node was lost, and the agent
		// would start them beside the attempt that replaced it.
		rev, err := s.st.Revision(ctx)
		if err == nil {
			wctx, wcancel := context.WithTimeout(ctx, wait+5*time.Second)
			err = s.cache.WaitRevision(wctx, rev)
			wcancel()
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("assignments of node %s: this server's view has not caught up with the store (%w); ask again", node, err))
			return
		}
	}
	// A server shutting down ends its long polls at once rather than
	// holding its exit up for their wait: the agents ask again, here once
	// restarted or at another replica.
	defer context.AfterFunc(s.closing, cancel)()
	b, rev, err := s.cache.Assignments(ctx, node, after, wait, q.Get("delta") == "1")
	if err != nil {
		if s.closing.Err() != nil {
			err = errShuttingDown
		}
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

// storeLostNodeExits stores, of a lost node's heartbeat, the exits with
// code 0 of ranks its attempts placed there (screened as any report), and
// nothing else: no checkpoint, progress or acknowledgement counts from a
// node the controller has written off. Failing, it logs: the agent
// repeats them after it registers again.
func (s *Server) storeLostNodeExits(ctx context.Context, hb *api.Heartbeat) {
	hb.Ranks = slices.DeleteFunc(hb.Ranks, func(rs api.RankStatus) bool {
		return rs.State != api.RankExited || rs.ExitCode != 0 || rs.Signal != ""
	})
	hb.Checkpoints, hb.Progress = nil, nil
	if len(hb.Ranks) == 0 {
		return
	}
	if _, err := s.screenReports(ctx, hb); err != nil || len(hb.Ranks) == 0 {
		return
	}
	if err := s.storeReports(ctx, hb); err != nil {
		s.log.Warn("storing the exits a lost node reported failed", "node", hb.Node, "err", err)
	}
}
