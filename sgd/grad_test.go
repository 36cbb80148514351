package sgd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// The gradient matches central differences of the float64 reference loss,
// for every row and class, the bias included.
func TestGradNumerical(t *testing.T) {
	for _, tc := range []struct {
		kind    model.Kind
		classes int
	}{{model.Logreg, 0}, {model.Softmax, 3}} {
		rng := rand.New(rand.NewPCG(7, uint64(tc.kind)))
		const dim = 9
		m := newModel(t, tc.kind, dim, tc.classes, 4, model.DefaultOptConfig(model.SGD))
		randomize(m, rng, 0.7)
		classes := max(tc.classes, 2)
		rows := randomRows(rng, 6, dim-2, 4, classes) // features dim-2, dim-1 untouched
		g := NewGrad(m)
		loss := g.Add(m, batchOf(rows))
		if g.Examples() != 6 {
			t.Errorf("%v: Examples = %d, want 6", tc.kind, g.Examples())
		}
		var sp model.Sparse
		g.Collect(&sp)

		w := weights64(m)
		if want := refLoss(tc.kind, w, rows); math.Abs(loss-want) > 1e-9*want {
			t.Errorf("%v: loss %.12g, reference %.12g", tc.kind, loss, want)
		}
		width := m.Width()
		got := make(map[uint32][]float32)
		for i, k := range sp.Idx {
			got[k] = sp.Val[i*width : (i+1)*width]
		}
		const h = 1e-5
		for k := range w {
			for c := range w[k] {
				orig := w[k][c]
				w[k][c] = orig + h
				up := refLoss(tc.kind, w, rows)
				w[k][c] = orig - h
				down := refLoss(tc.kind, w, rows)
				w[k][c] = orig
				num := (up - down) / (2 * h)
				row, touched := got[uint32(k)]
				if !touched {
					if num != 0 {
						t.Errorf("%v: row %d missing from the gradient, numerical %g", tc.kind, k, num)
					}
					continue
				}
				if d := math.Abs(float64(row[c]) - num); d > 1e-4*math.Max(1, math.Abs(num)) {
					t.Errorf("%v: row %d class %d: gradient %.7g, numerical %.7g", tc.kind, k, c, row[c], num)
				}
			}
		}
		if _, ok := got[dim]; !ok {
			t.Errorf("%v: bias row %d missing", tc.kind, dim)
		}
		if _, ok := got[dim-1]; ok {
			t.Errorf("%v: untouched row %d in the gradient", tc.kind, dim-1)
		}
		if !sp.Sorted(width) {
			t.Errorf("%v: gradient rows not sorted: %v", tc.kind, sp.Idx)
		}
	}
}

// At zero weights every probability is uniform, so the gradient and loss
// can be written down.
func TestGradHandComputed(t *testing.T) {
	// Logreg, p = 0.5: row 0 gets (0.5-1)·1; row 2 gets (0.5-1)·2 + (0.5-0)·0.5;
	// the bias (row 3) gets -0.5 + 0.5; loss = 2·log 2.
	m := newModel(t, model.Logreg, 3, 0, 2, model.DefaultOptConfig(model.SGD))
	g := NewGrad(m)
	loss := g.Add(m, batchOf([]row{
		{[]uint32{0, 2}, []float32{1, 2}, 1},
		{[]uint32{2}, []float32{0.5}, 0},
	}))
	var sp model.Sparse
	g.Collect(&sp)
	wantIdx, wantVal := []uint32{0, 2, 3}, []float32{-0.5, -0.75, 0}
	if !equalU32(sp.Idx, wantIdx) || !equalF32(sp.Val, wantVal) || math.Abs(loss-2*math.Ln2) > 1e-15 {
		t.Errorf("logreg: %v %v loss %v, want %v %v loss %v", sp.Idx, sp.Val, loss, wantIdx, wantVal, 2*math.Ln2)
	}
	// Softmax, 3 classes, p = 1/3: one row, feature 1 with value 3, class 2:
	// row 1 gets (1/3, 1/3, -2/3)·3 = (1, 1, -2); the bias (1/3, 1/3, -2/3);
	// loss = log 3.
	s := newModel(t, model.Softmax, 2, 3, 1, model.DefaultOptConfig(model.SGD))
	g = NewGrad(s)
	loss = g.Add(s, batchOf([]row{{[]uint32{1}, []float32{3}, 2}}))
	g.Collect(&sp)
	third := float32(1.0 / 3)
	if !equalU32(sp.Idx, []uint32{1, 2}) || !nearF32(sp.Val, []float32{1, 1, -2, third, third, -2 * third}) ||
		math.Abs(loss-math.Log(3)) > 1e-15 {
		t.Errorf("softmax: %v %v loss %v, want [1 2] [1 1 -2 1/3 1/3 -2/3] loss log 3", sp.Idx, sp.Val, loss)
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func nearF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			return false
		}
	}
	return true
}

