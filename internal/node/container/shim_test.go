package container

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testImage is the image the tests build: a root file system holding
// rankprog (static) as /rank, and /notexec, a file that is no program.
const testImage = "gangway-test-rank:1"

var (
	imageOnce sync.Once
	imageErr  error
)

// needEngine skips the test when this machine has no Docker engine, and
// otherwise builds the test image once, with no registry: docker import
// of a tar of the static program.
func needEngine(t *testing.T) *client.Client {
	t.Helper()
	if why := Available(context.Background(), ""); why != "" {
		t.Skip(why)
	}
	cli, err := engine("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	imageOnce.Do(func() { imageErr = buildTestImage(context.Background(), testImage, "./testdata/rankprog") })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return cli
}

// buildTestImage builds ref from the static program in dir, as /rank,
// and /notexec, a file that is no program.
func buildTestImage(ctx context.Context, ref, dir string) error {
	bin := filepath.Join(os.TempDir(), "gangway-rankprog")
	cmd := exec.Command("go", "build", "-o", bin, dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", dir, err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	return ImportImage(ctx, ref, []File{{Name: "rank", Mode: 0o755, Body: prog}, {Name: "notexec", Mode: 0o644, Body: []byte("not a program\n")}})
}

var nameSeq int

// testSpec is a spec of the test image running args, with its task
// directory mounted.
func testSpec(t *testing.T, args ...string) *Spec {
	nameSeq++
	dir := t.TempDir()
	key := strings.ReplaceAll(t.Name(), "/", "-") + "/1/" + string(rune('0'+nameSeq%10))
	return &Spec{
		Name: NameFor("testinstance", key), Image: testImage, PullPolicy: "Never", Network: "host",
		Command: args, Env: []string{"RANK=3", "WORLD_SIZE=4", "MARK_DIR=" + dir}, WorkingDir: dir,
		Mounts: []string{dir}, Labels: map[string]string{LabelTask: key, LabelInstance: "testinstance"}, Node: "n1",
	}
}

// shimRun runs the shim's body in this process; the channel stands for
// its signals.
type shimRun struct {
	sigc   chan os.Signal
	gone   bool
	out    syncWriter
	errb   syncWriter
	code   int
	err    error
	done   chan struct{}
	goneMu sync.Mutex
}

func startShim(spec *Spec) *shimRun {
	r := &shimRun{sigc: make(chan os.Signal, 4), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code, r.err = run(spec, &r.out, &r.errb, r.sigc, r.parentGone)
	}()
	return r
}

func (r *shimRun) parentGone() bool {
	r.goneMu.Lock()
	defer r.goneMu.Unlock()
	return r.gone
}

func (r *shimRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the shim did not return")
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// noContainer fails the test if a container named name exists.
func noContainer(t *testing.T, cli *client.Client, name string) {
	t.Helper()
	l, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", name))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l {
		t.Errorf("container %v (%s) is left behind", c.Names, c.State)
	}
}

// waitReady waits until the container says ready.
func waitReady(t *testing.T, r *shimRun) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			t.Fatalf("the shim returned %d, %v before the container was ready", r.code, r.err)
		default:
		}
		if strings.Contains(r.outString(), "ready") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the container never said ready")
}

func (r *shimRun) outString() string { return r.out.String() }
func (r *shimRun) errString() string { return r.errb.String() }

