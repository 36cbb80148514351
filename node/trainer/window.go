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
	h   int
	cur *window
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
	win.keys = unionKeys(win.keys[:0], win.batches)
	return win
}

// unionKeys appends to dst the union of the batches' keys (each ascending),
// ascending.
func unionKeys(dst []uint32, batches []*sgd.Prepared) []uint32 {
	for _, p := range batches {
		dst = append(dst, p.Keys...)
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}
