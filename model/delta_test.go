package model

import (
	"math"
	"testing"
)

// TestAddDeltasSumsChanges: two workers' changes from one start add up:
// weights and AdaGrad's accumulator by their sums, FTRL's z and n by their
// sums with the weights computed from them; an accumulator never falls
// below zero; AppendWide gives a row not owned here zero state.
func TestAddDeltasSumsChanges(t *testing.T) {
	for _, ok := range []OptKind{SGD, AdaGrad, FTRL} {
		opt := DefaultOptConfig(ok)
		start := mustNew(t, Logreg, 8, 2, 1, opt)
		start.OwnAll()
		start.Apply(&Sparse{Idx: []uint32{1, 2}, Val: []float32{0.5, -1}}, 1, 0)
		a, b := start.Clone(), start.Clone()
		a.Apply(&Sparse{Idx: []uint32{1, 3}, Val: []float32{1, 2}}, 1, 1)
		b.Apply(&Sparse{Idx: []uint32{1, 2}, Val: []float32{-3, 0.25}}, 1, 1)
		sw := start.StateWidth(true)
		var d Sparse
		for _, k := range []uint32{1, 2, 3} {
			s0, sa, sb := start.AppendWide(nil, k), a.AppendWide(nil, k), b.AppendWide(nil, k)
			row := make([]float32, sw)
			for c := range row {
				row[c] = (sa[c] - s0[c]) + (sb[c] - s0[c])
			}
			d.Append(k, row)
		}
		got := start.Clone()
		got.AddDeltas(&d)
		for i, k := range d.Idx {
			s0, g := start.AppendWide(nil, k), got.AppendWide(nil, k)
			want := make([]float32, sw)
			for c := range want {
				want[c] = s0[c] + d.Val[i*sw+c]
			}
			if ok == FTRL {
				want[0] = ftrlWeight(float64(want[1]), float64(want[2]), opt.L1, opt.LR, opt.Beta)
			}
			for c := range want {
				if math.Abs(float64(want[c]-g[c])) > 1e-6 {
					t.Errorf("%v row %d value %d: %v, want %v", ok, k, c, g[c], want[c])
				}
			}
		}
		if ok == AdaGrad {
			neg := start.Clone()
			neg.AddDeltas(&Sparse{Idx: []uint32{1}, Val: []float32{0, -1e9}})
			if acc := neg.AppendWide(nil, 1)[1]; acc != 0 {
				t.Errorf("an accumulator pushed below zero is %v, want 0", acc)
			}
		}
	}
	m := mustNew(t, Logreg, 8, 2, 2, DefaultOptConfig(AdaGrad))
	m.Own(0)
	if w := m.AppendWide(nil, 1); len(w) != 2 || w[1] != 0 { // row 1 is in shard 1, not owned
		t.Errorf("AppendWide of a row not owned: %v, want its weight and zero state", w)
	}
}
