package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// twoFeatures returns a logreg model with rows 0, 1 and the bias row 2 in one
// owned shard, weights w.
func twoFeatures(t *testing.T, opt OptConfig, w ...float32) *Model {
	t.Helper()
	m := mustNew(t, Logreg, 2, 0, 1, opt)
	m.OwnAll()
	copy(m.W, w)
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func checkRows(t *testing.T, name string, m *Model, want ...float64) {
	t.Helper()
	for k, w := range want {
		if got := float64(m.Row(uint32(k))[0]); !near(got, w) {
			t.Errorf("%s: row %d = %.9g, want %.9g", name, k, got, w)
		}
	}
}

func grad(idx []uint32, val ...float32) *Sparse { return &Sparse{Idx: idx, Val: val} }

func TestStepLR(t *testing.T) {
	c := OptConfig{Kind: SGD, LR: 1, Decay: 3, Power: 0.5}
	for _, tc := range []struct {
		t    int64
		want float64
	}{{0, 1}, {1, 0.5}, {5, 0.25}, {33, 0.1}} {
		if got := c.StepLR(tc.t); !near(got, tc.want) {
			t.Errorf("StepLR(%d) = %g, want %g", tc.t, got, tc.want)
		}
	}
	if got := (OptConfig{Kind: SGD, LR: 0.3, Decay: 0, Power: 0.5}).StepLR(1000); got != 0.3 {
		t.Errorf("no decay: StepLR(1000) = %g, want 0.3", got)
	}
	if got := (OptConfig{Kind: AdaGrad, LR: 0.3, Decay: 1, Power: 1}).StepLR(10); got != 0.3 {
		t.Errorf("adagrad: StepLR = %g, want LR", got)
	}
}

// Hand-computed steps; all numbers below are worked out in the comments.
func TestApplySGD(t *testing.T) {
	m := twoFeatures(t, OptConfig{Kind: SGD, LR: 0.5, L2: 0.25, Decay: 3, Power: 0.5}, 1, -2, 0.5)
	// Step 0, lr 0.5, sums over n=2 -> means 0.25, -0.5, 0.5.
	//   w0 = 1 - 0.5·(0.25 + 0.25·1)     = 0.75
	//   w1 = -2 - 0.5·(-0.5 + 0.25·(-2)) = -1.5
	//   b  = 0.5 - 0.5·0.5 (no L2)       = 0.25
	m.Apply(grad([]uint32{0, 1, 2}, 0.5, -1, 1), 2, 0)
	checkRows(t, "step 0", m, 0.75, -1.5, 0.25)
	if m.Steps != 1 {
		t.Errorf("Steps = %d, want 1", m.Steps)
	}
	// Step 1, lr 0.5/sqrt(1+3) = 0.25, row 0 only, mean 1:
	//   w0 = 0.75 - 0.25·(1 + 0.25·0.75) = 0.453125; rows not in g are untouched.
	m.Apply(grad([]uint32{0}, 1), 1, 1)
	checkRows(t, "step 1", m, 0.453125, -1.5, 0.25)
	if m.Steps != 2 {
		t.Errorf("Steps = %d, want 2", m.Steps)
	}
}

func TestApplyAdaGrad(t *testing.T) {
	m := twoFeatures(t, OptConfig{Kind: AdaGrad, LR: 0.5, Eps: 0.4375, L2: 0.25}, 1, 0, 0)
	// Step 0, n=2: row 0 mean 0.5, g = 0.5 + 0.25·1 = 0.75, G = 0.5625,
	//   w0 = 1 - 0.5·0.75/sqrt(0.4375+0.5625) = 0.625;
	// row 1 mean 0 and w 0: no change; bias mean 0.75 (no L2): b = -0.375.
	m.Apply(grad([]uint32{0, 1, 2}, 1, 0, 1.5), 2, 0)
	checkRows(t, "step 0", m, 0.625, 0, -0.375)
	if m.State[0][0] != 0.5625 || m.State[0][1] != 0 {
		t.Errorf("accumulators = %v, want [0.5625 0 ...]", m.State[0])
	}
	// Step 1, n=1: row 0 mean 0.59375, g = 0.59375 + 0.25·0.625 = 0.75,
	//   G = 1.125, w0 = 0.625 - 0.5·0.75/sqrt(0.4375+1.125) = 0.625 - 0.3 = 0.325.
	m.Apply(grad([]uint32{0}, 0.59375), 1, 1)
	checkRows(t, "step 1", m, 0.325, 0, -0.375)
	if m.State[0][0] != 1.125 {
		t.Errorf("accumulator = %v, want 1.125", m.State[0][0])
	}
}

func TestApplyFTRL(t *testing.T) {
	m := twoFeatures(t, OptConfig{Kind: FTRL, LR: 0.5, Beta: 1, L1: 0.25, L2: 0.5})
	// Step 0, n=2, means 0.75, 0.25, 0.75; from z = n = w = 0 (α 0.5, β 1),
	// so L2·w = 0:
	//   row 0: σ = 0.75/0.5 = 1.5, z = 0.75, n = 0.5625,
	//          w = -(0.75-0.25)·0.5/(1+0.75) = -1/7
	//   row 1: z = 0.25 <= L1 -> w = 0 exactly, n = 0.0625
	//   bias:  no L1: w = -0.75·0.5/1.75 = -3/14
	m.Apply(grad([]uint32{0, 1, 2}, 1.5, 0.5, 1.5), 2, 0)
	checkRows(t, "step 0", m, -1.0/7, 0, -3.0/14)
	if m.Row(1)[0] != 0 {
		t.Errorf("row 1 = %g, want exactly 0", m.Row(1)[0])
	}
	st := m.State[0] // z, n interleaved, rows in slot order
	if st[0] != 0.75 || st[1] != 0.5625 || st[2] != 0.25 || st[3] != 0.0625 {
		t.Errorf("state = %v, want [0.75 0.5625 0.25 0.0625 ...]", st)
	}
	// Step 1, n=14, row 0 sum 15: g = 15/14 + 0.5·(-1/7) = 1,
	//   sqrt(n): 0.75 -> sqrt(0.5625+1) = 1.25, σ = 0.5/0.5 = 1,
	//   z = 0.75 + 1 - 1·(-1/7) = 53/28,
	//   w = -(53/28 - 1/4)·0.5/(1+1.25) = -23/63.
	m.Apply(grad([]uint32{0}, 15), 14, 1)
	checkRows(t, "step 1", m, -23.0/63, 0, -3.0/14)
	if !near(float64(st[0]), 53.0/28) || !near(float64(st[1]), 1.5625) {
		t.Errorf("row 0 state = %v, want z 53/28, n 1.5625", st[:2])
	}
}

// L2 shrinks feature rows and never the bias row, for every optimizer.
func TestL2NotOnBias(t *testing.T) {
	for _, tc := range []struct {
		opt        OptConfig
		wantW, wnB float64 // row 0 and bias after one step with zero gradient from w = 1
	}{
		// SGD: w = 1 - 0.5·(0 + 0.5·1) = 0.75, the bias stays 1.
		{OptConfig{Kind: SGD, LR: 0.5, L2: 0.5}, 0.75, 1},
		// AdaGrad: g = 0.5, G = 0.25, w = 1 - 0.5·0.5/sqrt(0.25+0.25).
		{OptConfig{Kind: AdaGrad, LR: 0.5, Eps: 0.25, L2: 0.5}, 1 - 0.25/math.Sqrt(0.5), 1},
		// FTRL (α 0.5, β 1, no state): z starts at -w·β/α = -2, which gives
		// w = 1; g = 0.5, n = 0.25, σ = 0.5/0.5 = 1, z = -2 + 0.5 - 1 = -2.5,
		// w = 2.5·0.5/(1+0.5) = 5/6. The bias has g = 0: it keeps w = 1.
		{OptConfig{Kind: FTRL, LR: 0.5, Beta: 1, L2: 0.5}, 5.0 / 6, 1},
	} {
		m := twoFeatures(t, tc.opt, 1, 1, 1)
		m.Apply(grad([]uint32{0, 2}, 0, 0), 1, 0)
		checkRows(t, tc.opt.Kind.String(), m, tc.wantW, 1, tc.wnB)
	}
}

// FTRL continues from weights that come without state (a model saved
// without it, a shard handed over weights-only) instead of zeroing them.
func TestFTRLStartsFromLoadedWeights(t *testing.T) {
	m := twoFeatures(t, OptConfig{Kind: FTRL, LR: 0.5, Beta: 1, L1: 0.25}, 0.5, -2, 0)
	// A zero gradient leaves every weight as it was: z = -w·β/α - sgn(w)·L1
	// reproduces w, and σ = 0.
	m.Apply(grad([]uint32{0, 1, 2}, 0, 0, 0), 1, 0)
	checkRows(t, "zero gradient", m, 0.5, -2, 0)
}

// With a large L1, FTRL keeps every feature weight exactly 0; the bias,
// never regularised, still learns.
func TestFTRLSparsity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l1 := range []float64{0, 1000} {
		m := mustNew(t, Logreg, 64, 0, 4, OptConfig{Kind: FTRL, LR: 0.1, Beta: 1, L1: l1})
		m.OwnAll()
		var g Sparse
		for step := range int64(50) {
			g.Reset()
			for k := uint32(0); k <= 64; k++ {
				if k == 64 || rng.IntN(3) == 0 {
					g.Append(k, []float32{float32(rng.Float64()*2 - 1)})
				}
			}
			m.Apply(&g, 1, step)
		}
		nz := m.NonZeros()
		bias := m.Row(m.Bias())[0]
		if l1 == 0 && nz < 40 {
			t.Errorf("l1 0: %d nonzero weights, want most of 65", nz)
		}
		if l1 == 1000 && (nz != 1 || bias == 0) {
			t.Errorf("l1 1000: %d nonzero weights (bias %g), want exactly 1, the bias", nz, bias)
		}
	}
}

