// Package durbench measures what gangway's control plane keeps across a
// crash, the figure `gangway bench durability` prints: it starts the real
// `gangway server` as a child process on a data directory of its own,
// fires many submissions at once, each with an idempotency key (every
// tenth an array), SIGKILLs the server while they are in flight, starts it
// again on the same directory, and checks that every submission that got a
// success answer is there exactly once, by its job ID and by its key, and
// that sending each submission that got no answer again with its key
// leaves at most one job (or one whole array) for it.
//
// The server is this process's executable (os.Executable) run as `server`,
// so a test binary whose TestMain runs the gangway command line stands in
// for it; no node is registered, so every job waits pending and only the
// control plane is measured.
//
// It imports the standard library, api, api/client (its one way to the
// server), base/cmdkit and base/wait.
package durbench
