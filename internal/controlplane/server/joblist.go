package server

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// jobListQuery is what GET /v1/jobs was asked.
type jobListQuery struct {
	live, all bool
	limit     int
	since     time.Time // zero: no bound
	user      string
	selector  api.Selector // of the jobs' spec.labels; nil: all
}

// parseJobList reads GET /v1/jobs's parameters, refusing the ones it does
// not take and naming every bad one.
func parseJobList(r *http.Request, now time.Time) (jobListQuery, error) {
	if err := onlyParams(r, "live", "all", "since", "limit", "user", "selector", "index", "wait"); err != nil {
		return jobListQuery{}, err
	}
	q := r.URL.Query()
	var fields api.FieldErrors
	jq := jobListQuery{live: boolParam(q, "live", &fields), all: boolParam(q, "all", &fields), user: q.Get("user")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fields.Add("limit", "%q: want a positive integer", v)
		}
		jq.limit = n
	}
	if v := q.Get("since"); v != "" {
		t, err := api.ParseSince(v, now)
		if err != nil {
			fields.Add("since", "%s", fieldMsg(err))
		}
		jq.since = t
	}
	if v := q.Get("selector"); v != "" {
		sel, err := api.ParseSelector(v)
		if err != nil {
			fields.Add("selector", "%v", err)
		}
		jq.selector = sel
	}
	if jq.live && jq.all {
		fields.Add("all", "lists finished jobs, which live leaves out: give one or the other")
	}
	return jq, fields.Err()
}

// boolParam reads a true/false parameter ("" is false), adding to fields
// when it is neither.
func boolParam(q url.Values, name string, fields *api.FieldErrors) bool {
	switch v := q.Get(name); v {
	case "", "0", "false":
		return false
	case "1", "true":
		return true
	default:
		fields.Add(name, "%q: want true or false", v)
		return false
	}
}

// listJobs lists jobs, oldest first: all the store holds, or with ?live=1
// only those not finished (from the cache, as squeue shows). ?since=T
// keeps those not finished or finished at T or later (as sacct -S).
// ?all=1 adds the finished jobs retention moved to this server's job
// archive, and lists newest first (as sacct shows a history). ?limit=N
// keeps only the newest N (by submission), ?user=U only U's,
// ?selector=S only those whose labels S selects (api.ParseSelector).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	jq, err := parseJobList(r, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err := s.blockingIndex(r, store.JobsPrefix); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var jobs []*api.Job
	var rev int64
	switch {
	case jq.live:
		jobs, rev, err = s.liveJobs(r.Context())
	case jq.limit > 0 && !jq.all && jq.since.IsZero():
		jobs, rev, err = s.st.RecentJobs(r.Context(), jq.limit)
	default:
		jobs, rev, err = s.st.Jobs(r.Context())
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	var warnings []string
	if jq.all {
		if s.archive == nil {
			warnings = append(warnings, "this server keeps no job archive (--job-archive): the list holds only the finished jobs the store still keeps (--job-retention, --max-finished-jobs)")
		} else if jobs, err = s.withArchived(jobs, jq.since); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
	}
	jobs = slices.DeleteFunc(jobs, func(j *api.Job) bool {
		return (jq.user != "" && j.Spec.User != jq.user) || finishedBefore(j, jq.since) || !jq.selector.Matches(j.Spec.Labels)
	})
	if jq.all {
		store.SortJobs(jobs)
		slices.Reverse(jobs)
		if jq.limit > 0 && len(jobs) > jq.limit {
			jobs = jobs[:jq.limit]
		}
	} else if jq.limit > 0 && len(jobs) > jq.limit {
		jobs = jobs[len(jobs)-jq.limit:]
	}
	writeJSON(w, r, http.StatusOK, api.JobList{Index: rev, Jobs: redactJobs(who(r), jobs), Warnings: warnings})
}

// withArchived adds to stored (the store's jobs) the jobs of this server's
// job archive that the store no longer holds, reading only the archive's
// files written since since (zero: all of them; see
// jobarchive.Archive.JobsSince). The archive must be there.
func (s *Server) withArchived(stored []*api.Job, since time.Time) ([]*api.Job, error) {
	old, err := s.archive.JobsSince(since)
	if err != nil {
		return nil, err
	}
	in := make(map[string]bool, len(stored))
	for _, j := range stored {
		in[j.ID] = true
	}
	for _, j := range old {
		if !in[j.ID] {
			stored = append(stored, j)
		}
	}
	return stored, nil
}

// finishedBefore reports whether j finished before t (never, for t zero):
// a job not finished, or finished at t or later, was there since t.
func finishedBefore(j *api.Job, t time.Time) bool {
	if t.IsZero() || !j.Status.Phase.Final() {
		return false
	}
	end := j.Status.FinishedAt
	if a := j.Status.Current(); end.IsZero() && a != nil {
		end = a.EndedAt
	}
	if end.IsZero() {
		end = j.SubmittedAt
	}
	return end.Before(t)
}
