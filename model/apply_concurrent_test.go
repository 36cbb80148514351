package model

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// Apply on disjoint rows from several goroutines at once, once Steps is
// past the step, makes the model one Apply makes (run with -race: sgd's
// Worker.Apply relies on it).
func TestApplyDisjointRowsConcurrently(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, opt := range []OptConfig{
		{Kind: SGD, LR: 0.3, L2: 0.01, Decay: 0.5, Power: 0.5},
		{Kind: AdaGrad, LR: 0.2, L2: 0.01, Eps: 1e-6},
		{Kind: FTRL, LR: 0.2, Beta: 1, L1: 0.01, L2: 0.01},
	} {
		one := mustNew(t, Softmax, 1000, 3, 8, opt)
		one.OwnAll()
		for i := range one.W {
			one.W[i] = float32(rng.NormFloat64())
		}
		split := one.Clone()
		var g Sparse
		for k := uint32(0); k <= one.Bias(); k += 1 + uint32(rng.IntN(3)) {
			g.Append(k, []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())})
		}
		for step := range int64(3) {
			one.Apply(&g, 7, step)
			split.Steps = step + 1
			var wg sync.WaitGroup
			const parts = 4
			for c := range parts {
				lo, hi := g.Len()*c/parts, g.Len()*(c+1)/parts
				wg.Go(func() {
					split.Apply(&Sparse{Idx: g.Idx[lo:hi], Val: g.Val[3*lo : 3*hi]}, 7, step)
				})
			}
			wg.Wait()
		}
		if one.Hash() != split.Hash() || one.Steps != split.Steps {
			t.Errorf("%v: applying in 4 concurrent parts differs from one Apply", opt.Kind)
		}
	}
}
