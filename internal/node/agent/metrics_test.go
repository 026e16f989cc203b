package agent

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/gpu"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsLabelGPUsWithTheirRankAndReportProgress: each GPU is
// reported in dcgm-exporter's names with the rank holding it (job_id,
// rank, queue, user; empty for an idle GPU), its readings following its
// load, and a running rank's progress gives its step, loss, tokens and
// tokens a second.
func TestMetricsLabelGPUsWithTheirRankAndReportProgress(t *testing.T) {
	disc, err := gpu.NewFake(2, "H100-SXM-80GB", gpu.WithSeed("n1"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Server: "https://127.0.0.1:1", Name: "n1", DataDir: t.TempDir(), GPUs: disc})
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{asg: api.Assignment{JobID: "7", Attempt: 2, Rank: 3, GPUs: []int{1}, Queue: "research", User: "alice"},
		status: api.RankStatus{State: api.RankRunning}}
	loss := 0.5
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tk.noteProgressLocked([]api.Progress{{Step: 10, Tokens: 1000, Time: t0}, {Step: 11, Tokens: 3000, Loss: &loss, Time: t0.Add(2 * time.Second)}})
	a.tasks["7/2/3"] = tk
	busy := a.busyGPUs()
	a.gm.latest, err = disc.(gpu.Sampler).Sample(context.Background(), func(i int) bool { return busy[i] })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	find := func(name string, labels map[string]string) (float64, bool) {
		for _, m := range byName[name].GetMetric() {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && got[k] == v
			}
			if match {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	held := map[string]string{"gpu": "1", "device": "nvidia1", "modelName": "H100-SXM-80GB", "Hostname": "n1",
		"job_id": "7", "rank": "3", "queue": "research", "user": "alice"}
	idle := map[string]string{"gpu": "0", "job_id": "", "rank": "", "user": ""}
	prog := map[string]string{"job_id": "7", "attempt": "2", "rank": "3", "queue": "research", "user": "alice"}
	for _, c := range []struct {
		name     string
		labels   map[string]string
		min, max float64
	}{
		{"DCGM_FI_DEV_GPU_UTIL", held, 90, 100},
		{"DCGM_FI_DEV_GPU_UTIL", idle, 0, 0},
		{"DCGM_FI_DEV_FB_USED", held, 40000, 81559},
		{"DCGM_FI_DEV_FB_FREE", idle, 70000, 81559},
		{"DCGM_FI_DEV_GPU_TEMP", held, 60, 80},
		{"DCGM_FI_DEV_POWER_USAGE", held, 500, 700},
		{"DCGM_FI_DEV_SM_CLOCK", idle, 300, 400},
		{"DCGM_FI_DEV_XID_ERRORS", held, 0, 0},
		{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", held, 0, 0},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", held, 1, 1e12},
		{"gangway_rank_step", prog, 11, 11},
		{"gangway_rank_loss", prog, 0.5, 0.5},
		{"gangway_rank_tokens_total", prog, 3000, 3000},
		{"gangway_rank_tokens_per_second", prog, 1000, 1000},
	} {
		v, ok := find(c.name, c.labels)
		if !ok || v < c.min || v > c.max {
			t.Errorf("%s%v = %g (found: %v); want %g..%g", c.name, c.labels, v, ok, c.min, c.max)
		}
	}
}

// TestHeartbeatsCarryEachNewReadingOnce: a reading goes in heartbeats
// until one that carried it is answered, then not again until the GPUs
// are read anew; a reading the device does not give travels as -1.
func TestHeartbeatsCarryEachNewReadingOnce(t *testing.T) {
	a, err := New(Config{Server: "https://127.0.0.1:1", Name: "n1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if hb := a.snapshotReport(); hb.Telemetry != nil {
		t.Fatalf("telemetry %+v before any reading", hb.Telemetry)
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	read := func(at time.Time, util float64) {
		a.gm.mu.Lock()
		a.gm.latest = []gpu.Telemetry{{Index: 0, UtilPercent: util, FBUsedMiB: 512, TempC: 33, PowerW: math.NaN()}}
		a.gm.at = at
		a.gm.mu.Unlock()
	}
	read(t0, 0)
	hb := a.snapshotReport()
	want := &api.GPUTelemetry{At: t0, GPUs: []api.GPUSample{{Index: 0, UtilPercent: 0, MemUsedMiB: 512, TempC: 33, PowerW: -1}}}
	if diff := cmp.Diff(want, hb.Telemetry); diff != "" {
		t.Fatalf("first heartbeat's telemetry (-want +got):\n%s", diff)
	}
	if again := a.snapshotReport(); again.Telemetry == nil {
		t.Fatal("a reading no answered heartbeat carried is not sent again")
	}
	a.mu.Lock()
	a.reportedLocked(hb, api.HeartbeatResponse{Unstored: true}) // heard, if not stored
	a.mu.Unlock()
	if hb := a.snapshotReport(); hb.Telemetry != nil {
		t.Errorf("the same reading sent again: %+v", hb.Telemetry)
	}
	read(t0.Add(10*time.Second), 95)
	if hb := a.snapshotReport(); hb.Telemetry == nil || hb.Telemetry.GPUs[0].UtilPercent != 95 {
		t.Errorf("a new reading: heartbeat telemetry %+v; want it, at 95%%", hb.Telemetry)
	}
}
