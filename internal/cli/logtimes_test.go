package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// logs --timestamps and --since as kubectl's: each line after the time it
// was written (kept beside the log, not in it: without the flags the
// lines are as the rank wrote them); --since leaves out earlier lines,
// given as how long ago or as a time; a bad value names the flag and the
// forms it takes.
func TestLogsTimestampsAndSince(t *testing.T) {
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML("ranks: 2\ncommand: [sh, -c, 'echo one; echo err >&2; sleep 1.5; echo two']\n")
	d := cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	a := d.Job.Status.Attempts[0]

	out, errOut, code := cl.run("logs", id, "--timestamps")
	if code != 0 {
		t.Fatalf("logs --timestamps: %d %s", code, errOut)
	}
	line := regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z) (\[stderr\] )?(\S+)$`)
	at := map[string]time.Time{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("logs --timestamps line %q: want TIME LINE; all: %q", l, out)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || ts.Before(a.CreatedAt.Add(-time.Second)) || ts.After(a.EndedAt.Add(time.Second)) {
			t.Errorf("line %q: time %v not within the attempt (%v to %v)", l, ts, a.CreatedAt, a.EndedAt)
		}
		at[m[4]] = ts
	}
	if len(at) != 3 || at["two"].Sub(at["one"]) < time.Second {
		t.Fatalf("logs --timestamps: times %v; want one, err and two, two 1.5 s after one", at)
	}
	if plain, _, _ := cl.run("logs", id); plain != "one\ntwo\n[stderr] err\n" {
		t.Errorf("logs without --timestamps: %q", plain)
	}
	mid := at["one"].Add(700 * time.Millisecond).Format(time.RFC3339Nano)
	if out, errOut, code := cl.run("logs", id, "--since", mid, "--rank", "1"); code != 0 || out != "two\n" {
		t.Errorf("logs --since %s --rank 1: %d %q %q", mid, code, out, errOut)
	}
	if out, _, code := cl.run("logs", id, "--since", "1h", "--stdout"); code != 0 || out != "one\ntwo\n" {
		t.Errorf("logs --since 1h --stdout: %d %q", code, out)
	}
	if out, _, code := cl.run("logs", id, "--all-ranks", "--timestamps", "--since", mid); code != 0 ||
		!regexp.MustCompile(`(?m)^\[rank 1\] \S+Z two$`).MatchString(out) || strings.Contains(out, "one") {
		t.Errorf("logs --all-ranks --timestamps --since: %d %q", code, out)
	}
	for _, bad := range []string{"yesterday", "-5m", "10"} {
		if _, errOut, code := cl.run("logs", id, "--since", bad); code != 2 || !strings.Contains(errOut, "--since") || !strings.Contains(errOut, "how long ago (30s, 10m") {
			t.Errorf("logs --since %s: %d %q", bad, code, errOut)
		}
	}
}
