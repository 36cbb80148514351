package report

import (
	"cmp"
	"math"
	"slices"
)

// RoundTimes is how long a configuration's rounds took in steady state,
// from its peers' round lines. A run's whole-run rounds/s counts the
// cluster's start (peers meeting, agreeing, filling their first batches:
// a second or more) and its end, which on a short run hides what a round
// costs; these figures leave out each peer's first and last tenth of
// recorded rounds. And where rounds/s is a mean, the percentiles show the
// spread: a round p90 far above its p50 while the peers' CPU is low says
// the run waits on its messages (latency), not on its cores.
type RoundTimes struct {
	// Steady is rounds per second over the middle eight tenths of each
	// peer's rounds, the median over peers.
	Steady Num `json:"steady_rounds_per_sec"`
	// P50, P90, P99: the duration of one round in milliseconds, over the
	// same rounds of every peer. With --report-rounds N > 1 a peer records
	// every Nth round, and a duration is the mean of the N rounds between
	// two records.
	P50 Num `json:"round_ms_p50"`
	P90 Num `json:"round_ms_p90"`
	P99 Num `json:"round_ms_p99"`
	// Measured is how many round durations the percentiles are over.
	Measured int `json:"rounds_measured"`
}

// minRoundLines is the fewest round lines a peer needs for its rounds to
// count: fewer, and its middle eight tenths say little.
const minRoundLines = 10

// roundTimes computes RoundTimes from runs' round lines; every figure is
// NaN when no peer has minRoundLines of them (a plain train, a short run).
func roundTimes(runs []*Run) RoundTimes {
	nan := Num(math.NaN())
	out := RoundTimes{Steady: nan, P50: nan, P90: nan, P99: nan}
	var steady, ms []float64
	for _, r := range runs {
		rs := slices.Clone(r.Rounds)
		slices.SortStableFunc(rs, func(a, b Round) int { return cmp.Compare(a.Clock, b.Clock) })
		rs = slices.CompactFunc(rs, func(a, b Round) bool { return a.Clock == b.Clock })
		if len(rs) < minRoundLines {
			continue
		}
		lo, hi := rs[len(rs)/10], rs[len(rs)-1-len(rs)/10]
		if sec := hi.Seconds - lo.Seconds; sec > 0 {
			steady = append(steady, float64(hi.Clock-lo.Clock)/sec)
		}
		mid := rs[len(rs)/10 : len(rs)-len(rs)/10]
		for i := 1; i < len(mid); i++ {
			n := mid[i].Clock - mid[i-1].Clock
			if n > 0 && mid[i].Seconds >= mid[i-1].Seconds {
				ms = append(ms, 1e3*(mid[i].Seconds-mid[i-1].Seconds)/float64(n))
			}
		}
	}
	if len(steady) > 0 {
		out.Steady = Num(Median(steady))
	}
	if len(ms) > 0 {
		slices.Sort(ms)
		out.P50, out.P90, out.P99 = Num(quantile(ms, 0.5)), Num(quantile(ms, 0.9)), Num(quantile(ms, 0.99))
		out.Measured = len(ms)
	}
	return out
}

// Median is the median of v (NaN when empty); v is reordered.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// quantile is the nearest-rank q-quantile of sorted a (not empty).
func quantile(a []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(a)))) - 1
	return a[min(max(i, 0), len(a)-1)]
}
