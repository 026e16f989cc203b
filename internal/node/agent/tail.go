package agent

import (
	"bytes"
	"io"
	"path/filepath"
	"unicode/utf8"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
)

// tailWindow is how much of the end of a failed rank's stderr the agent
// reads to find its last line.
const tailWindow = 4 << 10

// stderrTail is the last non-blank line of the rank's kept stderr (the
// newest file, else the one rotated before it), at most
// api.MaxStderrTailBytes, for the attempt's reason: a Python traceback,
// a Go panic or a shell's complaint ends with the line that says what
// went wrong. "" when there is none (output discarded, nothing written).
// The supervisor reports an exit only once the rank's pipes are drained,
// so what the rank wrote last is on disk.
func stderrTail(dir string) string {
	for _, name := range []string{"stderr.log", "stderr.log.1"} {
		if line := lastLine(filepath.Join(dir, name)); line != "" {
			return line
		}
	}
	return ""
}

// lastLine is the last non-blank line of the file at path (no symlink,
// the rank's user may own the directory), cut to api.MaxStderrTailBytes.
func lastLine(path string) string {
	f, err := driver.OpenRegular(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return ""
	}
	start := max(end-tailWindow, 0)
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
		return ""
	}
	lines := bytes.Split(buf, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if i == 0 && start > 0 {
			break // a line cut at the window's start
		}
		line := bytes.TrimSpace(bytes.ToValidUTF8(lines[i], []byte("?")))
		if len(line) == 0 {
			continue
		}
		if len(line) > api.MaxStderrTailBytes {
			cut := api.MaxStderrTailBytes - len("…")
			for cut > 0 && !utf8.RuneStart(line[cut]) {
				cut--
			}
			line = append(line[:cut:cut], "…"...)
		}
		return string(line)
	}
	return ""
}
