package chaos

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// rankWatch follows the ranks' log and /proc. Every rank that started and
// has written no exit record is looked at every interval; once its process
// is gone (or is another process under a reused pid) it gets a gone
// record, kept in memory and appended to the harness's own log. The
// watch's view of a process is an upper bound on its death and a lower
// bound (AliveUntil) on its life.
type rankWatch struct {
	rd      lineReader
	goneLog string

	// live is the loop's own: the ranks being watched.
	live map[watchKey]*watched

	mu   sync.Mutex // guards recs, err
	recs []Record
	err  error // the first unreadable log
}

type watchKey struct {
	k   rankKey
	pid int
}

type watched struct {
	rec       Record
	started   string // /proc/PID/stat's starttime when first seen
	lastAlive time.Time
}

func newRankWatch(rankLog, goneLog string) *rankWatch {
	return &rankWatch{rd: lineReader{path: rankLog}, goneLog: goneLog, live: map[watchKey]*watched{}}
}

// run polls every interval until ctx ends, then once more.
func (w *rankWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.poll()
		select {
		case <-ctx.Done():
			w.poll()
			return
		case <-t.C:
		}
	}
}

func (w *rankWatch) poll() {
	recs, err := w.rd.next()
	now := time.Now()
	var gone []Record
	for _, r := range recs {
		k := watchKey{r.key(), r.PID}
		switch r.Ev {
		case EvStart:
			st, ok := procStart(r.PID)
			if !ok {
				// Already gone (or exited cleanly, its exit record to come).
				gone = append(gone, goneRecord(r, r.Time, now))
				continue
			}
			w.live[k] = &watched{rec: r, started: st, lastAlive: now}
		case EvExit:
			delete(w.live, k)
		}
	}
	for k, x := range w.live {
		if st, ok := procStart(k.pid); ok && st == x.started {
			x.lastAlive = now
			continue
		}
		gone = append(gone, goneRecord(x.rec, x.lastAlive, now))
		delete(w.live, k)
	}
	for _, g := range gone {
		if b, err := json.Marshal(g); err == nil {
			if f, err := os.OpenFile(w.goneLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
				_, _ = f.Write(append(b, '\n'))
				f.Close()
			}
		}
	}
	w.mu.Lock()
	w.recs = append(append(w.recs, recs...), gone...)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func goneRecord(start Record, aliveUntil, now time.Time) Record {
	g := start
	g.Ev, g.Time, g.AliveUntil = EvGone, now, aliveUntil
	return g
}

// records returns every record so far, the ranks' and the gone ones.
func (w *rankWatch) records() ([]Record, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Record(nil), w.recs...), w.err
}

// liveByHost counts, per host, the ranks that started and have not been
// seen ending.
func (w *rankWatch) liveByHost() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	host := map[watchKey]string{}
	for _, r := range w.recs {
		k := watchKey{r.key(), r.PID}
		if r.Ev == EvStart {
			host[k] = r.Host
		} else {
			delete(host, k)
		}
	}
	out := map[string]int{}
	for _, h := range host {
		out[h]++
	}
	return out
}

// procStart returns a live (not zombie) process's start time in clock
// ticks since boot, which tells it from a later process with its pid.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// nodeWatch polls the server's nodes and keeps every time each node was
// marked lost (the server's LostAt), and reports changes of state.
type nodeWatch struct {
	api *client.Client
	say func(format string, a ...any)

	mu    sync.Mutex // guards lost, state
	lost  map[string][]time.Time
	state map[string]string
}

func newNodeWatch(c *client.Client, say func(string, ...any)) *nodeWatch {
	return &nodeWatch{api: c, say: say, lost: map[string][]time.Time{}, state: map[string]string{}}
}

// run polls every interval until ctx ends.
func (w *nodeWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *nodeWatch) poll(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := w.api.Nodes(cctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range l.Nodes {
		st := string(n.Status.State)
		if n.Status.State == api.NodeLost && !n.Status.LostAt.IsZero() {
			ts := w.lost[n.Name]
			if len(ts) == 0 || !ts[len(ts)-1].Equal(n.Status.LostAt) {
				w.lost[n.Name] = append(ts, n.Status.LostAt)
			}
		}
		if old := w.state[n.Name]; old != st {
			if old != "" {
				w.say("  node %s: %s → %s %s", n.Name, old, st, n.Status.Reason)
			}
			w.state[n.Name] = st
		}
	}
}

// lostTimes returns, per node, every LostAt seen.
func (w *nodeWatch) lostTimes() map[string][]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]time.Time{}
	for k, v := range w.lost {
		out[k] = append([]time.Time(nil), v...)
	}
	return out
}
