package sim

// rng is splitmix64. A run draws every choice (the planted model, the fault
// schedule, the victims of faults, drops, duplicates, delays and compute
// times) from one stream in the order the run asks, so a seed replays
// exactly; the parts of the simulator share it through a pointer.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(r.next() % uint64(n))
}
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }
