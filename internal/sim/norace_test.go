//go:build !race

package sim

// raceEnabled: the race detector is on, and the long replays shrink.
const raceEnabled = false
