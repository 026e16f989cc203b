package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// keyedPost is what one POST /v1/jobs with an Idempotency-Key header, as
// a user's token, got.
type keyedPost struct {
	code     int
	replayed bool
	body     []byte
}

func (e *agentEnv) postKeyed(t *testing.T, tok, key, body string) keyedPost {
	t.Helper()
	p, err := e.tryPostKeyed(tok, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *agentEnv) tryPostKeyed(tok, key, body string) (keyedPost, error) {
	tc, err := client.TLSConfig(client.Config{CAFile: e.adm.CAFile})
	if err != nil {
		return keyedPost{}, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.url+"/v1/jobs", strings.NewReader(body))
	if err != nil {
		return keyedPost{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header[api.IdempotencyKeyHeader] = []string{key}
	resp, err := hc.Do(req)
	if err != nil {
		return keyedPost{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return keyedPost{code: resp.StatusCode, replayed: resp.Header.Get(api.IdempotentReplayedHeader) == "true", body: b}, err
}

// jobID reads the id of an answer's job, or of its array.
func (p keyedPost) jobID(t *testing.T) string {
	t.Helper()
	var v struct {
		ID      string `json:"id"`
		ArrayID string `json:"arrayId"`
	}
	if err := json.Unmarshal(p.body, &v); err != nil {
		t.Fatalf("answer %d %s: %v", p.code, p.body, err)
	}
	return v.ID + v.ArrayID
}

// userToken makes a user's token.
func (e *agentEnv) userToken(t *testing.T, name string) string {
	t.Helper()
	uid := 64000 + len(name)
	tok, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: name, Role: api.RoleUser, UID: &uid})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

// jobsOf counts the jobs the store holds for user.
func (e *agentEnv) jobsOf(t *testing.T, user string) int {
	t.Helper()
	l, err := e.admin.Jobs(e.ctx, client.JobQuery{User: user})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Jobs)
}

// TestIdempotencyKey: a submission sent again with its key creates nothing
// and gets the first one's answer (same job, same status, marked
// replayed), for a job and for an array; the same key with another body is
// refused with 422 naming the header; another user's same key is his own;
// a key that is empty, too long or not printable ASCII is refused with 400
// naming the header.
func TestIdempotencyKey(t *testing.T) {
	e := startAgentEnv(t)
	alice, bob := e.userToken(t, "alice"), e.userToken(t, "bob")
	const job = `{"ranks": 1, "command": ["sleep", "100"]}`
	first := e.postKeyed(t, alice, "k-1", job)
	if first.code != http.StatusCreated || first.replayed {
		t.Fatalf("first submission: %d replayed=%v %s", first.code, first.replayed, first.body)
	}
	again := e.postKeyed(t, alice, "k-1", job)
	if again.code != http.StatusCreated || !again.replayed || again.jobID(t) != first.jobID(t) {
		t.Fatalf("retry: %d replayed=%v job %s; want 201, replayed, job %s", again.code, again.replayed, again.jobID(t), first.jobID(t))
	}
	if n := e.jobsOf(t, "alice"); n != 1 {
		t.Fatalf("alice has %d jobs after a submission and its retry; want 1", n)
	}
	// As a quoted string (the draft's structured-field form) it is the
	// same key.
	if q := e.postKeyed(t, alice, `"k-1"`, job); q.jobID(t) != first.jobID(t) || !q.replayed {
		t.Errorf("quoted key: %d job %s; want a replay of %s", q.code, q.jobID(t), first.jobID(t))
	}
	other := e.postKeyed(t, alice, "k-1", `{"ranks": 1, "command": ["sleep", "200"]}`)
	if other.code != http.StatusUnprocessableEntity || !bytes.Contains(other.body, []byte(api.IdempotencyKeyHeader)) ||
		!bytes.Contains(other.body, []byte("another request body")) {
		t.Errorf("same key, another body: %d %s; want 422 naming the header", other.code, other.body)
	}
	theirs := e.postKeyed(t, bob, "k-1", job)
	if theirs.code != http.StatusCreated || theirs.replayed || theirs.jobID(t) == first.jobID(t) {
		t.Errorf("bob's same key: %d replayed=%v job %s; want a job of his own", theirs.code, theirs.replayed, theirs.jobID(t))
	}
	for _, bad := range []string{"", strings.Repeat("k", api.MaxIdempotencyKey+1), "k\u00e9y", `"a"b"`} {
		p := e.postKeyed(t, alice, bad, job)
		if p.code != http.StatusBadRequest || !bytes.Contains(p.body, []byte(api.IdempotencyKeyHeader)) {
			t.Errorf("key %q: %d %s; want 400 naming the header", bad, p.code, p.body)
		}
	}
	if p := e.postKeyed(t, alice, strings.Repeat("k", api.MaxIdempotencyKey), job); p.code != http.StatusCreated {
		t.Errorf("a key of %d characters: %d %s; want 201", api.MaxIdempotencyKey, p.code, p.body)
	}

	// Arrays.
	const array = `{"ranks": 1, "command": ["sleep", "100"], "array": "0-299%4"}`
	a1 := e.postKeyed(t, alice, "a-1", array)
	a2 := e.postKeyed(t, alice, "a-1", array)
	var s1, s2 api.ArraySubmission
	_ = json.Unmarshal(a1.body, &s1)
	_ = json.Unmarshal(a2.body, &s2)
	if a1.code != http.StatusCreated || a2.code != http.StatusCreated || !a2.replayed || s2.ArrayID != s1.ArrayID || s2.Count != 300 || len(s2.Jobs) != 300 || s2.Jobs[299] != s1.Jobs[299] {
		t.Fatalf("array and its retry: %d %s, %d %s", a1.code, a1.body[:min(len(a1.body), 80)], a2.code, a2.body[:min(len(a2.body), 80)])
	}
	if n := e.jobsOf(t, "alice"); n != 2+300 {
		t.Errorf("alice has %d jobs; want 302", n)
	}
}

// TestIdempotencyKeyConcurrentRetries: the same submission sent many
// times at once with one key (a client retrying while its first try is
// still in flight) stores one job, and every answer names it.
func TestIdempotencyKeyConcurrentRetries(t *testing.T) {
	e := startAgentEnv(t)
	alice := e.userToken(t, "alice")
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.tryPostKeyed(alice, "same", `{"ranks": 1, "command": ["true"]}`)
			if err != nil || p.code != http.StatusCreated {
				t.Errorf("try %d: %d %s %v", i, p.code, p.body, err)
				return
			}
			var j api.Job
			_ = json.Unmarshal(p.body, &j)
			ids[i] = j.ID
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("answers name jobs %v; want one", ids)
		}
	}
	if got := e.jobsOf(t, "alice"); got != 1 {
		t.Errorf("%d jobs stored; want 1", got)
	}
}

// loseFirstAnswer passes every request on, but throws the first answer
// away once the server has sent it whole, as a connection that breaks
// just then would.
type loseFirstAnswer struct {
	http.RoundTripper
	lost atomic.Bool
}

func (l *loseFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.RoundTripper.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || l.lost.Swap(true) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("read: connection reset by peer")
}

// TestSubmitWhoseAnswerIsLostCreatesOneJob: the Go client, whose first
// try's answer is lost after the server created the job, tries again with
// the same key and gets that job: one job, not two.
func TestSubmitWhoseAnswerIsLostCreatesOneJob(t *testing.T) {
	e := startAgentEnv(t)
	tok := e.userToken(t, "alice")
	tc, err := client.TLSConfig(client.Config{CAFile: e.adm.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{TLSClientConfig: tc}
	defer base.CloseIdleConnections()
	lose := &loseFirstAnswer{RoundTripper: base}
	c, err := client.New(client.Config{Server: e.url, Token: tok, Transport: lose, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{`{"ranks": 1, "command": ["true"]}`, `{"ranks": 1, "command": ["true"], "array": "0-9"}`} {
		lose.lost.Store(false)
		j, a, err := c.SubmitAny(e.ctx, []byte(spec))
		if err != nil || !lose.lost.Load() {
			t.Fatalf("submit %s: %v (answer lost: %v)", spec, err, lose.lost.Load())
		}
		if j == nil && a == nil {
			t.Fatalf("submit %s: no answer", spec)
		}
	}
	if n := e.jobsOf(t, "alice"); n != 1+10 {
		t.Errorf("alice has %d jobs; want 11: the job and the array's 10 tasks, once each", n)
	}
}