// The optimizer sees g/n: n copies of one example's gradient summed equal
// one example, bit for bit (n a power of two, so the scaling is exact).
func TestApplyMeanOfSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, opt := range []OptConfig{
		{Kind: SGD, LR: 0.3, L2: 0.01, Decay: 0.1, Power: 0.5},
		{Kind: AdaGrad, LR: 0.3, L2: 0.01, Eps: 1e-6},
		{Kind: FTRL, LR: 0.3, Beta: 1, L1: 0.01, L2: 0.01},
	} {
		a := mustNew(t, Softmax, 20, 3, 4, opt)
		a.OwnAll()
		for i := range a.W {
			if a.Layout.Valid(a.Layout.Feature(i/3/a.Layout.PerShard, i/3%a.Layout.PerShard)) {
				a.W[i] = float32(rng.NormFloat64())
			}
		}
		b := a.Clone()
		for step := range int64(5) {
			var one, four Sparse
			for k := uint32(0); k <= 20; k += uint32(1 + rng.IntN(3)) {
				v := []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())}
				one.Append(k, v)
				four.Append(k, []float32{4 * v[0], 4 * v[1], 4 * v[2]})
			}
			a.Apply(&one, 1, step)
			b.Apply(&four, 4, step)
		}
		if a.Hash() != b.Hash() {
			t.Errorf("%v: Apply(4·g, 4) differs from Apply(g, 1)", opt.Kind)
		}
	}
}

