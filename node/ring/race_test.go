//go:build race

package ring

// raceEnabled: the race detector is on. The ring is pure and the
// measurements below run one goroutine, so they shrink under it.
const raceEnabled = true
