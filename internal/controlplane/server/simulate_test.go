package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

// fakeSimulator answers one run per policy whose summary counts the
// trace's lines; a trace reading "block" waits until release closes (or
// its context ends).
type fakeSimulator struct {
	started chan struct{} // receives when a blocked run has started
	release chan struct{}
}

func (fakeSimulator) Policies() []string { return []string{"gangway", "fifo"} }

func (f fakeSimulator) Simulate(ctx context.Context, name string, r io.Reader, req api.SimulateRequest) (*api.SimulateResult, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(b)) == "block" {
		f.started <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for _, p := range req.Policies {
		if p != "gangway" && p != "fifo" {
			return nil, api.ErrorForField("policies", "unknown policy %q", p)
		}
	}
	lines := strings.Count(strings.TrimSpace(string(b)), "\n")
	res := &api.SimulateResult{Trace: name, Jobs: lines, GPUs: 8 * req.Nodes}
	for _, p := range req.Policies {
		res.Runs = append(res.Runs, api.SimRun{Summary: api.SimSummary{Policy: p, Jobs: lines}})
	}
	return res, nil
}

// simServer is a server with only the simulate routes, f as its
// simulator (nil: none) and dir as its trace directory; requests go in as
// alice, a user.
func simServer(t *testing.T, sim Simulator, dir string) func(method, path, body string) (int, string) {
	t.Helper()
	cfg := Config{Simulator: sim, TraceDir: dir}
	cfg.applyDefaults()
	s := &Server{cfg: cfg, log: cfg.Log}
	mux := http.NewServeMux()
	s.simulateRoutes(mux)
	return func(method, path, body string) (int, string) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r = asWho(r, &api.Who{Name: "alice", Kind: kindUser, Role: api.RoleUser})
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
}

const tinyTrace = "id,submit,duration,gpus\na,0,60,1\nb,10,120,2\n"

func traceDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"tiny.csv": tinyTrace, ".hidden.csv": tinyTrace} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSimulateAPI: without a simulator both routes answer 501; bad input
// answers 400 naming the field; a named or uploaded tiny trace answers
// each policy's summary; the list shows the directory's plain files.
func TestSimulateAPI(t *testing.T) {
	t.Run("no simulator", func(t *testing.T) {
		do := simServer(t, nil, "")
		for _, c := range [][2]string{{"GET", "/v1/simulate/traces"}, {"POST", "/v1/simulate"}} {
			code, body := do(c[0], c[1], `{"trace": "tiny.csv", "nodes": 1}`)
			if code != http.StatusNotImplemented || !strings.Contains(body, "no simulator") {
				t.Errorf("%s %s: %d %s; want 501 saying there is no simulator", c[0], c[1], code, body)
			}
		}
	})

	do := simServer(t, fakeSimulator{}, traceDir(t))
	t.Run("traces", func(t *testing.T) {
		code, body := do("GET", "/v1/simulate/traces", "")
		var got api.SimulateTraces
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%d %s (%v)", code, body, err)
		}
		want := api.SimulateTraces{TraceDir: true, Traces: []api.SimTrace{{Name: "tiny.csv", Bytes: int64(len(tinyTrace))}},
			Policies: []string{"gangway", "fifo"}, DefaultPolicy: "gangway", MaxTraceBytes: api.MaxTraceBytes}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("traces (-want +got):\n%s", d)
		}
	})

	for _, c := range []struct {
		name, body string
		field      string // "" for a success
	}{
		{"no trace", `{"nodes": 1}`, "trace"},
		{"both", `{"trace": "tiny.csv", "traceData": "x", "nodes": 1}`, "trace"},
		{"a path", `{"trace": "../etc/passwd", "nodes": 1}`, "trace"},
		{"hidden", `{"trace": ".hidden.csv", "nodes": 1}`, "trace"},
		{"no such trace", `{"trace": "nope.csv", "nodes": 1}`, "trace"},
		{"a directory", `{"trace": "sub", "nodes": 1}`, "trace"},
		{"no cluster", `{"trace": "tiny.csv"}`, "nodes"},
		{"nodes and load", `{"trace": "tiny.csv", "nodes": 2, "load": 0.5}`, "nodes"},
		{"negative load", `{"trace": "tiny.csv", "load": -1}`, "load"},
		{"a string for nodes", `{"trace": "tiny.csv", "nodes": "2"}`, "nodes"},
		{"an unknown field", `{"trace": "tiny.csv", "nodes": 2, "policy": "fifo"}`, "policy"},
		{"not JSON", `trace=tiny.csv`, ""},
		{"more after the object", `{"trace": "tiny.csv", "nodes": 1} {}`, ""},
		{"the simulator's own check", `{"trace": "tiny.csv", "nodes": 1, "policies": ["nope"]}`, "policies"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := do("POST", "/v1/simulate", c.body)
			var eb api.ErrorBody
			_ = json.Unmarshal([]byte(body), &eb)
			if code != http.StatusBadRequest {
				t.Fatalf("%d %s; want 400", code, body)
			}
			if c.field != "" && (len(eb.Fields) == 0 || eb.Fields[0].Field != c.field) {
				t.Errorf("%s; want the field %q named", body, c.field)
			}
		})
	}

	for _, c := range []struct{ name, body, trace string }{
		{"named", `{"trace": "tiny.csv", "nodes": 1, "policies": ["gangway", "fifo"]}`, "tiny.csv"},
		{"uploaded", `{"traceData": ` + jsonString(tinyTrace) + `, "traceName": "dir/mine.csv", "nodes": 1, "policies": ["gangway", "fifo"]}`, "mine.csv"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := do("POST", "/v1/simulate", c.body)
			var got api.SimulateResult
			if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
				t.Fatalf("%d %s (%v)", code, body, err)
			}
			got.Seconds = 0
			want := api.SimulateResult{Trace: c.trace, Jobs: 2, GPUs: 8, Runs: []api.SimRun{
				{Summary: api.SimSummary{Policy: "gangway", Jobs: 2}}, {Summary: api.SimSummary{Policy: "fifo", Jobs: 2}}}}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}

	t.Run("no trace directory", func(t *testing.T) {
		do := simServer(t, fakeSimulator{}, "")
		code, body := do("POST", "/v1/simulate", `{"trace": "tiny.csv", "nodes": 1}`)
		if code != 400 || !strings.Contains(body, "--trace-dir") {
			t.Errorf("%d %s; want 400 naming --trace-dir", code, body)
		}
		code, body = do("GET", "/v1/simulate/traces", "")
		if code != 200 || !strings.Contains(body, `"traceDir":false,"traces":[]`) {
			t.Errorf("the list: %d %s; want no directory, no traces", code, body)
		}
	})

	t.Run("too big an upload", func(t *testing.T) {
		big := `{"nodes": 1, "traceData": "` + strings.Repeat("x", api.MaxTraceBytes+1) + `"}`
		code, body := do("POST", "/v1/simulate", big)
		if code != 400 || !strings.Contains(body, `"field":"traceData"`) || !strings.Contains(body, "64 MiB") {
			t.Errorf("%d %.300s; want 400 naming traceData and its bound", code, body)
		}
	})
}

