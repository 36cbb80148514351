package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Base names (without extension) of the plots Plot draws.
const (
	PlotErrorVsExamples   = "error_vs_examples"
	PlotErrorVsSeconds    = "error_vs_seconds"
	PlotThroughput        = "throughput"
	PlotPeerNetOut        = "peer_net_out"
	PlotThroughputVsBatch = "throughput_vs_batch"
)

// PlotFile is one plot written in both formats.
type PlotFile struct {
	Name  string // base name, one of the Plot* constants
	Title string // the plot's title
	PNG   string // file name of the PNG, relative to the directory
	SVG   string // file name of the SVG, relative to the directory
}

// Plot draws the benchmark's plots into dir, each as NAME.png and NAME.svg,
// and returns those it wrote, in the order report.md shows them:
//
//   - error_vs_examples, error_vs_seconds: test error (%) of each
//     configuration's curve against all peers' training examples and
//     against wall-clock seconds (left out when no configuration has an
//     evaluation);
//   - throughput: examples/s per configuration (bars);
//   - peer_net_out: every peer's network send rate (MB/s), grouped by
//     configuration with the busiest peer first, so a master that saturates
//     its link stands out;
//   - throughput_vs_batch: examples/s against batch size, a line per
//     topology and mode (only when the configurations have several batch
//     sizes).
func Plot(dir string, bs []BenchConfig, o Options) ([]PlotFile, error) {
	var out []PlotFile
	save := func(p *plot.Plot, name string) error {
		f := PlotFile{Name: name, Title: p.Title.Text, PNG: name + ".png", SVG: name + ".svg"}
		w, h := vg.Length(o.PlotWidth)*vg.Centimeter, vg.Length(o.PlotHeight)*vg.Centimeter
		for _, file := range []string{f.PNG, f.SVG} {
			if err := p.Save(w, h, filepath.Join(dir, file)); err != nil {
				return fmt.Errorf("report: plot %s: %w", file, err)
			}
		}
		out = append(out, f)
		return nil
	}
	type mk struct {
		name string
		fn   func([]BenchConfig, Options) (*plot.Plot, error)
	}
	for _, m := range []mk{
		{PlotErrorVsExamples, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return errorCurves(bs, o, false) }},
		{PlotErrorVsSeconds, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return errorCurves(bs, o, true) }},
		{PlotThroughput, throughputBars},
		{PlotPeerNetOut, peerNetOutBars},
		{PlotThroughputVsBatch, throughputVsBatch},
	} {
		p, err := m.fn(bs, o)
		if err != nil {
			return out, fmt.Errorf("report: plot %s: %w", m.name, err)
		}
		if p == nil { // nothing to draw
			continue
		}
		if err := save(p, m.name); err != nil {
			return out, err
		}
	}
	return out, nil
}

// newPlot is a plot with a title, axis labels and a light grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Title.TextStyle.Font.Size = vg.Points(14)
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 220}
	g.Horizontal.Color = color.Gray{Y: 220}
	p.Add(g)
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	return p
}

// errorCurves plots test error (%) against examples or seconds.
func errorCurves(bs []BenchConfig, o Options, seconds bool) (*plot.Plot, error) {
	title, x := "Test error vs training examples", "training examples, all peers"
	if seconds {
		title, x = "Test error vs time", "wall-clock time since training started (s)"
	}
	p := newPlot(title, x, "test error (%)")
	p.X.Tick.Marker = siTicks{}
	drawn := 0
	for i, b := range bs {
		var xys plotter.XYs
		for _, c := range b.Curve {
			e := float64(c.TestError)
			if math.IsNaN(e) || math.IsInf(e, 0) {
				continue
			}
			xv := float64(c.Examples)
			if seconds {
				xv = c.Seconds
			}
			xys = append(xys, plotter.XY{X: xv, Y: 100 * e})
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(b.Name, l, s)
		drawn++
	}
	if drawn == 0 {
		return nil, nil
	}
	fitLegend(p, drawn, o)
	return p, nil
}

// throughputBars is a bar per configuration, labelled with its value.
func throughputBars(bs []BenchConfig, _ Options) (*plot.Plot, error) {
	p := newPlot("Throughput per configuration", "configuration", "training examples/s, all peers")
	vals := make(plotter.Values, len(bs))
	names := make([]string, len(bs))
	for i, b := range bs {
		vals[i] = finite(float64(b.ExamplesPerSec))
		names[i] = b.Name
	}
	w := barWidth(len(bs), 1)
	bars, err := plotter.NewBarChart(vals, w)
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Tick.Marker = siTicks{}
	labels := make([]string, len(vals))
	xys := make(plotter.XYs, len(vals))
	for i, v := range vals {
		labels[i] = siLabel(v)
		xys[i] = plotter.XY{X: float64(i), Y: v}
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lb)
	p.Y.Max = headroom(vals)
	return p, nil
}

// peerNetOutBars is a group of bars per configuration: every peer's send
// rate, busiest first.
func peerNetOutBars(bs []BenchConfig, o Options) (*plot.Plot, error) {
	p := newPlot("Network out per peer (busiest first)", "configuration", "sent, MB/s")
	k := 0
	for _, b := range bs {
		k = max(k, len(b.Peers))
	}
	if k == 0 {
		return nil, nil
	}
	rates := make([][]float64, len(bs)) // per configuration, sorted descending
	for i, b := range bs {
		for _, pe := range b.Peers {
			rates[i] = append(rates[i], finite(float64(pe.NetOutMBps)))
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(rates[i])))
	}
	w := barWidth(len(bs), k)
	var all plotter.Values
	for j := 0; j < k; j++ {
		vals := make(plotter.Values, len(bs))
		for i := range bs {
			if j < len(rates[i]) {
				vals[i] = rates[i][j]
			}
		}
		all = append(all, vals...)
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(j)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(j)-float64(k-1)/2)
		p.Add(bars)
		p.Legend.Add(ordinalPeer(j), bars)
	}
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	p.NominalX(names...)
	p.Y.Max = headroom(all)
	fitLegend(p, k, o)
	return p, nil
}

