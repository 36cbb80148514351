package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// Comparison is the headline of a benchmark: the master and the ring
// topology run with the same mode and batch.
type Comparison struct {
	Mode   string `json:"mode"`
	Batch  int    `json:"batch"`
	Peers  int    `json:"peers"`  // the runs' peers (BenchConfig.Workers)
	Master string `json:"master"` // the master configuration's name
	Ring   string `json:"ring"`   // the ring configuration's name
	// ThroughputRatio is the ring's examples/s over the master's.
	ThroughputRatio Num `json:"throughput_ratio"`
	// BusiestBytesRatio is the bytes the master's busiest peer sent over the
	// bytes the ring's busiest peer sent.
	BusiestBytesRatio Num `json:"busiest_bytes_ratio"`
}

// Compare pairs every master configuration with the ring configuration of
// the same mode and batch, in the order of bs.
func Compare(bs []BenchConfig) []Comparison {
	var out []Comparison
	for _, m := range bs {
		if m.Topology != "master" {
			continue
		}
		for _, r := range bs {
			if r.Topology != "ring" || r.Mode != m.Mode || r.Batch != m.Batch || r.Workers != m.Workers {
				continue
			}
			out = append(out, Comparison{
				Mode: m.Mode, Batch: m.Batch, Peers: m.Workers, Master: m.Name, Ring: r.Name,
				ThroughputRatio:   ratio(float64(r.ExamplesPerSec), float64(m.ExamplesPerSec)),
				BusiestBytesRatio: ratio(float64(m.BusiestBytesSent), float64(r.BusiestBytesSent)),
			})
		}
	}
	return out
}

// Sentence is the comparison in words, as report.md's headline says it.
func (c Comparison) Sentence() string {
	return fmt.Sprintf("%d peers, %s mode, batch %d: ring throughput is %sx master's; the master's busiest peer sent %sx the bytes of ring's busiest peer",
		c.Peers, c.Mode, c.Batch, fmtRatio(c.ThroughputRatio), fmtRatio(c.BusiestBytesRatio))
}

func fmtRatio(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", f)
}

// summaryHeader is the summary table's columns.
var summaryHeader = []string{"configuration", "peers", "examples", "seconds", "examples/s", "rounds/s",
	"test log-loss", "test error", "test AUC", "bytes/example"}

func summaryRow(b BenchConfig) []string {
	return []string{b.Name, fmt.Sprint(b.PeerCount), fmt.Sprint(b.Examples), fmtNum(b.Seconds),
		fmtNum(float64(b.ExamplesPerSec)), fmtNum(float64(b.RoundsPerSec)),
		fmtMetric(b.TestLogLoss), fmtMetric(b.TestError), fmtMetric(b.TestAUC), fmtNum(float64(b.BytesPerExample))}
}

// roundHeader is the round-time table's columns (RoundTimes).
var roundHeader = []string{"configuration", "rounds/s (whole run)", "steady rounds/s", "round ms p50", "p90", "p99"}

func roundRow(b BenchConfig) []string {
	return []string{b.Name, fmtNum(float64(b.RoundsPerSec)), fmtNum(float64(b.Steady)),
		fmtNum(float64(b.P50)), fmtNum(float64(b.P90)), fmtNum(float64(b.P99))}
}

// withRoundTimes is the configurations that have round times (a plain
// train has none).
func withRoundTimes(bs []BenchConfig) []BenchConfig {
	var out []BenchConfig
	for _, b := range bs {
		if !math.IsNaN(float64(b.Steady)) {
			out = append(out, b)
		}
	}
	return out
}

// roundTimesNote says what the round-time table shows.
const roundTimesNote = "Steady rounds/s and the time of one round leave out each peer's first and last tenth " +
	"of rounds (the cluster's start and end). A p90 far above the p50 while the peers' CPU is low means " +
	"the rounds wait on messages, not on cores."

