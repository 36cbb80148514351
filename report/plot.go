package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

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
	PlotLogLossVsExamples = "logloss_vs_examples"
	PlotLogLossVsSeconds  = "logloss_vs_seconds"
	PlotThroughput        = "throughput"
	PlotPeerNetOut        = "peer_net_out"
	PlotThroughputVsBatch = "throughput_vs_batch"
	PlotSpeedup           = "speedup_vs_peers"
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
//   - logloss_vs_examples: test log-loss against all peers' examples;
//   - throughput: examples/s per configuration (bars);
//   - peer_net_out: every peer's network send rate (MB/s), grouped by
//     configuration with the busiest peer first, so a master that saturates
//     its link stands out (left out when no peer sent anything);
//   - throughput_vs_batch: examples/s against batch size, a line per
//     topology and mode (only when the configurations have several batch
//     sizes);
//   - speedup_vs_peers: speedup against one peer alone over the number of
//     peers, a line per topology and mode with the ideal y = x (only for a
//     scaling series: configurations with a single-peer baseline).
func Plot(dir string, bs []BenchConfig, o Options) ([]PlotFile, error) {
	var out []PlotFile
	save := func(p *plot.Plot, name string) error {
		f := PlotFile{Name: name, Title: p.Title.Text, PNG: name + ".png", SVG: name + ".svg"}
		w, h := vg.Length(o.PlotWidth)*vg.Centimeter, vg.Length(o.PlotHeight)*vg.Centimeter
		for _, file := range []string{f.PNG, f.SVG} {
			if err := savePlot(p, w, h, filepath.Join(dir, file)); err != nil {
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
		{PlotErrorVsExamples, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return curves(bs, o, testError, false) }},
		{PlotErrorVsSeconds, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return curves(bs, o, testError, true) }},
		{PlotLogLossVsExamples, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return curves(bs, o, testLogLoss, false) }},
		{PlotLogLossVsSeconds, func(bs []BenchConfig, o Options) (*plot.Plot, error) { return curves(bs, o, testLogLoss, true) }},
		{PlotThroughput, throughputBars},
		{PlotPeerNetOut, peerNetOutBars},
		{PlotThroughputVsBatch, throughputVsBatch},
		{PlotSpeedup, speedupVsPeers},
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

// metric is a test figure the curve plots show.
type metric struct {
	name  string // in titles: "Test error"
	axis  string // the y axis label
	value func(Metrics) float64
	max   float64 // the largest value the figure can take (0: none)
}

var (
	testError   = metric{"Test error", "test error (%)", func(m Metrics) float64 { return 100 * float64(m.TestError) }, 100}
	testLogLoss = metric{"Test log-loss", "test log-loss", func(m Metrics) float64 { return float64(m.TestLogLoss) }, 0}
)

// curves plots a test figure of every configuration's curve against
// examples or seconds (see curveSeries for how coinciding curves stay
// visible). The y axis fits the curves (fitY: from 0 it flattened a fall
// of the log-loss from 0.50 to 0.46, or of the error from 24% to 21%, into
// a line), and against time the log-loss plot draws each configuration's
// target (time to accuracy).
func curves(bs []BenchConfig, o Options, m metric, seconds bool) (*plot.Plot, error) {
	title, x := m.name+" vs training examples", "training examples, all peers"
	if seconds {
		title, x = m.name+" vs time", "wall-clock time since training started (s)"
	}
	ss, hi := curveSeries(bs, m, seconds)
	if len(ss) == 0 {
		return nil, nil
	}
	lo := hi
	for _, s := range ss {
		for _, xy := range s.xys {
			lo = math.Min(lo, xy.Y)
		}
	}
	var targets []float64
	if m.name == testLogLoss.name && seconds {
		for _, b := range bs {
			if t := float64(b.Target); t > 0 && !slices.Contains(targets, t) {
				targets = append(targets, t)
				lo, hi = math.Min(lo, t), math.Max(hi, t)
			}
		}
	}
	p := newPlot(title, x, m.axis)
	p.X.Tick.Marker = siTicks{}
	p.Y.Tick.Marker = stepTicks{n: 6}
	for _, s := range ss {
		l, sc, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = plotutil.Color(s.index), plotutil.Color(s.index)
		l.Dashes, sc.Shape = plotutil.Dashes(s.index), plotutil.Shape(s.index)
		l.Width, sc.Radius = s.width, s.radius
		p.Add(l, sc)
		p.Legend.Add(s.label, l, sc)
	}
	p.X.Min = 0 // how soon each configuration got there
	var vs []float64
	for _, s := range ss {
		for _, xy := range s.xys {
			vs = append(vs, xy.Y)
		}
	}
	fitY(p, vs, targets, m.max)
	for _, t := range targets {
		xmax := 0.0
		for _, s := range ss {
			for _, xy := range s.xys {
				xmax = math.Max(xmax, xy.X)
			}
		}
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: t}, {X: xmax, Y: t}})
		if err != nil {
			return nil, err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = color.Gray{Y: 100}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("target %.4f", t), l)
	}
	return p, nil
}

// minSpanShare is the smallest span fitY gives a y axis, as a share of its
// top: an error of 21.2-21.3% on an axis of its own 0.1 points made noise
// look like a trend.
const minSpanShare = 0.1

