package server

import (
	"net/http"
	"strconv"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// listJobs lists jobs, oldest first: all of them, or with ?live=1 only
// those not finished (from the cache, as squeue shows), and with
// ?limit=N only the newest N (by submission).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var fields api.FieldErrors
	live := false
	switch v := q.Get("live"); v {
	case "", "0", "false":
	case "1", "true":
		live = true
	default:
		fields.Add("live", "%q: want true or false", v)
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fields.Add("limit", "%q: want a positive integer", v)
		}
		limit = n
	}
	if err := fields.Err(); err != nil {
		writeError(w, http.StatusBadRequest, err)
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
	if user := q.Get("user"); user != "" {
		mine := jobs[:0:0]
		for _, j := range jobs {
			if j.Spec.User == user {
				mine = append(mine, j)
			}
		}
		jobs = mine
	}
	writeJSON(w, r, http.StatusOK, api.JobList{Index: rev, Jobs: redactJobs(who(r), jobs)})
}