// peerHeader is the per-peer table's columns.
var peerHeader = []string{"peer", "examples", "CPU %", "peak RSS MiB", "net out MB/s", "net in MB/s",
	"disk read MB/s", "wait s", "owned shards"}

func peerRow(p BenchPeer) []string {
	name := peerName(p)
	switch {
	case !p.Finished:
		name += " (no summary)"
	case p.Partial:
		name += fmt.Sprintf(" (partial: %s at round %d)", p.Stopped, p.StoppedAt)
	}
	return []string{name, fmt.Sprint(p.Examples), fmtNum(float64(p.CPUPercent)),
		fmtNum(float64(p.PeakRSSBytes) / (1 << 20)), fmtNum(float64(p.NetOutMBps)), fmtNum(float64(p.NetInMBps)),
		fmtNum(float64(p.DiskReadMBps)), fmtNum(p.WaitSeconds), fmt.Sprint(p.OwnedShards)}
}

// WriteSummaryTable writes the summary table (a row per configuration) as
// aligned plain text, for a terminal.
func WriteSummaryTable(w io.Writer, bs []BenchConfig) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(summaryHeader, "\t")+"\t")
	for _, b := range bs {
		fmt.Fprintln(tw, strings.Join(summaryRow(b), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if rt := withRoundTimes(bs); len(rt) > 0 {
		fmt.Fprintf(w, "\nround times (each peer's first and last tenth of rounds left out):\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(roundHeader, "\t")+"\t")
		for _, b := range rt {
			fmt.Fprintln(tw, strings.Join(roundRow(b), "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	for _, c := range Compare(bs) {
		if _, err := fmt.Fprintf(w, "%s.\n", c.Sentence()); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	if hasScaling(bs) {
		fmt.Fprintf(w, "\nscaling against one peer alone (plain train on all the data):\n")
		if err := WriteScalingTable(w, bs); err != nil {
			return err
		}
	}
	if hasTarget(bs) {
		fmt.Fprintf(w, "\ntime to accuracy (training seconds until the test log-loss first reached the target):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(accuracyHeader, "\t")+"\t")
		for _, r := range accuracyRows(bs) {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

// WriteMarkdown writes report.md: title, setup, headline, summary table,
// warnings, plots and a per-peer table per configuration. bs is
// Summarize(cfgs); plots are the plot files to embed (their paths are
// written relative to report.md's directory, as Plot names them).
func WriteMarkdown(w io.Writer, cfgs []*Config, bs []BenchConfig, plots []PlotFile, o Options) error {
	bw := bufio.NewWriter(w)
	pf := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }

	title := o.Title
	if title == "" {
		title = DefaultOptions().Title
	}
	reports := 0
	for _, b := range bs {
		reports += b.PeerCount
	}
	pf("# %s\n\n", title)
	pf("%d peer reports in %d configurations. MB is 10^6 bytes, MiB 2^20 bytes; rates are over each peer's training time. "+
		"A configuration's examples/s is all its peers' examples over the slowest peer's seconds.\n\n", reports, len(bs))

	writeSetup(bw, cfgs, bs, o)

	if cmp := Compare(bs); len(cmp) > 0 {
		pf("## Headline\n\n")
		for _, c := range cmp {
			pf("- %s.\n", c.Sentence())
		}
		pf("\n")
	}

	pf("## Summary\n\n")
	mdTable(bw, summaryHeader, len(bs), func(i int) []string { return summaryRow(bs[i]) })
	pf("\n")
	if rt := withRoundTimes(bs); len(rt) > 0 {
		pf("## Round times\n\n%s\n\n", roundTimesNote)
		mdTable(bw, roundHeader, len(rt), func(i int) []string { return roundRow(rt[i]) })
		pf("\n")
	}
	writeScalingMarkdown(bw, bs, plots)
	writeApartMarkdown(bw, o.Apart, bs)
	if hasTarget(bs) {
		pf("## Time to accuracy\n\n%s\n\n", accuracyText)
		rows := accuracyRows(bs)
		mdTable(bw, accuracyHeader, len(rows), func(i int) []string { return rows[i] })
		pf("\n")
		for _, p := range plots {
			if p.Name == PlotLogLossVsSeconds {
				pf("![%s](%s) ([SVG](%s))\n\n", p.Title, p.PNG, p.SVG)
			}
		}
	}

	var warns []string
	warns = append(warns, o.Warnings...)
	for _, b := range bs {
		for _, x := range b.Warnings {
			warns = append(warns, b.Name+": "+x)
		}
	}
	if len(warns) > 0 {
		pf("## Warnings\n\n")
		for _, x := range warns {
			pf("- %s\n", x)
		}
		pf("\n")
	}

	if len(plots) > 0 {
		pf("## Plots\n\n")
		for _, p := range plots {
			pf("### %s\n\n![%s](%s)\n\n", p.Title, p.Title, p.PNG)
			pf("[SVG](%s)\n\n", p.SVG)
		}
	}

	pf("## Per peer\n\n")
	for _, b := range bs {
		pf("### %s\n\n", b.Name)
		mdTable(bw, peerHeader, len(b.Peers), func(i int) []string { return peerRow(b.Peers[i]) })
		pf("\n")
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// writeSetup writes report.md's Setup section: each configuration's peers,
// topology, mode and batch; the data, model and command; the flags every
// peer ran with, and those that differ between configurations.
func writeSetup(bw *bufio.Writer, cfgs []*Config, bs []BenchConfig, o Options) {
	pf := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	pf("## Setup\n\n")
	for _, b := range bs {
		pf("- **%s**: %s %s, %s mode, batch %d per step\n", b.Name, plural(b.PeerCount, "peer"), topologyWords(b.Topology), b.Mode, b.Batch)
	}
	common, perConfig := settings(cfgs)
	given := givenFlags(cfgs, common)
	var dataParts, modelParts []string
	for _, k := range []string{"train", "test", "format"} {
		if v := common[k]; v != "" {
			dataParts = append(dataParts, fmt.Sprintf("%s `%s`", k, v))
		}
	}
	for _, k := range []string{"model", "dim", "classes", "hidden", "optimizer", "lr", "l2", "epochs"} {
		if v := common[k]; v != "" && !(k == "hidden" && common["model"] != "mlp") {
			modelParts = append(modelParts, fmt.Sprintf("%s `%s`", k, v))
		}
	}
	if len(dataParts) > 0 {
		pf("- data: %s\n", strings.Join(dataParts, ", "))
	}
	if len(modelParts) > 0 {
		pf("- model: %s\n", strings.Join(modelParts, ", "))
	}
	if o.Command != "" {
		pf("- command: `%s`\n", o.Command)
	}
	pf("\n")
	if len(common) > 0 {
		pf("<details><summary>Flags every peer ran with (from the reports' start lines; the values in effect, " +
			"where a flag left them to a default or to inference)</summary>\n\n")
		pf("| flag | value |\n|---|---|\n")
		for _, k := range sortedMapKeys(common) {
			v := common[k]
			if g, ok := given[k]; ok {
				v = fmt.Sprintf("%s (given: %s)", v, g)
			}
			pf("| %s | %s |\n", mdCell(k), mdCell(v))
		}
		pf("\n</details>\n\n")
	}
	if anyFlags(perConfig) {
		pf("Flags that differ between configurations:\n\n| configuration | flags |\n|---|---|\n")
		for _, c := range cfgs {
			if m := perConfig[c.Name]; len(m) > 0 {
				var kv []string
				for _, k := range sortedMapKeys(m) {
					kv = append(kv, fmt.Sprintf("`--%s %s`", k, m[k]))
				}
				pf("| %s | %s |\n", c.Name, mdCell(strings.Join(kv, " ")))
			}
		}
		pf("\n")
	}
}

func mdTable(w io.Writer, header []string, n int, row func(int) []string) {
	fmt.Fprintf(w, "| %s |\n|", strings.Join(header, " | "))
	for i := range header {
		if i == 0 {
			fmt.Fprint(w, "---|")
		} else {
			fmt.Fprint(w, "---:|")
		}
	}
	fmt.Fprintln(w)
	for i := 0; i < n; i++ {
		cells := row(i)
		for j, c := range cells {
			cells[j] = mdCell(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// mdCell escapes what would break a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// anyFlags reports whether some configuration has flags of its own.
func anyFlags(perConfig map[string]map[string]string) bool {
	for _, m := range perConfig {
		if len(m) > 0 {
			return true
		}
	}
	return false
}

// effectiveFlags is a start line's flags with the values the run used
// where it records them (Start.Effective): "--lr 0" becomes the
// optimizer's default, "--classes 0" the inferred classes.
func effectiveFlags(st *Start) map[string]string {
	m := make(map[string]string, len(st.Config)+len(st.Effective))
	for k, v := range st.Config {
		m[k] = v
	}
	for k, v := range st.Effective {
		m[k] = v
	}
	return m
}

// givenFlags are the literal flag values behind the common effective
// values that differ from them (--lr 0 behind lr 0.1), when every run
// gave the same.
func givenFlags(cfgs []*Config, common map[string]string) map[string]string {
	var given map[string]string
	for _, c := range cfgs {
		for _, r := range c.Peers {
			if r.Start == nil {
				continue
			}
			cur := map[string]string{}
			for k, v := range common {
				if g, ok := r.Start.Config[k]; ok && g != v {
					cur[k] = g
				}
			}
			if given == nil {
				given = cur
				continue
			}
			for k, g := range given {
				if cur[k] != g {
					delete(given, k)
				}
			}
		}
	}
	return given
}

// settings splits the start lines' flags into those every run shares
// (non-empty values only) and, per configuration, those constant within
// it that are not shared by all. Flags that differ between the peers of
// one configuration (report file, identity, part) are left out.
func settings(cfgs []*Config) (common map[string]string, perConfig map[string]map[string]string) {
	perConfig = map[string]map[string]string{}
	for _, c := range cfgs {
		var m map[string]string
		for _, r := range c.Peers {
			if r.Start == nil {
				continue
			}
			flags := effectiveFlags(r.Start)
			if m == nil {
				m = flags
				continue
			}
			for k, v := range m {
				if w, ok := flags[k]; !ok || w != v {
					delete(m, k)
				}
			}
		}
		if m != nil {
			perConfig[c.Name] = m
		}
	}
	common = map[string]string{}
	first := true
	for _, c := range cfgs {
		m, ok := perConfig[c.Name]
		if !ok {
			continue
		}
		if first {
			for k, v := range m {
				if v != "" {
					common[k] = v
				}
			}
			first = false
			continue
		}
		for k, v := range common {
			if w, ok := m[k]; !ok || w != v {
				delete(common, k)
			}
		}
	}
	for _, m := range perConfig {
		for k := range m {
			if _, ok := common[k]; ok || m[k] == "" {
				delete(m, k)
			}
		}
	}
	return common, perConfig
}

func sortedMapKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func topologyWords(t string) string {
	switch t {
	case "ring":
		return "sharing the model on a consistent-hash ring"
	case "master":
		return "with every shard on one master peer"
	case "single":
		return "training alone"
	}
	return "in topology " + t
}

// fmtNum formats a figure for a table: integers above 100, two decimals
// above 1, four below; "-" when undefined.
func fmtNum(f float64) string {
	switch a := math.Abs(f); {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "-"
	case a >= 100:
		return fmt.Sprintf("%.0f", f)
	case a >= 1:
		return fmt.Sprintf("%.2f", f)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.4f", f)
}

// fmtMetric formats a test metric with four decimals; "-" when undefined.
func fmtMetric(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.4f", f)
}
