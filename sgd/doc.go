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
// Train is that loop for a single peer (the N = 1 case, also the baseline
// the distributed modes are measured against), with periodic evaluation,
// progress hooks and cancellation. Evaluate and Evaluator compute Metrics
// on a data.Source; Predict gives one example's probabilities.
//
// Nothing in this package is safe for concurrent use; a Model, a Grad and
// an Evaluator each belong to one goroutine at a time.
package sgd
