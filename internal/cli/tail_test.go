package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestFailedRankSaysWhy: describe job gives the last line of a failed
// rank's stderr in its attempt's reason, so that a user sees what went
// wrong without fetching the logs first.
func TestFailedRankSaysWhy(t *testing.T) {
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML(`
ranks: 2
maxRestarts: 0
command: [sh, -c, 'if [ "$RANK" = 1 ]; then printf "Traceback (most recent call last):\n  File \"train.py\", line 3\nAttributeError: no attribute step\n" >&2; exit 1; fi; sleep 30']
`)
	d := cl.waitPhase(id, api.JobFailed, 30*time.Second)
	want := "rank 1 on n1 exited with code 1: AttributeError: no attribute step"
	if r := d.Job.Status.Attempts[0].Reason; r != want {
		t.Errorf("attempt 1's reason %q, want %q", r, want)
	}
	if out, _, _ := cl.run("describe", "job", id); !strings.Contains(out, want) {
		t.Errorf("describe job does not give the reason %q:\n%s", want, out)
	}
}
