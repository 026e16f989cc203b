package driver

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The agent and the supervisor speak JSON lines over a Unix socket in the
// abstract namespace, named after the data directory, so nothing stale is
// left on disk when a supervisor dies and every network namespace (every
// emulated host) has its own. The supervisor accepts only peers with its
// own user id.

// request is one message from the agent.
type request struct {
	ID   int64     `json:"id"`
	Op   string    `json:"op"` // "hello", "start", "list", "forget", "retire" or "lease"
	Key  string    `json:"key,omitempty"`
	Spec *wireSpec `json:"spec,omitempty"`
	// LeaseMS ("lease"): kill every rank unless another lease comes
	// within this many milliseconds.
	LeaseMS int64 `json:"leaseMs,omitempty"`
}

// wireSpec is Spec as the supervisor needs it.
type wireSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// Stdout and Stderr are log files to append to; "" is /dev/null.
	// Each keeps at most LogFiles files of LogFileBytes (0: the node's
	// defaults, DefaultLogFiles of DefaultLogFileBytes).
	Stdout       string `json:"stdout,omitempty"`
	Stderr       string `json:"stderr,omitempty"`
	LogFileBytes int64  `json:"logFileBytes,omitempty"`
	LogFiles     int    `json:"logFiles,omitempty"`
	MemoryBytes  int64  `json:"memoryBytes,omitempty"`
	CPUMillis    int64  `json:"cpuMillis,omitempty"`
	Cgroup       string `json:"cgroup,omitempty"`
	// RunAs is the account the rank runs under; nil: the supervisor's.
	RunAs *Account `json:"runAs,omitempty"`
	// Cleanup is run after the rank ends and before its exit is told
	// (Spec.Cleanup).
	Cleanup []string `json:"cleanup,omitempty"`
}

// reply answers a request (ID set) or tells of an exit (Event "exit").
type reply struct {
	ID    int64    `json:"id,omitempty"`
	Err   string   `json:"err,omitempty"`
	State *State   `json:"state,omitempty"`
	Tasks []record `json:"tasks,omitempty"`
	Event string   `json:"event,omitempty"`
	Key   string   `json:"key,omitempty"`
	Exit  *Exit    `json:"exit,omitempty"`
	// Version and Build answer "hello"; a supervisor from before the
	// handshake answers it "unknown op".
	Version int    `json:"version,omitempty"`
	Build   string `json:"build,omitempty"`
}

// protocolVersion is what this build's supervisor speaks: 1 added hello
// and retire; 2 bounds kept output (logFileBytes, logFiles: a supervisor
// of version 1 ignores them and appends without bound until the agent
// replaces it, as it replaces any other build once idle); 3 runs a rank as
// another account (runAs: a supervisor of version 2 would ignore it and
// run the rank as itself, root, so the agent asks the version before such
// a start and refuses it below 3); 4 fences on a lapsed lease ("lease": a
// supervisor of version 3 answers it "unknown op" and the agent's own
// fence stays the only one); 5 runs a rank's cleanup command before it
// tells the rank's exit ("cleanup": a supervisor of version 4 would ignore
// it and leave a container running after its shim died, so the agent asks
// the version before such a start). A later field a supervisor of an older
// version would ignore must check the version first.
const protocolVersion = 5

// runAsVersion is the first protocol version that honours runAs;
// cleanupVersion the first that runs cleanup commands.
const (
	runAsVersion   = 3
	cleanupVersion = 5
)

// unknownOp starts a supervisor's answer to an op it does not know, in
// every build: how an agent tells a supervisor from before an op.
const unknownOp = "unknown op"

// isUnknownOp reports whether err is a supervisor's unknownOp answer.
func isUnknownOp(err error) bool {
	return err != nil && strings.Contains(err.Error(), unknownOp)
}

