package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
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

// TestAppendWideRows: the rows appended are AppendWide's, key by key, for
// logreg with AdaGrad (rows of shards owned here and not), softmax and
// FTRL, after what dst holds; a row out of range panics as AppendWide's.
func TestAppendWideRows(t *testing.T) {
	for _, c := range []struct {
		kind    Kind
		classes int
		opt     OptKind
	}{{Logreg, 2, AdaGrad}, {Logreg, 2, SGD}, {Logreg, 2, FTRL}, {Softmax, 3, AdaGrad}} {
		m := mustNew(t, c.kind, 64, c.classes, 4, DefaultOptConfig(c.opt))
		m.Own(0)
		m.Own(2)
		for i := range m.W {
			m.W[i] = float32(i) / 7
		}
		for _, st := range m.State {
			for i := range st {
				st[i] = float32(i) / 3
			}
		}
		keys := []uint32{0, 1, 2, 5, 6, 10, 33, 63, uint32(m.Bias())}
		want := []float32{-1, -2}
		for _, k := range keys {
			want = m.AppendWide(want, k)
		}
		got := m.AppendWideRows([]float32{-1, -2}, keys)
		if !slices.Equal(got, want) {
			t.Errorf("%v %v: AppendWideRows %v, want %v", c.kind, c.opt, got, want)
		}
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "out of range") {
					t.Errorf("%v %v: a row out of range: panic %v, want out of range", c.kind, c.opt, r)
				}
			}()
			m.AppendWideRows(nil, []uint32{1, uint32(m.Layout.Features)})
		}()
	}
}

// TestAddWeightDeltasChangesWeightsOnly: windows whose workers keep the
// optimizer state (node/train, Config.LocalState) push weight changes
// only. Added to a model, each row of the changes moves its weights by
// them (float32 sums, exactly) and no other row's; the optimizer state of
// every row stays as it was, for logreg (width 1, its loop of its own)
// and wider rows (softmax, an MLP), with AdaGrad and SGD. Changes of the
// wrong width panic, and so does an FTRL model, whose weights follow
// from its state.
func TestAddWeightDeltasChangesWeightsOnly(t *testing.T) {
	softmax := func(t *testing.T, opt OptConfig) *Model { return mustNew(t, Softmax, 20, 3, 4, opt) }
	cases := []struct {
		name string
		opt  OptKind
		new  func(*testing.T, OptConfig) *Model
	}{
		{"logreg", AdaGrad, func(t *testing.T, opt OptConfig) *Model { return mustNew(t, Logreg, 20, 2, 4, opt) }},
		{"logreg", SGD, func(t *testing.T, opt OptConfig) *Model { return mustNew(t, Logreg, 20, 2, 4, opt) }},
		{"softmax", AdaGrad, softmax},
		{"mlp", AdaGrad, func(t *testing.T, opt OptConfig) *Model {
			m, err := NewMLP(20, 3, 5, 4, opt, 1)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
	}
	for _, tc := range cases {
		m := tc.new(t, DefaultOptConfig(tc.opt))
		m.OwnAll()
		for i := range m.W {
			m.W[i] = float32(i%13)/8 - 0.75
		}
		for _, st := range m.State {
			for i := range st {
				st[i] = float32(i%7) / 4
			}
		}
		width := m.Layout.Width
		keys := []uint32{0, 3, 7, m.Bias()} // (rows of three of the four shards)
		var d Sparse
		for i, k := range keys {
			row := make([]float32, width)
			for c := range row {
				row[c] = float32(i+1)*0.125 - float32(c)*0.0625
			}
			d.Append(k, row)
		}
		got := m.Clone()
		got.AddWeightDeltas(&d)
		for k := range uint32(m.Layout.Features) {
			want := slices.Clone(m.Row(k))
			if i := slices.Index(keys, k); i >= 0 {
				for c := range want {
					want[c] += d.Val[i*width+c]
				}
			}
			if g := got.Row(k); !slices.Equal(g, want) {
				t.Errorf("%s %v: row %d weights %v, want %v", tc.name, tc.opt, k, g, want)
			}
		}
		for s := range m.State {
			if !slices.Equal(got.State[s], m.State[s]) {
				t.Errorf("%s %v: shard %d's optimizer state changed: %v, was %v", tc.name, tc.opt, s, got.State[s], m.State[s])
			}
		}
		wantPanic(t, fmt.Sprintf("%s %v: changes one value short", tc.name, tc.opt), "AddWeightDeltas with", func() {
			got.AddWeightDeltas(&Sparse{Idx: d.Idx, Val: d.Val[:len(d.Val)-1]})
		})
	}
	f := mustNew(t, Logreg, 20, 2, 4, DefaultOptConfig(FTRL))
	f.OwnAll()
	wantPanic(t, "ftrl", "FTRL", func() {
		f.AddWeightDeltas(&Sparse{Idx: []uint32{1}, Val: []float32{0.5}})
	})
}

// wantPanic calls f and reports an error unless it panics with a message
// that contains sub.
func wantPanic(t *testing.T, what, sub string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), sub) {
			t.Errorf("%s: panic %v, want one that says %q", what, r, sub)
		}
	}()
	f()
}
