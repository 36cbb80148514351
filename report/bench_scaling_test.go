package report

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scalingFixture is a scaling series worked out by hand:
//
//	single/local/b100: one plain train, 4000 examples in 10 s: 400/s.
//	ring/sync/b100/2p: 2 x 2000 examples, 5 s and 4 s: 4000/5 = 800/s,
//	  speedup 2.00, efficiency 1.00; each received 100 kB: 50 B/example.
//	ring/sync/b100/4p: 4 x 1000 examples, 5 s: 800/s, speedup 2.00,
//	  efficiency 0.50; received 100, 200, 300, 400 kB: 100-400 B/example,
//	  mean 250.
//	master/sync/b100/4p: 4 x 1000 examples, 20 s: 200/s, speedup 0.50,
//	  efficiency 0.125.
func scalingFixture(t *testing.T) [][]*Run {
	t.Helper()
	dir := t.TempDir()
	set := func(name string, specs []peerSpec) []*Run {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return writeFixture(t, d, specs)
	}
	var sets [][]*Run
	sets = append(sets, set("single", []peerSpec{{id: "", topology: "single", mode: "local", batch: 100,
		examples: 4000, seconds: 10, rounds: 40, evalErr: []float64{0.2}}}))
	var two, four, master []peerSpec
	for i, sec := range []float64{5, 4} {
		two = append(two, peerSpec{id: fmt.Sprintf("p%d", i), topology: "ring", mode: "sync", batch: 100,
			examples: 2000, seconds: sec, rounds: 20, recv: 100e3, hash: "aa"})
	}
	for i := range 4 {
		four = append(four, peerSpec{id: fmt.Sprintf("p%d", i), topology: "ring", mode: "sync", batch: 100,
			examples: 1000, seconds: 5, rounds: 10, recv: int64(i+1) * 100e3, hash: "bb"})
		master = append(master, peerSpec{id: fmt.Sprintf("p%d", i), topology: "master", mode: "sync", batch: 100,
			examples: 1000, seconds: 20, rounds: 10, recv: 1e3, hash: "cc"})
	}
	// Written in an order GroupSeries must not depend on.
	return append(sets, set("four", four), set("two", two), set("master", master))
}

func TestScalingSeries(t *testing.T) {
	cfgs, err := GroupSeries(scalingFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cfgs {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "single/local/b100 master/sync/b100/4p ring/sync/b100/2p ring/sync/b100/4p" {
		t.Fatalf("configurations %q", got)
	}
	bs := Summarize(cfgs)
	want := []struct {
		workers             int
		speedup, eff, recvB float64
	}{{1, 1, 1, math.NaN()}, {4, 0.5, 0.125, 1}, {2, 2, 1, 50}, {4, 2, 0.5, 250}}
	for i, w := range want {
		b := bs[i]
		if b.Workers != w.workers || b.Baseline != "single/local/b100" || !near(float64(b.Speedup), w.speedup) ||
			!near(float64(b.Efficiency), w.eff) {
			t.Errorf("%s: workers %d, baseline %q, speedup %v, efficiency %v; want %d, single/local/b100, %v, %v",
				b.Name, b.Workers, b.Baseline, b.Speedup, b.Efficiency, w.workers, w.speedup, w.eff)
		}
		if got := float64(b.RecvBytesPerExample); !(math.IsNaN(w.recvB) && got == 0) && !near(got, w.recvB) {
			t.Errorf("%s: received %v B/example/peer, want %v", b.Name, got, w.recvB)
		}
	}
	// The master is compared with the ring of its own peer count only.
	if cmp := Compare(bs); len(cmp) != 1 || cmp[0].Ring != "ring/sync/b100/4p" || !near(float64(cmp[0].ThroughputRatio), 4) {
		t.Errorf("comparisons %+v, want master/4p against ring/4p: 4x", cmp)
	}
	var tbl bytes.Buffer
	if err := WriteSummaryTable(&tbl, bs); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"speedup", "efficiency", "ring/sync/b100/2p  2  800  2.00  1.00  50.00"} {
		if !strings.Contains(strings.Join(strings.Fields(tbl.String()), "  "), strings.Join(strings.Fields(s), "  ")) {
			t.Errorf("the terminal table lacks %q:\n%s", s, tbl.String())
		}
	}

	dir := t.TempDir()
	if err := WriteBench(dir, cfgs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, ReportMDFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Scaling", "| ring/sync/b100/4p | 4 | 800 | 2.00 | 0.50 | 250 |", "(" + PlotSpeedup + ".png)"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	for _, ext := range []string{".png", ".svg"} {
		if st, err := os.Stat(filepath.Join(dir, PlotSpeedup+ext)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s%s: %v", PlotSpeedup, ext, err)
		}
	}
}

// Without a single-peer run nothing changes: no speedups, no scaling
// section, no speedup plot.
func TestNoScalingWithoutBaseline(t *testing.T) {
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), benchFixture()))
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	for _, b := range bs {
		if b.Baseline != "" || !math.IsNaN(float64(b.Speedup)) {
			t.Errorf("%s: baseline %q, speedup %v without a single-peer run", b.Name, b.Baseline, b.Speedup)
		}
		if b.Workers != 4 {
			t.Errorf("%s: workers %d, want 4", b.Name, b.Workers)
		}
	}
	dir := t.TempDir()
	if err := WriteBench(dir, cfgs); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportMDFile))
	if strings.Contains(string(md), "## Scaling") {
		t.Error("report.md has a scaling section without a baseline")
	}
	if _, err := os.Stat(filepath.Join(dir, PlotSpeedup+".png")); err == nil {
		t.Error("a speedup plot without a baseline")
	}
}

// Two runs of one configuration and peer count cannot be told apart.
func TestGroupSeriesRejectsDuplicates(t *testing.T) {
	sets := scalingFixture(t)
	if _, err := GroupSeries(append(sets, sets[2])); err == nil || !strings.Contains(err.Error(), "ring/sync/b100/2p") {
		t.Errorf("a run given twice: %v, want an error naming ring/sync/b100/2p", err)
	}
}
