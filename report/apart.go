package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gossiptrain/gossiptrain/human"
)

// Apart is a peer count's processes apart: that many plain train
// processes started at once under the peers' caps, each on the share of
// the data one peer of the cluster trains on, exchanging nothing. Their
// examples per second together, over one process's alone, is what the
// host gives that many processes that each do a lone peer's work: on one
// machine, what two capped processes sharing a core, its caches and the
// memory bandwidth cost, and on any hosts, what each process's own start
// costs (the first batches fault in the model's pages). A cluster's
// examples/s over its processes apart tells the exchange's cost from the
// host's. It is a reference, not a bound: a peer of a cluster keeps the
// optimizer state of its shards only, and may do less than a plain train
// on the same share.
type Apart struct {
	Processes int   `json:"processes"`
	Batch     int   `json:"batch"`
	Examples  int64 `json:"examples"` // all processes
	// Seconds is the slowest process's training time.
	Seconds        float64 `json:"seconds"`
	ExamplesPerSec Num     `json:"examples_per_sec"`
	// Speedup is ExamplesPerSec over the lone peer's of the same batch
	// (NaN without one).
	Speedup Num `json:"speedup"`
	// Finished is how many processes wrote a summary; figures of
	// processes that did not all finish are no reference (ReadApart
	// fails).
	Finished int `json:"finished"`
}

// ReadApart reads the figures of processes apart from its processes' reports.
func ReadApart(runs []*Run, processes, batch int) (Apart, error) {
	l := Apart{Processes: processes, Batch: batch, Speedup: Num(math.NaN())}
	for _, r := range runs {
		p := benchPeer(r)
		if !p.Finished || p.Partial {
			continue
		}
		l.Finished++
		l.Examples += p.Examples
		l.Seconds = math.Max(l.Seconds, float64(p.Seconds))
	}
	if l.Finished != processes {
		return l, fmt.Errorf("report: %w: %d processes apart: %d of them finished", ErrConfig, processes, l.Finished)
	}
	l.ExamplesPerSec = ratio(float64(l.Examples), l.Seconds)
	return l, nil
}

// AddApartSpeedups sets the Speedup of every one of ls against the lone peer of its
// batch among bs.
func AddApartSpeedups(ls []Apart, bs []BenchConfig) {
	for i := range ls {
		ls[i].Speedup = Num(math.NaN())
		if a, ok := lonePeer(bs, ls[i].Batch); ok {
			ls[i].Speedup = ratio(float64(ls[i].ExamplesPerSec), float64(a.ExamplesPerSec))
		}
	}
}

// lonePeer is the single-peer configuration of batch among bs.
func lonePeer(bs []BenchConfig, batch int) (BenchConfig, bool) {
	i := slices.IndexFunc(bs, func(b BenchConfig) bool { return b.Topology == "single" && b.Workers == 1 && b.Batch == batch })
	if i < 0 {
		return BenchConfig{}, false
	}
	return bs[i], true
}

// apartText explains the table of processes apart.
const apartText = "As many plain `gossiptrain train` processes as a cluster has peers, started at once under the same caps, " +
	"each on the data one peer trains on, exchanging nothing: what they train together per second (all their examples " +
	"over the slowest one's training time) is what this host gives that many processes that each do a lone peer's work. " +
	"On one machine it shows what the host takes (capped processes sharing cores, caches and memory bandwidth); on any " +
	"hosts, what each process's start takes (the first batches fault in the model's pages). The last columns give the " +
	"fastest configuration of that many peers and its examples/s over the processes apart: below 1 is about what the " +
	"exchange costs. It is a reference, not a bound: a peer keeps the optimizer state of its own shards only, and can " +
	"do less than a plain train on the same share."

var apartHeader = []string{"peers", "batch", "apart: examples/s", "apart: speedup", "fastest configuration", "its examples/s", "over apart"}

// apartRows are the table's rows: each count's processes apart with the fastest
// configuration of its peer count and batch.
func apartRows(ls []Apart, bs []BenchConfig) [][]string {
	var rows [][]string
	for _, l := range ls {
		best, name := math.NaN(), "-"
		for _, b := range bs {
			if b.Topology != "single" && b.Workers == l.Processes && b.Batch == l.Batch && !(float64(b.ExamplesPerSec) <= best) {
				best, name = float64(b.ExamplesPerSec), b.Name
			}
		}
		bestCell, share := "-", "-"
		if !math.IsNaN(best) {
			bestCell = human.Count(best)
			share = fmt.Sprintf("%.2f", best/float64(l.ExamplesPerSec))
		}
		rows = append(rows, []string{fmt.Sprint(l.Processes), fmt.Sprint(l.Batch), human.Count(float64(l.ExamplesPerSec)),
			fmtSpeedup(l.Speedup), name, bestCell, share})
	}
	return rows
}

// WriteApart prints the table of processes apart as text (nothing
// without any).
func WriteApart(w io.Writer, ls []Apart, bs []BenchConfig) error {
	if len(ls) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nprocesses apart (as many plain train processes at once, each on one peer's data, exchanging nothing):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(apartHeader, "\t")+"\t")
	for _, r := range apartRows(ls, bs) {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// writeApartMarkdown writes report.md's section on processes apart.
func writeApartMarkdown(w io.Writer, ls []Apart, bs []BenchConfig) {
	if len(ls) == 0 {
		return
	}
	fmt.Fprintf(w, "## Processes apart\n\n%s\n\n", apartText)
	rows := apartRows(ls, bs)
	mdTable(w, apartHeader, len(rows), func(i int) []string { return rows[i] })
	fmt.Fprintln(w)
}

// WriteApartRepeats writes the examples/s and speedup of each count's
// processes apart in every repetition, and their medians (reps[k] are
// repetition k's configurations, aparts[k] its processes apart).
func WriteApartRepeats(w io.Writer, reps [][]BenchConfig, aparts [][]Apart) {
	if len(aparts) == 0 || len(aparts[0]) == 0 {
		return
	}
	fmt.Fprintf(w, "\nProcesses apart (as many plain train processes at once, exchanging nothing) in each repetition, and the median:\n\n")
	fmt.Fprintln(w, "| peers | batch | apart: examples/s | median | apart: speedup | median |")
	fmt.Fprintln(w, "|---:|---:|---|---:|---|---:|")
	for _, l0 := range aparts[0] {
		var rates, speedups []float64
		var rc, sc []string
		for k, ls := range aparts {
			i := slices.IndexFunc(ls, func(l Apart) bool { return l.Processes == l0.Processes && l.Batch == l0.Batch })
			if i < 0 {
				rc, sc = append(rc, "-"), append(sc, "-")
				continue
			}
			l := ls[i]
			if k < len(reps) {
				one := []Apart{l}
				AddApartSpeedups(one, reps[k])
				l = one[0]
			}
			rates = append(rates, float64(l.ExamplesPerSec))
			rc = append(rc, human.Count(float64(l.ExamplesPerSec)))
			if math.IsNaN(float64(l.Speedup)) {
				sc = append(sc, "-")
			} else {
				speedups = append(speedups, float64(l.Speedup))
				sc = append(sc, fmt.Sprintf("%.2f", float64(l.Speedup)))
			}
		}
		mr, ms := "-", "-"
		if len(rates) > 0 {
			mr = human.Count(Median(rates))
		}
		if len(speedups) > 0 {
			ms = fmt.Sprintf("%.2f", Median(speedups))
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s |\n", l0.Processes, l0.Batch, strings.Join(rc, ", "), mr, strings.Join(sc, ", "), ms)
	}
}
