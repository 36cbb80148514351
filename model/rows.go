package model

import "math"

// Touched rows. A model of --dim 3e9 trained on Adult holds 128 nonzero
// weights in 12 GB of reserved, mostly never written, memory: what is
// saved, exported and checkpointed is the rows that hold something, found
// without reading (and so without faulting in) the pages never written.

// visitRows calls fn, in storage order (slot ascending), for each row of
// shard s that keep accepts, with the row's weights and, with withState
// (s must then be owned), its optimizer state (nil otherwise). Rows whose
// weights lie in pages the process never wrote are zero, and so is their
// state, since every writer of a row's state writes its weights too
// (Apply, LoadShard, ImportRows, the file readers): they are skipped
// unread.
func (m *Model) visitRows(s int, withState bool, keep func(row, srow []float32) bool, fn func(k uint32, row, srow []float32)) {
	l := &m.Layout
	w := l.Width
	spw := m.Opt.Kind.StatePerWeight()
	lo, _ := l.ShardRange(s)
	st := m.State[s]
	n := l.shardRows(s)
	var untouched [][2]int
	untouchedRuns(m.W[lo:lo+n*w], func(a, b int, zero bool) {
		if zero {
			untouched = append(untouched, [2]int{a, b})
		}
	})
	for slot := 0; slot < n; slot++ {
		off := slot * w
		for len(untouched) > 0 && untouched[0][1] < off+w {
			untouched = untouched[1:]
		}
		if len(untouched) > 0 && untouched[0][0] <= off {
			slot = untouched[0][1]/w - 1 // the last row wholly in the run
			continue
		}
		row := m.W[lo+off : lo+off+w]
		var srow []float32
		if withState {
			srow = st[slot*w*spw : (slot+1)*w*spw]
		}
		if keep(row, srow) {
			fn(l.Feature(s, slot), row, srow)
		}
	}
}

// anyBits reports whether a row's weights or state hold a value whose bits
// are not all zero: a -0 is kept, so a file reads back bit for bit.
func anyBits(row, srow []float32) bool {
	for _, x := range row {
		if math.Float32bits(x) != 0 {
			return true
		}
	}
	for _, x := range srow {
		if math.Float32bits(x) != 0 {
			return true
		}
	}
	return false
}

// anyValue reports whether a row's weights or state hold a value that is
// not 0 (-0 counts as 0): the rows a shard transfer carries.
func anyValue(row, srow []float32) bool { return !allZero(row) || !allZero(srow) }

// TouchedRows counts the rows that hold a nonzero value (weights, or with
// withState the optimizer state of an owned shard; the bits of -0 count):
// the rows a sparse model file stores. It reads only the pages training
// wrote.
func (m *Model) TouchedRows(withState bool) (rows, withStateRows int64) {
	for s := range m.Layout.Shards {
		ws := withState && m.State[s] != nil
		m.visitRows(s, ws, anyBits, func(uint32, []float32, []float32) {
			rows++
			if ws {
				withStateRows++
			}
		})
	}
	return rows, withStateRows
}

// clearTouched zeroes v without writing the pages never written (they are
// zero already, and writing them would make them resident).
func clearTouched(v []float32) {
	untouchedRuns(v, func(a, b int, zero bool) {
		if !zero {
			clear(v[a:b])
		}
	})
}
