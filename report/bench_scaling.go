package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// Scaling is a configuration's throughput against one peer training
// alone: a plain train process (topology single) on all the data the
// configuration's peers split among themselves, with the same batch (and,
// as bench and cluster --baseline run it, under the same CPU cap).
type Scaling struct {
	// Baseline names the single-peer configuration compared with ("" when
	// there is none).
	Baseline string `json:"baseline,omitempty"`
	// Speedup is ExamplesPerSec over the baseline's: N peers that scale
	// perfectly reach N.
	Speedup Num `json:"speedup"`
	// Efficiency is Speedup / Workers: 1 is perfect scaling.
	Efficiency Num `json:"efficiency"`
}

func noScaling() Scaling {
	return Scaling{Speedup: Num(math.NaN()), Efficiency: Num(math.NaN())}
}

// SeriesName is the configuration name of a run of a scaling series:
// ConfigName with the number of peers ("ring/sync/b1000/4p"), so that runs
// of one topology, mode and batch with different peer counts stay apart.
// The single-peer baseline keeps its ConfigName ("single/local/b1000").
func SeriesName(topology, mode string, batch, peers int) string {
	if topology == "single" {
		return ConfigName(topology, mode, batch)
	}
	return fmt.Sprintf("%s/%dp", ConfigName(topology, mode, batch), peers)
}

// recvPerExample is the mean over peers that trained of bytes received
// per example trained.
func recvPerExample(ps []BenchPeer) Num {
	var sum float64
	n := 0
	for _, p := range ps {
		if p.Examples > 0 {
			sum += float64(p.BytesRecv) / float64(p.Examples)
			n++
		}
	}
	return ratio(sum, float64(n))
}

// addScaling sets every configuration's Scaling against the single-peer
// configuration of the same batch (the baseline itself gets speedup 1).
func addScaling(bs []BenchConfig) {
	base := map[int]int{} // batch -> index of its single-peer configuration
	for i, b := range bs {
		if b.Topology == "single" && b.Workers == 1 {
			if _, ok := base[b.Batch]; !ok {
				base[b.Batch] = i
			}
		}
	}
	for i := range bs {
		j, ok := base[bs[i].Batch]
		if !ok {
			continue
		}
		s := ratio(float64(bs[i].ExamplesPerSec), float64(bs[j].ExamplesPerSec))
		bs[i].Scaling = Scaling{Baseline: bs[j].Name, Speedup: s, Efficiency: ratio(float64(s), float64(bs[i].Workers))}
	}
}

// hasScaling reports whether any configuration other than a baseline has
// a speedup: a scaling series, or a cluster run with its baseline.
func hasScaling(bs []BenchConfig) bool {
	for _, b := range bs {
		if b.Baseline != "" && b.Baseline != b.Name {
			return true
		}
	}
	return false
}

// scalingHeader is the scaling table's columns.
var scalingHeader = []string{"configuration", "peers", "examples/s", "speedup", "efficiency", "received B/example/peer"}

func scalingRows(bs []BenchConfig) [][]string {
	var rows [][]string
	for _, b := range bs {
		if b.Baseline == "" {
			continue
		}
		rows = append(rows, []string{b.Name, fmt.Sprint(b.Workers), fmtNum(float64(b.ExamplesPerSec)),
			fmtSpeedup(b.Speedup), fmtSpeedup(b.Efficiency), fmtNum(float64(b.RecvBytesPerExample))})
	}
	return rows
}

func fmtSpeedup(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

// scalingText explains the scaling figures, for report.md and the
// terminal.
const scalingText = "Speedup is a configuration's examples/s (all peers) over the examples/s of one peer training alone " +
	"(plain `gossiptrain train`, topology single) on all the data the peers split among themselves, with the same batch; " +
	"efficiency is speedup / peers (1 is perfect scaling). Received B/example/peer is the bytes a peer received over the network " +
	"per example it trained, the mean over the peers: flat when each peer receives only what it needs. " +
	"On one machine the figures mean something only when every peer is capped to its share of the cores (`--cpus`)."

// WriteScalingTable writes the scaling table (a row per configuration
// that has a baseline) as aligned plain text; nothing when there is no
// scaling series.
func WriteScalingTable(w io.Writer, bs []BenchConfig) error {
	if !hasScaling(bs) {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(scalingHeader, "\t")+"\t")
	for _, r := range scalingRows(bs) {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// writeScalingMarkdown writes report.md's scaling section.
func writeScalingMarkdown(w io.Writer, bs []BenchConfig, plots []PlotFile) {
	if !hasScaling(bs) {
		return
	}
	fmt.Fprintf(w, "## Scaling\n\n%s\n\n", scalingText)
	rows := scalingRows(bs)
	mdTable(w, scalingHeader, len(rows), func(i int) []string { return rows[i] })
	fmt.Fprintln(w)
	for _, p := range plots {
		if p.Name == PlotSpeedup {
			fmt.Fprintf(w, "![%s](%s) ([SVG](%s))\n\n", p.Title, p.PNG, p.SVG)
		}
	}
}

// GroupSeries groups the runs of a scaling series: each element of sets
// is one run (a run directory's reports: one configuration, such as 4
// peers of ring/sync/b1000) and is grouped on its own, since runs of the
// same topology, mode and batch with different peer counts would
// otherwise mix; each configuration is named with SeriesName. The order is
// GroupRuns's with the peer count ascending within a topology, mode and
// batch.
func GroupSeries(sets [][]*Run) ([]*Config, error) {
	var out []*Config
	seen := map[string]string{}
	for _, runs := range sets {
		cfgs, err := GroupRuns(runs)
		if err != nil {
			return nil, err
		}
		for _, c := range cfgs {
			c.Name = SeriesName(c.Topology, c.Mode, c.Batch, configWorkers(c))
			if c.Topology != "single" && c.LocalSteps > 1 {
				c.Name = fmt.Sprintf("%s/%dp", windowName(ConfigName(c.Topology, c.Mode, c.Batch), c.LocalSteps), configWorkers(c))
			}
			if prev, ok := seen[c.Name]; ok {
				return nil, fmt.Errorf("report: %w: two runs of %s (%s and %s): give one run per configuration and peer count",
					ErrConfig, c.Name, prev, c.Peers[0].Path)
			}
			seen[c.Name] = c.Peers[0].Path
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if configLess(a, b) || configLess(b, a) {
			return configLess(a, b)
		}
		return configWorkers(a) < configWorkers(b)
	})
	return out, nil
}

// configWorkers is a configuration's peers: the most any summary names,
// at least its reports.
func configWorkers(c *Config) int {
	n := len(c.Peers)
	for _, r := range c.Peers {
		if r.Summary != nil {
			n = max(n, r.Summary.Peers)
		}
	}
	return n
}
