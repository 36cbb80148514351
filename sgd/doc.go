// Package sgd computes losses and gradients of linear models on CSR batches,
// evaluates models (log-loss, error, AUC), and runs the local training loop.
//
// # How it is driven
//
// A worker keeps one Grad per model and one data.Batch, and per step:
//
//	g := sgd.NewGrad(m)
//	for {
//		n, err := src.Next(&batch, 100)   // CSR rows, labels mapped by the reader
//		...
//		loss := g.Add(m, &batch)          // SUM of per-example gradients, bias included
//		g.Collect(&sparse)                // sorted rows; g is empty again
//		// distributed: split sparse by owner and publish (package gossip);
//		// local: apply directly
//		m.Apply(&sparse, n, step)         // the optimizer sees sparse/n
//	}
//
// Summing on workers and dividing by the total on owners makes N peers with
// batch B take the step one peer with batch N·B takes (docs/contracts.md).
// Add and Collect allocate nothing once their buffers have grown.
//
// # Computing on a working set, on several cores
//
// The same gradient, bit for bit, can be computed without the whole model:
// a Preparer turns a batch into a Prepared one (its distinct rows, Keys,
// and the batch re-indexed to them), which is all a worker needs to ask
// the rows' owners for; a Worker computes on the rows it gets back, with
// several goroutines:
//
//	pr, w := sgd.NewPreparer(m), sgd.NewWorker(m, threads)
//	defer w.Close()
//	pr.Prepare(&batch, &p)                // off the critical path: on a read-ahead goroutine
//	sgd.Gather(m, p.Keys, ws)             // or: the owners send rows p.Keys
//	loss := w.Compute(&p, ws, grad)       // grad row i is model row p.Keys[i]
//	w.Apply(m, &model.Sparse{Idx: p.Keys, Val: grad}, n, step) // or: send each owner its rows
//
// Compute does what Add and Collect do, in the same order per row, so its
// result does not depend on the number of threads (see Worker).
//
// Train is the local loop for a single peer (the N = 1 case, also the
// baseline the distributed modes are measured against), built that way:
// a goroutine reads and prepares batches ahead while the step gathers,
// computes and applies on Config.Threads goroutines. It has periodic
// evaluation, progress hooks and cancellation, and never applies a
// gradient that is not finite (CheckFinite, Config.NonFinite: finite
// values can overflow a batch's sum). Evaluate and Evaluator
// compute Metrics on a data.Source; Predict gives one example's
// probabilities.
//
// Unless its documentation says otherwise, nothing in this package is
// safe for concurrent use; a Model, a Grad, a Preparer, a Worker and an
// Evaluator each belong to one goroutine at a time.
package sgd
