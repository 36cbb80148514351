package model

// Reading a page of anonymous memory that was never written makes the
// kernel back it with a page of its own: on the VMs this project measures
// on, hashing a 2^29-row model (2 GiB of weights, of which training
// touched 1.3 GB) took a lone train's peak RSS from 1.3 to 2.8 GB, and a
// peer's by the size of its shards. untouchedRuns lets Hash and NonZeros
// treat such pages as the zeros they are without reading them.

// untouchedRuns calls fn for consecutive runs of v, in order, covering v:
// zero is true for a run that lies in pages the process never wrote (all
// its values are 0, and reading them would only cost memory). Where that
// cannot be told (not Linux, a system with swap, a short v, an error) it
// calls fn once for all of v with zero false.
func untouchedRuns(v []float32, fn func(lo, hi int, zero bool)) {
	if len(v) < minUntouchedFloats {
		fn(0, len(v), false)
		return
	}
	res, first, per, ok := residency(v)
	if !ok {
		fn(0, len(v), false)
		return
	}
	// Page p covers v[max(0, p·per-first) : min(len, (p+1)·per-first)].
	lo := 0
	for p := 0; p < len(res); {
		q := p
		for q < len(res) && res[q] == res[p] {
			q++
		}
		hi := min(len(v), q*per-first)
		if hi > lo {
			fn(lo, hi, !res[p])
		}
		lo, p = hi, q
	}
}

// minUntouchedFloats is the shortest slice untouchedRuns looks into (64 KiB
// of floats, 16 pages); shorter ones are read. A shard of a 2^24-row
// logreg model is 256 KiB.
const minUntouchedFloats = 1 << 14
