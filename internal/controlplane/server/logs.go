package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

// jobLogs streams one rank's log from the agent that ran it. In per-node
// launches a rank has no process of its own: its node's launcher's log is
// streamed, and for torchrun only the rank's lines of it (those torchrun's
// --tee marks [default<local rank>]:, the mark removed) and the
// launcher's own unmarked ones, unless node=1 asks for all of it.
// tail=N sends only the last N lines of what is retained (then, with
// follow, everything after); in a torchrun rank's filtered lines that are
// followed, the last N of its node's lines are filtered. timestamps=1
// puts the time each line was written before it; since=T (how long ago,
// or a time) leaves out the lines written before T.
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
	// What does not depend on the job's state is checked first: a bad
	// value is a 400 whether or not the job has started.
	tail := 0
	if v := q.Get("tail"); v != "" {
		if tail, err = strconv.Atoi(v); err != nil || tail < 0 {
			writeError(w, http.StatusBadRequest, api.ErrorForField("tail", "must be a number of lines, 0 or more"))
			return
		}
	}
	follow := q.Get("follow")
	stamped := q.Get("timestamps") == "1" || q.Get("timestamps") == "true"
	since := ""
	if v := q.Get("since"); v != "" {
		t, err := api.ParseSince(v, time.Now())
		if err != nil {
			writeError(w, http.StatusBadRequest, api.ErrorForField("since", "%q: want how long ago (30s, 10m, 12h, 7d) or an RFC 3339 time", v))
			return
		}
		since = t.UTC().Format(time.RFC3339Nano)
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
	proc, local := logProcess(&j.Spec, &a, rank, q.Get("node") == "1")
	agentTail := tail
	if local >= 0 && follow != "1" {
		agentTail = 0 // the rank's lines are picked here: so are their last ones
	}
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
	v := url.Values{"task": {api.TaskKey(j.ID, attempt, proc)}, "stream": {q.Get("stream")}, "follow": {follow}}
	if agentTail > 0 {
		v.Set("tail", strconv.Itoa(agentTail))
	}
	if stamped {
		v.Set("timestamps", "1")
	}
	if since != "" {
		v.Set("since", since)
	}
	u := fmt.Sprintf("%s/v1/logs?%s", strings.TrimRight(n.AgentURL, "/"), v.Encode())
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
	if local < 0 || resp.StatusCode != http.StatusOK {
		copyFlush(w, w, resp.Body)
		return
	}
	tw := api.NewTailWriter(w, tail-agentTail)
	lf := &localRankLines{w: tw, local: local, stamped: stamped}
	copyFlush(w, lf, resp.Body)
	_ = lf.close()
	_ = tw.Release()
}

// logProcess returns the rank whose process holds rank's output: rank
// itself, or in per-node launches its node's first rank (the launcher's);
// and the local rank whose lines to keep of a torchrun launcher's log, or
// -1 for all of it (other launches, or wholeNode).
func logProcess(spec *api.JobSpec, a *api.Attempt, rank int, wholeNode bool) (proc, local int) {
	if !spec.Launch.PerNode() {
		return rank, -1
	}
	p := a.Placement[rank]
	proc = rank
	for _, q := range a.Placement {
		if q.NodeRank == p.NodeRank && q.Rank < proc {
			proc = q.Rank
		}
	}
	if spec.Launch != api.LaunchTorchrun || wholeNode {
		return proc, -1
	}
	return proc, p.LocalRank
}

// copyFlush copies src to dst, flushing w after every read so followers
// see lines as they come.
func copyFlush(w http.ResponseWriter, dst io.Writer, src io.Reader) {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
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

// torchrunMark is what torchrun's --tee puts before a worker's line:
// [<role><local rank>]:, the role "default" unless the script names one.
var torchrunMark = regexp.MustCompile(`^\[[^\]\s]*?(\d+)\]:`)

// localRankLines passes on, of a torchrun launcher's log, the lines of one
// local rank without torchrun's mark, and the lines no rank's mark
// begins (torchrun's own, and what --tee did not mark); a line's
// api.StderrMark is kept.
type localRankLines struct {
	w       io.Writer
	local   int
	stamped bool   // each line begins with its time and a space
	held    []byte // a line not yet ended
}

func (l *localRankLines) Write(p []byte) (int, error) {
	data := append(l.held, p...)
	end := bytes.LastIndexByte(data, '\n') + 1
	var out []byte
	for rest := data[:end]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n') + 1
		out = l.keep(out, rest[:i])
		rest = rest[i:]
	}
	l.held = append([]byte(nil), data[end:]...)
	if len(out) > 0 {
		if _, err := l.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// close passes on the unfinished last line.
func (l *localRankLines) close() error {
	if len(l.held) == 0 {
		return nil
	}
	_, err := l.w.Write(l.keep(nil, l.held))
	return err
}

// keep appends line to out if it is the local rank's or no rank's.
func (l *localRankLines) keep(out, line []byte) []byte {
	mark := []byte(nil)
	if i := bytes.IndexByte(line, ' '); l.stamped && i >= 0 {
		mark, line = line[:i+1], line[i+1:]
	}
	if bytes.HasPrefix(line, []byte(api.StderrMark)) {
		mark, line = append(mark[:len(mark):len(mark)], api.StderrMark...), line[len(api.StderrMark):]
	}
	m := torchrunMark.FindSubmatchIndex(line)
	if m == nil {
		return append(append(out, mark...), line...)
	}
	if n, err := strconv.Atoi(string(line[m[2]:m[3]])); err != nil || n != l.local {
		return out
	}
	return append(append(out, mark...), line[m[1]:]...)
}