// Collect returns rows in ascending order whatever digits of the radix sort
// they differ in, merges repeats, and leaves the accumulator empty.
func TestCollectOrderAndReset(t *testing.T) {
	const dim = 1<<20 + 5 // 21-bit features: two radix passes
	m := newModel(t, model.Logreg, dim, 0, 256, model.DefaultOptConfig(model.SGD))
	g := NewGrad(m)
	feats := []uint32{dim - 1, 262144, 0, 4096, 63, 262143, 64, 4095, 64}
	var r row
	for _, k := range feats {
		r.idx = append(r.idx, k)
		r.val = append(r.val, 1)
	}
	r.y = 1
	var sp model.Sparse
	for round := range 3 {
		g.Add(m, batchOf([]row{r}))
		g.Collect(&sp)
		want := []uint32{0, 63, 64, 4095, 4096, 262143, 262144, dim - 1, dim}
		if !equalU32(sp.Idx, want) {
			t.Fatalf("round %d: rows %v, want %v", round, sp.Idx, want)
		}
		// p = 0.5, y = 1: -0.5 per occurrence; feature 64 occurs twice.
		for i, k := range sp.Idx {
			want := float32(-0.5)
			if k == 64 {
				want = -1
			}
			if sp.Val[i] != want {
				t.Fatalf("round %d: row %d = %g, want %g", round, k, sp.Val[i], want)
			}
		}
		if g.Examples() != 0 {
			t.Fatalf("Examples after Collect = %d", g.Examples())
		}
	}
	g.Collect(&sp)
	if sp.Len() != 0 {
		t.Errorf("second Collect returned %v", sp.Idx)
	}
}

func TestGradInvariants(t *testing.T) {
	m := newModel(t, model.Logreg, 4, 0, 1, model.DefaultOptConfig(model.SGD))
	g := NewGrad(m)
	mustPanic(t, "feature 4", func() { g.Add(m, batchOf([]row{{[]uint32{4}, []float32{1}, 0}})) })
	mustPanic(t, "binary label 2", func() { g.Add(m, batchOf([]row{{[]uint32{1}, []float32{1}, 2}})) })
	s := newModel(t, model.Softmax, 4, 3, 1, model.DefaultOptConfig(model.SGD))
	gs := NewGrad(s)
	mustPanic(t, "class 3", func() { gs.Add(s, batchOf([]row{{[]uint32{1}, []float32{1}, 3}})) })
	mustPanic(t, "class 1.5", func() { gs.Add(s, batchOf([]row{{[]uint32{1}, []float32{1}, 1.5}})) })
	mustPanic(t, "used with", func() { g.Add(s, batchOf(nil)) })
}

func TestGradAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		kind    model.Kind
		classes int
	}{{model.Logreg, 0}, {model.Softmax, 5}, {model.MLP, 5}} {
		var m *model.Model
		if tc.kind == model.MLP {
			m = newMLP(t, 1000, tc.classes, 32, 16, model.DefaultOptConfig(model.AdaGrad))
		} else {
			m = newModel(t, tc.kind, 1000, tc.classes, 16, model.DefaultOptConfig(model.SGD))
		}
		m.OwnAll()
		b := batchOf(randomRows(rng, 50, 1000, 20, max(tc.classes, 2)))
		g := NewGrad(m)
		var sp model.Sparse
		step := int64(0)
		run := func() {
			g.Add(m, b)
			g.Collect(&sp)
			m.Apply(&sp, b.Rows(), step)
			step++
		}
		run()
		if a := testing.AllocsPerRun(20, run); a != 0 {
			t.Errorf("%v: Add+Collect+Apply allocates %v times per step", tc.kind, a)
		}
	}
}

// sumSparse adds the rows of a and b (width values each) the way an owner
// sums two workers' contributions.
func sumSparse(a, b *model.Sparse, width int) *model.Sparse {
	var out model.Sparse
	i, j := 0, 0
	for i < a.Len() || j < b.Len() {
		switch {
		case j == b.Len() || (i < a.Len() && a.Idx[i] < b.Idx[j]):
			out.Append(a.Idx[i], a.Val[i*width:(i+1)*width])
			i++
		case i == a.Len() || b.Idx[j] < a.Idx[i]:
			out.Append(b.Idx[j], b.Val[j*width:(j+1)*width])
			j++
		default:
			v := make([]float32, width)
			for c := range v {
				v[c] = a.Val[i*width+c] + b.Val[j*width+c]
			}
			out.Append(a.Idx[i], v)
			i++
			j++
		}
	}
	return &out
}

