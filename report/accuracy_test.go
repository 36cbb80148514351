package report

import (
	"fmt"
	"math"
	"testing"
)

func pts(sl ...float64) []CurvePoint {
	var out []CurvePoint
	for i := 0; i+1 < len(sl); i += 2 {
		out = append(out, CurvePoint{Seconds: sl[i], Metrics: Metrics{TestLogLoss: Num(sl[i+1])}})
	}
	return out
}

// TestTimeToTarget: the time is interpolated between the evaluation above
// the target and the first at or under it, is the first evaluation's own
// when that is already there, and NaN when the curve never gets there.
func TestTimeToTarget(t *testing.T) {
	for _, tc := range []struct {
		curve  []CurvePoint
		target float64
		want   float64
	}{
		{pts(10, 0.6, 20, 0.5, 30, 0.4), 0.45, 25},
		{pts(10, 0.6, 20, 0.5, 30, 0.4), 0.5, 20},
		{pts(10, 0.4, 20, 0.3), 0.45, 10},
		{pts(10, 0.6, 20, 0.5), 0.45, math.NaN()},
		{pts(10, math.NaN(), 20, 0.6, 30, 0.4), 0.5, 25},
	} {
		got := timeToTarget(tc.curve, tc.target)
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("timeToTarget(%v, %v) = %v, want %v", tc.curve, tc.target, got, tc.want)
		}
	}
}

// TestAddTimeToTarget: every configuration is timed to its baseline's final
// log-loss plus the tolerance, and its speedup is the baseline's time over
// its own; a given target replaces the baseline's.
func TestAddTimeToTarget(t *testing.T) {
	bs := []BenchConfig{
		{Name: "single/local/b100", Metrics: Metrics{TestLogLoss: 0.40}, Curve: pts(10, 0.6, 30, 0.41, 60, 0.40)},
		{Name: "ring/sync/b100/4p", Metrics: Metrics{TestLogLoss: 0.401}, Curve: pts(5, 0.5, 10, 0.4, 20, 0.401)},
		{Name: "ring/async/b100/4p", Metrics: Metrics{TestLogLoss: 0.45}, Curve: pts(5, 0.5, 10, 0.45)},
	}
	for i := range bs {
		bs[i].Baseline = "single/local/b100"
	}
	AddTimeToTarget(bs, 0, 0.005)
	if got := float64(bs[0].Target); math.Abs(got-0.402) > 1e-12 {
		t.Fatalf("target %v, want 0.402", got)
	}
	// The baseline: between 30 s (0.41) and 60 s (0.40).
	if got := float64(bs[0].SecondsToTarget); math.Abs(got-54) > 1e-9 {
		t.Errorf("baseline reached the target at %v s, want 54", got)
	}
	if got := float64(bs[1].SecondsToTarget); math.Abs(got-(5+5*0.098/0.1)) > 1e-9 {
		t.Errorf("ring/sync reached it at %v s, want 9.9", got)
	}
	if got := float64(bs[1].SpeedupToTarget); math.Abs(got-54/9.9) > 1e-9 {
		t.Errorf("ring/sync speedup to target %v, want %v", got, 54/9.9)
	}
	if !math.IsNaN(float64(bs[2].SecondsToTarget)) || !math.IsNaN(float64(bs[2].SpeedupToTarget)) {
		t.Errorf("ring/async never got there but has %v s, speedup %v", bs[2].SecondsToTarget, bs[2].SpeedupToTarget)
	}
	AddTimeToTarget(bs, 0.45, 0)
	if got := float64(bs[2].SecondsToTarget); got != 10 {
		t.Errorf("with target 0.45: ring/async at %v s, want 10", got)
	}
}

