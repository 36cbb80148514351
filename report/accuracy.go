package report

import (
	"fmt"
	"math"
)

// DefaultTargetTolerance is how far above the baseline's final test
// log-loss the default target lies: 0.5%, the quality a distributed run
// must reach to count as done.
const DefaultTargetTolerance = 0.005

// Accuracy is a configuration's time to accuracy: once a change alters
// what a step computes (windows of local steps, bigger batches), examples/s
// alone says nothing of how soon a model is good, so a configuration is
// also judged by the wall time until its test log-loss first reaches a
// target.
type Accuracy struct {
	// Target is the test log-loss to reach: the single-peer baseline's
	// final test log-loss plus DefaultTargetTolerance (or one given); NaN
	// when there is neither.
	Target Num `json:"target_logloss"`
	// SecondsToTarget is the training time until the test log-loss first
	// reached Target, interpolated linearly between the evaluation before
	// and the one at or under it; NaN when it never did.
	SecondsToTarget Num `json:"seconds_to_target"`
	// SpeedupToTarget is the baseline's SecondsToTarget over this one's: 3
	// means a good model three times sooner than one peer alone.
	SpeedupToTarget Num `json:"speedup_to_target"`
}

func noAccuracy() Accuracy {
	nan := Num(math.NaN())
	return Accuracy{Target: nan, SecondsToTarget: nan, SpeedupToTarget: nan}
}

// AddTimeToTarget sets every configuration's Accuracy. With target > 0
// every configuration is timed to it; otherwise each is timed to its
// single-peer baseline's (the configuration Scaling names) final test
// log-loss times 1 + tolerance. Speedups are against that baseline.
func AddTimeToTarget(bs []BenchConfig, target, tolerance float64) {
	idx := map[string]int{}
	for i, b := range bs {
		idx[b.Name] = i
	}
	for i := range bs {
		b := &bs[i]
		b.Accuracy = noAccuracy()
		j, hasBase := idx[b.Baseline]
		t := target
		if t <= 0 && hasBase {
			t = float64(bs[j].TestLogLoss) * (1 + tolerance)
		}
		if !(t > 0) || math.IsInf(t, 0) {
			continue
		}
		b.Target = Num(t)
		b.SecondsToTarget = Num(timeToTarget(b.Curve, t))
	}
	for i := range bs {
		if j, ok := idx[bs[i].Baseline]; ok {
			bs[i].SpeedupToTarget = ratio(float64(bs[j].SecondsToTarget), float64(bs[i].SecondsToTarget))
		}
	}
}

// timeToTarget is the first time curve reaches target (linear between the
// evaluation before and the first at or under it; the first evaluation's
// own time when it is already there), NaN when it never does.
func timeToTarget(curve []CurvePoint, target float64) float64 {
	prevS, prevL := 0.0, math.NaN()
	for _, c := range curve {
		l := float64(c.TestLogLoss)
		if math.IsNaN(l) {
			continue
		}
		if l <= target {
			if math.IsNaN(prevL) || prevL <= l {
				return c.Seconds
			}
			return prevS + (c.Seconds-prevS)*(prevL-target)/(prevL-l)
		}
		prevS, prevL = c.Seconds, l
	}
	return math.NaN()
}

// hasTarget reports whether any configuration was timed to a target.
func hasTarget(bs []BenchConfig) bool {
	for _, b := range bs {
		if !math.IsNaN(float64(b.Target)) {
			return true
		}
	}
	return false
}

// accuracyHeader is the time-to-accuracy table's columns.
var accuracyHeader = []string{"configuration", "peers", "final test log-loss", "target", "s to target", "speedup to target", "examples/s speedup"}

func accuracyRows(bs []BenchConfig) [][]string {
	var rows [][]string
	for _, b := range bs {
		if math.IsNaN(float64(b.Target)) {
			continue
		}
		s := fmtNum(float64(b.SecondsToTarget))
		if math.IsNaN(float64(b.SecondsToTarget)) {
			s = "never"
		}
		rows = append(rows, []string{b.Name, fmt.Sprint(b.Workers), fmtMetric(b.TestLogLoss), fmt.Sprintf("%.4f", float64(b.Target)),
			s, fmtSpeedup(b.SpeedupToTarget), fmtSpeedup(b.Speedup)})
	}
	return rows
}

// accuracyText explains the time-to-accuracy figures.
const accuracyText = "Time to accuracy: the training time until a configuration's test log-loss first reached the target " +
	"(by default one peer alone's final test log-loss plus 0.5%), interpolated between evaluations; its speedup is one peer " +
	"alone's time over it. It is the honest figure once a configuration changes what a step computes (windows of local " +
	"steps, other batches): examples/s counts work, this counts how soon the model is good."