// buildID identifies the executable at path (its device, inode, size and
// modification time), so that an agent can tell whether the supervisor
// runs the binary it would start itself. For /proc/self/exe it is the
// running image even when its file has been replaced since.
func buildID(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%x:%x:%x:%x.%x", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

// record is what the supervisor knows of one task.
type record struct {
	Key    string `json:"key"`
	State  State  `json:"state"`
	Exited bool   `json:"exited,omitempty"`
	Exit   Exit   `json:"exit"`
	// watched: not the supervisor's child (left by an earlier supervisor),
	// so its exit is noticed by polling and its status is unknown.
	watched bool
	// logs is how the rank's kept output is copied, for a later
	// supervisor to take over; nil when it is discarded.
	logs *logConf
	// cleanup is run once the rank has ended, before its exit is told
	// (wireSpec.Cleanup); cleaning: it runs now, as pid cleaning.
	cleanup  []string
	cleaning int
}

// logConf is what a supervisor needs to take over the copying of a live
// rank's output: the files, their bounds, and the pipes' inodes (so as
// not to take a pipe the rank has since put on its fd 1 or 2 instead).
type logConf struct {
	Paths     [2]string `json:"p"`
	Inodes    [2]uint64 `json:"i"`
	FileBytes int64     `json:"b,omitempty"`
	Files     int       `json:"n,omitempty"`
	// Owner owns the files the copier creates (the rank's account); nil:
	// the supervisor.
	Owner *Account `json:"o,omitempty"`
}

// maxMessage bounds one line (a rank's environment can be large).
const maxMessage = 16 << 20

// readLine reads one newline-terminated message of at most maxMessage bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxMessage {
			return nil, fmt.Errorf("driver: message over %d bytes", maxMessage)
		}
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func encodeLine(v any) []byte {
	b, _ := json.Marshal(v) // our own plain structs: cannot fail
	return append(b, '\n')
}

// socketName is the supervisor's address for a data directory.
func socketName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return "@gangway-supervisor-" + hex.EncodeToString(sum[:12])
}

// ---- journal ----

// The journal is an append-only file of entries, one line each: a start
// (State set), an exit (Exit set), or a forget (Gone). The newest entry for
// a key wins. A torn last line (the supervisor died mid-write) is skipped.

const journalName = "supervisor.journal"

// compactAt is the journal size past which the supervisor rewrites it with
// only what it still holds.
const compactAt = 1 << 20

type entry struct {
	Key   string `json:"k"`
	State *State `json:"s,omitempty"`
	Exit  *Exit  `json:"x,omitempty"`
	Gone  bool   `json:"g,omitempty"`
	// Logs comes with a start's State (and is kept by a later State of
	// the same start).
	Logs *logConf `json:"l,omitempty"`
	// Cleanup comes with a start's State, as Logs does.
	Cleanup []string `json:"c,omitempty"`
}

// readJournal returns the records the journal in dir holds, by key.
func readJournal(dir string) (map[string]*record, error) {
	out := map[string]*record{}
	b, err := os.ReadFile(filepath.Join(dir, journalName))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("driver: read journal: %w", err)
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		var e entry
		if len(line) == 0 || json.Unmarshal(line, &e) != nil || e.Key == "" {
			continue
		}
		switch {
		case e.Gone:
			delete(out, e.Key)
		case e.State != nil:
			logs, cleanup := e.Logs, e.Cleanup
			if old := out[e.Key]; old != nil && old.State.PID == e.State.PID {
				if logs == nil {
					logs = old.logs
				}
				if cleanup == nil {
					cleanup = old.cleanup
				}
			}
			out[e.Key] = &record{Key: e.Key, State: *e.State, logs: logs, cleanup: cleanup}
		case e.Exit != nil:
			if r := out[e.Key]; r != nil {
				r.Exited, r.Exit = true, *e.Exit
			}
		}
	}
	return out, nil
}

// writeJournal replaces the journal with recs, atomically, and returns the
// new file open for appending and its size.
func writeJournal(dir string, recs map[string]*record) (*os.File, int64, error) {
	var buf bytes.Buffer
	for _, r := range recs {
		st := r.State
		buf.Write(encodeLine(entry{Key: r.Key, State: &st, Logs: r.logs, Cleanup: r.cleanup}))
		if r.Exited {
			x := r.Exit
			buf.Write(encodeLine(entry{Key: r.Key, Exit: &x}))
		}
	}
	path := filepath.Join(dir, journalName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return nil, 0, fmt.Errorf("driver: write journal: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, 0, fmt.Errorf("driver: write journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("driver: open journal: %w", err)
	}
	return f, int64(buf.Len()), nil
}
