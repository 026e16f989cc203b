package agent

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

// TestServeBothLogs: stream=both gives a rank's stdout and stderr in one
// answer, each stderr line marked, whole lines only, the unfinished last
// lines included; one stream alone comes as it was written.
func TestServeBothLogs(t *testing.T) {
	a := &Agent{cfg: Config{Name: "n1", DataDir: t.TempDir()}, tasks: map[string]*task{}}
	key := api.TaskKey("7", 1, 0)
	dir := a.taskDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("stdout.log", "step 1\nstep 2\npartial")
	write("stderr.log", "Traceback (most recent call last):\nValueError: boom")
	for _, tt := range []struct {
		query, want string
	}{
		{"stream=both", "step 1\nstep 2\npartial\n[stderr] Traceback (most recent call last):\n[stderr] ValueError: boom\n"},
		{"stream=both&follow=1", "step 1\nstep 2\npartial\n[stderr] Traceback (most recent call last):\n[stderr] ValueError: boom\n"},
		{"stream=stdout", "step 1\nstep 2\npartial"},
		{"stream=stderr", "Traceback (most recent call last):\nValueError: boom"},
	} {
		w := httptest.NewRecorder()
		a.serveLogs(w, httptest.NewRequest("GET", "/v1/logs?task="+key+"&"+tt.query, nil))
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.query, w.Code, w.Body)
		}
		if diff := cmp.Diff(tt.want, w.Body.String()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.query, diff)
		}
	}
	// Only stderr kept: the answer is stderr's, marked.
	os.Remove(filepath.Join(dir, "stdout.log"))
	w := httptest.NewRecorder()
	a.serveLogs(w, httptest.NewRequest("GET", "/v1/logs?task="+key+"&stream=both", nil))
	if want := "[stderr] Traceback (most recent call last):\n[stderr] ValueError: boom\n"; w.Body.String() != want {
		t.Errorf("stderr alone: %q; want %q", w.Body, want)
	}
}

// TestFollowBothLogs follows a running rank's two streams: each line comes
// as it is written, in the order written, and the answer ends once the
// rank has exited.
func TestFollowBothLogs(t *testing.T) {
	a := &Agent{cfg: Config{Name: "n1", DataDir: t.TempDir()}, tasks: map[string]*task{}}
	key := api.TaskKey("8", 1, 0)
	dir := a.taskDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]*os.File{}
	for _, name := range []string{"stdout", "stderr"} {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[name] = f
	}
	a.tasks[key] = &task{status: api.RankStatus{State: api.RankRunning}}
	srv := httptest.NewServer(http.HandlerFunc(a.serveLogs))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/logs?task=" + key + "&stream=both&follow=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	for _, step := range []struct{ stream, text, want string }{
		{"stdout", "loading\n", "loading\n"},
		{"stderr", "Traceback\n", "[stderr] Traceback\n"},
		{"stdout", "step 1\n", "step 1\n"},
		{"stderr", "Error: ", ""}, // held until the line ends
		{"stderr", "boom\n", "[stderr] Error: boom\n"},
	} {
		if _, err := files[step.stream].WriteString(step.text); err != nil {
			t.Fatal(err)
		}
		if step.want == "" {
			continue
		}
		got, err := lines.ReadString('\n')
		if err != nil || got != step.want {
			t.Fatalf("after %q on %s: read %q, %v; want %q", step.text, step.stream, got, err, step.want)
		}
	}
	a.mu.Lock()
	a.tasks[key].status.State = api.RankExited
	a.mu.Unlock()
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Errorf("after the rank exited: %q, %v; want the end of the answer", rest, err)
	}
}
