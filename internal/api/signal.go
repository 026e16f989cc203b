package api

import (
	"fmt"
	"strconv"
	"strings"
)

// Signals are the signals gangway delivers to a job's ranks (the
// checkpoint signal, gangway cancel --signal), by their Linux numbers:
// every agent knows these five, so none that an older agent would drop
// can be asked for.
var Signals = []struct {
	Name   string
	Number int
}{{"SIGHUP", 1}, {"SIGINT", 2}, {"SIGUSR1", 10}, {"SIGUSR2", 12}, {"SIGTERM", 15}}

// ParseSignal reads a signal as Slurm's scancel --signal and kill(1) take
// one: USR1, SIGUSR1, usr1 or its number (10), and returns its canonical
// name (SIGUSR1). Anything else is an error that lists what is accepted.
func ParseSignal(s string) (string, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	n, numErr := strconv.Atoi(t)
	if !strings.HasPrefix(t, "SIG") {
		t = "SIG" + t
	}
	for _, sg := range Signals {
		if (numErr == nil && n == sg.Number) || t == sg.Name {
			return sg.Name, nil
		}
	}
	return "", fmt.Errorf("signal %q: want one of %s", s, SignalForms())
}

// SignalForms says which signals ParseSignal accepts, for errors and help.
func SignalForms() string {
	var names, nums []string
	for _, sg := range Signals {
		names = append(names, strings.TrimPrefix(sg.Name, "SIG"))
		nums = append(nums, strconv.Itoa(sg.Number))
	}
	return strings.Join(names, ", ") + " (with or without SIG, any case) or their numbers " + strings.Join(nums, ", ")
}