// throughputVsBatch is a line per topology and mode over batch sizes.
func throughputVsBatch(bs []BenchConfig, o Options) (*plot.Plot, error) {
	batches := map[int]bool{}
	for _, b := range bs {
		batches[b.Batch] = true
	}
	if len(batches) < 2 {
		return nil, nil
	}
	p := newPlot("Throughput vs batch size", "batch size (examples per worker step)", "training examples/s, all peers")
	p.Y.Tick.Marker = siTicks{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for b := range batches {
		lo, hi = math.Min(lo, float64(b)), math.Max(hi, float64(b))
	}
	if lo > 0 && hi/lo >= 10 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	var keys []string
	series := map[string]plotter.XYs{}
	for _, b := range bs { // bs is in GroupRuns order: batches ascending within a topology/mode
		k := b.Topology + "/" + b.Mode
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		if v := float64(b.ExamplesPerSec); !math.IsNaN(v) && !math.IsInf(v, 0) {
			series[k] = append(series[k], plotter.XY{X: float64(b.Batch), Y: v})
		}
	}
	for i, k := range keys {
		xys := series[k]
		if len(xys) == 0 {
			continue
		}
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes, s.Shape = plotutil.Dashes(i), plotutil.Shape(i)
		l.Width = vg.Points(1.5)
		p.Add(l, s)
		p.Legend.Add(k, l, s)
	}
	p.Legend.Left = true
	p.Y.Min = 0
	fitLegend(p, len(keys), o)
	return p, nil
}

// fitLegend raises the y axis's maximum so that a legend of n entries at
// the top of a plot o.PlotHeight high sits above the data, not on it.
func fitLegend(p *plot.Plot, n int, o Options) {
	data := o.PlotHeight*float64(vg.Centimeter) - 90 // points left for data: title and x axis take ~90
	f := math.Min((14*float64(n)+10)/math.Max(data, 1), 0.6)
	span := p.Y.Max - p.Y.Min
	if span <= 0 {
		span = math.Max(math.Abs(p.Y.Max), 1)
	}
	p.Y.Max += span * f / (1 - f)
}

// barWidth fits n groups of k bars into a plot about 14 cm wide.
func barWidth(n, k int) vg.Length {
	w := 14 * vg.Centimeter / vg.Length(max(n, 1)) * 0.8 / vg.Length(max(k, 1))
	return min(max(w, vg.Points(2)), vg.Points(60))
}

func ordinalPeer(j int) string {
	switch j {
	case 0:
		return "busiest peer"
	case 1:
		return "2nd"
	case 2:
		return "3rd"
	}
	return fmt.Sprintf("%dth", j+1)
}

// headroom is a y maximum 15% above the largest value, for labels and the
// legend; 1 when every value is 0.
func headroom(vs plotter.Values) float64 {
	m := 0.0
	for _, v := range vs {
		m = math.Max(m, v)
	}
	if m <= 0 {
		return 1
	}
	return m * 1.15
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// siTicks are gonum's default ticks labelled with k/M/G suffixes, so an
// axis of examples reads "2M" rather than "2e+06".
type siTicks struct{}

// Ticks implements plot.Ticker.
func (siTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = siLabel(ts[i].Value)
		}
	}
	return ts
}

// siLabel formats v with up to three significant digits and a k/M/G suffix.
func siLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimFloat(v/1e9) + "G"
	case a >= 1e6:
		return trimFloat(v/1e6) + "M"
	case a >= 1e3:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	return fmt.Sprint(math.Round(v*100) / 100)
}
