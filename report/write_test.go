package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	_ "image/png" // registers the PNG decoder for image.DecodeConfig
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// checkPNG fails unless path is a PNG image with a positive size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(f)
	if err != nil || format != "png" || cfg.Width <= 0 || cfg.Height <= 0 {
		t.Errorf("%s: format %q, %dx%d, error %v; want a PNG image", path, format, cfg.Width, cfg.Height, err)
	}
}

// checkSVG fails unless path is well-formed XML whose root element is <svg>.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s: not well-formed XML: %v", path, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element <%s>, want <svg>", path, root)
	}
}

func TestWriteBenchWritesJSONMarkdownAndPlots(t *testing.T) {
	tmp := t.TempDir()
	cfgs, err := GroupRuns(writeFixture(t, tmp, benchFixture()))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	if err := WriteBench(out, cfgs, WithCommand("gossiptrain bench --peers 4"), WithWarnings("one file skipped")); err != nil {
		t.Fatal(err)
	}

	// bench.json: the names tools read, with the hand-computed figures.
	b, err := os.ReadFile(filepath.Join(out, BenchJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var js []map[string]any
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatalf("bench.json: %v", err)
	}
	if len(js) != 2 {
		t.Fatalf("bench.json has %d configurations, want 2", len(js))
	}
	for i, want := range []struct {
		topology string
		eps      float64
		logloss  float64
	}{{"master", 200, 0.5}, {"ring", 500, 0.48}} {
		c := js[i]
		if c["topology"] != want.topology || c["mode"] != "sync" || c["batch"] != 100.0 ||
			!near(c["examples_per_sec"].(float64), want.eps) || !near(c["test_logloss"].(float64), want.logloss) {
			t.Errorf("bench.json[%d] = topology %v mode %v batch %v examples_per_sec %v test_logloss %v; want %+v",
				i, c["topology"], c["mode"], c["batch"], c["examples_per_sec"], c["test_logloss"], want)
		}
		peers, _ := c["peers"].([]any)
		if len(peers) != 4 {
			t.Fatalf("bench.json[%d] has %d peers, want 4", i, len(peers))
		}
		p := peers[0].(map[string]any)
		for _, k := range []string{"peer_id", "bytes_sent", "bytes_recv", "cpu_percent", "peak_rss_bytes"} {
			if _, ok := p[k]; !ok {
				t.Errorf("bench.json[%d].peers[0] lacks %q: %v", i, k, p)
			}
		}
	}
	if m := js[0]["peers"].([]any)[0].(map[string]any); m["peer_id"] != "m1" || m["bytes_sent"] != 8e6 || m["peak_rss_bytes"] != float64(256<<20) {
		t.Errorf("master's first peer %v; want m1, 8e6 bytes sent, 256 MiB", m)
	}

	md, err := os.ReadFile(filepath.Join(out, ReportMDFile))
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	for _, want := range []string{
		"# gossiptrain benchmark report",
		"8 peer reports in 2 configurations",
		"- command: `gossiptrain bench --peers 4`",
		"- data: train `data/train-*.svm`\n",
		"- model: dim `1024`\n",
		"ring throughput is 2.5x master's; the master's busiest peer sent 4.0x the bytes of ring's busiest peer",
		"| configuration | peers | examples | seconds | examples/s | rounds/s | test log-loss | test error | test AUC | bytes/example |",
		"| master/sync/b100 | 4 | 4000 | 20.00 | 200 | 0.5000 | 0.5000 | 0.2000 | 0.8000 | 2750 |",
		"| ring/sync/b100 | 4 | 4000 | 8.00 | 500 | 1.25 | 0.4800 | 0.1800 | 0.8200 | 2000 |",
		"## Round times",
		"| configuration | rounds/s (whole run) | steady rounds/s | round ms p50 | p90 | p99 |",
		"| master/sync/b100 | 0.5000 | ",
		"- one file skipped",
		"| peer | examples | CPU % | peak RSS MiB | net out MB/s | net in MB/s | disk read MB/s | wait s | owned shards |",
		"| m1 | 1000 | 150 | 256 | 0.8000 | 0.2000 | 0.3000 | 1.50 | 256 |",
		"| m4 | 1000 | 150 | 256 | 0.0500 | 0.1000 | 0.1500 | 1.50 | 0 |",
		"| r4 | 1000 | 90.00 | 128 | 0.2500 | 0.2500 | 0.3750 | 0.5000 | 64 |",
		"![Test error vs training examples](error_vs_examples.png)",
		"[SVG](peer_net_out.svg)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(text, "throughput_vs_batch") {
		t.Error("report.md shows throughput vs batch with one batch size")
	}

	for _, name := range []string{PlotErrorVsExamples, PlotErrorVsSeconds, PlotLogLossVsExamples, PlotLogLossVsSeconds, PlotThroughput, PlotPeerNetOut} {
		checkPNG(t, filepath.Join(out, name+".png"))
		checkSVG(t, filepath.Join(out, name+".svg"))
	}
	if _, err := os.Stat(filepath.Join(out, PlotThroughputVsBatch+".png")); !os.IsNotExist(err) {
		t.Errorf("throughput vs batch drawn for one batch size (stat: %v)", err)
	}
}

// Several batch sizes add the throughput-vs-batch plot, with a log axis.
func TestThroughputVsBatchPlot(t *testing.T) {
	var specs []peerSpec
	for _, topo := range []string{"master", "ring"} {
		for _, batch := range []int{1, 100, 10000} {
			for p := 0; p < 2; p++ {
				specs = append(specs, peerSpec{id: topo + string(rune('a'+p)), topology: topo, mode: "async", batch: batch,
					examples: int64(1000 * batch), seconds: 10, rounds: 1000, sent: 1e6, evalErr: []float64{0.3, 0.25}})
			}
		}
	}
	tmp := t.TempDir()
	cfgs, err := GroupRuns(writeFixture(t, tmp, specs))
	if err != nil {
		t.Fatal(err)
	}
	plots, err := Plot(tmp, Summarize(cfgs), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range plots {
		names = append(names, p.Name)
	}
	want := []string{PlotErrorVsExamples, PlotErrorVsSeconds, PlotLogLossVsExamples, PlotLogLossVsSeconds, PlotThroughput, PlotPeerNetOut, PlotThroughputVsBatch}
	if !slices.Equal(names, want) {
		t.Fatalf("plots %v, want %v", names, want)
	}
	checkPNG(t, filepath.Join(tmp, PlotThroughputVsBatch+".png"))
	checkSVG(t, filepath.Join(tmp, PlotThroughputVsBatch+".svg"))
}

// Runs without any evaluation get no error curves, and report.md does not
// link plots that were not drawn.
func TestNoEvaluationsNoErrorPlots(t *testing.T) {
	tmp := t.TempDir()
	cfgs, err := GroupRuns(writeFixture(t, tmp, []peerSpec{{id: "a", topology: "ring", mode: "sync", batch: 5, examples: 10, seconds: 1, rounds: 2}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBench(tmp, cfgs); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(tmp, ReportMDFile))
	if strings.Contains(string(md), "error_vs") {
		t.Errorf("report.md links error plots for runs without evaluations:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(tmp, PlotErrorVsExamples+".png")); !os.IsNotExist(err) {
		t.Errorf("error_vs_examples.png drawn without evaluations (stat: %v)", err)
	}
	checkPNG(t, filepath.Join(tmp, PlotThroughput+".png"))
	// The run sent nothing: no empty network chart, and no link to one.
	if _, err := os.Stat(filepath.Join(tmp, PlotPeerNetOut+".png")); !os.IsNotExist(err) {
		t.Errorf("peer_net_out.png drawn for runs that sent nothing (stat: %v)", err)
	}
	if strings.Contains(string(md), PlotPeerNetOut) {
		t.Errorf("report.md links the network plot of runs that sent nothing:\n%s", md)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("default options: %v", err)
	}
	o := DefaultOptions()
	o.PlotWidth = 1
	if err := o.Validate(); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "1x12 cm") {
		t.Fatalf("1 cm wide plots: %v; want ErrOptions naming the size", err)
	}
	o.Plots = false
	if err := o.Validate(); err != nil {
		t.Fatalf("size is irrelevant without plots: %v", err)
	}
	if err := WriteBench(t.TempDir(), nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("no configurations: %v; want ErrConfig", err)
	}
}

// report.md shows the values a run used, not the flags' literal ones
// ("lr 0" for the optimizer's default, "classes 0" for logreg), and no
// empty "Flags that differ" table when nothing differs.
func TestMarkdownShowsEffectiveValues(t *testing.T) {
	var specs []peerSpec
	for i := 1; i <= 2; i++ {
		specs = append(specs, peerSpec{id: fmt.Sprintf("r%d", i), topology: "ring", mode: "sync", batch: 10,
			examples: 100, seconds: 1, rounds: 10, hash: "bbbb", evalErr: []float64{0.3, 0.2},
			flags:     map[string]string{"lr": "0", "classes": "0", "model": "auto", "optimizer": "adagrad", "l2": "auto"},
			effective: map[string]string{"lr": "0.1", "classes": "2", "model": "logreg", "optimizer": "adagrad", "l2": "5e-05"}})
	}
	tmp := t.TempDir()
	cfgs, err := GroupRuns(writeFixture(t, tmp, specs))
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, cfgs, Summarize(cfgs), nil, DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	text := md.String()
	for _, want := range []string{
		"- model: model `logreg`, dim `1024`, classes `2`, optimizer `adagrad`, lr `0.1`, l2 `5e-05`\n",
		"| lr | 0.1 (given: 0) |", "| classes | 2 (given: 0) |", "| l2 | 5e-05 (given: auto) |", "| optimizer | adagrad |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, bad := range []string{"lr `0`", "classes `0`", "Flags that differ"} {
		if strings.Contains(text, bad) {
			t.Errorf("report.md has %q:\n%s", bad, text)
		}
	}
}

// The curve plots fit their y axis to the curves (from 0 a fall of the
// error from 25% to 21.5% was a flat line, issue 33), but give it at
// least a tenth of its top, so a flat 21.2-21.3% error is drawn flat
// rather than zoomed into a trend; curves that coincide (sync master and
// ring) are all visible: each copy is drawn thinner with smaller markers,
// and its legend entry names the curve it repeats.
func TestCurvePlots(t *testing.T) {
	curve := func(errs ...float64) []CurvePoint {
		var c []CurvePoint
		for i, e := range errs {
			c = append(c, CurvePoint{Examples: int64(1000 * (i + 1)), Seconds: float64(i + 1),
				Metrics: Metrics{TestError: Num(e), TestLogLoss: Num(2 * e)}})
		}
		return c
	}
	same := curve(0.2125, 0.2131, 0.2128)
	bs := []BenchConfig{
		{Name: "master/sync/b100", Curve: same},
		{Name: "ring/sync/b100", Curve: same},
		{Name: "ring/async/b100", Curve: curve(0.25, 0.22, 0.215)},
	}
	p, err := curves(bs, DefaultOptions(), testError, false)
	if err != nil || p == nil {
		t.Fatalf("curves: %v, %v", p, err)
	}
	if !(p.Y.Min > 15 && p.Y.Min < 21.25) || !(p.Y.Max > 22 && p.Y.Max < 30) {
		t.Errorf("y axis %g..%g: want it fitted to the curves' 21.25-25%%, not from 0", p.Y.Min, p.Y.Max)
	}
	flat, err := curves(bs[:2], DefaultOptions(), testError, false)
	if err != nil || flat.Y.Min > 21.25 || flat.Y.Max < 21.31 || flat.Y.Max-flat.Y.Min < 0.1*21.31 {
		t.Errorf("a flat 21.25-21.31%% error on an axis %g..%g (%v): want the values inside a span of at least 2.1 points", flat.Y.Min, flat.Y.Max, err)
	}
	ss, _ := curveSeries(bs, testError, false)
	if len(ss) != 3 || ss[1].same != 0 || ss[2].same != -1 || !(ss[0].width > ss[1].width) || !(ss[0].radius > ss[1].radius) ||
		ss[2].width != ss[1].width {
		t.Errorf("series %+v: want ring/sync to repeat master/sync, drawn thinner with smaller markers over it", ss)
	}
	tmp := t.TempDir()
	if err := p.Save(10*vg.Centimeter, 6*vg.Centimeter, filepath.Join(tmp, "c.svg")); err != nil {
		t.Fatal(err)
	}
	svg, _ := os.ReadFile(filepath.Join(tmp, "c.svg"))
	if !strings.Contains(string(svg), "ring/sync/b100 (same curve as master/sync/b100)") {
		t.Errorf("the legend does not say the ring curve repeats the master's")
	}
	if strings.Contains(string(svg), "ring/async/b100 (same") {
		t.Errorf("a different curve is called the same")
	}
	// The log-loss's axis fits where its curves spend their time (here
	// from 0.42), so a fall of a few hundredths shows; an early spike (the
	// untrained model's first evaluation) is left above the axis.
	lowest := math.Inf(1)
	for _, b := range bs {
		for _, c := range b.Curve {
			lowest = math.Min(lowest, float64(c.TestLogLoss))
		}
	}
	ll, err := curves(bs, DefaultOptions(), testLogLoss, false)
	if err != nil || ll == nil || !(ll.Y.Min > lowest-0.02 && ll.Y.Min < lowest) || !(ll.Y.Max > lowest+0.01 && ll.Y.Max < 0.55) {
		t.Errorf("log-loss plot (y %v..%v), %v: want an axis fitted to the curves: from a little below their lowest point, %v", ll.Y.Min, ll.Y.Max, err, lowest)
	}
	spiked := append([]BenchConfig(nil), bs...)
	spiked[0].Curve = append([]CurvePoint{{Examples: 1, Seconds: 0.1, Metrics: Metrics{TestLogLoss: 5}}}, spiked[0].Curve...)
	if sp, err := curves(spiked, DefaultOptions(), testLogLoss, false); err != nil || sp.Y.Max > 1 {
		t.Errorf("with a first evaluation at 5, the log-loss axis goes up to %v, want the spike left out (under 1)", sp.Y.Max)
	}
}

func TestStepTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 27.5, []string{"0", "5", "10", "15", "20", "25"}},
		{0, 0.66, []string{"0.0", "0.2", "0.4", "0.6"}},
		{21.2, 21.3, []string{"21.20", "21.22", "21.24", "21.26", "21.28", "21.30"}},
		{0, 100, []string{"0", "20", "40", "60", "80", "100"}},
	}
	for _, c := range cases {
		var got []string
		for _, tk := range (stepTicks{n: 6}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ticks of %g..%g: %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}

// A plot's legend is drawn in a column right of its axes, never over the
// data, and the plot leaves room right of the x axis for its last tick
// label (issue 33: the legend hid a corner of the curves, the last label
// was cut off).
func TestPlotLegendOutsideTheData(t *testing.T) {
	bs := []BenchConfig{
		{Name: "master/sync/b100", Curve: []CurvePoint{{Examples: 1000, Seconds: 1, Metrics: Metrics{TestError: 0.3}}, {Examples: 2000, Seconds: 2, Metrics: Metrics{TestError: 0.2}}}},
		{Name: "ring/async/b100 (a run with a long name)", Curve: []CurvePoint{{Examples: 1500, Seconds: 1, Metrics: Metrics{TestError: 0.25}}}},
	}
	p, err := curves(bs, DefaultOptions(), testError, false)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	w, h := vg.Length(o.PlotWidth)*vg.Centimeter, vg.Length(o.PlotHeight)*vg.Centimeter
	c := draw.New(vgimg.New(w, h))
	legend := p.Legend
	axes, key, hasKey := plotLayout(p, &legend, c)
	data := p.DataCanvas(axes)
	if !hasKey || key.Min.X < data.Max.X+legendGap/2 || legend.Rectangle(key).Max.X > c.Max.X {
		t.Errorf("legend at x %v..%v, data up to %v, canvas %v: want the legend whole, right of the data", key.Min.X, legend.Rectangle(key).Max.X, data.Max.X, c.Max.X)
	}
	ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)
	last := ticks[len(ticks)-1]
	for i := len(ticks) - 1; i >= 0 && last.Label == ""; i-- {
		last = ticks[i]
	}
	half := p.X.Tick.Label.Rectangle(last.Label).Size().X / 2
	if x := data.X(p.X.Norm(last.Value)); x+half > c.Max.X {
		t.Errorf("the last x label %q ends at %v, beyond the canvas (%v)", last.Label, x+half, c.Max.X)
	}
	dir := t.TempDir()
	files, err := Plot(dir, bs, o)
	if err != nil || len(files) == 0 {
		t.Fatalf("Plot: %v, %v", files, err)
	}
}
