package container

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-units"
	"golang.org/x/sys/unix"
)

// Exit codes of the shim for what ended the rank before its container ran
// its command (127, as a shell's "command not found"; the message, the
// shim's last stderr line, becomes the attempt's reason), and for a
// container the kernel's OOM killer ended (137, SIGKILL's).
const (
	exitCannotStart = 127
	exitOOM         = 137
)

// setupTimeout bounds each engine call before the container runs (a pull
// has pullTimeout).
const (
	setupTimeout = 30 * time.Second
	pullTimeout  = 30 * time.Minute
	// pullEvery is how often the shim notes a pull's progress.
	pullEvery = time.Second
)

// RunMain is the hidden `container-rank --spec FILE` command: the shim the
// supervisor runs as a container rank's process. It returns the
// container's exit code, or exitCannotStart with the reason as its last
// line on stderr.
func RunMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("container-rank", flag.ContinueOnError)
	fs.SetOutput(stderr)
	specPath := fs.String("spec", "", "the container spec the agent wrote")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	spec, err := readSpec(*specPath)
	if err != nil {
		fmt.Fprintln(stderr, "container-rank:", err)
		return exitCannotStart
	}
	// The supervisor holds the ranks' lease: when it dies, a bare rank
	// dies with it, so the container must too. SIGTERM, which the shim
	// catches and tells from a stop by its parent having changed.
	parent := os.Getppid()
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigc)
	if os.Getppid() != parent {
		return exitCannotStart // the supervisor died before the signal was set
	}
	parentGone := func() bool { return os.Getppid() != parent }
	code, err := run(spec, stdout, stderr, sigc, parentGone)
	if err != nil {
		if isEngineDown(err) {
			_ = os.WriteFile(filepath.Join(filepath.Dir(*specPath), NodeFaultFile), []byte(err.Error()+"\n"), 0o644)
		}
		fmt.Fprintln(stderr, err)
	}
	return code
}

// engine connects to the node's Docker engine at host ("unix:///PATH",
// "tcp://HOST:PORT"); "": as the docker CLI does ($DOCKER_HOST, else the
// default socket); at the API version it speaks.
func engine(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.NewClientWithOpts(opts...)
}

// NodeFaultFile is the file, beside the spec, in which the shim says that
// the rank could not run for its node's fault (the engine down or not
// answering) rather than the job's: the agent reads it (NodeFault) and
// tells the server, which charges the node, not the job.
const NodeFaultFile = "node-fault"

// engineDown is an error of the node's engine not answering.
type engineDown struct{ error }

func (e engineDown) Unwrap() error { return e.error }

// isEngineDown reports whether err is the node's engine not answering
// (refused, absent or timed out), not something about the job.
func isEngineDown(err error) bool {
	var d engineDown
	return errors.As(err, &d) || client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded)
}

// NodeFault reports the message of a shim whose rank, with task directory
// dir, could not run for its node's fault; ok is false if it did not say so.
func NodeFault(dir string) (msg string, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, NodeFaultFile))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// run is the shim's life: the container made, run, waited for and
// removed. A non-nil error is the reason the rank could not run, for the
// attempt's reason; the code is then exitCannotStart.
func run(spec *Spec, stdout, stderr io.Writer, sigc <-chan os.Signal, parentGone func() bool) (int, error) {
	cli, err := engine(spec.Engine)
	if err != nil {
		return exitCannotStart, engineDown{fmt.Errorf("docker engine on node %s: %w", spec.Node, err)}
	}
	defer cli.Close()
	ctx := context.Background()
	if err := ping(ctx, cli, spec.Node); err != nil {
		return exitCannotStart, err
	}
	if err := ensureImage(ctx, cli, spec, stderr); err != nil {
		return exitCannotStart, err
	}
	// A container of this name is a leftover of this task (a shim and
	// cleanup that both died): never two of one rank.
	if err := remove(ctx, cli, spec.Name); err != nil {
		return exitCannotStart, err
	}
	for _, m := range spec.Mounts {
		_ = os.MkdirAll(m, 0o755) // else the create says why
	}
	cfg, hc := containerConfig(spec)
	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	created, err := cli.ContainerCreate(cctx, cfg, hc, nil, nil, spec.Name)
	cancel()
	if err != nil {
		return exitCannotStart, fmt.Errorf("create container of image %s on node %s: %w", spec.Image, spec.Node, err)
	}
	id := created.ID
	removeLater := func() { _ = remove(context.Background(), cli, id) }
	// Attached and waited for before the start, so no output and no exit
	// is missed.
	att, err := cli.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		removeLater()
		return exitCannotStart, fmt.Errorf("attach to container %s: %w", spec.Name, err)
	}
	defer att.Close()
	wctx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	waitc, werrc := cli.ContainerWait(wctx, id, container.WaitConditionNextExit)
	// The client's waiter sends its one answer on an unbuffered channel:
	// an early return takes it, once the container is gone, so that the
	// waiter ends.
	drain := func() {
		select {
		case <-waitc:
		case <-werrc:
		case <-time.After(setupTimeout):
		}
	}
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		removeLater()
		drain()
		return exitCannotStart, fmt.Errorf("container of image %s could not start %q on node %s: %s", spec.Image, spec.Command[0], spec.Node, engineMessage(err))
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}()
	var code int
