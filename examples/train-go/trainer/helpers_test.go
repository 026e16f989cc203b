package trainer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Small flags that keep runs fast under -race.
var smallArgs = []string{"--hidden", "16", "--batch", "30", "--lr", "0.1", "--log-every", "5"}

func withArgs(extra ...string) []string {
	return append(append([]string(nil), smallArgs...), extra...)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

type rankResult struct {
	code           int
	stdout, stderr string
}

// launchEnv is the launch contract of rank `rank` of a loopback job, with
// overrides (an empty value unsets a variable).
func launchEnv(rank, world int, port string, overrides map[string]string) func(string) string {
	vars := map[string]string{
		"RANK":              strconv.Itoa(rank),
		"LOCAL_RANK":        strconv.Itoa(rank),
		"WORLD_SIZE":        strconv.Itoa(world),
		"LOCAL_WORLD_SIZE":  strconv.Itoa(world),
		"NODE_RANK":         "0",
		"NNODES":            "1",
		"MASTER_ADDR":       "127.0.0.1",
		"MASTER_PORT":       port,
		"GANGWAY_NODE_ADDR": "127.0.0.1",
		"GANGWAY_JOB_ID":    "job-test",
		"GANGWAY_ATTEMPT":   "1",
	}
	maps.Copy(vars, overrides)
	return func(k string) string { return vars[k] }
}

// runJob runs world ranks of Main as goroutines on loopback and returns
// their results, indexed by rank.
func runJob(ctx context.Context, t *testing.T, world int, args []string, env map[string]string) []rankResult {
	t.Helper()
	port := freePort(t)
	results := make([]rankResult, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			var out, errb bytes.Buffer
			code := Main(ctx, args, launchEnv(r, world, port, env), &out, &errb)
			results[r] = rankResult{code, out.String(), errb.String()}
		})
	}
	wg.Wait()
	return results
}

// mustSucceed fails the test unless every rank exited 0.
func mustSucceed(t *testing.T, results []rankResult) {
	t.Helper()
	for r, res := range results {
		if res.code != ExitOK {
			t.Fatalf("rank %d exited %d\nstdout:\n%s\nstderr:\n%s", r, res.code, res.stdout, res.stderr)
		}
	}
}

// finalLoss parses rank 0's "final_loss=" line.
func finalLoss(t *testing.T, stdout string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "final_loss="); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("no final_loss= line in stdout:\n%s", stdout)
	return 0
}

func relDiff(a, b float64) float64 {
	d := a - b
	if d < 0 {
		d = -d
	}
	m := max(abs(a), abs(b))
	if m == 0 {
		return 0
	}
	return d / m
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func jobEnv(ckptDir, progress, resume string) map[string]string {
	return map[string]string{
		"GANGWAY_CHECKPOINT_DIR": ckptDir,
		"GANGWAY_PROGRESS_FILE":  progress,
		"GANGWAY_RESUME_FROM":    resume,
	}
}

func stepDir(root string, step int) string { return fmt.Sprintf("%s/%d", root, step) }
