package agent

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
)

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/logs", a.serveLogs)
	mux.HandleFunc("GET /v1/peer/contact", a.servePeerContact)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// serveLogs streams what a rank's stdout or stderr retains, the rotated
// files oldest first; with follow=1 it keeps streaming, across rotations,
// until the rank has exited and the log is drained.
func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("task")
	if _, _, _, err := api.ParseTaskKey(key); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	stream := q.Get("stream")
	switch stream {
	case "", "stdout":
		stream = "stdout"
	case "stderr":
	default:
		http.Error(w, fmt.Sprintf("stream %q: want stdout or stderr", stream), http.StatusBadRequest)
		return
	}
	f, err := driver.OpenLog(a.taskDir(key), stream)
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, fmt.Sprintf("no %s log for %s on node %s", stream, key, a.cfg.Name), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			continue
		}
		if err != nil && err != io.EOF {
			return
		}
		if !follow {
			return // what was retained when the request came
		}
		// Across a rotation: the rest of the file just read, then the
		// files written since.
		if more, err := f.Next(); err != nil {
			return
		} else if more {
			continue
		}
		if a.taskFinished(key) {
			// Read once more: the rank may have written before exiting.
			if more, _ := f.Next(); more {
				continue
			}
			if n, _ := f.Read(buf); n > 0 {
				_, _ = w.Write(buf[:n])
				continue
			}
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *Agent) taskFinished(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[key]
	return t == nil || t.status.State.Terminal()
}