wait:
	for {
		select {
		case sig := <-sigc:
			if parentGone() {
				// The supervisor is gone: nothing holds the lease.
				kill(cli, id, syscall.SIGKILL)
				removeLater()
				drain()
				return 128 + int(syscall.SIGKILL), nil
			}
			kill(cli, id, sig.(syscall.Signal))
		case w := <-waitc:
			if w.Error != nil {
				fmt.Fprintf(stderr, "gangway: waiting for container %s: %s\n", spec.Name, w.Error.Message)
			}
			code = int(w.StatusCode)
			break wait
		case err := <-werrc:
			removeLater()
			return exitCannotStart, fmt.Errorf("wait for container %s: %w", spec.Name, err)
		}
	}
	// The stream ends once the engine has sent the last output; bounded,
	// in case the engine keeps it open.
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	if in, err := cli.ContainerInspect(ctx, id); err == nil && in.State != nil && in.State.OOMKilled {
		removeLater()
		return exitOOM, fmt.Errorf("OOMKilled: the container ran out of memory (its limit, spec.resources.memoryBytes, is %s)", limitText(spec.MemoryBytes))
	}
	removeLater()
	return code, nil
}

func limitText(b int64) string {
	if b <= 0 {
		return "none: the node's memory ran out"
	}
	return units.BytesSize(float64(b))
}

// ping checks that the engine answers.
func ping(ctx context.Context, cli *client.Client, node string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		return engineDown{fmt.Errorf("the Docker engine on node %s does not answer at %s (is dockerd running?): %w", node, cli.DaemonHost(), err)}
	}
	return nil
}

// ensureImage makes the image present as the pull policy says.
func ensureImage(ctx context.Context, cli *client.Client, spec *Spec, stderr io.Writer) error {
	present := false
	if spec.PullPolicy != "Always" {
		ictx, cancel := context.WithTimeout(ctx, setupTimeout)
		_, err := cli.ImageInspect(ictx, spec.Image)
		cancel()
		switch {
		case err == nil:
			present = true
		case !cerrdefs.IsNotFound(err):
			return fmt.Errorf("look up image %s on node %s: %w", spec.Image, spec.Node, err)
		}
	}
	if present {
		return nil
	}
	if spec.PullPolicy == "Never" {
		return fmt.Errorf("image %s not found on node %s and imagePullPolicy is Never", spec.Image, spec.Node)
	}
	fmt.Fprintf(stderr, "gangway: pulling image %s on node %s\n", spec.Image, spec.Node)
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	auth, err := RegistryAuth(spec.AuthFile, spec.Image)
	if err != nil {
		return fmt.Errorf("pull image %s on node %s: %w", spec.Image, spec.Node, err)
	}
	rc, err := cli.ImagePull(pctx, spec.Image, image.PullOptions{RegistryAuth: auth})
	if err == nil {
		// The pull runs while its progress is read; the task directory
		// keeps how far it has got, for `gangway describe job`.
		prefix := fmt.Sprintf("image %s on node %s: ", spec.Image, spec.Node)
		err = followPull(rc, prefix, pullEvery, func(line string) {
			if spec.dir != "" {
				writePull(spec.dir, line)
			}
		})
		rc.Close()
		if spec.dir != "" {
			_ = os.Remove(filepath.Join(spec.dir, PullFile))
		}
	}
	if err != nil {
		return fmt.Errorf("pull image %s on node %s (imagePullPolicy %s): %s", spec.Image, spec.Node, spec.PullPolicy, engineMessage(err))
	}
	// A pull whose progress reports an error answers 200 all the same.
	ictx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if _, err := cli.ImageInspect(ictx, spec.Image); err != nil {
		return fmt.Errorf("pull image %s on node %s (imagePullPolicy %s): the image is not there after the pull: %v", spec.Image, spec.Node, spec.PullPolicy, err)
	}
	return nil
}