// Two workers each summing half a batch, an owner adding the halves and
// applying with n = total, take the step one worker takes on the whole
// batch: bit-identical when the sums are the same (here exact: zero
// weights, so p = 1/2 or 1/C, and dyadic values), within float32 rounding of
// the summation order otherwise.
func TestHalfBatchEquivalence(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	opts := []model.OptConfig{
		{Kind: model.SGD, LR: 0.5, L2: 0.125, Decay: 1, Power: 0.5},
		{Kind: model.AdaGrad, LR: 0.5, L2: 0.125, Eps: 1e-6},
		{Kind: model.FTRL, LR: 0.5, Beta: 1, L1: 0.01, L2: 0.125},
	}
	for _, tc := range []struct {
		kind    model.Kind
		classes int
	}{{model.Logreg, 0}, {model.Softmax, 4}} {
		for _, opt := range opts {
			for _, exact := range []bool{true, false} {
				rows := randomRows(rng, 40, 50, 6, max(tc.classes, 2))
				if exact {
					for _, r := range rows {
						for i := range r.val {
							r.val[i] = float32(rng.IntN(8)-4) / 4
						}
					}
				}
				whole := newModel(t, tc.kind, 50, tc.classes, 4, opt)
				whole.OwnAll()
				if !exact {
					randomize(whole, rng, 0.3)
				}
				split := whole.Clone()

				var gw, g1, g2 model.Sparse
				a := NewGrad(whole)
				a.Add(whole, batchOf(rows))
				a.Collect(&gw)
				whole.Apply(&gw, len(rows), 0)

				b := NewGrad(split)
				b.Add(split, batchOf(rows[:17]))
				b.Collect(&g1)
				b.Add(split, batchOf(rows[17:]))
				b.Collect(&g2)
				split.Apply(sumSparse(&g1, &g2, split.Width()), len(rows), 0)

				name := tc.kind.String() + "/" + opt.Kind.String()
				if exact {
					if whole.Hash() != split.Hash() {
						t.Errorf("%s exact: split batch differs from whole batch", name)
					}
					continue
				}
				for i := range whole.W {
					if d := math.Abs(float64(whole.W[i] - split.W[i])); d > 1e-5 {
						t.Errorf("%s: weight %d differs by %g", name, i, d)
						break
					}
				}
			}
		}
	}
	// Adding two halves to one Grad is the same summation order as adding
	// the whole batch: bit-identical for any data.
	m := newModel(t, model.Softmax, 50, 4, 4, opts[2])
	m.OwnAll()
	randomize(m, rng, 0.5)
	rows := randomRows(rng, 40, 50, 6, 4)
	var whole, halves model.Sparse
	g := NewGrad(m)
	l1 := g.Add(m, batchOf(rows))
	g.Collect(&whole)
	l2 := g.Add(m, batchOf(rows[:23])) + g.Add(m, batchOf(rows[23:]))
	if g.Examples() != 40 {
		t.Errorf("Examples = %d, want 40", g.Examples())
	}
	g.Collect(&halves)
	if !equalU32(whole.Idx, halves.Idx) || !equalF32(whole.Val, halves.Val) || math.Abs(l1-l2) > 1e-12*l1 {
		t.Error("Add(whole) differs from Add(first half) + Add(second half)")
	}
}

func TestPredict(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, tc := range []struct {
		kind    model.Kind
		classes int
	}{{model.Logreg, 0}, {model.Softmax, 3}} {
		m := newModel(t, tc.kind, 10, tc.classes, 2, model.DefaultOptConfig(model.SGD))
		randomize(m, rng, 1)
		w := weights64(m)
		for _, r := range randomRows(rng, 20, 10, 5, max(tc.classes, 2)) {
			out := make([]float32, m.Width())
			Predict(m, r.idx, r.val, out)
			var sum float64
			for c := range out {
				// -log p of class c from the reference loss of a row labelled c.
				r.y = float32(c)
				want := math.Exp(-refLoss(tc.kind, w, []row{r}))
				if tc.kind == model.Logreg {
					r.y = 1
					want = math.Exp(-refLoss(tc.kind, w, []row{r}))
				}
				if math.Abs(float64(out[c])-want) > 1e-6 {
					t.Errorf("%v: P(%d) = %g, reference %g", tc.kind, c, out[c], want)
				}
				sum += float64(out[c])
			}
			if tc.kind == model.Softmax && math.Abs(sum-1) > 1e-6 {
				t.Errorf("softmax probabilities sum to %g", sum)
			}
		}
		r := randomRows(rng, 1, 10, 5, 2)[0]
		out := make([]float32, m.Width())
		if a := testing.AllocsPerRun(100, func() { Predict(m, r.idx, r.val, out) }); a != 0 {
			t.Errorf("%v: Predict allocates %v times", tc.kind, a)
		}
	}
	// Extreme logits neither overflow nor give NaN.
	m := newModel(t, model.Softmax, 1, 2, 1, model.DefaultOptConfig(model.SGD))
	m.Row(0)[0], m.Row(0)[1] = 1000, -1000
	out := make([]float32, 2)
	Predict(m, []uint32{0}, []float32{1}, out)
	if out[0] != 1 || out[1] != 0 {
		t.Errorf("softmax of (1000, -1000) = %v, want [1 0]", out)
	}
}

