package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/docker/go-units"
)

// PullFile is the file, beside the spec, in which the shim keeps one line
// saying how far the pull of the rank's image has got, while it pulls:
// the agent sends it with the rank's status (RankStatus.Pulling) and
// `gangway describe job` shows it. The shim removes it when the pull ends.
const PullFile = "image-pull"

// pullMessage is one line of the engine's pull progress stream (the fields
// of its JSON messages gangway reads).
type pullMessage struct {
	Status   string `json:"status"`
	ID       string `json:"id"`
	Progress *struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// layer is how far one layer of a pull has got.
type layer struct {
	current, total int64
	done           bool
}

// pullProgress sums a pull's layers.
type pullProgress struct {
	layers map[string]*layer
}

// add takes in one message of the stream.
func (p *pullProgress) add(m pullMessage) {
	if m.ID == "" {
		return
	}
	switch m.Status {
	case "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete", "Extracting", "Pull complete", "Already exists":
	default:
		return // "Pulling from library/x" and the like name the tag, not a layer
	}
	l := p.layers[m.ID]
	if l == nil {
		if p.layers == nil {
			p.layers = map[string]*layer{}
		}
		l = &layer{}
		p.layers[m.ID] = l
	}
	switch m.Status {
	case "Downloading":
		if m.Progress != nil {
			l.current, l.total = m.Progress.Current, m.Progress.Total
		}
	case "Download complete", "Verifying Checksum", "Extracting":
		if l.total > 0 {
			l.current = l.total
		}
	case "Pull complete", "Already exists":
		l.done = true
		if l.total > 0 {
			l.current = l.total
		}
	}
}

// String is the pull's state in a line: "3 of 7 layers done, 1.2GB of
// 3.4GB downloaded".
func (p *pullProgress) String() string {
	ids := make([]string, 0, len(p.layers))
	for id := range p.layers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var done int
	var cur, total int64
	for _, id := range ids {
		l := p.layers[id]
		if l.done {
			done++
		}
		cur += l.current
		total += l.total
	}
	s := fmt.Sprintf("%d of %d layers done", done, len(ids))
	if total > 0 {
		s += fmt.Sprintf(", %s of %s downloaded", units.HumanSize(float64(cur)), units.HumanSize(float64(total)))
	}
	return s
}

// followPull reads the pull's progress stream r to its end, calling say
// with a line on the progress (prefix first) at most every every, and
// returns the error the stream reports, if any (a failed pull still
// answers 200).
func followPull(r io.Reader, prefix string, every time.Duration, say func(string)) error {
	dec := json.NewDecoder(r)
	var p pullProgress
	last := time.Time{}
	for {
		var m pullMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read the pull's progress: %w", err)
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
		p.add(m)
		if now := time.Now(); now.Sub(last) >= every && len(p.layers) > 0 {
			last = now
			say(prefix + p.String())
		}
	}
}

// writePull replaces dir's PullFile with line.
func writePull(dir, line string) {
	tmp := filepath.Join(dir, PullFile+".tmp")
	if os.WriteFile(tmp, []byte(line+"\n"), 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, PullFile))
	}
}

// Pulling is what the shim of the rank with task directory dir says of its
// image's pull, while it pulls; "" when it is not pulling.
func Pulling(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, PullFile))
	if err != nil {
		return ""
	}
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return string(b)
}
