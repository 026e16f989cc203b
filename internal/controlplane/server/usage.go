package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/goodput"
)

func (s *Server) reportRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/reports/usage", s.usageReport)
}

// usageReport answers GET /v1/reports/usage?by=queue|user|job&since=&user=
// &archived=true: GPU-hours over [since, now), useful and lost by cause,
// from the attempts of the jobs the store holds (and with archived, of
// those retention moved to the job archive). Admins and viewers see
// everyone's; a user sees only their own jobs' (user= defaults to them,
// and naming another is refused).
func (s *Server) usageReport(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	now := time.Now()
	if err := onlyParams(r, "by", "since", "user", "archived"); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var fe api.FieldErrors
	by, err := api.ParseUsageBy(q.Get("by"))
	if err != nil {
		fe.Add("by", "%s", fieldMsg(err))
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		if since, err = api.ParseSince(v, now); err != nil {
			fe.Add("since", "%s", fieldMsg(err))
		}
	}
	archived := false
	switch v := q.Get("archived"); v {
	case "", "0", "false":
	case "1", "true":
		archived = true
		if s.archive == nil {
			fe.Add("archived", "this server keeps no job archive (--job-archive): it has only the jobs the store holds")
		}
	default:
		fe.Add("archived", "%q: want true or false", v)
	}
	if err := fe.Err(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	user := q.Get("user")
	if wh := who(r); !isAdmin(wh) && (wh == nil || wh.Role != api.RoleViewer) {
		switch {
		case wh == nil || wh.Kind != kindUser:
			writeError(w, http.StatusForbidden, fmt.Errorf("%w: usage reports are for users, viewers and admins", errForbidden))
			return
		case user != "" && user != wh.Name:
			writeError(w, http.StatusForbidden, fmt.Errorf("%w: %s may see only their own usage (an admin or a viewer sees %s's)", errForbidden, wh.Name, user))
			return
		}
		user = wh.Name
	}
	jobs, latest, err := s.usageJobs(ctx, archived, since)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	if user != "" {
		mine := jobs[:0]
		for _, j := range jobs {
			if j.Spec.User == user {
				mine = append(mine, j)
			}
		}
		jobs = mine
	}
	writeJSON(w, r, http.StatusOK, goodput.Report(jobs, goodput.Options{Since: since, Now: now, By: by, Latest: latest}))
}

// fieldMsg is a one-field validation error's message without its field
// (the api parsers name the CLI's flag; the API names its parameter).
func fieldMsg(err error) string {
	var ve *api.ValidationError
	if errors.As(err, &ve) && len(ve.Fields) == 1 {
		return ve.Fields[0].Msg
	}
	return err.Error()
}

// usageJobs is every job the store holds and, with archived, every one
// the job archive holds that the store no longer does (of those that may
// have run since since); and the newest checkpoint of each job between
// attempts (the one it resumes from).
func (s *Server) usageJobs(ctx context.Context, archived bool, since time.Time) ([]*api.Job, map[string]*api.Checkpoint, error) {
	jobs, _, err := s.st.Jobs(ctx)
	if err != nil {
		return nil, nil, err
	}
	latest := map[string]*api.Checkpoint{}
	for _, j := range jobs {
		if a := j.Status.Current(); a == nil || a.Phase == api.AttemptRunning || j.Status.Phase.Final() {
			continue // no attempt whose checkpoint is still to be resumed from
		}
		ck, err := s.st.LatestCheckpoint(ctx, j.ID)
		if err != nil {
			return nil, nil, err
		}
		if ck != nil {
			latest[j.ID] = ck
		}
	}
	if archived {
		jobs, err = s.withArchived(jobs, since)
	}
	return jobs, latest, err
}
