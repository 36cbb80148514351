// Package report writes and reads gossiptrain's run reports and measures the
// resources a peer uses.
//
// A run report is a JSON-lines file (one JSON object per line) that every peer
// writes with --report FILE. Each line has a "type":
//
//   - "eval": a test-set evaluation at some point of the run
//     (examples, seconds, test_logloss, test_error, test_auc, test_accuracy);
//   - "round": per-round figures of a distributed run (clock, examples,
//     seconds, bytes_sent, bytes_recv, wait_seconds, …);
//   - "summary": the last line, the run's totals (examples, seconds,
//     examples_per_sec, final test metrics, model_nonzeros, resource figures).
//
// Field names are a public format: later tooling (gossiptrain report, bench,
// users' scripts) reads them, so fields are only ever added, never renamed.
// Numbers that are undefined (the AUC of a multiclass model, say) are written
// as null, never as NaN, which JSON cannot carry.
//
// The Writer is safe for concurrent use: a training loop and a progress
// goroutine may both write records.
//
// # From reports to a benchmark report
//
// The reports of a benchmark (one file per peer, from one machine or
// gathered from several) become the report a person reads in four steps,
// which is what "gossiptrain report" and "gossiptrain bench" run:
//
//	runs := []*report.Run{}              // report.ReadFile for every peer's file
//	cfgs, err := report.GroupRuns(runs)  // configurations by topology/mode/batch, run by run
//	bs := report.Summarize(cfgs)         // figures by configuration and by peer
//	err = report.WriteBench(dir, cfgs)   // bench.json, plots (PNG, SVG), report.md
//
// Summarize does the arithmetic (a configuration's examples/s is all its
// peers' examples over the slowest peer's seconds; bytes per example is all
// bytes sent over all examples) and the checks (model hashes that disagree,
// gossipsub drops, rejected messages, peers without a summary line). Compare
// pairs master and ring configurations of the same mode and batch for the
// headline; Plot draws the figures with gonum.org/v1/plot; WriteMarkdown and
// WriteSummaryTable write the tables, WriteClusterTable the cluster and
// launch commands' result, WriteRepeats bench's repetitions. Find and
// ReadDir find and read the report files under directories. Nothing here runs training or touches
// the network: it reads files and writes files.
package report
