package gossip

import "time"

// SetCoreIdle sets how long a core link's sender waits idle before it
// retires, until restore.
func SetCoreIdle(d time.Duration) (restore func()) {
	old := coreIdle
	coreIdle = d
	return func() { coreIdle = old }
}

// Destinations returns how many destinations have a sender.
func (l *CoreLink) Destinations() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.dests)
}
