package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

func TestNewestCheckpoint(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, marker string) {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if marker != "" {
			if err := os.WriteFile(filepath.Join(d, marker), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, ok := NewestCheckpoint(root); ok {
		t.Fatal("empty dir has a checkpoint")
	}
	if _, _, ok := NewestCheckpoint(filepath.Join(root, "missing")); ok {
		t.Fatal("missing dir has a checkpoint")
	}
	mk("20", "COMMITTED")
	mk("100", "")             // being written: no marker yet
	mk("60", ".metadata")     // torch.distributed.checkpoint
	mk("latest", "COMMITTED") // not a step
	mk("-5", "COMMITTED")
	if err := os.WriteFile(filepath.Join(root, "80"), nil, 0o644); err != nil { // a file, not a dir
		t.Fatal(err)
	}
	step, path, ok := NewestCheckpoint(root)
	if !ok || step != 60 || path != filepath.Join(root, "60") {
		t.Fatalf("NewestCheckpoint = %d %q %v; want 60", step, path, ok)
	}
	mk("100", "COMMITTED")
	if step, _, _ := NewestCheckpoint(root); step != 100 {
		t.Fatalf("after commit, step = %d; want 100", step)
	}
}

func TestScanProgressForwardsOnlyCompleteLines(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{tasks: map[string]*task{}}
	tk := &task{asg: api.Assignment{JobID: "9", Attempt: 2, Rank: 0}, dir: dir}
	f, err := os.Create(filepath.Join(dir, "progress.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"step":1,"loss":2.5}` + "\n" + `not json` + "\n" + `{"step":2,"loss":2.`)
	a.scanProgress(tk)
	if len(a.pendingPr) != 1 || a.pendingPr[0].Step != 1 || *a.pendingPr[0].Loss != 2.5 {
		t.Fatalf("after first scan: %+v", a.pendingPr)
	}
	p := a.pendingPr[0]
	if p.JobID != "9" || p.Attempt != 2 || p.Time.IsZero() {
		t.Errorf("line not stamped with its job, attempt and time: %+v", p)
	}
	write("25,\"tokens\":512,\"final\":true}\n")
	a.scanProgress(tk)
	if len(a.pendingPr) != 2 || a.pendingPr[1].Step != 2 || a.pendingPr[1].Tokens != 512 || !a.pendingPr[1].Final {
		t.Fatalf("after the line completed: %+v", a.pendingPr)
	}
	a.scanProgress(tk)
	if len(a.pendingPr) != 2 {
		t.Fatalf("a rescan forwarded lines twice: %d", len(a.pendingPr))
	}
}

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"MASTER_PORT": "29500", "GANGWAY_TASK_DIR": "/t"}
	for in, want := range map[string]string{
		"--port=${MASTER_PORT}":             "--port=29500",
		"${GANGWAY_TASK_DIR}/hostfile":      "/t/hostfile",
		"echo $MASTER_PORT $$ ${1} ${HOME}": "echo $MASTER_PORT $$ ${1} ${HOME}",
		"a$":                                "a$",
		"${unterminated":                    "${unterminated",
		"${MASTER_PORT}${MASTER_PORT}":      "2950029500",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}