// fitY fits p's y axis to the values vs (and must, values that must show:
// targets), within [0, limit] (limit 0: no upper bound): up to three times
// the third quartile's height above the lowest value, so an early spike
// (the first evaluation of an untrained model) does not squash the part
// where configurations differ, at least minSpanShare of the top high, with
// 8% of the span as padding (TestCurvePlots).
func fitY(p *plot.Plot, vs, must []float64, limit float64) {
	if len(vs) == 0 {
		return
	}
	vs = slices.Sorted(slices.Values(vs))
	lo, hi := vs[0], vs[len(vs)-1]
	q3 := vs[3*(len(vs)-1)/4]
	top := math.Min(hi, lo+3*(q3-lo))
	if top <= lo {
		top = hi
	}
	for _, t := range must {
		lo, top = math.Min(lo, t), math.Max(top, t)
	}
	if min := minSpanShare * math.Abs(top); top-lo < min {
		mid := (top + lo) / 2
		lo, top = mid-min/2, mid+min/2
	}
	if top <= lo { // every value 0
		lo, top = 0, 1
	}
	pad := 0.08 * (top - lo)
	p.Y.Min, p.Y.Max = math.Max(0, lo-pad), top+pad
	if limit > 0 {
		p.Y.Max = math.Min(p.Y.Max, limit)
	}
}

// series is one configuration's curve as a plot draws it.
type series struct {
	index  int    // the configuration's index: its colour, dashes and marker shape
	label  string // its legend entry
	xys    plotter.XYs
	same   int // the series (index in the list) it repeats, -1 if none
	width  vg.Length
	radius vg.Length
}

// curveSeries returns the series of the configurations that have points,
// and the largest value. Curves that coincide (a sync master and ring end
// bit-identical, so their curves against examples are the same) stay
// visible: the first is drawn widest with the largest markers, each copy
// thinner with smaller markers of its own shape over it, so every one
// shows around the next, and a copy's legend entry names the curve it
// repeats.
func curveSeries(bs []BenchConfig, m metric, seconds bool) ([]series, float64) {
	var ss []series
	hi := 0.0
	for i, b := range bs {
		var xys plotter.XYs
		for _, c := range b.Curve {
			v := m.value(c.Metrics)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			xv := float64(c.Examples)
			if seconds {
				xv = c.Seconds
			}
			xys = append(xys, plotter.XY{X: xv, Y: v})
			hi = math.Max(hi, v)
		}
		if len(xys) == 0 {
			continue
		}
		s := series{index: i, label: b.Name, xys: xys, same: -1}
		for k, d := range ss {
			if d.same < 0 && slices.Equal(d.xys, xys) {
				s.same = k
				s.label += " (same curve as " + d.label + ")"
				break
			}
		}
		ss = append(ss, s)
	}
	copies := make([]int, len(ss)) // copies drawn after series k
	rank := make([]int, len(ss))   // for a copy: how many of its group precede it
	for k, s := range ss {
		if s.same >= 0 {
			copies[s.same]++
			rank[k] = copies[s.same]
		}
	}
	for k := range ss {
		first := k
		if ss[k].same >= 0 {
			first = ss[k].same
		}
		// Steps of 1.5pt in width and 2pt in radius: visible at 96 dpi.
		outer := float64(copies[first] - rank[k])
		ss[k].width = vg.Points(1.5 + 1.5*outer)
		ss[k].radius = vg.Points(3 + 2*outer)
	}
	return ss, hi
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
	sent := false
	for i, b := range bs {
		for _, pe := range b.Peers {
			r := finite(float64(pe.NetOutMBps))
			rates[i] = append(rates[i], r)
			sent = sent || r > 0
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(rates[i])))
	}
	if !sent { // runs alone: an empty chart says nothing
		return nil, nil
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
	var vs []float64
	series := map[string]plotter.XYs{}
	for _, b := range bs { // bs is in GroupRuns order: batches ascending within a topology/mode
		k := b.Topology + "/" + b.Mode
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		if v := float64(b.ExamplesPerSec); !math.IsNaN(v) && !math.IsInf(v, 0) {
			series[k] = append(series[k], plotter.XY{X: float64(b.Batch), Y: v})
			vs = append(vs, v)
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
	fitY(p, vs, nil, 0)
	return p, nil
}

// savePlot writes p into file (PNG or SVG, by its extension), w by h, with
// its legend outside the data: in a column on the right of the axes, so
// no legend hides a curve or a bar, and with a margin on the right so the
// last x tick label, centred on the axis's end, is not cut off
// (TestPlotLegendOutsideTheData).
func savePlot(p *plot.Plot, w, h vg.Length, file string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	legend := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = legend }()
	axes, key, hasKey := plotLayout(p, &legend, draw.New(c))
	p.Draw(axes)
	if hasKey {
		legend.Top, legend.Left = true, true
		legend.Draw(key)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotLayout splits canvas c between p's title, axes and data (axes) and
// its legend (key, when it has entries: a column right of the axes, below
// the title).
func plotLayout(p *plot.Plot, legend *plot.Legend, c draw.Canvas) (axes, key draw.Canvas, hasKey bool) {
	right := legendGap
	lw := legend.Rectangle(c).Size().X
	if lw > 0 {
		right = min(lw+2*legendGap, c.Size().X/2)
	}
	axes = draw.Crop(c, 0, -right, 0, 0)
	top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding + legendGap
	key = draw.Crop(c, c.Size().X-right+legendGap, 0, 0, -top)
	return axes, key, lw > 0
}

// legendGap is the space between the axes and the legend, and the margin
// right of a plot without one.
const legendGap = vg.Length(0.5 * vg.Centimeter)

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

// stepTicks labels about n ticks at a round step (1, 2 or 5 times a power
// of ten: 0, 5, 10, … 25), with an unlabelled tick halfway between:
// gonum's default ticks label only two or three values.
type stepTicks struct{ n int }

// Ticks implements plot.Ticker.
func (t stepTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || t.n < 1 || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / float64(t.n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	prec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var ts []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if half := v + step/2; half <= hi {
			ts = append(ts, plot.Tick{Value: half})
		}
	}
	return ts
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
