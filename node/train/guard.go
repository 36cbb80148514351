package train

import (
	"fmt"
	"math"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
)

// A member's influence on the model (docs/protocol.md, "Owners", rules G1-G3).
// An owner takes every member's pushes, so one member with bad data or a
// bug must not be able to wreck the shards it reaches:
//
//	G1  a push claims at most Config.Guard.MaxExamples examples (the job's
//	    batch): a larger claim, which would dilute every other worker's
//	    gradient in the round's mean, is refused;
//	G2  a gradient row whose L2 norm exceeds Config.Guard.MaxRowGrad times the
//	    push's examples (with windows of local steps: a change row whose
//	    norm exceeds MaxRowGrad² times LocalSteps) is dropped (not scaled: a value that large is a bug
//	    or an overflow, and scaling it would still move the row by the
//	    bound), counted (Stats.RowsDropped) and reported (EvDropped). Per
//	    row, so the decision is the same whichever owner holds the row, and
//	    the serial reference (the simulator) applies it likewise
//	    (GuardRows). Honest rows of the product's data sets stay under 0.8
//	    per example for linear models and under 100 for the MLP
//	    (DefaultMaxRowGrad);
//	G3  with Config.Combine == Trimmed (sync), each row of a round is the
//	    trimmed mean of the per-example gradients of the workers that
//	    touched it (combine.go).
//
// Within the bounds a member can still push adversarial values: rows up
// to the bound every round, or honest-looking gradients of wrong labels.
// docs/security.md measures what that does, with and without Trimmed.
//
// TestGuard* pin G1 and G2; TestTrimmedMean G3.

// DefaultMaxRowGrad is the default bound on a gradient row's L2 norm per
// example (G2) for a model kind: 10 for linear models, whose per-example
// row gradient is at most the feature's value times sqrt(2) (measured
// largest on Adult, IMDB-5k, generated click data and Fashion-MNIST:
// 0.27-0.76), and 1000 for the MLP, whose hidden activations make the
// second layer's rows larger (measured largest: 82 on Fashion-MNIST with
// 128 hidden units, batch 100 and 1000).
func DefaultMaxRowGrad(kind model.Kind) float64 {
	if kind == model.MLP {
		return 1000
	}
	return 10
}

// GuardRows returns rows without the rows whose L2 norm exceeds bound
// times examples (G2), and how many it dropped. It allocates only when it
// drops a row (into *buf, reused); bound <= 0 keeps every row (Config's
// negative MaxRowGrad: off).
func GuardRows(rows *model.Sparse, width int, examples uint64, bound float64, buf *model.Sparse) (*model.Sparse, int) {
	if bound <= 0 || rows.Len() == 0 {
		return rows, 0
	}
	limit := bound * float64(examples)
	limit *= limit
	over := func(i int) bool {
		s := 0.0
		for _, v := range rows.Val[i*width : (i+1)*width] {
			s += float64(v) * float64(v)
		}
		return s > limit || math.IsNaN(s)
	}
	first := -1
	for i := range rows.Idx {
		if over(i) {
			first = i
			break
		}
	}
	if first < 0 {
		return rows, 0
	}
	buf.Reset()
	buf.Idx = append(buf.Idx, rows.Idx[:first]...)
	buf.Val = append(buf.Val, rows.Val[:first*width]...)
	dropped := 1
	for i := first + 1; i < len(rows.Idx); i++ {
		if over(i) {
			dropped++
			continue
		}
		buf.Append(rows.Idx[i], rows.Val[i*width:(i+1)*width])
	}
	return buf, dropped
}

// guard applies G1 and G2 to a push's contribution k: it reports false
// when the push must be refused, and replaces k's rows by a copy without
// the rows over the bound.
func (o *owner) guard(k *contribution) bool {
	c := o.c
	if c.cfg.Guard.MaxExamples > 0 && k.examples > uint64(c.cfg.Guard.MaxExamples) {
		c.stats.Rejected++ // G1
		return false
	}
	var buf model.Sparse
	examples, bound := k.examples, c.cfg.Guard.MaxRowGrad
	if c.cfg.LocalSteps > 1 {
		// A window's change: AdaGrad's accumulator grows by at most R² a
		// step for gradients of at most R per example, and a weight by
		// LR·R (LR below R): R²·steps bounds the whole row.
		examples, bound = 1, bound*bound*float64(c.cfg.LocalSteps)
	}
	rows, dropped := GuardRows(&k.rows, c.xw, examples, bound, &buf)
	if dropped == 0 {
		return true
	}
	k.rows = model.Sparse{Idx: slices.Clone(rows.Idx), Val: slices.Clone(rows.Val)}
	c.stats.RowsDropped += uint64(dropped)
	c.event(Event{Kind: EvDropped, Peer: k.from, Rows: dropped,
		Text: fmt.Sprintf("round %d: %d gradient rows of %s over %g per example (of %d examples) dropped", k.round, dropped, short(k.from), c.cfg.Guard.MaxRowGrad, k.examples)})
	return true
}
