package trainer

import (
	"slices"

	"github.com/gossiptrain/gossiptrain/sgd"
)

// Windows of local steps (train.Config.LocalSteps > 1): the core's round is
// a window of that many batches. The trainer groups the batches it reads
// into windows, gives the core each window's rows (the union of its
// batches' keys) and examples, and answers a compute request by training
// the window's batches on the wide rows the core fetched (sgd.Window),
// returning each row's change.

// window is one round's batches when rounds are windows.
type window struct {
	batches  []*sgd.Prepared
	keys     []uint32 // the union of the batches' keys, ascending
	examples int
	epoch    int
	row      int64 // rows of the epoch before the first batch
}

// windower groups batches into windows of h, never across an epoch: a
// window's position in the data (for checkpoints) is the position before
// its first batch.
type windower struct {
	h       int
	cur     *window
	scratch [2][]uint32 // unionKeys'
}

// add takes the next batch (of epoch, after row rows of it) and returns a
// window when one is complete: this batch's, or the one before it when
// this batch starts a new epoch (then this batch starts the next window).
func (w *windower) add(p *sgd.Prepared, epoch int, row int64) (done *window) {
	if w.cur != nil && w.cur.epoch != epoch {
		done = w.flush()
	}
	if w.cur == nil {
		w.cur = &window{epoch: epoch, row: row}
	}
	w.cur.batches = append(w.cur.batches, p)
	w.cur.examples += p.Examples()
	if len(w.cur.batches) == w.h {
		if done != nil {
			panic("trainer: a window completed twice by one batch")
		}
		done = w.flush()
	}
	return done
}

// flush returns the window under way (nil when none), its keys made.
func (w *windower) flush() *window {
	win := w.cur
	w.cur = nil
	if win == nil {
		return nil
	}
	win.keys = unionKeys(&w.scratch, win.batches)
	return win
}

// unionKeys returns the union of the batches' keys (each ascending),
// ascending, in a new slice, which the core keeps without a copy of its
// own and nothing writes to (train.Core.Batch): merged batch by batch
// into scratch, which it reuses (a sort of every key was a tenth of a
// capped peer's time with windows of 16).
func unionKeys(scratch *[2][]uint32, batches []*sgd.Prepared) []uint32 {
	a, b := scratch[0][:0], scratch[1][:0]
	for _, p := range batches {
		b = mergeKeys(b[:0], a, p.Keys)
		a, b = b, a
	}
	scratch[0], scratch[1] = a, b
	return slices.Clone(a)
}

// mergeKeys appends the union of ascending x and y to dst. Its loop has
// no branch on which key is smaller, a coin toss that a branch predictor
// loses: with one, windows of 4 batches of bench's data took 2.4 times as
// long to merge (BenchmarkUnionKeys). TestMergeKeys pins the result.
func mergeKeys(dst, x, y []uint32) []uint32 {
	n := len(dst)
	dst = slices.Grow(dst, len(x)+len(y))[:n+len(x)+len(y)]
	out := dst[n:]
	i, j, o := 0, 0, 0
	for i < len(x) && j < len(y) && o < len(out) {
		a, b := x[i], y[j]
		out[o] = min(a, b)
		o++
		if a <= b {
			i++
		}
		if b <= a {
			j++
		}
	}
	o += copy(out[o:], x[i:])
	o += copy(out[o:], y[j:])
	return dst[:n+o]
}
