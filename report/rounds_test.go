package report

import (
	"math"
	"testing"
)

// roundsOf makes a peer's round lines: round k (1-based) ends dur(k)
// seconds after round k-1, and every step-th round is recorded.
func roundsOf(n, step int, dur func(k int) float64) *Run {
	r := &Run{}
	sec := 0.0
	for k := 1; k <= n; k++ {
		sec += dur(k)
		if k%step == 0 {
			r.Rounds = append(r.Rounds, Round{Type: TypeRound, Clock: int64(k), Seconds: sec})
		}
	}
	return r
}

// What a user reads off the round-time table: the start and the end do
// not count, the percentiles show the slow rounds, sampled lines give the
// mean of the rounds between them, and a run without enough round lines
// has no figures rather than wrong ones.
func TestRoundTimes(t *testing.T) {
	// 100 rounds of 10 ms, every twentieth 50 ms; the first round took 5 s
	// (the cluster forming) and the last 3 s (the final gather).
	slow := func(k int) float64 {
		switch {
		case k == 1:
			return 5
		case k == 100:
			return 3
		case k%20 == 0:
			return 0.050
		}
		return 0.010
	}
	rt := roundTimes([]*Run{roundsOf(100, 1, slow)})
	// The middle rounds: clocks 11..90, so the 79 durations of rounds
	// 12..90, 4 of them 50 ms (rounds 20, 40, 60, 80): 79 rounds in
	// 75·0.010 + 4·0.050 = 0.95 s.
	if rt.Measured != 79 {
		t.Errorf("measured %d rounds; want 79 (the first and last tenth left out)", rt.Measured)
	}
	if want := 79 / 0.95; math.Abs(float64(rt.Steady)-want) > 1e-6 {
		t.Errorf("steady %v rounds/s; want %.4f (the 5 s start and 3 s end left out)", rt.Steady, want)
	}
	if math.Abs(float64(rt.P50)-10) > 1e-6 || math.Abs(float64(rt.P90)-10) > 1e-6 || math.Abs(float64(rt.P99)-50) > 1e-6 {
		t.Errorf("round ms p50 %v, p90 %v, p99 %v; want 10, 10, 50 (4 of 79 rounds are slow)", rt.P50, rt.P90, rt.P99)
	}

	// Two peers, one recording every second round: its durations are the
	// mean of two rounds; the steady figure is the median over peers.
	even := func(k int) float64 { return 0.020 }
	rt = roundTimes([]*Run{roundsOf(100, 1, even), roundsOf(200, 2, func(int) float64 { return 0.010 }), roundsOf(100, 1, func(int) float64 { return 0.040 })})
	if math.Abs(float64(rt.Steady)-50) > 1e-6 {
		t.Errorf("steady %v; want 50 rounds/s, the median of 25, 50 and 100", rt.Steady)
	}
	if math.Abs(float64(rt.P50)-20) > 1e-6 || math.Abs(float64(rt.P99)-40) > 1e-6 {
		t.Errorf("p50 %v, p99 %v; want 20 and 40 ms", rt.P50, rt.P99)
	}

	// Nine round lines (or none: a plain train) are too few.
	for _, runs := range [][]*Run{{roundsOf(9, 1, even)}, {{}}, nil} {
		rt = roundTimes(runs)
		if !math.IsNaN(float64(rt.Steady)) || !math.IsNaN(float64(rt.P50)) || rt.Measured != 0 {
			t.Errorf("%d runs with too few round lines: %+v; want NaN figures", len(runs), rt)
		}
	}
}
