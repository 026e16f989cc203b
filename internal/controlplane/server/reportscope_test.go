package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/launch"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// twoNodes registers n1 and n2 and returns their agents' clients.
func (e *agentEnv) twoNodes() map[string]*client.Client {
	e.t.Helper()
	out := map[string]*client.Client{}
	for _, name := range []string{"n1", "n2"} {
		c := e.node(name)
		if err := e.register(c, testNode(name, "https://127.0.0.1:1", nil)); err != nil {
			e.t.Fatal(err)
		}
		out[name] = c
	}
	return out
}

// placed submits a job of two ranks of two GPUs (one per node) and
// returns it once the server's cache holds it placed.
func (e *agentEnv) placed(c *client.Client) *api.Job {
	e.t.Helper()
	id, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 2, "gpusPerRank": 2, "command": ["sleep", "1000"]}`))
	if err != nil {
		e.t.Fatal(err)
	}
	var j *api.Job
	wctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	if err := wait.Until(wctx, 5*time.Millisecond, func() (bool, error) {
		j, _ = e.s.cache.Job(id)
		return j != nil && j.Status.Current() != nil, nil
	}); err != nil {
		e.t.Fatalf("job %s never placed: %v", id, err)
	}
	return j
}

// keys counts the store's keys but the events (which the leader writes
// on its own, when it gets to them).
func (e *agentEnv) keys() int64 {
	e.t.Helper()
	resp, err := e.s.st.Client().Get(e.ctx, store.Root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	n := int64(0)
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); !strings.HasPrefix(k, store.EventsPrefix) && !strings.HasPrefix(k, store.EventLeasesPrefix) {
			n++
		}
	}
	return n
}

// TestReportsOfUnknownJobsLeaveNoKey: a registered node reporting ranks,
// checkpoints and progress of jobs that do not exist gets them all
// refused, and etcd holds not one key more.
func TestReportsOfUnknownJobsLeaveNoKey(t *testing.T) {
	e := startAgentEnv(t)
	agents := e.twoNodes()
	before := e.keys()
	for i := range 5 {
		hb := &api.Heartbeat{Node: "n1"}
		for r := range 20 {
			id := fmt.Sprint(1000 + i*20 + r)
			hb.Ranks = append(hb.Ranks, api.RankStatus{JobID: id, Attempt: 1, Rank: r, State: api.RankRunning})
			hb.Progress = append(hb.Progress, api.Progress{JobID: id, Attempt: 1, Rank: r, Step: 1})
			hb.Checkpoints = append(hb.Checkpoints, api.CheckpointReport{JobID: id, Checkpoint: api.Checkpoint{Step: 1, Attempt: 1, Path: "/ckpt/" + id + "/1"}})
		}
		resp, err := agents["n1"].Heartbeat(e.ctx, hb)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Refused != 60 {
			t.Errorf("heartbeat %d: %d refused; want 60", i, resp.Refused)
		}
	}
	if after := e.keys(); after != before {
		t.Errorf("reports of unknown jobs added %d keys", after-before)
	}
	if got := e.s.RefusedReports(); got != 300 {
		t.Errorf("server counted %d refused reports; want 300", got)
	}
}

// TestReportsAreNodeScoped: a node reports only the ranks placed on it,
// and checkpoints only under the job's checkpoint directory; what it may
// not report is refused and not stored.
func TestReportsAreNodeScoped(t *testing.T) {
	e := startAgentEnv(t)
	agents := e.twoNodes()
	j := e.placed(agents["n1"])
	a := j.Status.Current()
	rankOn := map[string]int{}
	for _, p := range a.Placement {
		rankOn[p.Node] = p.Rank
	}
	if len(rankOn) != 2 {
		t.Fatalf("placement %+v; want one rank per node", a.Placement)
	}
	dir := launch.CheckpointDir(j, e.s.cfg.CheckpointRoot)
	exited := func(rank int) api.RankStatus {
		return api.RankStatus{JobID: j.ID, Attempt: a.Number, Rank: rank, State: api.RankExited, ExitCode: 1}
	}
	ckpt := func(path string) api.CheckpointReport {
		return api.CheckpointReport{JobID: j.ID, Checkpoint: api.Checkpoint{Step: 7, Attempt: a.Number, Path: path, Time: time.Now()}}
	}
	for _, tc := range []struct {
		name    string
		node    string
		hb      api.Heartbeat
		refused int
	}{
		{"another node's rank failed", "n2", api.Heartbeat{Ranks: []api.RankStatus{exited(rankOn["n1"])}}, 1},
		{"a rank of an attempt that does not exist", "n1", api.Heartbeat{Ranks: []api.RankStatus{{JobID: j.ID, Attempt: a.Number + 5, Rank: rankOn["n1"], State: api.RankRunning}}}, 1},
		{"a rank the job does not have", "n1", api.Heartbeat{Ranks: []api.RankStatus{{JobID: j.ID, Attempt: a.Number, Rank: 9, State: api.RankRunning}}}, 1},
		{"another node's rank's progress", "n2", api.Heartbeat{Progress: []api.Progress{{JobID: j.ID, Attempt: a.Number, Rank: rankOn["n1"], Step: 5}}}, 1},
		{"a checkpoint outside the directory", "n1", api.Heartbeat{Checkpoints: []api.CheckpointReport{ckpt("/tmp/evil/7")}}, 1},
		{"a checkpoint climbing out with ..", "n1", api.Heartbeat{Checkpoints: []api.CheckpointReport{ckpt(dir + "/../../../tmp/evil")}}, 1},
		{"a checkpoint that is the directory's sibling", "n1", api.Heartbeat{Checkpoints: []api.CheckpointReport{ckpt(dir + "-evil/7")}}, 1},
		{"a relative checkpoint", "n1", api.Heartbeat{Checkpoints: []api.CheckpointReport{ckpt("7")}}, 1},
		{"its own rank runs, with progress", "n1", api.Heartbeat{
			Ranks:    []api.RankStatus{{JobID: j.ID, Attempt: a.Number, Rank: rankOn["n1"], State: api.RankRunning}},
			Progress: []api.Progress{{JobID: j.ID, Attempt: a.Number, Rank: rankOn["n1"], Step: 3}},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := tc.hb
			hb.Node = tc.node
			resp, err := agents[tc.node].Heartbeat(e.ctx, &hb)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Refused != tc.refused {
				t.Errorf("%d refused; want %d", resp.Refused, tc.refused)
			}
		})
	}
	rs, err := e.s.st.RankStatuses(e.ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Node != "n1" || rs[0].State != api.RankRunning {
		t.Errorf("stored rank statuses %+v; want n1's rank running alone", rs)
	}
	if cks, err := e.s.st.Checkpoints(e.ctx, j.ID); err != nil || len(cks) != 0 {
		t.Errorf("stored checkpoints %+v (%v); want none", cks, err)
	}
	if pl, err := e.s.st.Progress(e.ctx, j.ID); err != nil || pl.Latest.Step != 3 {
		t.Errorf("stored progress %+v (%v); want n1's step 3 alone", pl, err)
	}
	// A checkpoint under the directory is the node's to report.
	hb := api.Heartbeat{Node: "n1", Checkpoints: []api.CheckpointReport{ckpt(filepath.Join(dir, "7"))}}
	if resp, err := agents["n1"].Heartbeat(e.ctx, &hb); err != nil || resp.Refused != 0 {
		t.Fatalf("own checkpoint: %+v, %v", resp, err)
	}
	if ck, err := e.s.st.LatestCheckpoint(e.ctx, j.ID); err != nil || ck == nil || ck.Path != filepath.Join(dir, "7") {
		t.Errorf("latest checkpoint %+v (%v); want the one under %s", ck, err, dir)
	}
	if cur, _ := e.s.cache.Job(j.ID); cur == nil || cur.Status.Phase != api.JobRunning {
		t.Errorf("job after the forged reports: %+v; want it running", cur)
	}
}

// TestReportScopeAttempts: a node may report its ranks of the current
// attempt and of the one before (whose last statuses may come while the
// next starts), not of older ones, and not another node's.
func TestReportScopeAttempts(t *testing.T) {
	on := func(n int, nodes ...string) api.Attempt {
		a := api.Attempt{Number: n}
		for r, node := range nodes {
			a.Placement = append(a.Placement, api.RankPlacement{Rank: r, Node: node})
		}
		return a
	}
	j := &api.Job{ID: "7"}
	j.Status.Attempts = []api.Attempt{on(1, "n1", "n2"), on(2, "n2", "n3"), on(3, "n3", "n1")}
	for _, tc := range []struct {
		name          string
		attempt, rank int
		node          string
		want          bool
	}{
		{"current attempt, own rank", 3, 1, "n1", true},
		{"current attempt, another node's rank", 3, 0, "n1", false},
		{"previous attempt, own rank", 2, 0, "n2", true},
		{"previous attempt, another node's rank", 2, 1, "n2", false},
		{"older attempt, own rank", 1, 0, "n1", false},
		{"attempt to come", 4, 0, "n3", false},
		{"rank out of range", 3, 2, "n1", false},
		{"negative rank", 3, -1, "n1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := attempt(j, tc.attempt)
			if got := a != nil && holds(a, tc.rank, tc.node); got != tc.want {
				t.Errorf("got %v; want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkScreenReports: the cost screening adds to a heartbeat of 16
// ranks' statuses and progress (the reporting node's own, all kept).
func BenchmarkScreenReports(b *testing.B) {
	e := startAgentEnv(b)
	agents := e.twoNodes()
	j := e.placed(agents["n1"])
	a := j.Status.Current()
	var hb api.Heartbeat
	for _, p := range a.Placement {
		if p.Node == "n1" {
			for range 16 {
				hb.Ranks = append(hb.Ranks, api.RankStatus{JobID: j.ID, Attempt: a.Number, Rank: p.Rank, State: api.RankRunning})
				hb.Progress = append(hb.Progress, api.Progress{JobID: j.ID, Attempt: a.Number, Rank: p.Rank, Step: 1})
			}
		}
	}
	ranks, prog := hb.Ranks, hb.Progress
	b.ReportAllocs()
	for b.Loop() {
		hb := api.Heartbeat{Node: "n1", Ranks: ranks, Progress: prog}
		if n, err := e.s.screenReports(e.ctx, &hb); n != 0 || err != nil {
			b.Fatal("refused the node's own reports")
		}
	}
}

// TestRepeatedStatusOfFinishedJobIsNoRefusal: an agent repeats a rank's
// last status until it sees the rank unassigned; when the job finished
// meanwhile, the repeat is no refusal, while any other report of the
// finished job is one.
func TestRepeatedStatusOfFinishedJobIsNoRefusal(t *testing.T) {
	e := startAgentEnv(t)
	agents := e.twoNodes()
	j := e.placed(agents["n1"])
	a := j.Status.Current()
	last := map[string]api.RankStatus{}
	for _, p := range a.Placement {
		last[p.Node] = api.RankStatus{JobID: j.ID, Attempt: a.Number, Rank: p.Rank, State: api.RankExited}
		hb := api.Heartbeat{Node: p.Node, Ranks: []api.RankStatus{last[p.Node]}}
		if resp, err := agents[p.Node].Heartbeat(e.ctx, &hb); err != nil || resp.Refused != 0 {
			t.Fatalf("%s's exit: %+v, %v", p.Node, resp, err)
		}
	}
	wctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	if err := wait.Until(wctx, 5*time.Millisecond, func() (bool, error) {
		_, live := e.s.cache.Job(j.ID)
		return !live, nil
	}); err != nil {
		t.Fatalf("job never finished: %v", err)
	}
	again := api.Heartbeat{Node: "n1", Ranks: []api.RankStatus{last["n1"]}}
	if resp, err := agents["n1"].Heartbeat(e.ctx, &again); err != nil || resp.Refused != 0 {
		t.Errorf("repeated last status: %+v, %v; want accepted (and not stored again)", resp, err)
	}
	changed := last["n1"]
	changed.ExitCode = 3
	other := api.Heartbeat{Node: "n1", Ranks: []api.RankStatus{changed}}
	if resp, err := agents["n1"].Heartbeat(e.ctx, &other); err != nil || resp.Refused != 1 {
		t.Errorf("a new status of a finished job: %+v, %v; want refused", resp, err)
	}
}

// TestScreenWaitsForTheCacheList: a server whose cache has not listed the
// store yet (just started) refuses nothing: it fails the heartbeat, and
// the agent keeps its reports for the next one.
func TestScreenWaitsForTheCacheList(t *testing.T) {
	s := &Server{cache: store.NewCache(nil, slog.New(slog.DiscardHandler)), written: map[string]api.RankStatus{}}
	hb := api.Heartbeat{Node: "n1", Ranks: []api.RankStatus{{JobID: "1", Attempt: 1, State: api.RankRunning}}}
	n, err := s.screenReports(context.Background(), &hb)
	if err == nil || n != 0 || len(hb.Ranks) != 1 || s.RefusedReports() != 0 {
		t.Errorf("screen before the cache listed: %d refused, %v, %d ranks left; want an error and nothing refused", n, err, len(hb.Ranks))
	}
}
