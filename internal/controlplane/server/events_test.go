package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// eventLines is each event as "Name Reason".
func eventLines(evs []api.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Name+" "+e.Reason)
	}
	return out
}

// waitEvents waits until the events q lists include every line of want
// ("Name Reason"), in that order, and returns them.
func waitEvents(t *testing.T, c *client.Client, q client.EventQuery, want ...string) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var evs []api.Event
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		l, err := c.Events(ctx, q)
		if err != nil {
			return false, err
		}
		evs = l.Events
		lines, k := eventLines(evs), 0
		for _, l := range lines {
			if k < len(want) && l == want[k] {
				k++
			}
		}
		return k == len(want), nil
	}); err != nil {
		t.Fatalf("events %+v: never had %q in order (last: %q): %v", q, want, eventLines(evs), err)
	}
	return evs
}

// TestEventsAPI: a job's and its nodes' events are listed by job and by
// node; a blocking query waits for an event its filter keeps; a node lost
// under a job tells on the node and on the job; a viewer reads them; and
// a filter the API does not know, or a since it cannot read, is refused
// naming the parameter.
func TestEventsAPI(t *testing.T) {
	e := startAgentEnv(t)
	// No event yet: the index to follow from is still past everything
	// written, or a follower would ask again and again at once.
	if l, err := e.admin.Events(e.ctx, client.EventQuery{}); err != nil || len(l.Events) != 0 || l.Index == 0 {
		t.Fatalf("events of a new cluster: %+v, %v; want none, at an index past 0", l, err)
	}
	e.twoNodes()
	id, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 1, "gpusPerRank": 2, "command": ["sleep", "1000"]}`))
	if err != nil {
		t.Fatal(err)
	}
	waitEvents(t, e.admin, client.EventQuery{Job: id}, id+" Submitted", id+" Scheduled")
	d, err := e.admin.Job(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	on, other := d.Job.Status.Current().Placement[0].Node, "n1"
	if on == "n1" {
		other = "n2"
	}
	evs := waitEvents(t, e.admin, client.EventQuery{Node: on}, on+" Registered", id+" Scheduled")
	if slices.Contains(eventLines(evs), other+" Registered") {
		t.Errorf("%s's events include %s's: %q", on, other, eventLines(evs))
	}
	for _, ev := range evs {
		if ev.Index == 0 || ev.Time.IsZero() || ev.Message == "" || ev.Type != api.EventNormal {
			t.Errorf("event %+v: want an index, a time, a message and type Normal", ev)
		}
	}

	// A blocking query for the other node's events waits until one comes.
	l, err := e.admin.Events(e.ctx, client.EventQuery{Node: other})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan api.EventList, 1)
	go func() {
		l, err := e.admin.Events(e.ctx, client.EventQuery{Node: other, Index: l.Index, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		t.Fatalf("the blocking query returned at once: %q", eventLines(l.Events))
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := e.admin.NodeAction(e.ctx, other, "cordon"); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if lines := eventLines(l.Events); !slices.Equal(lines, []string{other + " Cordoned"}) || l.Index < l.Events[0].Index {
			t.Errorf("the blocking query answered %q at index %d; want %s Cordoned", lines, l.Index, other)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the blocking query did not return when %s was cordoned", other)
	}

	// The job's node is lost: the node and the job tell it, and the job
	// waits, the other node being cordoned.
	e.lose(on)
	waitEvents(t, e.admin, client.EventQuery{Node: on}, on+" NodeLost", id+" NodeLost")
	evs = waitEvents(t, e.user("vera", api.RoleViewer), client.EventQuery{Job: id, Since: "1h"}, id+" Submitted", id+" Scheduled", id+" NodeLost", id+" Waiting")
	lost := evs[slices.Index(eventLines(evs), id+" NodeLost")]
	if lost.Type != api.EventWarning || lost.Attempt != 1 || !strings.Contains(lost.Message, "node "+on+" lost") {
		t.Errorf("the job's NodeLost: %+v; want attempt 1 lost with %s, a warning", lost, on)
	}
	if l, err := e.admin.Events(e.ctx, client.EventQuery{Job: id, Limit: 1}); err != nil || len(l.Events) != 1 || l.Events[0].Reason != api.ReasonWaiting {
		t.Errorf("the job's newest event: %+v, %v; want Waiting alone", l.Events, err)
	}

	for _, tt := range []struct{ query, field, says string }{
		{"jbo=" + id, "jbo", "unknown parameter"},
		{"since=yesterday", "since", "RFC 3339"},
		{"since=-2h", "since", "negative"},
		{"limit=0", "limit", "positive"},
		{"kind=pod", "kind", "want job, node"},
		{"index=x", "index", "non-negative"},
	} {
		err := e.admin.Get(e.ctx, "/v1/events?"+tt.query, nil)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || len(ae.Fields) != 1 || ae.Fields[0].Field != tt.field || !strings.Contains(ae.Fields[0].Msg, tt.says) {
			t.Errorf("GET /v1/events?%s: %v; want a 400 naming %s (%q)", tt.query, err, tt.field, tt.says)
		}
	}
}

// TestEventsSurviveARestart: the events a server wrote are there after it
// restarts on the same data directory, at the same indexes; and the
// restarted leader tells nothing again of the state it found.
func TestEventsSurviveARestart(t *testing.T) {
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "server")}
	s1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c1, _, stop := runServer(t, s1)
	waitLeader(t, c1, time.Minute)
	ctx := context.Background()
	if _, err := c1.SetQueue(ctx, api.QueueSpec{Name: "research", GuaranteeGPUs: 8}); err != nil {
		t.Fatal(err)
	}
	before := waitEvents(t, c1, client.EventQuery{}, "research Created")
	stop()

	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c2, _, stop2 := runServer(t, s2)
	defer stop2()
	l, err := c2.Events(ctx, client.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(l.Events) != fmt.Sprint(before) {
		t.Fatalf("after the restart: %+v\nbefore: %+v", l.Events, before)
	}
	waitLeader(t, c2, time.Minute)
	if _, err := c2.SetQueue(ctx, api.QueueSpec{Name: "prod", GuaranteeGPUs: 4}); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, c2, client.EventQuery{}, "research Created", "prod Created")
	if len(evs) != 2 {
		t.Errorf("events after the restart: %q; want research's and prod's alone", eventLines(evs))
	}
}

// TestEventsOnEveryReplicaNoStormAtFailover: two replicas on one etcd;
// the one that does not lead serves the events the leader writes, a
// blocking query on it included; when the leader stops, the other leads
// and tells what changes from then on, and nothing again of what was.
func TestEventsOnEveryReplicaNoStormAtFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, cfg := sharedEtcd(t, ctx)
	r1 := startReplica(t, cfg("s1"))
	adm, err := r1.s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	adm.Retries = -1
	c1, err := client.New(adm)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.CloseIdleConnections()
	waitLeader(t, c1, time.Minute)
	r2 := startReplica(t, cfg("s2"))
	adm.Server = r2.url
	c2, err := client.New(adm)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseIdleConnections()

	if _, err := c1.SetQueue(ctx, api.QueueSpec{Name: "research", GuaranteeGPUs: 8}); err != nil {
		t.Fatal(err)
	}
	l := waitEvents(t, c2, client.EventQuery{Kind: api.KindQueue}, "research Created")
	got := make(chan []api.Event, 1)
	go func() {
		l, err := c2.Events(ctx, client.EventQuery{Kind: api.KindQueue, Index: l[len(l)-1].Index, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l.Events
	}()
	time.Sleep(200 * time.Millisecond) // the query waits at the replica
	if _, err := c1.SetQueue(ctx, api.QueueSpec{Name: "prod", GuaranteeGPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if evs := <-got; !slices.Equal(eventLines(evs), []string{"prod Created"}) {
		t.Errorf("the blocking query on the replica that does not lead answered %q; want prod Created", eventLines(evs))
	}

	r1.stop()
	waitLeader(t, c2, time.Minute)
	if _, err := c2.SetQueue(ctx, api.QueueSpec{Name: "prod", GuaranteeGPUs: 16}); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, c2, client.EventQuery{}, "research Created", "prod Created", "prod Changed")
	if !slices.Equal(eventLines(evs), []string{"research Created", "prod Created", "prod Changed"}) {
		t.Errorf("events after the failover: %q; want each change told once", eventLines(evs))
	}
}
