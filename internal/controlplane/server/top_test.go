package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/google/go-cmp/cmp"
)

// TestNodeListCarriesReadingsAndUse: the GPU readings a heartbeat brings
// come back in the node list, an older one does not replace a newer, and
// the list and a running job's view count the GPUs its attempt holds.
func TestNodeListCarriesReadingsAndUse(t *testing.T) {
	e := startAgentEnv(t)
	n1 := e.node("n1")
	node := api.Node{Name: "n1", Address: "10.0.0.1", GPUs: []api.GPU{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}, {Index: 2, UUID: "GPU-2", Health: api.GPUFaulty}}}
	if err := e.register(n1, node); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	beat := func(at time.Time, util float64) {
		t.Helper()
		tel := &api.GPUTelemetry{At: at, GPUs: []api.GPUSample{{Index: 0, UtilPercent: util, MemUsedMiB: 60000, TempC: 70, PowerW: 600}, {Index: 1, UtilPercent: 0, MemUsedMiB: 512, TempC: 33, PowerW: -1}}}
		if _, err := n1.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1", Telemetry: tel}); err != nil {
			t.Fatal(err)
		}
	}
	beat(t0.Add(10*time.Second), 97)
	beat(t0, 12) // late, and older: kept out
	j, err := e.s.st.NewJob(e.ctx, api.JobSpec{Ranks: 1, GPUsPerRank: 1, Queue: "default", Command: []string{"train"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	j.Status = api.JobStatus{Phase: api.JobRunning, StartedAt: t0, Attempts: []api.Attempt{{Number: 1, Phase: api.AttemptRunning, CreatedAt: t0,
		Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0}}}}}}
	if err := e.s.st.CreateJobAs(e.ctx, j, nil); err != nil {
		t.Fatal(err)
	}
	l, err := e.admin.Nodes(e.ctx)
	if err != nil || len(l.Nodes) != 1 {
		t.Fatalf("nodes: %v, %v", l, err)
	}
	st := l.Nodes[0].Status
	if st.Telemetry == nil || !st.Telemetry.At.Equal(t0.Add(10*time.Second)) || st.Telemetry.Sample(0).UtilPercent != 97 || st.UsedGPUs != 1 || st.FreeGPUs != 1 {
		t.Errorf("n1: used %d, free %d, telemetry %+v; want 1 used, 1 free (the third is faulty) and the newer reading", st.UsedGPUs, st.FreeGPUs, st.Telemetry)
	}
	top, err := e.admin.TopJobs(e.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []api.JobTop{{ID: j.ID, Queue: "default", Attempt: 1, Nodes: []string{"n1"}, GPUs: 1, Sampled: 1, UtilPercent: 97, MemUsedMiB: 60000}}
	if d := cmp.Diff(want, top.Jobs); d != "" {
		t.Errorf("top jobs (-want +got):\n%s", d)
	}
	if top, err := e.admin.TopJobs(e.ctx, "nobody"); err != nil || len(top.Jobs) != 0 {
		t.Errorf("top jobs of nobody: %+v, %v; want none", top.Jobs, err)
	}
	for _, tc := range []struct{ path, field string }{{"/v1/nodes?wiat=5s", "wiat"}, {"/v1/top/jobs?usr=al", "usr"}} {
		err := e.admin.Get(e.ctx, tc.path, &struct{}{})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != tc.field || !strings.Contains(err.Error(), "unknown query parameter") {
			t.Errorf("%s: %v; want a 400 naming %s", tc.path, err, tc.field)
		}
	}
}
