package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
)

// isProbe reports whether asg is a preflight probe (api.PreflightCommand).
func isProbe(asg *api.Assignment) bool {
	return len(asg.Command) > 0 && asg.Command[0] == api.PreflightCommand
}

// unfit says why this node must not take part in a gang, by its health
// checks' latest findings (they run every --health-interval): "" if none
// is fatal.
func (a *Agent) unfit() string {
	if a.cfg.Health == nil {
		return ""
	}
	var bad []string
	for _, h := range a.cfg.Health.Results() {
		if h.Fatal() {
			where := "node"
			if h.GPU >= 0 {
				where = fmt.Sprintf("GPU %d", h.GPU)
			}
			bad = append(bad, fmt.Sprintf("%s check on %s: %s", h.Check, where, h.Message))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "preflight: " + strings.Join(bad, "; ")
}

// maxProbeFile bounds what is read of a probe's result.
const maxProbeFile = 4096

// readProbe reads the result a probe left in its task directory; nil if
// it left none that reads.
func readProbe(dir string) *api.PreflightResult {
	// The rank's user may own dir: not through a symlink, nor a FIFO.
	f, err := driver.OpenRegular(filepath.Join(dir, api.PreflightFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProbeFile))
	if err != nil {
		return nil
	}
	var r api.PreflightResult
	if json.Unmarshal(b, &r) != nil || r.InGBps <= 0 {
		return nil
	}
	return &r
}
