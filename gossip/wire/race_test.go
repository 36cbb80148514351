//go:build race

package wire

// raceEnabled: the race detector is on (allocation counts differ).
const raceEnabled = true
