package driver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runRank starts sh -c script with kept output (bounded by the given
// sizes) or discarded, and waits for it.
func runRank(b *testing.B, s *Supervisor, dir, script string, discard bool, fileBytes int64, files int) {
	b.Helper()
	seq++
	h, err := s.Start(Spec{Key: "b/1/" + strconv.Itoa(seq), Command: []string{"sh", "-c", script},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, DiscardOutput: discard,
		LogFileBytes: fileBytes, LogFiles: files})
	if err != nil {
		b.Fatal(err)
	}
	<-h.Done()
	if e := h.Exit(); e.Code != 0 {
		b.Fatalf("exit %+v", e)
	}
	s.Forget(h.Key())
}

// BenchmarkRankOutput writes 1 GiB from a rank through each path: the rank
// writing a file itself (what kept output was before it was bounded), the
// pipe the supervisor splices into rotating files, and /dev/null.
func BenchmarkRankOutput(b *testing.B) {
	const size = 1 << 30
	s, sdir := newSupB(b)
	script := "dd if=/dev/zero bs=64k count=" + strconv.Itoa(size/(64<<10)) + " status=none"
	for _, c := range []struct {
		name    string
		script  string
		discard bool
	}{
		{"direct-file", script + " of=direct.out", true},
		{"pipe-rotating", script, false},
		{"discard", script, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			b.SetBytes(size)
			cpu0 := cpuTicks(sdir)
			for b.Loop() {
				runRank(b, s, dir, c.script, c.discard, 0, 0)
			}
			b.StopTimer()
			// Clock ticks are 10 ms.
			b.ReportMetric(float64(cpuTicks(sdir)-cpu0)*10/float64(b.N), "supervisor-cpu-ms/op")
			if !c.discard {
				total := int64(0)
				m, _ := filepath.Glob(filepath.Join(dir, "stdout.log*"))
				for _, f := range m {
					fi, _ := os.Stat(f)
					total += fi.Size()
				}
				b.ReportMetric(float64(total)/(1<<20), "MiB-kept")
			}
		})
	}
}

// BenchmarkStartKeptOutput is the cost of starting (and reaping) a rank
// that prints nothing, with its output kept or discarded.
func BenchmarkStartKeptOutput(b *testing.B) {
	s, sdir := newSupB(b)
	for _, discard := range []bool{false, true} {
		b.Run("discard="+strconv.FormatBool(discard), func(b *testing.B) {
			dir := b.TempDir()
			cpu0 := cpuTicks(sdir)
			for b.Loop() {
				runRank(b, s, dir, "true", discard, 0, 0)
			}
			b.ReportMetric(float64(cpuTicks(sdir)-cpu0)*10e3/float64(b.N), "supervisor-cpu-µs/op")
		})
	}
}

// cpuTicks is the CPU time the supervisor of dir has used, in clock ticks.
func cpuTicks(dir string) int64 {
	b, _ := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	st, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	f := statFields(string(st))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	k, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	return u + k
}

func newSupB(b *testing.B) (*Supervisor, string) {
	dir := b.TempDir()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	s, err := Connect(b.Context(), dir, exe, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(); KillAll(dir) })
	return s, dir
}