// naiveGradient sums the per-example gradients of rows in a map, the
// obvious way, from dloss/dz computed by the float64 reference.
func naiveGradient(m *model.Model, rows []row) map[uint32][]float64 {
	kind, width, bias := m.Kind, m.Width(), m.Bias()
	w := make(map[uint32][]float64)
	for _, r := range rows {
		for _, k := range append(r.idx, bias) {
			for _, v := range m.Row(k) {
				if len(w[k]) < width {
					w[k] = append(w[k], float64(v))
				}
			}
		}
	}
	out := make(map[uint32][]float64)
	add := func(k uint32, d []float64, v float64) {
		if out[k] == nil {
			out[k] = make([]float64, width)
		}
		for c := range d {
			out[k][c] += d[c] * v
		}
	}
	for _, r := range rows {
		z := make([]float64, width)
		for c := range z {
			z[c] = w[bias][c]
			for i, k := range r.idx {
				z[c] += w[k][c] * float64(r.val[i])
			}
		}
		d := make([]float64, width)
		if kind == model.Logreg {
			d[0] = 1/(1+math.Exp(-z[0])) - float64(r.y)
		} else {
			var sum float64
			for _, v := range z {
				sum += math.Exp(v)
			}
			for c := range d {
				d[c] = math.Exp(z[c]) / sum
			}
			d[int(r.y)]--
		}
		for i, k := range r.idx {
			add(k, d, float64(r.val[i]))
		}
		add(bias, d, 1)
	}
	return out
}

// Collect agrees with a map-based sum for models from 1 row to 2^24 rows
// (0 to 24 key bits), batches added in several calls, keys spread out or
// clustered (which sends the sort to its radix fallback).
func TestCollectAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct {
		kind      model.Kind
		classes   int
		dim       uint32
		clustered bool
	}{
		{model.Logreg, 0, 1, false},
		{model.Logreg, 0, 2, false},
		{model.Logreg, 0, 300, false},
		{model.Softmax, 3, 70000, false},
		{model.Logreg, 0, 1 << 24, false},
		{model.Logreg, 0, 1 << 24, true},
		{model.Softmax, 2, 1 << 20, true},
	} {
		m := newModel(t, tc.kind, uint64(tc.dim), tc.classes, 1, model.DefaultOptConfig(model.SGD))
		var all []row
		g := NewGrad(m)
		for range 3 {
			rows := randomRows(rng, 40, tc.dim, 12, max(tc.classes, 2))
			if tc.clustered { // distinct features in descending order within a few hundred rows
				for i := range rows {
					for j := range rows[i].idx {
						rows[i].idx[j] = 5000 - uint32(i*12+j)
					}
				}
			}
			all = append(all, rows...)
		}
		for _, r := range all { // random weights on the rows in use
			for _, k := range append(r.idx, m.Bias()) {
				for c := range m.Row(k) {
					m.Row(k)[c] = float32(rng.NormFloat64() * 0.3)
				}
			}
		}
		for i := 0; i < len(all); i += 40 {
			g.Add(m, batchOf(all[i:i+40]))
		}
		var sp model.Sparse
		g.Collect(&sp)
		want := naiveGradient(m, all)
		name := fmt.Sprintf("%v dim %d clustered %v", tc.kind, tc.dim, tc.clustered)
		if !sp.Sorted(m.Width()) || sp.Len() != len(want) {
			t.Errorf("%s: %d rows (sorted %v), want %d", name, sp.Len(), sp.Sorted(m.Width()), len(want))
			continue
		}
		for i, k := range sp.Idx {
			for c, v := range sp.Val[i*m.Width() : (i+1)*m.Width()] {
				if math.Abs(float64(v)-want[k][c]) > 1e-5*math.Max(1, math.Abs(want[k][c])) {
					t.Errorf("%s: row %d class %d = %g, want %g", name, k, c, v, want[k][c])
				}
			}
		}
	}
}
