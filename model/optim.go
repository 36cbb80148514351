package model

import (
	"fmt"
	"math"
)

// StepLR returns the SGD step size of step t (0-based):
// LR / (1 + Decay·t)^Power. For AdaGrad and FTRL it is Opt.LR.
func (c OptConfig) StepLR(t int64) float64 {
	if c.Kind != SGD || c.Decay == 0 || c.Power == 0 {
		return c.LR
	}
	return c.LR / math.Pow(1+c.Decay*float64(t), c.Power)
}

// Apply takes one optimizer step on the rows of g.
//
// g holds gradient SUMS over n examples (n > 0), Width values per row, every
// row in a shard owned here and < Dim+1; anything else is a broken invariant
// and panics. The gradient used for a weight w is g/n + L2·w, without L2 (or
// L1) on the bias row, so every optimizer minimises the same objective: mean
// log-loss + (L2/2)·||w||². Rows not in g are untouched (regularisation is
// lazy: a row decays when it has a gradient). step is the 0-based step
// number of SGD's schedule; afterwards Steps >= step+1. Only W and the
// owned shards' State change, and Apply allocates nothing. A row's update
// reads and writes that row's weights and state only, so calls on disjoint
// rows may run concurrently once Steps > step (sgd.Worker.Apply does).
//
// The updates, per weight w with gradient g = g/n + L2·w (arithmetic in
// float64, results stored as float32):
//
//	SGD:     w -= lr_t·g,  lr_t = LR/(1+Decay·step)^Power
//	AdaGrad: G += g²;  w -= LR·g/sqrt(Eps + G)
//	FTRL:    σ = (sqrt(n + g²) - sqrt(n))/α;  z += g - σ·w;  n += g²
//	         w = 0 if |z| <= L1, else -(z - sgn(z)·L1)·α/(β + sqrt(n))
//
// FTRL is Algorithm 1 of McMahan et al., "Ad Click Prediction: a View from
// the Trenches" (KDD 2013), per coordinate, with α = LR, β = Beta, λ1 = L1;
// L2 enters through the gradient like for the others instead of as the
// paper's λ2, whose closed form penalises the sum of all steps' gradients
// once and so would not minimise the same objective. L1 thresholds z, the
// running sum of mean gradients, as in the paper. A weight with z = n = 0
// but w != 0 (loaded or handed over without state) starts from the z that
// reproduces w, so it continues from its value instead of resetting to 0.
func (m *Model) Apply(g *Sparse, n int, step int64) {
	width := m.Layout.Width
	if n <= 0 {
		panic(fmt.Sprintf("model: Apply over %d examples", n))
	}
	if len(g.Val) != len(g.Idx)*width {
		panic(fmt.Sprintf("model: Apply with %d values for %d rows of width %d", len(g.Val), len(g.Idx), width))
	}
	inv := 1 / float64(n)
	switch m.Opt.Kind {
	case SGD:
		m.applySGD(g, inv, m.Opt.StepLR(step))
	case AdaGrad:
		m.applyAdaGrad(g, inv)
	case FTRL:
		m.applyFTRL(g, inv)
	default:
		panic(fmt.Sprintf("model: Apply with unknown optimizer %d", m.Opt.Kind))
	}
	if step+1 > m.Steps {
		m.Steps = step + 1
	}
}

// rowIndex resolves rows to their weights and optimizer state with the
// layout's fields copied into locals, so Apply's loops keep them in
// registers instead of reloading them through pointers per row.
type rowIndex struct {
	w     []float32
	state [][]float32
	rows  uint64
	mask  uint32
	shift uint
	per   int // floats per shard
	width int
	spw   int // state floats per weight
}

func (m *Model) rowIndex() rowIndex {
	l := &m.Layout
	return rowIndex{
		w: m.W, state: m.State, rows: l.Features,
		mask: l.mask, shift: l.shift, per: l.PerShard * l.Width, width: l.Width,
		spw: m.Opt.Kind.StatePerWeight(),
	}
}

