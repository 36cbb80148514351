package sgd

import (
	"io"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// Early stopping on held-out rows (Config.Holdout).
//
// Every Holdout-th row of an epoch's stream, by position (rows k, 2k, …
// for k = Holdout, counted from the epoch's first row, as Vowpal Wabbit's
// --holdout_period counts them), is held out: Train never trains on it. The
// held-out rows of the first epoch are kept in memory (about 1/k of the
// parsed training data: 8 bytes a nonzero and about 12 a row), so no
// second pass over the data is needed and a pipe works. At the end of
// every whole epoch the model's mean log-loss on them is the held-out
// loss. Training stops once Patience whole epochs in a row have not
// improved the best held-out loss by more than HoldoutTol of it, and Train
// returns the model of the epoch with the lowest held-out loss (by any
// margin): from the epoch with the lowest loss so far on, it keeps each
// row a step changes as it was before (undoLog), and at the end it writes
// them back when a later epoch was run (TestTrainHoldoutKeepsTheBestEpoch).

// holdoutSource passes on the rows of src that are not held out and, when
// keep is not nil, appends the held-out ones to keep.
type holdoutSource struct {
	src  data.Source
	k    int64
	row  int64       // rows of src read so far
	keep *data.Batch // the held-out rows kept (nil: not kept)
	tmp  data.Batch
	eof  bool // src returned io.EOF
}

// Next appends up to max rows that are not held out to b. Like every
// source it returns 0 rows and io.EOF at the end (and may return rows
// with io.EOF).
func (h *holdoutSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	if h.eof {
		return 0, io.EOF
	}
	for b.Rows() < max {
		n, err := h.src.Next(&h.tmp, max-b.Rows())
		for r := range n {
			h.row++
			if h.row%h.k == 0 {
				if h.keep != nil {
					appendRow(h.keep, &h.tmp, r)
				}
				continue
			}
			appendRow(b, &h.tmp, r)
		}
		if n > 0 {
			if b.Span.IsZero() {
				b.Span.First = h.tmp.Span.First
			}
			b.Span.Last = h.tmp.Span.Last
		}
		if err != nil {
			if err == io.EOF && b.Rows() > 0 {
				h.eof = true // the next call returns io.EOF
				return b.Rows(), nil
			}
			return b.Rows(), err
		}
		if n == 0 {
			break
		}
	}
	return b.Rows(), nil
}

// HoldOut returns src without its held-out rows: every k-th row by
// position (Config.Holdout's rule, k >= 2), appended to keep when keep is
// not nil. A peer of a distributed run holds out its rows with it
// (node/trainer, Config.Holdout there).
func HoldOut(src data.Source, k int, keep *data.Batch) data.Source {
	return &holdoutSource{src: src, k: int64(k), keep: keep}
}

func (h *holdoutSource) Stats() data.Stats { return h.src.Stats() }
func (h *holdoutSource) Close() error      { return h.src.Close() }

// appendRow appends row r of o to b.
func appendRow(b *data.Batch, o *data.Batch, r int) {
	idx, val := o.Row(r)
	for i, k := range idx {
		b.Add(k, val[i])
	}
	b.EndRowWeighted(o.Labels[r], o.Weight(r))
}

// heldSource reads the rows of an in-memory batch.
type heldSource struct {
	b   *data.Batch
	pos int
}

func (s *heldSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	for s.pos < s.b.Rows() && b.Rows() < max {
		appendRow(b, s.b, s.pos)
		s.pos++
	}
	if b.Rows() == 0 {
		return 0, io.EOF
	}
	return b.Rows(), nil
}

func (s *heldSource) Stats() data.Stats { return data.Stats{} }
func (s *heldSource) Close() error      { return nil }

// undoLog is how Train goes back to the best epoch's model without a copy
// of the whole model: from the best epoch's end on, before a step changes
// a row for the first time, it keeps the row as it was (its wide row:
// weights, then optimizer state; model.AppendWide), and restore writes
// those back. It costs the rows trained since the best epoch, as wide
// rows, and a bit per row of the model, whose pages only the rows trained
// touch: a sparse model's untouched rows cost nothing, where reading or
// copying its whole arrays would fault every page of them in.
type undoLog struct {
	dirty    []uint64 // a bit per row: kept since the best epoch
	keys     []uint32
	vals     []float32 // model.StateWidth(true) per key
	steps    int64
	examples int64 // Summary.Examples at the best epoch's end
	epoch    int   // the whole epochs run then
	restored bool  // Train is over: the model is the best epoch's
}

// reset makes m as it is now the model to go back to.
func (u *undoLog) reset(m *model.Model, examples int64, epoch int) {
	for _, k := range u.keys {
		u.dirty[k/64] &^= 1 << (k % 64)
	}
	u.keys, u.vals = u.keys[:0], u.vals[:0]
	u.steps, u.examples, u.epoch = m.Steps, examples, epoch
}

// save keeps the rows of keys not kept yet, before a step changes them.
func (u *undoLog) save(m *model.Model, keys []uint32) {
	if u.dirty == nil {
		u.dirty = make([]uint64, (m.Layout.Features+63)/64)
	}
	for _, k := range keys {
		if u.dirty[k/64]&(1<<(k%64)) != 0 {
			continue
		}
		u.dirty[k/64] |= 1 << (k % 64)
		u.keys = append(u.keys, k)
		u.vals = m.AppendWide(u.vals, k)
	}
}

// restore writes the kept rows back into m.
func (u *undoLog) restore(m *model.Model) {
	l := &m.Layout
	w, spw := l.Width, m.Opt.Kind.StatePerWeight()
	sw := w * (1 + spw)
	for i, k := range u.keys {
		v := u.vals[i*sw : (i+1)*sw]
		off := l.Offset(k)
		copy(m.W[off:off+w], v[:w])
		if st := m.State[l.Shard(k)]; st != nil {
			j := l.Slot(k) * w * spw
			copy(st[j:j+w*spw], v[w:])
		}
	}
	m.Steps = u.steps
}

// holdoutEpoch evaluates the held-out loss after a whole epoch, keeps a
// copy of the model when it is the lowest so far, and reports whether
// training should stop (Patience epochs in a row without an improvement
// by more than HoldoutTol).
func (t *trainer) holdoutEpoch() (stop bool, err error) {
	if t.held == nil || t.held.Rows() == 0 {
		return false, nil
	}
	met, err := t.ev.Evaluate(t.m, &heldSource{b: t.held}, t.cfg.EvalBatch)
	if err != nil {
		return false, err
	}
	loss := met.LogLoss
	t.sum.HoldoutRows = met.Examples
	t.sum.HoldoutLoss = append(t.sum.HoldoutLoss, loss)
	first := t.sum.BestEpoch == 0
	improved := first || loss < t.bestLoss*(1-t.cfg.HoldoutTol)
	if first || loss < t.bestLoss {
		t.bestLoss, t.sum.BestEpoch = loss, t.sum.Epochs
		t.best.reset(t.m, t.sum.Examples, t.sum.Epochs)
	}
	if improved {
		t.worse = 0
		return false, nil
	}
	t.worse++
	return t.worse >= max(t.cfg.Patience, 1), nil
}

// keepBest puts the best epoch's model back when a later epoch was run.
// It does so once: Train ends after it.
func (t *trainer) keepBest() {
	if t.sum.BestEpoch == 0 || t.best.restored {
		return
	}
	t.sum.BestExamples = t.best.examples
	if t.best.epoch != t.sum.Epochs || t.sum.Examples != t.best.examples {
		t.best.restore(t.m)
	}
	t.best.restored = true
}
