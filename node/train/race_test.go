//go:build race

package train

// raceEnabled: the race detector is on (it slows the core tenfold, so
// timed checks are skipped).
const raceEnabled = true