// TestSimulateOneAtATime: while a run goes on, another is refused with 429
// saying whose it is; once it ends, the next runs.
func TestSimulateOneAtATime(t *testing.T) {
	f := fakeSimulator{started: make(chan struct{}), release: make(chan struct{})}
	do := simServer(t, f, "")
	done := make(chan int)
	go func() {
		code, _ := do("POST", "/v1/simulate", `{"traceData": "block", "nodes": 1, "policies": ["fifo"]}`)
		done <- code
	}()
	select {
	case <-f.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never started")
	}
	code, body := do("POST", "/v1/simulate", `{"traceData": "a\nb", "nodes": 1}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "alice's") || !strings.Contains(body, "one runs at a time") {
		t.Errorf("a second run while one goes on: %d %s; want 429 saying whose runs", code, body)
	}
	close(f.release)
	if code := <-done; code != 200 {
		t.Errorf("the first run: %d; want 200", code)
	}
	if code, body := do("POST", "/v1/simulate", `{"traceData": "a\nb", "nodes": 1, "policies": ["fifo"]}`); code != 200 {
		t.Errorf("a run after it: %d %s; want 200", code, body)
	}
}

// TestSimulateAccess: viewers list traces but may not run one.
func TestSimulateAccess(t *testing.T) {
	viewer := &api.Who{Name: "v", Kind: kindUser, Role: api.RoleViewer}
	user := &api.Who{Name: "u", Kind: kindUser, Role: api.RoleUser}
	if err := allowed(routeAccess["GET /v1/simulate/traces"], viewer); err != nil {
		t.Errorf("a viewer listing traces: %v", err)
	}
	if err := allowed(routeAccess["POST /v1/simulate"], viewer); !errors.Is(err, errForbidden) {
		t.Errorf("a viewer simulating: %v; want forbidden", err)
	}
	if err := allowed(routeAccess["POST /v1/simulate"], user); err != nil {
		t.Errorf("a user simulating: %v", err)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzSimulateRequest: any body decodes to a valid request or to bad
// input (400), never a panic or another error.
func FuzzSimulateRequest(f *testing.F) {
	f.Add(`{"trace": "tiny.csv", "nodes": 2, "policies": ["fifo"]}`)
	f.Add(`{"traceData": "submit,duration,gpus\n0,1,1\n", "load": 0.8, "from": "2017-10-01"}`)
	f.Add(`{"nodes": "x"}`)
	f.Add(`[1, 2]`)
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/simulate", strings.NewReader(body))
		req, err := readSimulateRequest(httptest.NewRecorder(), r)
		if err != nil && !errors.Is(err, api.ErrInvalid) {
			t.Fatalf("%q: %v; want nil or bad input", body, err)
		}
		if err == nil && req.Validate() != nil {
			t.Fatalf("%q: decoded to an invalid request", body)
		}
	})
}
