// Package testenv holds what tests share: set-up for tests that start
// subprocesses, the goroutines an embedded etcd leaves behind for the leak
// checks of those that start one, and the path of the project's shared
// data, and a count of the bytes a call allocates. Only tests import it.
//
// It imports the standard library and go.uber.org/goleak.
package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// EtcdLeaks are the goroutines etcd's embedded server and client leave
// behind briefly after Close, for goleak.VerifyTestMain and goleak.Find.
func EtcdLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	}
}

// QuickRaceExit keeps the race runtime of a test's subprocesses (the test
// binary re-run as agent, supervisor or cg-exec) from sleeping a second at
// exit, its atexit_sleep_ms default: every supervisor launch and every
// short-lived child would otherwise cost that second. A GORACE already set
// wins. Race reports are printed as before.
func QuickRaceExit() {
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
}

// SharedData returns the path of shared/data/rel, the project's data
// folder beside the repository, found by walking up from the working
// directory. A test that needs it is skipped, with a message saying where
// it was expected, when it is missing.
func SharedData(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("shared/data/%s not found above the working directory: expected beside the repository (../shared/data/%s from the repo root)", rel, rel)
		}
		dir = parent
	}
}

// BytesAllocated is how many bytes f allocated on the heap: for tests that
// a path stays cheap (a refusal that must not run a decoder), bounded by
// bytes rather than by the clock.
func BytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
