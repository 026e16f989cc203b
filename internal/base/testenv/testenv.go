// Package testenv holds set-up that tests which start subprocesses share.
package testenv

import "os"

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
