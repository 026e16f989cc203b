package server

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// TestWitnessesFollowTheFleet: each node gets three other ready nodes as
// witnesses, with their endpoints; a witness lost is replaced, and the set
// before the change is kept in the record until the agent's heartbeat
// shows it holds the new one (until then the lifecycle needs a witness
// heard in both).
func TestWitnessesFollowTheFleet(t *testing.T) {
	e := startAgentEnvWith(t, func(c *Config) { c.HeartbeatInterval = time.Second })
	cs := map[string]*client.Client{}
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		c := e.node(name)
		if err := e.register(c, testNode(name, "https://127.0.0.1:1"+name[1:], nil)); err != nil {
			t.Fatal(err)
		}
		cs[name] = c
		if at, _ := e.s.liveness().Get(name); time.Since(at) > 5*time.Second {
			t.Errorf("%s registered but its last heartbeat is %s old: it could be declared lost at once", name, time.Since(at))
		}
	}
	beat := func(held []string) api.HeartbeatResponse {
		t.Helper()
		resp, err := cs["n1"].Heartbeat(e.ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), Witnesses: held})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var got []string
	if err := wait.Until(e.ctx, 100*time.Millisecond, func() (bool, error) {
		got = names(beat(got).Witnesses)
		return len(got) == 3, nil
	}); err != nil {
		t.Fatalf("n1 never got three witnesses (has %v): %v", got, err)
	}
	resp := beat(got)
	for _, w := range resp.Witnesses {
		if w.Node == "n1" || w.URL != "https://127.0.0.1:1"+w.Node[1:] {
			t.Errorf("witness %+v: not another node with its endpoint", w)
		}
	}
	rec := func() *api.Node {
		n, err := e.s.st.Node(e.ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rec(); !slices.Equal(n.Status.Witnesses, got) || len(n.Status.PrevWitnesses) != 0 {
		t.Fatalf("record has %v (prev %v), the agent %v", n.Status.Witnesses, n.Status.PrevWitnesses, got)
	}

	old := got
	e.lose(old[0])
	var now []string
	if err := wait.Until(e.ctx, 50*time.Millisecond, func() (bool, error) {
		now = names(beat(old).Witnesses)
		return !slices.Contains(now, old[0]), nil
	}); err != nil {
		t.Fatalf("lost witness %s never replaced: %v", old[0], err)
	}
	if len(now) != 2 {
		t.Errorf("after %s was lost n1 has witnesses %v; want the two other ready nodes", old[0], now)
	}
	if n := rec(); !slices.Equal(n.Status.PrevWitnesses, old) {
		t.Errorf("record keeps prev %v; want the set the agent held, %v", n.Status.PrevWitnesses, old)
	}
	beat(old) // the answer was lost: the agent still holds the old set
	if n := rec(); !slices.Equal(n.Status.PrevWitnesses, old) {
		t.Errorf("prev dropped before the agent showed it holds the new set: %v", n.Status.PrevWitnesses)
	}
	beat(now)
	if n := rec(); len(n.Status.PrevWitnesses) != 0 || !slices.Equal(n.Status.Witnesses, now) {
		t.Errorf("after the agent showed the new set: witnesses %v, prev %v", n.Status.Witnesses, n.Status.PrevWitnesses)
	}
}

func names(ws []api.Witness) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Node)
	}
	return out
}

// TestShutdownEndsLongPolls: a server shutting down answers an agent's
// pending long poll, and a blocking events query, at once, saying so,
// rather than holding its exit up for their wait.
func TestShutdownEndsLongPolls(t *testing.T) {
	r := startReplica(t, Config{DataDir: filepath.Join(t.TempDir(), "server"), NodeTimeout: time.Minute})
	s := r.s
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	defer lcancel()
	if err := wait.Until(lctx, 20*time.Millisecond, func() (bool, error) { return s.controller() != nil, nil }); err != nil {
		t.Fatalf("never led: %v", err)
	}
	var err error
	e := &agentEnv{t: t, s: s, url: r.url, ctx: context.Background()}
	e.adm, err = s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.admin = e.clientFor(e.adm)
	n := e.node("n1")
	if err := e.register(n, testNode("n1", "https://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	l, err := n.Assignments(e.ctx, client.AssignmentQuery{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := n.Assignments(e.ctx, client.AssignmentQuery{Node: "n1", Index: l.Revision, Wait: time.Minute})
		polled <- err
	}()
	ev, err := e.admin.Events(e.ctx, client.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() {
		_, err := e.admin.Events(e.ctx, client.EventQuery{Index: ev.Index, Job: "none", Wait: time.Minute})
		followed <- err
	}()
	time.Sleep(500 * time.Millisecond) // the polls wait at the server
	r.stop()
	if err := <-polled; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("pending long poll at shutdown: %v; want an answer saying the server shuts down", err)
	}
	if err := <-followed; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("pending events query at shutdown: %v; want an answer saying the server shuts down", err)
	}
}