func TestApplyInvariants(t *testing.T) {
	m := mustNew(t, Logreg, 7, 0, 2, DefaultOptConfig(SGD))
	m.Own(0)
	mustPanic(t, "not owned", func() { m.Apply(grad([]uint32{1}, 1), 1, 0) })
	mustPanic(t, "out of range", func() { m.Apply(grad([]uint32{8}, 1), 1, 0) })
	mustPanic(t, "over 0 examples", func() { m.Apply(grad([]uint32{0}, 1), 0, 0) })
	mustPanic(t, "values for", func() { m.Apply(grad([]uint32{0, 2}, 1), 1, 0) })
}

func TestApplyAllocs(t *testing.T) {
	for _, k := range []OptKind{SGD, AdaGrad, FTRL} {
		m := mustNew(t, Softmax, 100, 4, 8, DefaultOptConfig(k))
		m.OwnAll()
		g := &Sparse{}
		for r := uint32(0); r <= 100; r += 7 {
			g.Append(r, []float32{0.1, -0.2, 0.3, 0.4})
		}
		step := int64(0)
		if a := testing.AllocsPerRun(50, func() { m.Apply(g, 3, step); step++ }); a != 0 {
			t.Errorf("%v: Apply allocates %v times per call", k, a)
		}
	}
}
