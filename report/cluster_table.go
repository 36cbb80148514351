package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gossiptrain/gossiptrain/human"
)

// Planted is what a generated data set says of its planted model (the
// model that drew its labels): its test log-loss and AUC, the best a
// learner can get; zero when the data is not generated.
type Planted struct {
	LogLoss, AUC float64
}

// WriteClusterTable prints the result of a cluster run (gossiptrain
// cluster and launch): for each configuration a row per peer (examples/s,
// bytes, CPU, memory, wait, shards), totals, the steady state, the final
// test figures (beside the planted model's when the data has one) and
// whether the peers agree on the model; with a lone peer's run among bs
// (the --baseline, topology "single"), the cluster's speedup against it
// and the time to accuracy of both.
func WriteClusterTable(w io.Writer, bs []BenchConfig, planted Planted) error {
	var alone *BenchConfig // the --baseline run
	for i, b := range bs {
		if b.Topology == "single" && len(bs) > 1 {
			alone = &bs[i]
		}
	}
	for _, b := range bs {
		if alone != nil && b.Name == alone.Name {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "\n%s: %d peers, %s mode, batch %d\n", b.Topology, b.PeerCount, b.Mode, b.Batch)
		fmt.Fprintln(tw, "peer\tpeer ID\texamples\texamples/s\tsent MB\treceived MB\tCPU %\tpeak RSS MiB\twait s\towned shards\t")
		var cpu float64
		var rss int64
		for i, p := range b.Peers {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.1f\t%.1f\t%s\t%.0f\t%.2f\t%d\t\n", i, shortID(p.PeerID), p.Examples,
				human.Count(float64(p.ExamplesPerSec)), float64(p.BytesSent)/1e6, float64(p.BytesRecv)/1e6,
				percent(float64(p.CPUPercent)), float64(p.PeakRSSBytes)/(1<<20), p.WaitSeconds, p.OwnedShards)
			cpu += finiteOr(float64(p.CPUPercent))
			rss += p.PeakRSSBytes
		}
		fmt.Fprintf(tw, "total\t\t%d\t%s\t%.1f\t%.1f\t%.0f\t%.0f\t\t\t\n", b.Examples, human.Count(float64(b.ExamplesPerSec)),
			float64(b.BytesSent)/1e6, float64(b.BytesRecv)/1e6, cpu, float64(rss)/(1<<20))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "%.1f s, %d rounds; cluster throughput %s examples/s, %.0f bytes sent per example\n",
			b.Seconds, b.Rounds, human.Count(float64(b.ExamplesPerSec)), finiteOr(float64(b.BytesPerExample)))
		if !math.IsNaN(float64(b.Steady)) {
			fmt.Fprintf(w, "steady state (each peer's first and last tenth of rounds left out): %.1f rounds/s, a round %.1f ms (p50), %.1f ms (p90), %.1f ms (p99)\n",
				float64(b.Steady), float64(b.P50), float64(b.P90), float64(b.P99))
		}
		if !math.IsNaN(float64(b.TestLogLoss)) {
			fmt.Fprintf(w, "test log-loss %.4f", float64(b.TestLogLoss))
			if planted.LogLoss > 0 {
				fmt.Fprintf(w, " (the planted model that made the labels: %.4f)", planted.LogLoss)
			}
			if auc := float64(b.TestAUC); !math.IsNaN(auc) {
				fmt.Fprintf(w, ", AUC %.4f", auc)
				if planted.AUC > 0 {
					fmt.Fprintf(w, " (planted %.4f)", planted.AUC)
				}
			}
			fmt.Fprintf(w, ", accuracy %.4f\n", float64(b.TestAccuracy))
		}
		writeHashLine(w, b)
		if alone != nil && b.Baseline == alone.Name {
			fmt.Fprintf(w, "one peer alone (plain train on all the data, same cap): %s examples/s in %.1f s, test log-loss %.4f; the cluster's speedup %s, efficiency %s (speedup / %d peers); a peer received %.0f bytes per example it trained\n",
				human.Count(float64(alone.ExamplesPerSec)), alone.Seconds, finiteOr(float64(alone.TestLogLoss)), fmtTimes(b.Speedup), fmtEff(b.Efficiency), b.Workers, finiteOr(float64(b.RecvBytesPerExample)))
			writeMemoryLine(w, b, *alone)
			writeTargetLine(w, b, *alone)
		}
	}
	return nil
}

