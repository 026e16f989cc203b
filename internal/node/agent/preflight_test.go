package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

type staticChecks []api.HealthCheck

func (s staticChecks) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s staticChecks) Results() []api.HealthCheck    { return s }
func (s staticChecks) Changed() <-chan struct{}      { return nil }

// TestProbeAsksTheNodesChecks: a preflight probe refuses a node with a
// fatal finding, naming it, and not one with only warnings.
func TestProbeAsksTheNodesChecks(t *testing.T) {
	warn := api.HealthCheck{Check: "thermal", GPU: 1, Status: api.CheckWarn, Message: "95 C"}
	fatal := api.HealthCheck{Check: "xid", GPU: 2, Status: api.CheckFatal, Action: api.ActionCordonNode, Message: "Xid 79: GPU has fallen off the bus"}
	a := &Agent{cfg: Config{Health: staticChecks{warn}}}
	if why := a.unfit(); why != "" {
		t.Errorf("a warning makes the node unfit: %q", why)
	}
	a.cfg.Health = staticChecks{warn, fatal}
	if why := a.unfit(); !strings.Contains(why, "xid check on GPU 2") || !strings.Contains(why, "fallen off the bus") {
		t.Errorf("unfit = %q; want the fatal finding named", why)
	}
}

// TestReadProbe: the probe's result is read back; a missing, malformed or
// empty one is none.
func TestReadProbe(t *testing.T) {
	dir := t.TempDir()
	if readProbe(dir) != nil {
		t.Error("a result from no file")
	}
	for body, want := range map[string]float64{`{"inGBps":3.5,"allReduceGBps":2}`: 3.5, `{"inGBps":0}`: 0, `not json`: 0} {
		if err := os.WriteFile(filepath.Join(dir, api.PreflightFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := readProbe(dir)
		switch {
		case want == 0 && r != nil:
			t.Errorf("%s: read as %+v, want none", body, r)
		case want != 0 && (r == nil || r.InGBps != want):
			t.Errorf("%s: read as %+v, want in %.1f", body, r, want)
		}
	}
}
