//go:build race

package infbench

const raceEnabled = true
