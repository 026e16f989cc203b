package adminhttp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestListenerServesMetricsAndPprofOnlyWhenAsked(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gangway_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	for _, tc := range []struct {
		name      string
		debug     bool
		pprofCode int
	}{
		{"metrics only", false, http.StatusNotFound},
		{"debug", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Listen("127.0.0.1:0", Gatherer(reg), tc.debug, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			base := "http://" + s.Addr().String()
			code, body := get(t, base+"/metrics")
			if code != http.StatusOK || !strings.Contains(body, "gangway_test_things_total 3") || !strings.Contains(body, "go_goroutines ") {
				t.Errorf("/metrics: %d, want 200 with our counter at 3 and Go's metrics:\n%.2000s", code, body)
			}
			if code, _ := get(t, base+"/debug/pprof/goroutine?debug=1"); code != tc.pprofCode {
				t.Errorf("/debug/pprof/goroutine: %d, want %d", code, tc.pprofCode)
			}
			if code, _ := get(t, base+"/v1/jobs"); code != http.StatusNotFound {
				t.Errorf("/v1/jobs: %d, want 404", code)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNewRegistryHasRuntimeMetricsOnly: the agent's registry holds Go's
// and the process's series, and none a library put in the default one.
func TestNewRegistryHasRuntimeMetricsOnly(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gangway_test_library_total", Help: "A library's."})
	prometheus.MustRegister(c)
	defer prometheus.Unregister(c)
	fams, err := NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	if !names["go_goroutines"] || !names["process_cpu_seconds_total"] || names["gangway_test_library_total"] {
		t.Errorf("NewRegistry gathers %v; want go_goroutines and process_cpu_seconds_total, not the default registry's gangway_test_library_total", names)
	}
}
