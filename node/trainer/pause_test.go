package trainer

import (
	"math"
	"testing"
	"time"
)

// TestPauseCostsWhatItsRoundTookBeyondOthers: a pause counts what the
// round it held took beyond the median round without a pause, at most its
// own wall time and at least nothing (pauseState.request). Counting the
// pause's whole wall time credits the run with the others' share of the
// round, which they computed while this worker evaluated.
func TestPauseCostsWhatItsRoundTookBeyondOthers(t *testing.T) {
	at := time.Unix(1000, 0)
	p := pauseState{}
	step := func(d time.Duration) {
		at = at.Add(d)
		p.request(at)
	}
	p.request(at)
	for _, d := range []time.Duration{10, 12, 9, 11, 10, 30, 10} { // ms: the median is 10
		step(d * time.Millisecond)
	}
	// The request of the next round is held for a pause of 45 ms, and its
	// round ends 50 ms after it: it cost 40 ms.
	p.want = true
	step(10 * time.Millisecond) // (the held request: the round before it had no pause)
	p.want, p.on = false, true
	p.on, p.pending, p.settle = false, 0.045, true
	if got := p.paused(); math.Abs(got-0.045) > 1e-9 {
		t.Fatalf("while its round is under way the pause counts its wall time: %v, want 0.045", got)
	}
	step(50 * time.Millisecond)
	if got := p.paused(); math.Abs(got-0.040) > 1e-9 {
		t.Fatalf("a 45 ms pause in a round of 50 ms (others: 10 ms) cost %v s, want 0.040", got)
	}
	// A pause its round hid entirely costs nothing; one whose round took
	// longer than the pause costs at most the pause.
	p.pending, p.settle = 0.020, true
	step(8 * time.Millisecond)
	if got := p.paused(); math.Abs(got-0.040) > 1e-9 {
		t.Fatalf("a pause hidden by its round added %v s", got-0.040)
	}
	p.pending, p.settle = 0.020, true
	step(200 * time.Millisecond)
	if got := p.paused(); math.Abs(got-0.060) > 1e-9 {
		t.Fatalf("a 20 ms pause in a slow round cost %v s, want at most its 20 ms", got-0.040)
	}
	if n := min(p.nRecent, len(p.recent)); n != 8 {
		t.Fatalf("%d rounds without a pause noted, want 8 (the paused rounds are not)", n)
	}
}
