// Package api holds gangway's wire types: jobs, nodes, assignments and the
// reports agents send, with their defaults, validation and strict decoding.
//
// It does no I/O and imports nothing of gangway's; every other package may
// import it.
package api
