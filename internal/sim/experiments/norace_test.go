//go:build !race

package experiments

// raceEnabled: the race detector is on, and the long replays shrink.
const raceEnabled = false
