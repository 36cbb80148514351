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
package report
