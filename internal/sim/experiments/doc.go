// Package experiments holds the studies built on the simulator, each a
// function a command or a test runs whole: the Helios parity check
// (parity.go: our FIFO/SJF/SRTF against the published Philly runs), FGD's
// openb allocation experiment (openb.go), goodput under Llama 3's failure
// statistics with the checkpoint interval gangway picks (goodput.go), and
// the SVG charts they draw (svg.go). The simulator's engine stays in
// internal/sim; nothing here changes how a trace is replayed.
//
// It imports the standard library, internal/sim, internal/sim/trace and
// internal/base/stats.
package experiments
