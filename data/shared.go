package data

import "sync"

// Shared returns src for one reading goroutine and any number of others
// that ask how far it got: Next and Close go to src from the reader, and
// Stats, safe to call from any goroutine at any time, returns src's Stats
// as of the last Next to return (it never waits for a Next in progress).
// A trainer that reads ahead on a goroutine of its own while a progress
// display on another shows bytes read is the use.
func Shared(src Source) Source {
	s := &sharedSource{src: src}
	s.stats = src.Stats()
	return s
}

type sharedSource struct {
	src   Source
	mu    sync.Mutex
	stats Stats
}

func (s *sharedSource) Next(b *Batch, max int) (int, error) {
	n, err := s.src.Next(b, max)
	st := s.src.Stats()
	s.mu.Lock()
	s.stats = st
	s.mu.Unlock()
	return n, err
}

func (s *sharedSource) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func (s *sharedSource) Close() error { return s.src.Close() }
