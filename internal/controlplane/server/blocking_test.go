package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

// TestBlockingJobAndQueues: a job's detail and the queue list answer
// ?index=N&wait=D as the lists do: at once without an index, after D when
// nothing they are made of changed, and as soon as something did.
func TestBlockingJobAndQueues(t *testing.T) {
	type answer struct {
		idx  int64
		took time.Duration
		err  error
	}
	e := startAgentEnv(t)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(e.s.ca.Pool(), nil)}}
	defer hc.CloseIdleConnections()
	// get answers path's X-Gangway-Index and how long it took, or an
	// error (it runs on goroutines of the test's too).
	get := func(path string, into any) (answer, error) {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.adm.Token)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return answer{}, fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return answer{}, err
		}
		idx, err := strconv.ParseInt(resp.Header.Get("X-Gangway-Index"), 10, 64)
		if err != nil || idx <= 0 {
			return answer{}, fmt.Errorf("GET %s: X-Gangway-Index %q", path, resp.Header.Get("X-Gangway-Index"))
		}
		return answer{idx, time.Since(start), nil}, nil
	}
	must := func(a answer, err error) answer {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	sp := api.JobSpec{Ranks: 1, Command: []string{"true"}}
	sp.Default()
	j, err := e.s.st.CreateJob(e.ctx, sp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var d api.JobDetail
	// The controller's first pass writes the job's waiting reason; only
	// then is the job unchanged, as the blocking read below needs.
	var idx int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		idx = must(get("/v1/jobs/"+j.ID, &d)).idx
		if d.Job.Status.Reason != "" && d.Job.Status.Reason != api.ReasonNew {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never got the scheduler's reason: %q", j.ID, d.Job.Status.Reason)
		}
	}
	if d.Job.ID != j.ID {
		t.Fatalf("detail of job %s: %+v", j.ID, d.Job)
	}
	if took := must(get(fmt.Sprintf("/v1/jobs/%s?index=%d&wait=300ms", j.ID, idx), &d)).took; took < 250*time.Millisecond {
		t.Errorf("a blocking detail of an unchanged job answered after %s; want the 300ms wait", took)
	}
	var ql api.QueueList
	qidx := must(get("/v1/queues", &ql)).idx
	if ql.Index != qidx {
		t.Errorf("queue list index %d, header %d", ql.Index, qidx)
	}

	detail := make(chan answer, 1)
	go func() {
		var d api.JobDetail
		a, err := get(fmt.Sprintf("/v1/jobs/%s?index=%d&wait=20s", j.ID, idx), &d)
		a.err = err
		detail <- a
	}()
	queues := make(chan answer, 1)
	var ql2 api.QueueList
	go func() {
		a, err := get(fmt.Sprintf("/v1/queues?index=%d&wait=20s", qidx), &ql2)
		a.err = err
		queues <- a
	}()
	if err := e.s.st.AppendProgress(e.ctx, j.ID, []api.Progress{{Step: 3}}); err != nil {
		t.Fatal(err)
	}
	if a := <-detail; a.err != nil || a.idx <= idx || a.took > 10*time.Second {
		t.Errorf("blocking detail answered index %d after %s (%v); want one past %d, soon after the progress", a.idx, a.took, a.err, idx)
	}
	if _, err := e.admin.SetQueue(e.ctx, api.QueueSpec{Name: "research", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	a := <-queues
	if a.err != nil || a.idx <= qidx || a.took > 10*time.Second {
		t.Errorf("blocking queue list answered index %d after %s (%v); want one past %d, soon after the change", a.idx, a.took, a.err, qidx)
	}
	found := false
	for _, q := range ql2.Queues {
		found = found || q.Spec.Name == "research"
	}
	if !found {
		t.Errorf("the queue list that woke lacks the new queue: %+v", ql2.Queues)
	}
}
