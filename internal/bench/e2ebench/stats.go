package e2ebench

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux architecture gangway runs on.
const userHZ = 100

// procStat is the CPU accounting of one /proc/PID/stat line, in ticks.
type procStat struct {
	utime, stime, cutime, cstime int64
}

// total is the process's CPU seconds plus those of its reaped children.
func (s procStat) total() float64 {
	return float64(s.utime+s.stime+s.cutime+s.cstime) / userHZ
}

// parseProcStat reads fields 14–17 (utime, stime, cutime, cstime) of a
// /proc/PID/stat line. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted after the last
// ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("proc stat: no ')' closing the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after the command name, want at least 15", len(f))
	}
	var v [4]int64
	for k := range v {
		n, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil || n < 0 {
			return procStat{}, fmt.Errorf("proc stat: field %d is %q, want a tick count", 14+k, f[11+k])
		}
		v[k] = n
	}
	return procStat{utime: v[0], stime: v[1], cutime: v[2], cstime: v[3]}, nil
}