func TestContainerGetsEnvMountsAndExitCode(t *testing.T) {
	cli := needEngine(t)
	spec := testSpec(t, "/rank", "env-exit", "7")
	r := startShim(spec)
	r.wait(t)
	if r.code != 7 || r.err != nil {
		t.Fatalf("shim = %d, %v; want the container's 7\nstderr: %s", r.code, r.err, r.errb.String())
	}
	out := r.outString()
	for _, want := range []string{"RANK=3\n", "WORLD_SIZE=4\n", "cwd=" + spec.WorkingDir + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if got := r.errString(); got != "to stderr\n" {
		t.Errorf("stderr = %q; want the container's own", got)
	}
	b, err := os.ReadFile(filepath.Join(spec.WorkingDir, "mark"))
	if err != nil || string(b) != "written in the container\n" {
		t.Errorf("the mounted directory holds %q, %v; want the container's file", b, err)
	}
	noContainer(t, cli, spec.Name)
}

func TestSignalsReachTheContainer(t *testing.T) {
	cli := needEngine(t)
	spec := testSpec(t, "/rank", "wait-term")
	r := startShim(spec)
	waitReady(t, r)
	r.sigc <- syscall.SIGUSR1
	r.sigc <- syscall.SIGTERM
	r.wait(t)
	if r.code != 143 || r.err != nil {
		t.Fatalf("shim = %d, %v; want 143 (the container's exit on SIGTERM)", r.code, r.err)
	}
	if diff := cmp.Diff("ready\ngot user defined signal 1\ngot terminated\n", r.outString()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	noContainer(t, cli, spec.Name)
}

// TestSupervisorDeathKillsTheContainer: with its parent gone, the shim's
// signal kills the container at once, whatever the container does with
// SIGTERM.
func TestSupervisorDeathKillsTheContainer(t *testing.T) {
	cli := needEngine(t)
	spec := testSpec(t, "/rank", "sleep")
	r := startShim(spec)
	waitReady(t, r)
	r.goneMu.Lock()
	r.gone = true
	r.goneMu.Unlock()
	r.sigc <- syscall.SIGTERM
	r.wait(t)
	if r.code != 137 {
		t.Fatalf("shim = %d, %v; want 137", r.code, r.err)
	}
	noContainer(t, cli, spec.Name)
}

func TestOOMKilledIsTheReason(t *testing.T) {
	cli := needEngine(t)
	spec := testSpec(t, "/rank", "alloc")
	spec.MemoryBytes = 64 << 20
	r := startShim(spec)
	r.wait(t)
	if r.code != exitOOM || r.err == nil || !strings.Contains(r.err.Error(), "OOMKilled") || !strings.Contains(r.err.Error(), "64MiB") {
		t.Fatalf("shim = %d, %v; want %d with OOMKilled and the 64MiB limit named", r.code, r.err, exitOOM)
	}
	noContainer(t, cli, spec.Name)
}

func TestWhatCannotStartSaysWhy(t *testing.T) {
	cli := needEngine(t)
	for _, tt := range []struct {
		name  string
		edit  func(*Spec)
		setup func(t *testing.T)
		want  string
	}{
		{name: "image missing, never pulled", edit: func(s *Spec) { s.Image = "gangway-absent:1" },
			want: "image gangway-absent:1 not found on node n1 and imagePullPolicy is Never"},
		{name: "pull fails", edit: func(s *Spec) { s.Image, s.PullPolicy = "127.0.0.1:1/absent:1", "IfNotPresent" },
			want: "pull image 127.0.0.1:1/absent:1 on node n1 (imagePullPolicy IfNotPresent): "},
		{name: "entrypoint not executable", edit: func(s *Spec) { s.Command = []string{"/notexec"} },
			want: `container of image gangway-test-rank:1 could not start "/notexec" on node n1: `},
		{name: "entrypoint missing", edit: func(s *Spec) { s.Command = []string{"/absent"} },
			want: `could not start "/absent" on node n1: `},
		{name: "engine down", setup: func(t *testing.T) { t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock") },
			want: "the Docker engine on node n1 does not answer at unix:///nonexistent/docker.sock (is dockerd running?)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(t, "/rank", "env-exit", "0")
			if tt.edit != nil {
				tt.edit(spec)
			}
			if tt.setup != nil {
				tt.setup(t)
			}
			r := startShim(spec)
			r.wait(t)
			if r.code != exitCannotStart || r.err == nil || !strings.Contains(r.err.Error(), tt.want) {
				t.Fatalf("shim = %d, %v; want %d with %q", r.code, r.err, exitCannotStart, tt.want)
			}
			noContainer(t, cli, spec.Name)
		})
	}
}

func TestReapRemovesARunningContainer(t *testing.T) {
	cli := needEngine(t)
	spec := testSpec(t, "/rank", "sleep")
	r := startShim(spec)
	waitReady(t, r)
	var errb bytes.Buffer
	if code := ReapMain([]string{"--name", spec.Name}, &errb); code != 0 {
		t.Fatalf("reap = %d: %s", code, errb.String())
	}
	noContainer(t, cli, spec.Name)
	r.wait(t) // the shim's wait ends with its container
	if code := ReapMain([]string{"--name", spec.Name}, &errb); code != 0 {
		t.Fatalf("a second reap = %d: %s; want 0 (nothing to do)", code, errb.String())
	}
	_, err := cli.ContainerInspect(context.Background(), spec.Name)
	if !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect after reap: %v; want not found", err)
	}
}
