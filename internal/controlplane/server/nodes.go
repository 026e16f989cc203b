package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

func (s *Server) nodeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/nodes", s.listNodes)
	mux.HandleFunc("GET /v1/nodes/{name}", s.getNode)
	mux.HandleFunc("POST /v1/nodes/{name}/{action}", s.nodeAction)
}

// listNodes lists the nodes with their last heartbeat, their GPUs in use
// and free, and their GPUs' newest readings; ?selector=S only those whose
// labels S selects (api.ParseSelector).
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if err := onlyParams(r, "selector", "index", "wait"); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	sel, err := api.ParseSelector(r.URL.Query().Get("selector"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("selector", "%v", err))
		return
	}
	if err := s.blockingIndex(r, store.NodesPrefix); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	nodes, rev, err := s.st.Nodes(r.Context())
	nodes = slices.DeleteFunc(nodes, func(n *api.Node) bool { return !sel.Matches(n.Labels) })
	if err == nil {
		err = s.fillUse(r.Context(), nodes)
	}
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

// fillHeartbeat sets n's last heartbeat: as this server heard it, else as
// the leader that declared it lost heard it. A node this server never
// heard from has none: the liveness table's stand-in for it (the time this
// server began to lead, from which it gives the node a full timeout) is
// no heartbeat, and shown as one it made a node dead for half an hour look
// seen when the leader changed.
func (s *Server) fillHeartbeat(n *api.Node) {
	if _, last, heard := s.liveness().Run(n.Name); heard && !last.Before(n.Status.LastSeenAt) {
		n.Status.LastHeartbeat = last
	} else if !n.Status.LastSeenAt.IsZero() {
		n.Status.LastHeartbeat = n.Status.LastSeenAt
	}
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.st.Node(r.Context(), r.PathValue("name"))
	if err == nil {
		err = s.fillUse(r.Context(), []*api.Node{n})
	}
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
		fn = func(n *api.Node) {
			n.Status.Cordoned, n.Status.Draining = false, false
			n.Status.DrainGraceful, n.Status.DrainReason, n.Status.DrainDeadline = false, "", time.Time{}
			clearHealth(n)
		}
	case "drain":
		req, ok := drainRequest(w, r)
		if !ok {
			return
		}
		fn = func(n *api.Node) {
			n.Status.Cordoned, n.Status.Draining = true, true
			n.Status.DrainGraceful, n.Status.DrainReason, n.Status.DrainDeadline = !req.Now, req.Reason, time.Time{}
			if !req.Now && req.Timeout > 0 {
				n.Status.DrainDeadline = time.Now().Add(req.Timeout.D())
			}
		}
	case "revoke":
		// Cut off and cordoned: its agent's requests are refused from now,
		// so it goes lost and its gangs restart elsewhere.
		if err := s.revokeNode(r.Context(), r.PathValue("name")); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		fn = func(n *api.Node) { n.Status.Cordoned = true }
	default:
		writeError(w, http.StatusNotFound, fmt.Errorf("unknown node action %q (want cordon, uncordon, drain or revoke)", action))
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

// drainRequest reads a drain's optional body; none is api.DrainRequest
// with Now, what POST .../drain did before it took one.
func drainRequest(w http.ResponseWriter, r *http.Request) (api.DrainRequest, bool) {
	req := api.DrainRequest{Now: true}
	b, err := readBody(w, r)
	if err == nil && len(bytes.TrimSpace(b)) > 0 {
		req = api.DrainRequest{}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if derr := d.Decode(&req); derr != nil {
			err = api.ErrorForField("", "drain request: %s", derr)
		} else if req.Timeout < 0 {
			err = api.ErrorForField("timeout", "must not be negative")
		} else if len(req.Reason) > 256 {
			err = api.ErrorForField("reason", "%d characters; at most 256", len(req.Reason))
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return req, false
	}
	return req, true
}
