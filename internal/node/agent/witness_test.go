package agent

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

// nodeKP is a node certificate from ca for name, valid for loopback.
func nodeKP(t *testing.T, ca *pki.CA, name string) *pki.KeyPair {
	t.Helper()
	csr, key, err := pki.NewCSR(name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.SignNode(csr, name, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.NewKeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// witnessAgent serves a node's agent endpoint over TLS with the node's
// certificate; lastOK is when its own last heartbeat succeeded.
func witnessAgent(t *testing.T, ca *pki.CA, certName string, lastOK time.Time) (*Agent, *httptest.Server) {
	t.Helper()
	a, err := New(Config{Name: certName, Server: "https://s:1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a.lastOK = lastOK
	// Not StartTLS: it would serve its own certificate, not the node's.
	srv := httptest.NewUnstartedServer(peersOrServer(a.handler()))
	srv.Listener = tls.NewListener(srv.Listener, pki.ServerTLS(nodeKP(t, ca, certName), ca.Pool(), true))
	srv.Start()
	srv.URL = strings.Replace(srv.URL, "http://", "https://", 1)
	t.Cleanup(srv.Close)
	return a, srv
}

// TestWitnessesKeepRanksOnlyWhenAllSayTheServerIsDown: an agent whose
// heartbeats fail extends its ranks' lease only when every witness answers
// that it too has had no heartbeat for WitnessDown; a witness that hears
// the server, one that cannot be reached, and one whose certificate names
// another node each leave the lease to lapse.
func TestWitnessesKeepRanksOnlyWhenAllSayTheServerIsDown(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lease := api.RegisterResponse{FenceAfter: api.Duration(3500 * time.Millisecond), WitnessDown: api.Duration(1600 * time.Millisecond),
		MaxOutage: api.Duration(time.Minute)}
	now := time.Now()
	silent := now.Add(-2 * time.Second)
	_, w1 := witnessAgent(t, ca, "w1", silent)
	w2a, w2 := witnessAgent(t, ca, "w2", silent)
	_, impostor := witnessAgent(t, ca, "w9", silent)
	_, closed := witnessAgent(t, ca, "w3", silent)
	closed.Close()

	ask := func(lastOK time.Time, ws ...api.Witness) (*Agent, bool) {
		a, err := New(Config{Name: "a", Server: "https://s:1", DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		a.lease, a.lastOK, a.witnesses = lease, lastOK, ws
		a.leaseUntil = lastOK.Add(lease.FenceAfter.D())
		a.peerHC = pki.AgentClient(ca.Pool(), nodeKP(t, ca, "a"))
		t.Cleanup(a.peerHC.CloseIdleConnections)
		return a, a.askWitnesses(context.Background())
	}
	both := []api.Witness{{Node: "w1", URL: w1.URL}, {Node: "w2", URL: w2.URL}}

	a, ok := ask(silent, both...)
	if !ok {
		t.Fatalf("both witnesses silent for 2s: lease not extended (%s)", a.noWord)
	}
	if got := time.Until(a.leaseUntil); got < 3*time.Second {
		t.Errorf("lease extended to %s from now, want about FenceAfter (3.5s)", got.Round(time.Millisecond))
	}
	if a, ok := ask(now.Add(-time.Second), both...); ok {
		t.Errorf("extended after 1s of silence, under WitnessDown: a witness's silence means nothing yet (%v)", a.leaseUntil)
	}

	w2a.mu.Lock()
	w2a.lastOK = time.Now().Add(-200 * time.Millisecond)
	w2a.mu.Unlock()
	if a, ok := ask(silent, both...); ok || !strings.Contains(a.noWord, "w2 heard the server") {
		t.Errorf("w2 hears the server: extended %v, word %q", ok, a.noWord)
	}
	w2a.mu.Lock()
	w2a.lastOK = time.Time{} // never had a heartbeat: not hearing the server either
	w2a.mu.Unlock()
	if a, ok := ask(silent, both...); !ok {
		t.Errorf("w2 never heard the server: not extended (%s)", a.noWord)
	}

	for name, ws := range map[string][]api.Witness{
		"unreachable":         {{Node: "w1", URL: w1.URL}, {Node: "w3", URL: closed.URL}},
		"another node's cert": {{Node: "w1", URL: w1.URL}, {Node: "w2", URL: impostor.URL}},
		"no endpoint":         {{Node: "w1", URL: w1.URL}, {Node: "w2"}},
		"no witnesses at all": nil,
		"past the max outage": both,
	} {
		last := silent
		if name == "past the max outage" {
			last = now.Add(-lease.MaxOutage.D())
		}
		if a, ok := ask(last, ws...); ok || a.noWord == "" {
			t.Errorf("%s: extended %v, word %q", name, ok, a.noWord)
		}
	}
}

// TestPeersAskOnlyAboutTheServer: another node's certificate opens the
// witness question and nothing else of the agent's endpoint.
func TestPeersAskOnlyAboutTheServer(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := witnessAgent(t, ca, "w1", time.Now())
	hc := pki.AgentClient(ca.Pool(), nodeKP(t, ca, "peer"))
	defer hc.CloseIdleConnections()
	for path, want := range map[string]int{"/v1/peer/contact": 200, "/v1/logs?task=1/1/0": 403} {
		req := httptest.NewRequest("GET", srv.URL+path, nil).WithContext(pki.ForNode(context.Background(), "w1"))
		req.RequestURI = ""
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s as another node: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestApplyAfterLapsedLeaseStartsNothing: an assignment list applied
// after the lease lapsed (the agent frozen past it, before its fence tick)
// fences the agent and starts no rank: the server may already run that
// attempt elsewhere.
func TestApplyAfterLapsedLeaseStartsNothing(t *testing.T) {
	a, err := New(Config{Name: "a", Server: "https://s:1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a.lease = api.RegisterResponse{FenceAfter: api.Duration(3500 * time.Millisecond)}
	a.lastOK = time.Now().Add(-5 * time.Second)
	a.leaseUntil = a.lastOK.Add(a.lease.FenceAfter.D())
	l := api.AssignmentList{Revision: 7, Assignments: []api.Assignment{{JobID: "1", Attempt: 1, Rank: 0, Command: []string{"sleep", "60"}}}}
	if a.apply(context.Background(), l) {
		t.Error("apply with a lapsed lease applied the list")
	}
	if !a.fenced || len(a.tasks) != 0 {
		t.Errorf("fenced %v, %d ranks started; want fenced and none", a.fenced, len(a.tasks))
	}
}
