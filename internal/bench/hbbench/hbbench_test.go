package hbbench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api/client"
)

// TestMain lets the test binary stand in for gangway: Run starts the
// agents' process as `<exe> bench heartbeats --load URL ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == "heartbeats" {
		os.Exit(Main(context.Background(), os.Args[3:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// The command as a user runs it: agents in their own process, JSON out.
func TestMainWithAgentsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a process of agents; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"-o", "json", "--agents", "30", "--interval", "500ms", "--window", "1500ms",
		"--dir", t.TempDir(), "--timeout", "2m"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if r.InProcess || r.Agents != 30 || r.NodesReady != 30 || r.NodesLost != 0 || r.Heartbeats == 0 || r.HeartbeatErrors != 0 {
		t.Errorf("result %+v: want 30 agents out of process, all ready, beats and no failures", r)
	}
}

// A small fleet in this process: every agent registers, beats within the
// window, acknowledges assignments and stays ready.
func TestRunSmallFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Agents: 40, GPUsPerNode: 8, Interval: 500 * time.Millisecond, Window: 1500 * time.Millisecond,
		Dir: t.TempDir(), InProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.NodesReady != 40 || res.NodesLost != 0 {
		t.Errorf("nodes after the window: %d ready, %d lost; want 40 and 0", res.NodesReady, res.NodesLost)
	}
	if res.Heartbeats == 0 || res.HeartbeatErrors != 0 {
		t.Errorf("%d heartbeats, %d failed: want some and none failed", res.Heartbeats, res.HeartbeatErrors)
	}
	if res.HeartbeatP50Ms > res.HeartbeatP99Ms || res.HeartbeatP99Ms > res.HeartbeatMaxMs {
		t.Errorf("latency quantiles out of order: %+v", res)
	}
	if res.ServerCores <= 0 || res.ServerPeakRSSBytes <= 0 || res.ServerPeakHeap == 0 {
		t.Errorf("server figures missing: %+v", res)
	}
	var b bytes.Buffer
	WriteTable(&b, res)
	for _, want := range []string{"40 (8 fake GPUs each)", "40 ready, 0 lost", "their"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	ok := Config{Agents: 1, GPUsPerNode: 8, Interval: time.Second, Window: time.Second}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"agents", func(c *Config) { c.Agents = 0 }},
		{"gpus-per-node", func(c *Config) { c.GPUsPerNode = 65 }},
		{"interval", func(c *Config) { c.Interval = time.Millisecond }},
		{"window", func(c *Config) { c.Window = 0 }},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "--"+tc.field+" ") {
			t.Errorf("%s: error %v, want one naming it", tc.field, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// The child's protocol: marks on stdin, one JSON object per "stop".
func TestRunLoadAnswersStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	// No server: registrations fail and retry; the window is empty.
	if err := RunLoad(ctx, client.Config{Server: "https://127.0.0.1:1"}, 2, 8, strings.NewReader("start\nstop\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != `{"latencies_ms":[],"errors":0}` {
		t.Errorf("stats %q", got)
	}
}
