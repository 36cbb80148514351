package report

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gossiptrain/gossiptrain/human"
)

// SummarizeDirs summarizes one repetition's run directories (a scaling
// series groups each run on its own, as the main report does).
func SummarizeDirs(dirs []string, series bool, target float64) ([]BenchConfig, error) {
	var sets [][]*Run
	var all []*Run
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err != nil {
			continue // the run failed before it started
		}
		runs, err := ReadDir(dir)
		if err != nil {
			return nil, err
		}
		if len(runs) > 0 {
			sets = append(sets, runs)
			all = append(all, runs...)
		}
	}
	var groups []*Config
	var err error
	if series {
		groups, err = GroupSeries(sets)
	} else {
		groups, err = GroupRuns(all)
	}
	if err != nil {
		return nil, err
	}
	bs := Summarize(groups)
	if target > 0 {
		AddTimeToTarget(bs, target, 0)
	}
	return bs, nil
}

// WriteRepeats writes, for each configuration of the first repetition,
// its examples/s in every repetition and their median, likewise its
// speedup when the runs have a baseline, and its steady-state rounds/s
// (RoundTimes) when the runs have round lines. A configuration
// missing from a repetition (it failed there) shows "-" and counts in no
// median.
func WriteRepeats(w io.Writer, reps [][]BenchConfig) {
	fmt.Fprintf(w, "Every configuration in each of %d interleaved repetitions, and the median:\n\n", len(reps))
	speedup := func(b BenchConfig) float64 {
		if b.Baseline == "" {
			return math.NaN()
		}
		return float64(b.Speedup)
	}
	toTarget := func(b BenchConfig) float64 {
		if b.Baseline == "" {
			return math.NaN()
		}
		return float64(b.SpeedupToTarget)
	}
	steady := func(b BenchConfig) float64 {
		if !(b.Steady > 0) { // NaN: too few round lines (a plain train); 0: none summarized
			return math.NaN()
		}
		return float64(b.Steady)
	}
	columns := []struct {
		title  string
		value  func(BenchConfig) float64
		format func(float64) string
	}{
		{"examples/s", func(b BenchConfig) float64 { return float64(b.ExamplesPerSec) }, human.Count},
		{"speedup", speedup, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"speedup to target", toTarget, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"steady rounds/s", steady, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	}
	// A column shows when some configuration of the first repetition has it.
	shown := columns[:1]
	for _, c := range columns[1:] {
		if slices.ContainsFunc(reps[0], func(b BenchConfig) bool { return !math.IsNaN(c.value(b)) }) {
			shown = append(shown, c)
		}
	}
	fmt.Fprint(w, "| configuration |")
	for _, c := range shown {
		fmt.Fprintf(w, " %s | median |", c.title)
	}
	fmt.Fprint(w, "\n|---|")
	for range shown {
		fmt.Fprint(w, "---|---:|")
	}
	fmt.Fprintln(w)
	for _, b := range reps[0] {
		fmt.Fprintf(w, "| %s |", b.Name)
		for _, c := range shown {
			var cells []string
			var vs []float64
			for _, rep := range reps {
				i := slices.IndexFunc(rep, func(o BenchConfig) bool { return o.Name == b.Name })
				v := math.NaN()
				if i >= 0 {
					v = c.value(rep[i])
				}
				if math.IsNaN(v) {
					cells = append(cells, "-")
					continue
				}
				cells = append(cells, c.format(v))
				vs = append(vs, v)
			}
			m := "-"
			if len(vs) > 0 {
				m = c.format(Median(vs))
			}
			fmt.Fprintf(w, " %s | %s |", strings.Join(cells, ", "), m)
		}
		fmt.Fprintln(w)
	}
}
