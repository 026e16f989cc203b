// Package testenv holds set-up that tests share: for those that start
// subprocesses, and the goroutines an embedded etcd leaves behind for the
// leak checks of those that start one. Only tests import it.
//
// It imports goleak and the standard library.
package testenv

import (
	"os"

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
