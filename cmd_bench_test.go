package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// The repetitions table gives each configuration's figures in every
// repetition, in order, and their median; a configuration that failed in
// a repetition shows "-" there and counts in no median.
func TestRepeatsTable(t *testing.T) {
	nan := report.Num(math.NaN())
	cfg := func(name string, eps, speedup float64) report.BenchConfig {
		b := report.BenchConfig{Name: name, ExamplesPerSec: report.Num(eps)}
		b.Speedup = nan
		if speedup > 0 {
			b.Speedup, b.Baseline = report.Num(speedup), "single/local/b1000"
		}
		return b
	}
	reps := [][]report.BenchConfig{
		{cfg("single/local/b1000", 200e3, 1), cfg("ring/sync/b1000/4p", 220e3, 1.1)},
		{cfg("single/local/b1000", 180e3, 1), cfg("ring/sync/b1000/4p", 234e3, 1.3)},
		{cfg("single/local/b1000", 240e3, 1)},
	}
	var b bytes.Buffer
	writeRepeats(&b, reps)
	out := b.String()
	for _, want := range []string{
		"each of 3 interleaved repetitions",
		"| single/local/b1000 | 200.0k, 180.0k, 240.0k | 200.0k | 1.00, 1.00, 1.00 | 1.00 |",
		"| ring/sync/b1000/4p | 220.0k, 234.0k, - | 227.0k | 1.10, 1.30, - | 1.20 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// No baseline: no speedup columns.
	b.Reset()
	writeRepeats(&b, [][]report.BenchConfig{{cfg("ring/sync/b100", 1e3, 0)}, {cfg("ring/sync/b100", 3e3, 0)}})
	if strings.Contains(b.String(), "speedup") || !strings.Contains(b.String(), "| ring/sync/b100 | 1.0k, 3.0k | 2.0k |") {
		t.Errorf("without a baseline:\n%s", b.String())
	}
	// Runs with round lines: their steady rounds/s in every repetition.
	b.Reset()
	withSteady := func(eps, steady float64) report.BenchConfig {
		c := cfg("ring/sync/b100", eps, 0)
		c.Steady = report.Num(steady)
		return c
	}
	writeRepeats(&b, [][]report.BenchConfig{{withSteady(1e3, 120)}, {withSteady(3e3, 90.5)}, {withSteady(2e3, math.NaN())}})
	if want := "| ring/sync/b100 | 1.0k, 3.0k, 2.0k | 2.0k | 120.0, 90.5, - | 105.2 |"; !strings.Contains(b.String(), want) {
		t.Errorf("with round lines, the table lacks %q:\n%s", want, b.String())
	}
}
