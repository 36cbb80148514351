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

// Limit is the host's limit for a peer count: that many plain train
// processes started at once under the peers' caps, each on the share of
// the data a peer of the cluster trains on, exchanging nothing. What they
// train together per second over what one process alone trains is the
// most a cluster of that many peers can reach on this host: every peer
// does at least their work (parse, prepare, step, its own start), on the
// same cores and caches, and the cluster adds its exchange. On one machine
// it shows what the host takes (two capped processes sharing a core and
// its caches, memory bandwidth) apart from what gossiptrain's exchange
// takes; on separate VMs, what each process's start costs.
type Limit struct {
	Processes int   `json:"processes"`
	Batch     int   `json:"batch"`
	Examples  int64 `json:"examples"` // all processes
	// Seconds is the slowest process's training time.
	Seconds        float64 `json:"seconds"`
	ExamplesPerSec Num     `json:"examples_per_sec"`
	// Speedup is ExamplesPerSec over the lone peer's of the same batch
	// (NaN without one): the most any configuration of Processes peers
	// can reach here.
	Speedup Num `json:"speedup"`
	// Finished is how many processes wrote a summary; a limit whose
	// processes did not all finish is no limit (Read says so).
	Finished int `json:"finished"`
}

// ReadLimit reads a limit's figures from its processes' reports.
func ReadLimit(runs []*Run, processes, batch int) (Limit, error) {
	l := Limit{Processes: processes, Batch: batch, Speedup: Num(math.NaN())}
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
		return l, fmt.Errorf("report: %w: the host's limit of %d processes: %d of them finished", ErrConfig, processes, l.Finished)
	}
	l.ExamplesPerSec = ratio(float64(l.Examples), l.Seconds)
	return l, nil
}

// AddLimitSpeedups sets every limit's Speedup against the lone peer of its
// batch among bs.
func AddLimitSpeedups(ls []Limit, bs []BenchConfig) {
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

// limitText explains the limits' table.
const limitText = "The same number of plain `gossiptrain train` processes, started at once under the peers' caps, each on the " +
	"data one peer trains on, exchanging nothing: what they train per second together (all their examples over the slowest " +
	"one's training time) is the most a cluster of that many peers can reach on this host. Every peer does at least their " +
	"work (reading, preparing and training its share, and its own start) on the same cores and caches; the cluster adds " +
	"the exchange. The last columns give the fastest configuration of that many peers and its share of the limit: " +
	"below 1 is what the exchange costs."

var limitHeader = []string{"peers", "batch", "apart: examples/s", "speedup over one alone", "fastest configuration", "its examples/s", "share of the limit"}

// limitRows are the table's rows: each limit with the fastest
// configuration of its peer count and batch.
func limitRows(ls []Limit, bs []BenchConfig) [][]string {
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

// WriteLimits prints the limits' table as text (nothing without limits).
func WriteLimits(w io.Writer, ls []Limit, bs []BenchConfig) error {
	if len(ls) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nthe host's limit (as many plain train processes at once, each on a peer's data, exchanging nothing):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(limitHeader, "\t")+"\t")
	for _, r := range limitRows(ls, bs) {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// writeLimitsMarkdown writes report.md's section on the limits.
func writeLimitsMarkdown(w io.Writer, ls []Limit, bs []BenchConfig) {
	if len(ls) == 0 {
		return
	}
	fmt.Fprintf(w, "## The host's limit\n\n%s\n\n", limitText)
	rows := limitRows(ls, bs)
	mdTable(w, limitHeader, len(rows), func(i int) []string { return rows[i] })
	fmt.Fprintln(w)
}

// WriteLimitRepeats writes each limit's examples/s and speedup in every
// repetition, and their medians (reps[k] are repetition k's
// configurations, limits[k] its limits).
func WriteLimitRepeats(w io.Writer, reps [][]BenchConfig, limits [][]Limit) {
	if len(limits) == 0 || len(limits[0]) == 0 {
		return
	}
	fmt.Fprintf(w, "\nThe host's limit (as many plain train processes at once, exchanging nothing) in each repetition, and the median:\n\n")
	fmt.Fprintln(w, "| peers | batch | examples/s | median | speedup over one alone | median |")
	fmt.Fprintln(w, "|---:|---:|---|---:|---|---:|")
	for _, l0 := range limits[0] {
		var rates, speedups []float64
		var rc, sc []string
		for k, ls := range limits {
			i := slices.IndexFunc(ls, func(l Limit) bool { return l.Processes == l0.Processes && l.Batch == l0.Batch })
			if i < 0 {
				rc, sc = append(rc, "-"), append(sc, "-")
				continue
			}
			l := ls[i]
			if k < len(reps) {
				one := []Limit{l}
				AddLimitSpeedups(one, reps[k])
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