// TestBenchLeavesOutPausedEvaluations: a run alone evaluates between its
// steps, so its training time (examples/s, the curve's seconds, time to a
// target) leaves out the seconds it paused for evaluations, as the report's
// paused_seconds say; a peer's report without training_seconds or
// paused_seconds (an older one) is its wall time.
func TestBenchLeavesOutPausedEvaluations(t *testing.T) {
	m := func(ll float64) Metrics {
		return Metrics{TestExamples: 100, TestLogLoss: Num(ll), TestError: 0.2, TestAUC: 0.8, TestAccuracy: 0.8}
	}
	alone := &Run{
		Evals:   []Eval{{Type: TypeEval, Examples: 500, Seconds: 5, Paused: 1, Metrics: m(0.5)}},
		Summary: &Summary{Type: TypeSummary, Examples: 1000, Seconds: 10, PausedSeconds: 2, Metrics: m(0.4)},
	}
	p := benchPeer(alone)
	if p.Seconds != 8 || float64(p.ExamplesPerSec) != 125 {
		t.Errorf("alone: %v s, %v examples/s; want 8 s of training (10 less 2 paused) and 125/s", p.Seconds, p.ExamplesPerSec)
	}
	c := curve(alone, p, 1000)
	if len(c) != 2 || c[0].Seconds != 4 || c[1].Seconds != 8 {
		t.Errorf("alone: curve %+v; want points at 4 s and 8 s of training", c)
	}
	peer := &Run{
		Evals:   []Eval{{Type: TypeEval, Examples: 500, Seconds: 5, Metrics: m(0.5)}},
		Summary: &Summary{Type: TypeSummary, Examples: 1000, Seconds: 10, Metrics: m(0.4)},
	}
	if q := benchPeer(peer); q.Seconds != 10 || curve(peer, q, 1000)[0].Seconds != 5 {
		t.Errorf("peer: %v s, curve %+v; want its wall time, 10 s and 5 s", q.Seconds, curve(peer, q, 1000))
	}
}

// TestBenchSyncLeavesOutTheRunsPauses: a peer's training time ends at the
// run's last round (training_seconds), and in a sync run every peer waited
// for the peer that paused to evaluate, so the run's largest pauses are
// left out of every peer's time, once: the configuration's seconds are the
// slowest peer's training seconds less those pauses, and its curve ends at
// that time. In async the evaluating peer paused nobody else: the others
// keep their time.
func TestBenchSyncLeavesOutTheRunsPauses(t *testing.T) {
	const paused = 2.0
	specs := func(mode string) []peerSpec {
		var out []peerSpec
		for i, sec := range [][2]float64{{12, 10}, {12.5, 10.5}, {11, 9.8}} { // seconds, training seconds
			s := peerSpec{id: fmt.Sprintf("%s%d", mode[:1], i+1), topology: "ring", mode: mode, batch: 100,
				examples: 1000, seconds: sec[0], training: sec[1], rounds: 10, hash: "cccc"}
			if i == 0 {
				s.paused, s.evalErr = paused, []float64{0.3, 0.2} // the peer that evaluates
			}
			out = append(out, s)
		}
		return out
	}
	runs := writeFixture(t, t.TempDir(), append(specs("sync"), specs("async")...))
	cfgs, err := GroupRuns(runs)
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	if len(bs) != 2 || bs[0].Mode != "sync" || bs[1].Mode != "async" {
		t.Fatalf("configurations %+v, want ring/sync and ring/async", bs)
	}
	for _, tc := range []struct {
		b       BenchConfig
		peers   []float64 // each peer's seconds
		seconds float64
	}{
		{bs[0], []float64{10 - paused, 10.5 - paused, 9.8 - paused}, 10.5 - paused},
		{bs[1], []float64{10 - paused, 10.5, 9.8}, 10.5},
	} {
		b := tc.b
		for i, p := range b.Peers {
			if math.Abs(p.Seconds-tc.peers[i]) > 1e-9 || math.Abs(float64(p.ExamplesPerSec)-1000/tc.peers[i]) > 1e-9 {
				t.Errorf("%s: peer %s: %v s, %v examples/s; want %v s", b.Name, p.PeerID, p.Seconds, p.ExamplesPerSec, tc.peers[i])
			}
		}
		if math.Abs(b.Seconds-tc.seconds) > 1e-9 || math.Abs(float64(b.ExamplesPerSec)-3000/tc.seconds) > 1e-9 {
			t.Errorf("%s: %v s, %v examples/s; want %v s, 3000 examples over it", b.Name, b.Seconds, b.ExamplesPerSec, tc.seconds)
		}
		// The curve: the evaluating peer's points, at 6 s less 1 s paused,
		// and the final evaluation (at 12 s of the run, after its last
		// round) at its training time.
		if c := b.Curve; len(c) != 2 || math.Abs(c[0].Seconds-5) > 1e-9 || math.Abs(c[1].Seconds-(10-paused)) > 1e-9 {
			t.Errorf("%s: curve %+v; want points at 5 s and %v s", b.Name, c, 10-paused)
		}
	}
}
