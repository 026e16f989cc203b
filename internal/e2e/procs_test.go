package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procStat is the part of /proc/PID/stat these tests read.
type procStat struct {
	pid   int
	state byte // R, S, D, Z, ...
	pgrp  int
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, state: f[0][0], pgrp: pgrp}, true
}

// liveGroups maps each process group to its live (not zombie) members.
func liveGroups() map[int][]int {
	ents, _ := os.ReadDir("/proc")
	out := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok || st.state == 'Z' || st.state == 'X' {
			continue
		}
		out[st.pgrp] = append(out[st.pgrp], pid)
	}
	return out
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

// deathWatch records when each watched process group was first seen with
// no live member. A rank runs as a process group (the rank itself is its
// leader), so a group with no live member is a rank with nothing left
// running. The times are upper bounds: death happened before them.
type deathWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // guards dead
	dead map[int]time.Time
}

// watchGroups polls /proc every interval until stop.
func watchGroups(pgids []int, interval time.Duration) *deathWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &deathWatch{cancel: cancel, dead: map[int]time.Time{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			live := liveGroups()
			now := time.Now()
			w.mu.Lock()
			for _, g := range pgids {
				if _, seen := w.dead[g]; !seen && len(live[g]) == 0 {
					w.dead[g] = now
				}
			}
			all := len(w.dead) == len(pgids)
			w.mu.Unlock()
			if all {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// stop ends the polling and waits for it.
func (w *deathWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// deadAt returns when pgid was first seen dead.
func (w *deathWatch) deadAt(pgid int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.dead[pgid]
	return t, ok
}

// groupGone reports whether no live process is left in pgid, naming any
// survivors.
func groupGone(pgid int) (bool, string) {
	if m := liveGroups()[pgid]; len(m) > 0 {
		return false, fmt.Sprintf("process group %d still has live members %v", pgid, m)
	}
	return true, ""
}
