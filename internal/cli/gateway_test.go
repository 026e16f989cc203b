package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// TestGatewayFailsOverAndDeploymentHeals deploys two simulated vLLM
// replicas through the real scheduler and agents, streams requests
// through the server's gateway, kills a replica, and checks that requests
// keep succeeding and the deployment comes back to two ready replicas.
func TestGatewayFailsOverAndDeploymentHeals(t *testing.T) {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwURL := "http://" + gl.Addr().String()
	cl := startClusterWith(t, 2, 2, func(c *server.Config) { c.Gateway = gl })
	f := filepath.Join(t.TempDir(), "qwen.yaml")
	os.WriteFile(f, []byte("name: qwen\nengine: sim\nmodel: Qwen3-8B\nreplicas: 2\n"), 0o644)
	if _, errOut, code := cl.run("deploy", f); code != 0 {
		t.Fatal(errOut)
	}
	ready := func(n int) func() bool {
		return func() bool {
			d, err := cl.c.Deployment(context.Background(), "qwen")
			return err == nil && d.Status.Ready == n && len(d.Status.Replicas) == n
		}
	}
	cl.wait(60*time.Second, "2 ready replicas", ready(2))
	// The gateway learns endpoints on its own refresh.
	cl.wait(10*time.Second, "the gateway routing", func() bool { return stream(gwURL, "warm up") == nil })

	for i := 0; i < 8; i++ {
		if err := stream(gwURL, fmt.Sprintf("request %d about the same long shared prefix", i)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	d, _ := cl.c.Deployment(context.Background(), "qwen")
	victim := d.Status.Replicas[0].JobID
	jd := cl.detail(victim)
	if err := syscall.Kill(-jd.Ranks[len(jd.Ranks)-1].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Requests right after the kill must fail over to the live replica.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stream(gwURL, fmt.Sprintf("after the kill %d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request during failover: %v", err)
	}
	cl.wait(60*time.Second, "the deployment healed", func() bool {
		return ready(2)() && len(cl.detail(victim).Job.Status.Attempts) >= 2
	})
	if err := stream(gwURL, "after healing"); err != nil {
		t.Fatal(err)
	}
	if j := cl.detail(victim); j.Job.Status.Phase != api.JobRunning {
		t.Errorf("healed replica job is %s", j.Job.Status.Phase)
	}
}

// stream sends one streamed chat completion and checks the SSE answer.
func stream(base, prompt string) error {
	body := fmt.Sprintf(`{"model":"Qwen3-8B","stream":true,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, prompt)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, done := 0, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			chunks++
		}
	}
	if !done || chunks == 0 {
		return fmt.Errorf("stream ended after %d chunks without [DONE] (err %v)", chunks, sc.Err())
	}
	return nil
}

// TestAutoscaleUnderLoad: an autoscaled deployment of simulated engines
// with a small KV cache grows when a burst of long requests saturates it.
func TestAutoscaleUnderLoad(t *testing.T) {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwURL := "http://" + gl.Addr().String()
	cl := startClusterWith(t, 1, 4, func(c *server.Config) { c.Gateway = gl })
	f := filepath.Join(t.TempDir(), "d.yaml")
	// 30% of an H100's memory leaves about 60k KV tokens beside the weights.
	os.WriteFile(f, []byte("name: q\nengine: sim\nmodel: Qwen3-8B\nautoscale: true\nminReplicas: 1\nmaxReplicas: 3\nextraArgs: [--gpu-memory-utilization, \"0.3\"]\n"), 0o644)
	if _, errOut, code := cl.run("deploy", f); code != 0 {
		t.Fatal(errOut)
	}
	cl.wait(60*time.Second, "one ready replica", func() bool {
		d, err := cl.c.Deployment(context.Background(), "q")
		return err == nil && d.Status.Ready == 1
	})
	cl.wait(10*time.Second, "the gateway routing", func() bool { return stream(gwURL, "warm up") == nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	long := strings.Repeat("tell me a long story about GPUs and schedulers ", 200)
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"Qwen3-8B","max_tokens":1500,"prompt":%q}`, fmt.Sprint(i)+long)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gwURL+"/v1/completions", strings.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	var d *api.Deployment
	cl.wait(45*time.Second, "the autoscaler to add replicas", func() bool {
		d, _ = cl.c.Deployment(context.Background(), "q")
		return d != nil && d.Status.Desired > 1
	})
	if d.Status.Reason == "" || len(d.Status.Replicas) < 2 {
		t.Errorf("after scaling up: %+v", d.Status)
	}
	t.Logf("scaled to %d: %s", d.Status.Desired, d.Status.Reason)
	cancel()
}

// TestScaleToZeroHoldsFirstRequest: an autoscaled deployment with
// minReplicas 0 runs no replica until a request comes; the gateway holds
// that request while the controller starts one and forwards it once the
// replica is ready; after scaleToZeroAfter without requests the replica
// goes, and the next request is held and served the same way.
func TestScaleToZeroHoldsFirstRequest(t *testing.T) {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwURL := "http://" + gl.Addr().String()
	cl := startClusterWith(t, 1, 2, func(c *server.Config) { c.Gateway = gl })
	f := filepath.Join(t.TempDir(), "z.yaml")
	os.WriteFile(f, []byte("name: z\nengine: sim\nmodel: Qwen3-8B\nautoscale: true\nminReplicas: 0\nmaxReplicas: 1\nscaleToZeroAfter: 3s\n"), 0o644)
	if _, errOut, code := cl.run("deploy", f); code != 0 {
		t.Fatal(errOut)
	}
	atZero := func() bool {
		d, err := cl.c.Deployment(context.Background(), "z")
		return err == nil && d.Status.Desired == 0 && len(d.Status.Replicas) == 0
	}
	cl.wait(20*time.Second, "the deployment at zero replicas", atZero)
	cl.wait(10*time.Second, "the gateway to list the model", func() bool {
		resp, err := http.Get(gwURL + "/v1/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"Qwen3-8B"`)
	})
	seen := map[string]bool{}
	for round := range 2 {
		// Nothing serves the model now: the request waits in the gateway.
		start := time.Now()
		if err := stream(gwURL, fmt.Sprintf("the first request, round %d", round)); err != nil {
			t.Fatalf("round %d: held request: %v", round, err)
		}
		took := time.Since(start)
		d, err := cl.c.Deployment(context.Background(), "z")
		if err != nil || d.Status.Ready != 1 || len(d.Status.Replicas) != 1 {
			t.Fatalf("round %d: after the first request: %+v, %v", round, d.Status, err)
		}
		id := d.Status.Replicas[0].JobID
		if seen[id] {
			t.Fatalf("round %d: served by replica %s of an earlier round, which should be gone", round, id)
		}
		seen[id] = true
		t.Logf("round %d: first request answered after %v by replica %s, started for it", round, took.Round(time.Millisecond), id)
		if err := stream(gwURL, "a second one, straight through"); err != nil {
			t.Fatal(err)
		}
		cl.wait(40*time.Second, "the idle deployment back at zero", atZero)
	}
}
