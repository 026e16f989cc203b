package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/agent"
)

// readmeScrapeConfig is the README's Prometheus configuration.
func readmeScrapeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(scrape_configs:.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no ```yaml block of scrape_configs")
	}
	return string(m[1])
}

// TestPrometheusScrapesTheCluster runs Debian's real Prometheus against an
// in-process cluster (a server with its gateway, an agent with two fake
// GPUs, a rank holding one of them and writing progress), with the
// README's scrape configuration pointed at them, and checks through
// Prometheus's HTTP API with PromQL that every target is up and that the
// series exist with the right labels and values: the server's (jobs,
// etcd's), the agent's (a GPU in dcgm-exporter's names with the rank on
// it, the rank's progress) and the gateway's.
func TestPrometheusScrapesTheCluster(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("needs Prometheus: apt-get install prometheus (Debian's package; .ci/run installs it)")
	}
	readme := readmeScrapeConfig(t)
	if promtool, err := exec.LookPath("promtool"); err == nil {
		f := filepath.Join(t.TempDir(), "readme.yml")
		if err := os.WriteFile(f, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "config", f).CombinedOutput(); err != nil {
			t.Fatalf("promtool check config of the README's configuration: %v\n%s", err, out)
		}
	}
	gw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := startClusterWith(t, 0, 0, func(c *server.Config) { c.MetricsListen, c.Gateway = "127.0.0.1:0", gw })
	cl.adjustAgent = func(c *agent.Config) { c.MetricsListen, c.GPUMetricsInterval = "127.0.0.1:0", 200*time.Millisecond }
	cl.startAgent("n1", 2)
	cl.waitNodes(1)
	id := cl.submitYAML(`name: metered
ranks: 1
gpusPerRank: 1
command: ["sh", "-c", "echo '{\"step\":5,\"loss\":0.25,\"tokens\":500}' >> $GANGWAY_PROGRESS_FILE; exec sleep 300"]
`)
	cl.waitPhase(id, api.JobRunning, 30*time.Second)

	// A request for a model nobody serves: the gateway's admission
	// turns it away, which its rejections series must show.
	resp, err := http.Post("http://"+gw.Addr().String()+"/v1/completions", "application/json", strings.NewReader(`{"model":"nobody-serves-this","prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("request for an unserved model through the gateway: %s, want 404", resp.Status)
	}

	cl.mu.Lock()
	ag := cl.handles["n1"]
	cl.mu.Unlock()
	targets := map[string]string{
		"gangway-server":  cl.srv.MetricsAddr().String(),
		"gangway-agents":  ag.MetricsAddr().String(),
		"gangway-gateway": gw.Addr().String(),
	}
	// The README's configuration with its targets replaced, and a short
	// interval.
	conf := "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n" + regexp.MustCompile(`(?m)^(\s*- job_name: (\S+)\n\s*static_configs:\n\s*- targets: )\[.*\]$`).
		ReplaceAllStringFunc(readme, func(s string) string {
			sm := regexp.MustCompile(`(?s)^(.*- targets: )\[.*\]$`).FindStringSubmatch(s)
			name := regexp.MustCompile(`job_name: (\S+)`).FindStringSubmatch(s)[1]
			return sm[1] + fmt.Sprintf("[%q]", targets[name])
		})
	for name, addr := range targets {
		if !strings.Contains(conf, addr) {
			t.Fatalf("the README's configuration has no job %s to point at %s:\n%s", name, addr, conf)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := pl.Addr().String()
	pl.Close()
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus's log:\n%s", b)
		}
	})
	base := "http://" + promAddr

	// Every target up, as Prometheus's targets API says.
	cl.wait(60*time.Second, "prometheus to scrape all three targets", func() bool {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Labels map[string]string `json:"labels"`
					Health string            `json:"health"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if promGet(base+"/api/v1/targets", &r) != nil {
			return false
		}
		up := 0
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		return up == 3
	})
	for _, c := range []struct {
		query  string
		labels map[string]string
		ok     func(v float64) bool
		want   string
	}{
		{`up`, nil, func(v float64) bool { return v == 1 }, "1 for each target"},
		{`gangway_jobs{phase="Running"}`, map[string]string{"job": "gangway-server", "queue": "default"}, func(v float64) bool { return v == 1 }, "1"},
		{`gangway_leader`, map[string]string{"job": "gangway-server"}, func(v float64) bool { return v == 1 }, "1"},
		{`gangway_nodes{state="ready"}`, nil, func(v float64) bool { return v == 1 }, "1"},
		{`etcd_server_has_leader{job="gangway-server"}`, nil, func(v float64) bool { return v == 1 }, "1"},
		{fmt.Sprintf(`DCGM_FI_DEV_GPU_UTIL{job_id=%q}`, id), map[string]string{"job": "gangway-agents", "gpu": "0", "modelName": "H100-SXM-80GB",
			"Hostname": "n1", "rank": "0", "queue": "default"}, func(v float64) bool { return v >= 90 }, "at least 90 (%)"},
		{`DCGM_FI_DEV_GPU_UTIL{gpu="1"}`, map[string]string{"Hostname": "n1"}, func(v float64) bool { return v == 0 }, "0: no rank holds it"},
		{fmt.Sprintf(`DCGM_FI_DEV_FB_USED{job_id=%q} + on(gpu, Hostname) DCGM_FI_DEV_FB_FREE{job_id=%q}`, id, id), nil,
			func(v float64) bool { return v > 80000 && v < 82000 }, "an H100's 80 GiB in MiB"},
		{fmt.Sprintf(`gangway_rank_loss{job_id=%q}`, id), map[string]string{"rank": "0", "attempt": "1"}, func(v float64) bool { return v == 0.25 }, "0.25"},
		{fmt.Sprintf(`gangway_rank_step{job_id=%q}`, id), nil, func(v float64) bool { return v == 5 }, "5"},
		{`gangway_gateway_decisions_per_second`, map[string]string{"job": "gangway-gateway", "policy": "prefix-affinity"}, func(v float64) bool { return v == 0 }, "0: nothing routed"},
		{`gangway_gateway_rejections_total{reason="unknown_model"}`, map[string]string{"job": "gangway-gateway", "policy": "prefix-affinity", "model": "nobody-serves-this"},
			func(v float64) bool { return v == 1 }, "1: the one request for it"},
	} {
		var res []promSample
		cl.wait(30*time.Second, "prometheus to have "+c.query, func() bool {
			var err error
			res, err = promQuery(base, c.query)
			return err == nil && len(res) > 0
		})
		for _, r := range res {
			for k, v := range c.labels {
				if r.Metric[k] != v {
					t.Errorf("%s: series %v: label %s=%q; want %q", c.query, r.Metric, k, r.Metric[k], v)
				}
			}
			if !c.ok(r.Value) {
				t.Errorf("%s: series %v = %g; want %s", c.query, r.Metric, r.Value, c.want)
			}
		}
	}
}

type promSample struct {
	Metric map[string]string
	Value  float64
}

// promQuery asks Prometheus's HTTP API for the instant vector of q.
func promQuery(base, q string) ([]promSample, error) {
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := promGet(base+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	var out []promSample
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		var v float64
		if _, err := fmt.Sscan(str, &v); err != nil {
			return nil, fmt.Errorf("value %q: %w", str, err)
		}
		out = append(out, promSample{s.Metric, v})
	}
	return out, nil
}

func promGet(u string, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
