//go:build race

package sim

// raceEnabled: the race detector is on (the simulator is one goroutine, so
// its big runs gain nothing from it and shrink).
const raceEnabled = true