// containerConfig is the engine's form of spec.
func containerConfig(spec *Spec) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image: spec.Image, Entrypoint: spec.Command, Cmd: []string{}, Env: spec.Env,
		WorkingDir: spec.WorkingDir, User: spec.User, Labels: spec.Labels,
	}
	network := spec.Network
	if network == "" {
		network = "host"
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		IpcMode:     container.IPCModeHost,
		Resources: container.Resources{
			Ulimits:  []*container.Ulimit{{Name: "memlock", Soft: memlock(), Hard: memlock()}},
			Memory:   spec.MemoryBytes,
			NanoCPUs: spec.CPUMillis * 1_000_000,
		},
	}
	if spec.MemoryBytes > 0 {
		hc.MemorySwap = spec.MemoryBytes // no swap beyond the limit: an OOM kill, not a crawl
	}
	for _, m := range spec.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m, Target: m})
	}
	hc.DeviceRequests = gpuRequests(spec.GPUs, hasNvidiaCDI(cdiDirs))
	hc.Devices = infiniband("/dev/infiniband")
	return cfg, hc
}

// memlock is the containers' memlock limit: unlimited (-1), as RDMA
// wants it, unless this node's own hard limit is lower (a node that is
// itself a container): then that, which is the most the engine may set.
func memlock() int64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil || l.Max == unix.RLIM_INFINITY {
		return -1
	}
	return int64(l.Max)
}

// cdiDirs are where CDI specs live (the CDI spec's defaults).
var cdiDirs = []string{"/etc/cdi", "/var/run/cdi"}

// gpuRequests passes the rank's GPUs: as CDI devices where the node has an
// nvidia CDI spec, else through the NVIDIA container toolkit's device
// request (docker run --gpus device=UUID,...); none for no GPUs.
func gpuRequests(uuids []string, cdi bool) []container.DeviceRequest {
	if len(uuids) == 0 {
		return nil
	}
	if cdi {
		ids := make([]string, len(uuids))
		for i, u := range uuids {
			ids[i] = "nvidia.com/gpu=" + u
		}
		return []container.DeviceRequest{{Driver: "cdi", DeviceIDs: ids}}
	}
	return []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: append([]string(nil), uuids...), Capabilities: [][]string{{"gpu"}}}}
}

// hasNvidiaCDI reports whether a CDI spec in dirs names nvidia.com/gpu.
func hasNvidiaCDI(dirs []string) bool {
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" && ext != ".yml" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err == nil && strings.Contains(string(b), "nvidia.com/gpu") {
				return true
			}
		}
	}
	return false
}

// infiniband maps every device under dir (the RDMA verbs and management
// devices) into the container; none when the node has no dir.
func infiniband(dir string) []container.DeviceMapping {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []container.DeviceMapping
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		out = append(out, container.DeviceMapping{PathOnHost: p, PathInContainer: p, CgroupPermissions: "rwm"})
	}
	return out
}

// kill sends sig to the container's main process through the engine.
func kill(cli *client.Client, id string, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	_ = cli.ContainerKill(ctx, id, strconv.Itoa(int(sig)))
}

// remove force-removes the container idOrName, if there is one.
func remove(ctx context.Context, cli *client.Client, idOrName string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	err := cli.ContainerRemove(ctx, idOrName, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", idOrName, err)
	}
	return nil
}

// engineMessage is the engine's words without the client's wrapping.
func engineMessage(err error) string {
	s := err.Error()
	if i := strings.Index(s, "Error response from daemon: "); i >= 0 {
		s = s[i+len("Error response from daemon: "):]
	}
	return s
}

// ReapMain is the hidden `container-reap --name NAME` command: the
// cleanup the supervisor runs after a container rank's shim has ended. It
// removes the container (killing it first) if there is one.
func ReapMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("container-reap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the container's name")
	host := fs.String("host", "", "the Docker engine's address (default: $DOCKER_HOST, else its socket)")
	if err := fs.Parse(args); err != nil || *name == "" {
		fmt.Fprintln(stderr, "container-reap: --name is required")
		return 2
	}
	cli, err := engine(*host)
	if err == nil {
		defer cli.Close()
		err = remove(context.Background(), cli, *name)
	}
	if err != nil {
		fmt.Fprintln(stderr, "container-reap:", err)
		return 1
	}
	return 0
}
