package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

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
	if err := mayAct(who(r), "job "+j.ID, j.Spec.User); err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("%w (logs are its owner's to read)", err))
		return
	}
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
			writeError(w, http.StatusBadRequest, api.ErrorForField("rank", "must be 0..%d", j.Spec.Ranks-1))
			return
		}
	}
	if v := q.Get("attempt"); v != "" {
		if attempt, err = strconv.Atoi(v); err != nil || attempt < 1 || attempt > len(j.Status.Attempts) {
			writeError(w, http.StatusBadRequest, api.ErrorForField("attempt", "must be 1..%d", len(j.Status.Attempts)))
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
	// Only to an https agent URL, and only an answer served by that node's
	// certificate is passed on (agentClient): a URL pointing elsewhere
	// gets nothing through the proxy.
	if !strings.HasPrefix(n.AgentURL, "https://") {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("node %s serves logs at %q, not over https; upgrade its agent", node, n.AgentURL))
		return
	}
	u := fmt.Sprintf("%s/v1/logs?%s", strings.TrimRight(n.AgentURL, "/"), url.Values{
		"task": {api.TaskKey(j.ID, attempt, rank)}, "stream": {q.Get("stream")}, "follow": {q.Get("follow")}}.Encode())
	req, err := http.NewRequestWithContext(pki.ForNode(ctx, node), http.MethodGet, u, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	resp, err := s.agentHC.Do(req)
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
