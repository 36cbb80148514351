package report

import (
	"image/color"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// speedupVsPeers is the scaling series: speedup over the number of peers,
// a line with markers per topology and mode (and batch, when there are
// several), each starting at the baseline's (1, 1), and the ideal y = x
// as a grey dashed line. nil when there is no series.
func speedupVsPeers(bs []BenchConfig, o Options) (*plot.Plot, error) {
	if !hasScaling(bs) {
		return nil, nil
	}
	batches := map[int]bool{}
	for _, b := range bs {
		batches[b.Batch] = true
	}
	var keys []string
	series := map[string]plotter.XYs{}
	maxN, maxY := 1.0, 1.0
	for _, b := range bs {
		if b.Baseline == "" || b.Baseline == b.Name {
			continue
		}
		k := b.Topology + "/" + b.Mode
		if len(batches) > 1 {
			k += "/b" + strconv.Itoa(b.Batch)
		}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
			series[k] = plotter.XYs{{X: 1, Y: 1}} // one peer alone is the baseline
		}
		v := float64(b.Speedup)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		series[k] = append(series[k], plotter.XY{X: float64(b.Workers), Y: v})
		maxN, maxY = math.Max(maxN, float64(b.Workers)), math.Max(maxY, v)
	}
	p := newPlot("Speedup against one peer alone", "peers", "speedup (examples/s over one peer's alone)")
	ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxN, Y: maxN}})
	if err != nil {
		return nil, err
	}
	ideal.Color = color.Gray{Y: 120}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	ideal.Width = vg.Points(1)
	p.Add(ideal)
	p.Legend.Add("ideal (y = x)", ideal)
	// Processes apart (Apart): as many plain train processes, exchanging
	// nothing.
	apart := map[int]plotter.XYs{}
	var apartBatches []int
	for _, l := range o.Apart {
		v := float64(l.Speedup)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if _, ok := apart[l.Batch]; !ok {
			apartBatches = append(apartBatches, l.Batch)
			apart[l.Batch] = plotter.XYs{{X: 1, Y: 1}}
		}
		apart[l.Batch] = append(apart[l.Batch], plotter.XY{X: float64(l.Processes), Y: v})
		maxY = math.Max(maxY, v)
	}
	for _, b := range apartBatches {
		l, s, err := sortedLinePoints(apart[b])
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = color.Black, color.Black
		l.Width, s.Radius, s.Shape = vg.Points(1), vg.Points(3), draw.BoxGlyph{}
		p.Add(l, s)
		name := "processes apart (plain train, no exchange)"
		if len(batches) > 1 {
			name += " b" + strconv.Itoa(b)
		}
		p.Legend.Add(name, l, s)
	}
	for i, k := range keys {
		l, s, err := sortedLinePoints(series[k])
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes, s.Shape = plotutil.Dashes(i), plotutil.Shape(i)
		l.Width, s.Radius = vg.Points(1.5), vg.Points(3)
		p.Add(l, s)
		p.Legend.Add(k, l, s)
	}
	p.X.Min, p.Y.Min = 0, 0
	p.X.Max = maxN + 0.5
	p.Y.Max = math.Max(maxN, maxY) * 1.05
	ticks := plot.ConstantTicks{{Value: 1, Label: "1"}}
	for _, b := range bs {
		if b.Workers > 1 && b.Baseline != "" && !hasTick(ticks, float64(b.Workers)) {
			ticks = append(ticks, plot.Tick{Value: float64(b.Workers), Label: strconv.Itoa(b.Workers)})
		}
	}
	p.X.Tick.Marker = ticks
	p.Y.Tick.Marker = stepTicks{n: 6}
	p.Legend.Left = true
	return p, nil
}

func hasTick(ts plot.ConstantTicks, v float64) bool {
	for _, t := range ts {
		if t.Value == v {
			return true
		}
	}
	return false
}

// sortedLinePoints is a line with markers through xys, sorted by X.
func sortedLinePoints(xys plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	sort.SliceStable(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
	return plotter.NewLinePoints(xys)
}
