// Package trace reads GPU-cluster job traces into one job type the simulator
// replays: the Pollux-derived Philly CSV, the Helios cluster_log.csv format
// (and the per-job logs the Helios simulator writes), the Alibaba openb node
// and pod lists, and gangway's own generic CSV and JSON-lines formats
// (documented in ../README.md).
//
// Every reader reports a malformed row as a *ParseError naming the source,
// line, column and field, and what was wrong with it. Readers never read
// more than the io.Reader they are given.
//
// It imports only the standard library.
package trace
