package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Idempotency keys on POST /v1/jobs (api.IdempotencyKeyHeader). A
// submission with a key takes it in the transaction that creates its job
// or commits its array (store.Claim). A request whose key its caller took
// before gets what that one created, with Idempotent-Replayed: true, and
// creates nothing; with another body it is refused (422): a client's
// mistake, not a retry. Keys are each caller's own (by identity: another
// user's same key is another key) and kept for a day at least
// (store.KeyTTL).
//
// Deployments need none: POST /v1/deployments applies a spec by its name,
// so the same request twice leaves what once does.

// keyed is a submission's idempotency key.
type keyed struct {
	owner string // whose: the caller's identity
	key   string
	hash  string // of the request's body, hex
}

// keyOf reads r's idempotency key, if it has one (nil otherwise), for the
// request body b.
func keyOf(r *http.Request, b []byte) (*keyed, error) {
	v, ok := r.Header[api.IdempotencyKeyHeader]
	if !ok {
		return nil, nil
	}
	if len(v) != 1 {
		return nil, api.ErrorForField(api.IdempotencyKeyHeader, "given %d times; send one", len(v))
	}
	key, err := api.ParseIdempotencyKey(v[0])
	if err != nil {
		return nil, err
	}
	owner := "anonymous"
	if wh := who(r); wh != nil {
		owner = wh.Kind + ":" + wh.Name
	}
	h := sha256.Sum256(b)
	return &keyed{owner: owner, key: key, hash: hex.EncodeToString(h[:])}, nil
}

// replay answers a request whose key was taken with what the submission
// that took it created, or refuses it if that one had another body. It
// returns false, having written nothing, when the key holds nothing (the
// caller answers as it would have).
func (s *Server) replay(w http.ResponseWriter, r *http.Request, k *keyed) bool {
	ctx := r.Context()
	rec, err := s.st.Claimed(ctx, k.owner, k.key)
	if err != nil {
		return false
	}
	created := "job " + rec.Job
	if rec.Array != "" {
		created = "array " + rec.Array
	}
	if rec.Hash != k.hash {
		writeError(w, http.StatusUnprocessableEntity, api.ErrorForField(api.IdempotencyKeyHeader,
			"%q was sent before with another request body (it created %s, at %s); a new submission needs a new key",
			k.key, created, rec.At.Format("2006-01-02T15:04:05Z07:00")))
		return true
	}
	w.Header().Set(api.IdempotentReplayedHeader, "true")
	if rec.Array != "" {
		// Its submitter may have crashed part-way, or still be writing.
		if err := s.st.FinishArray(ctx, rec.Array); err != nil {
			writeError(w, statusFor(err), err)
			return true
		}
		writeJSON(w, r, rec.Status, arraySubmission(rec.Array, rec.Count))
		return true
	}
	d, err := s.findJob(ctx, rec.Job)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			writeError(w, statusFor(err), err)
			return true
		}
		// Finished and deleted since, with no archive: its ID is still
		// the answer.
		d = &api.JobDetail{Job: api.Job{ID: rec.Job}}
	}
	s.log.Info("job submission replayed", "job_id", rec.Job, "owner", k.owner)
	writeJSON(w, r, rec.Status, &d.Job)
	return true
}

// refuse answers a submission that failed with err: one whose key another
// took (store.ErrKeyTaken) gets what that one created.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, k *keyed, err error) {
	if errors.Is(err, store.ErrKeyTaken) {
		if k != nil && s.replay(w, r, k) {
			return
		}
		// Taken and gone since (expired): rare; the retry takes it anew.
		err = fmt.Errorf("%s: %w; send the request again", api.IdempotencyKeyHeader, err)
	}
	writeError(w, statusFor(err), err)
}
