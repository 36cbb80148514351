package model

import (
	"fmt"
	"math"
	"slices"
)

// Windows of local steps (node/train, Config.LocalSteps) move a row as a
// wide row (StateWidth(true) values: the weights, then the optimizer state
// in State's order): a worker fetches the rows its window touches with
// their state, trains its batches on a local copy, and sends each row's
// change back; the owner adds the changes of every worker (AddDeltas).
//
// Summing is what each optimizer's state means: AdaGrad's accumulator and
// FTRL's z and n are sums over every step's gradient, so the sum of the
// workers' changes is what one peer taking all their steps from the same
// start would have added. Weights are summed likewise (SGD and AdaGrad
// take the steps' sum); FTRL's weights are a function of z and n and are
// computed again from the summed state, as its own update does.

// AppendWide appends row k's wide row (weights, then optimizer state) to
// dst; a row of a shard not owned here has zero state.
func (m *Model) AppendWide(dst []float32, k uint32) []float32 {
	l := &m.Layout
	if !l.Valid(k) {
		panic(fmt.Sprintf("model: row %d out of range (%d rows)", k, l.Features))
	}
	w, spw := l.Width, m.Opt.Kind.StatePerWeight()
	off := l.Offset(k)
	st := m.State[l.Shard(k)]
	j := l.Slot(k) * w * spw
	if w == 1 && spw == 1 && st != nil {
		return append(dst, m.W[off], st[j]) // (logreg with AdaGrad: the common case, without two copies)
	}
	for _, v := range m.W[off : off+w] {
		dst = append(dst, v)
	}
	if st == nil {
		// A shard not owned here has no state: a read copy's row (or a
		// row the owner has not installed yet) starts its history.
		for range w * spw {
			dst = append(dst, 0)
		}
		return dst
	}
	for _, v := range st[j : j+w*spw] {
		dst = append(dst, v)
	}
	return dst
}

// AppendWideRows appends the wide rows of keys to dst, as AppendWide of
// each key in turn does. An owner answers a window's rows with it: with
// logreg and AdaGrad (2 floats a row) in one loop, its rows' cache misses
// overlap more than in a call a row (BenchmarkWideRows).
func (m *Model) AppendWideRows(dst []float32, keys []uint32) []float32 {
	l := &m.Layout
	if l.Width != 1 || m.Opt.Kind.StatePerWeight() != 1 {
		for _, k := range keys {
			dst = m.AppendWide(dst, k)
		}
		return dst
	}
	n := len(dst)
	dst = slices.Grow(dst, 2*len(keys))[:n+2*len(keys)]
	out := dst[n:]
	w, state, per := m.W, m.State, l.PerShard
	for i, k := range keys {
		if !l.Valid(k) {
			panic(fmt.Sprintf("model: row %d out of range (%d rows)", k, l.Features))
		}
		s, slot := l.Shard(k), l.Slot(k)
		v, acc := w[s*per+slot], float32(0) // (a shard not owned here: zero state)
		if st := state[s]; st != nil {
			acc = st[slot]
		}
		out[2*i], out[2*i+1] = v, acc
	}
	return dst
}

// AddDeltas adds wide rows of changes (StateWidth(true) values per row,
// valid rows of owned shards, finite values) to the weights and state:
// SGD and AdaGrad add to both (an accumulator that would fall below zero
// stays at zero); FTRL adds to z and n (n kept at zero or above) and
// computes its weights from them as applyFTRL does. Steps is untouched.
// It allocates nothing.
func (m *Model) AddDeltas(d *Sparse) {
	width := m.Layout.Width
	sw := m.StateWidth(true)
	if len(d.Val) != len(d.Idx)*sw {
		panic(fmt.Sprintf("model: AddDeltas with %d values for %d rows of width %d", len(d.Val), len(d.Idx), sw))
	}
	ri := m.rowIndex()
	if m.Opt.Kind == AdaGrad && width == 1 {
		// Logreg's rows, in a loop of their own (BenchmarkWideRows).
		dv := d.Val[:2*len(d.Idx)]
		for i, k := range d.Idx {
			off, st, j := ri.row(k)
			ri.w[off] += dv[2*i]
			st[j] = max(0, st[j]+dv[2*i+1])
		}
		return
	}
	bias, bias2 := m.Bias(), m.Bias2()
	for i, k := range d.Idx {
		off, st, j := ri.row(k)
		w := ri.w[off : off+width]
		dv := d.Val[i*sw : (i+1)*sw]
		switch m.Opt.Kind {
		case SGD:
			for c := range w {
				w[c] += dv[c]
			}
		case AdaGrad:
			acc := st[j : j+width]
			for c := range w {
				w[c] += dv[c]
				acc[c] = max(0, acc[c]+dv[width+c])
			}
		case FTRL:
			zn := st[j : j+2*width]
			l1 := m.Opt.L1
			if k == bias || k == bias2 {
				l1 = 0
			}
			for c := range w {
				z := float64(zn[2*c]) + float64(dv[width+2*c])
				n := max(0, float64(zn[2*c+1])+float64(dv[width+2*c+1]))
				zn[2*c], zn[2*c+1] = float32(z), float32(n)
				w[c] = ftrlWeight(z, n, l1, m.Opt.LR, m.Opt.Beta)
			}
		default:
			panic(fmt.Sprintf("model: AddDeltas with unknown optimizer %d", m.Opt.Kind))
		}
	}
}

// AddWeightDeltas adds rows of weight changes (Layout.Width values per
// row, valid rows of owned shards, finite values) to the weights alone:
// windows whose workers keep their own optimizer state (node/train,
// Config.LocalState) push only their weights' changes. FTRL, whose
// weights are computed from its state, has none to add to. It allocates
// nothing.
func (m *Model) AddWeightDeltas(d *Sparse) {
	width := m.Layout.Width
	if len(d.Val) != len(d.Idx)*width {
		panic(fmt.Sprintf("model: AddWeightDeltas with %d values for %d rows of width %d", len(d.Val), len(d.Idx), width))
	}
	if m.Opt.Kind == FTRL {
		panic("model: AddWeightDeltas on an FTRL model: its weights follow from its state")
	}
	ri := m.rowIndex()
	if width == 1 {
		for i, k := range d.Idx {
			off, _, _ := ri.row(k)
			ri.w[off] += d.Val[i]
		}
		return
	}
	for i, k := range d.Idx {
		off, _, _ := ri.row(k)
		w := ri.w[off : off+width]
		for c, v := range d.Val[i*width : (i+1)*width] {
			w[c] += v
		}
	}
}

// ftrlWeight is FTRL-Proximal's weight for state z, n (applyFTRL).
func ftrlWeight(z, n, l1, alpha, beta float64) float32 {
	switch {
	case z > l1:
		return float32(-(z - l1) * alpha / (beta + math.Sqrt(n)))
	case z < -l1:
		return float32(-(z + l1) * alpha / (beta + math.Sqrt(n)))
	}
	return 0
}