// fmtEff formats an efficiency ("0.27"), "-" when it is unknown.
func fmtEff(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// fmtTimes formats a speedup ("0.54x"), "-" when it is unknown.
func fmtTimes(n Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64) + "x"
}

// writeHashLine says whether the peers that ran to the end agree on the
// model, and which stopped early (their models are partial, so they are
// not compared).
func writeHashLine(w io.Writer, b BenchConfig) {
	var stopped []string
	hash := ""
	same := len(b.Peers) > 0
	for i, p := range b.Peers {
		switch {
		case p.Partial:
			stopped = append(stopped, fmt.Sprintf("peer %d %s at round %d", i, p.Stopped, p.StoppedAt))
			same = same && p.Stopped == b.Peers[0].Stopped && p.StoppedAt == b.Peers[0].StoppedAt
		case p.Finished && hash == "":
			hash = p.ModelHash
		}
	}
	note := ""
	if len(stopped) > 0 {
		note = " (stopped early, partial models not compared: " + strings.Join(stopped, ", ") + ")"
	}
	switch {
	case len(b.Peers) > 0 && len(stopped) == len(b.Peers) && same:
		fmt.Fprintf(w, "every peer stopped before the end of training (%s at round %d): the models are partial, not compared\n",
			b.Peers[0].Stopped, b.Peers[0].StoppedAt)
	case len(b.Peers) > 0 && len(stopped) == len(b.Peers):
		fmt.Fprintf(w, "every peer stopped before the end of training: the models are partial%s\n", note)
	case b.ModelHashesAgree && hash != "" && len(stopped) == 0:
		fmt.Fprintf(w, "model hashes agree: yes, every peer ends with model %s\n", hash)
	case b.ModelHashesAgree && hash != "":
		fmt.Fprintf(w, "model hashes agree: yes, every peer that ran to the end has model %s%s\n", hash, note)
	default:
		fmt.Fprintf(w, "model hashes agree: NO (see the warnings)%s\n", note)
	}
}

// percent formats a CPU percentage, "-" when it is unknown (a peer
// without a summary line).
func percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:2] + "*" + id[len(id)-6:]
	}
	return id
}

func finiteOr(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// writeTargetLine says how soon the cluster and the lone peer reached the
// target test log-loss (time to accuracy, Accuracy).
func writeTargetLine(w io.Writer, b, alone BenchConfig) {
	t := float64(b.Target)
	if math.IsNaN(t) {
		return
	}
	when := func(s Num) string {
		if math.IsNaN(float64(s)) {
			return "never"
		}
		return fmt.Sprintf("after %.1f s", float64(s))
	}
	fmt.Fprintf(w, "time to accuracy (test log-loss %.4f, one peer alone's final + 0.5%% unless --target-logloss): one peer alone %s, the cluster %s: %s\n",
		t, when(alone.SecondsToTarget), when(b.SecondsToTarget), fmtTimes(b.SpeedupToTarget))
}

// writeMemoryLine compares the busiest peer's peak resident memory with
// the lone peer's: sharding the model pays in memory when a peer holds
// only its share (TestClusterTableMemoryLine).
func writeMemoryLine(w io.Writer, b, alone BenchConfig) {
	if len(alone.Peers) == 0 || alone.Peers[0].PeakRSSBytes <= 0 {
		return
	}
	var most int64
	for _, p := range b.Peers {
		most = max(most, p.PeakRSSBytes)
	}
	if most <= 0 {
		return
	}
	lone := alone.Peers[0].PeakRSSBytes
	fmt.Fprintf(w, "peak memory: the busiest peer %.0f MiB, %.0f%% of one peer alone's %.0f MiB\n",
		float64(most)/(1<<20), 100*float64(most)/float64(lone), float64(lone)/(1<<20))
}