// row returns the offset in W of row k, its shard's state and the index
// of the row's first state float in it, panicking on rows that are invalid
// or not owned here. Small enough to inline into Apply's loops.
func (r *rowIndex) row(k uint32) (off int, st []float32, j int) {
	s := int(k & r.mask)
	st = r.state[s]
	if uint64(k) >= r.rows || st == nil {
		r.bad(k)
	}
	slot := int(k>>(r.shift&31)) * r.width
	return s*r.per + slot, st, slot * r.spw
}

func (r *rowIndex) bad(k uint32) {
	if uint64(k) >= r.rows {
		panic(fmt.Sprintf("model: Apply to row %d out of range (%d rows)", k, r.rows))
	}
	panic(fmt.Sprintf("model: Apply to row %d of shard %d, which is not owned here", k, k&r.mask))
}

func (m *Model) applySGD(g *Sparse, inv, lr float64) {
	width, bias, bias2, ri := m.Layout.Width, m.Bias(), m.Bias2(), m.rowIndex()
	for i, k := range g.Idx {
		off, _, _ := ri.row(k)
		w := ri.w[off : off+width]
		gv := g.Val[i*width : (i+1)*width]
		l2 := m.Opt.L2
		if k == bias || k == bias2 {
			l2 = 0
		}
		for c, gc := range gv[:len(w)] {
			wc := float64(w[c])
			w[c] = float32(wc - lr*(float64(gc)*inv+l2*wc))
		}
	}
}

func (m *Model) applyAdaGrad(g *Sparse, inv float64) {
	width, bias, bias2 := m.Layout.Width, m.Bias(), m.Bias2()
	lr, eps, ri := m.Opt.LR, m.Opt.Eps, m.rowIndex()
	for i, k := range g.Idx {
		off, st, j := ri.row(k)
		w := ri.w[off : off+width]
		gv := g.Val[i*width : (i+1)*width]
		acc := st[j : j+len(w)]
		l2 := m.Opt.L2
		if k == bias || k == bias2 {
			l2 = 0
		}
		for c, gc := range gv[:len(w)] {
			wc := float64(w[c])
			gi := float64(gc)*inv + l2*wc
			a := float64(acc[c]) + gi*gi
			acc[c] = float32(a)
			w[c] = float32(wc - lr*gi/math.Sqrt(eps+a))
		}
	}
}

func (m *Model) applyFTRL(g *Sparse, inv float64) {
	width, bias, bias2 := m.Layout.Width, m.Bias(), m.Bias2()
	alpha, beta, ri := m.Opt.LR, m.Opt.Beta, m.rowIndex()
	for i, k := range g.Idx {
		off, st, j := ri.row(k)
		w := ri.w[off : off+width]
		gv := g.Val[i*width : (i+1)*width]
		zn := st[j : j+2*len(w)]
		l1, l2 := m.Opt.L1, m.Opt.L2
		if k == bias || k == bias2 {
			l1, l2 = 0, 0
		}
		for c, gc := range gv[:len(w)] {
			wc := float64(w[c])
			z, n := float64(zn[2*c]), float64(zn[2*c+1])
			if n == 0 && z == 0 && wc != 0 {
				// No history behind a nonzero weight (loaded or handed over
				// without state): start from the z that yields it.
				z = -wc*beta/alpha - math.Copysign(l1, wc)
			}
			gi := float64(gc)*inv + l2*wc
			sqrtN := math.Sqrt(n)
			n += gi * gi
			sqrtN1 := math.Sqrt(n)
			z += gi - (sqrtN1-sqrtN)/alpha*wc
			zn[2*c], zn[2*c+1] = float32(z), float32(n)
			switch {
			case z > l1:
				w[c] = float32(-(z - l1) * alpha / (beta + sqrtN1))
			case z < -l1:
				w[c] = float32(-(z + l1) * alpha / (beta + sqrtN1))
			default:
				w[c] = 0
			}
		}
	}
}
