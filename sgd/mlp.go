package sgd

import (
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// The MLP (model.MLP): one hidden layer of ReLU units, softmax output.
// Rows are Hidden wide (see model.MLP for which row is what). Grad stores,
// per example, dloss/dh (the gradient at the hidden pre-activations) where
// the linear kinds store dloss/dz: Collect then sums W1's rows and b1 (the
// bias row) exactly as it sums a linear model's rows, since
// dloss/dW1[k] = Σ x_k · dloss/dh. W2's and b2's gradients are dense and
// summed directly, in float64, as examples are added.

// mlpScratch is Grad's per-example buffers for an MLP.
type mlpScratch struct {
	h   []float64 // hidden activations of one example (after the ReLU)
	z   []float64 // logits, then probabilities, then dloss/dz
	gw2 []float64 // Σ dloss/dW2, Classes x Hidden
	gb2 []float64 // Σ dloss/db2
}

func newMLPScratch(m *model.Model) *mlpScratch {
	return &mlpScratch{
		h:   make([]float64, m.Hidden),
		z:   make([]float64, m.Classes),
		gw2: make([]float64, m.Classes*m.Hidden),
		gb2: make([]float64, m.Classes),
	}
}

// outputs is the number of scores a model gives an example: 1 for Logreg
// (the logit of P(y=1)), Classes for Softmax and MLP.
func outputs(m *model.Model) int {
	if m.Kind == model.Logreg {
		return 1
	}
	return m.Classes
}

// scores sets z (len outputs(m)) to the model's logits for one example;
// h (len m.Hidden) is the MLP's scratch for its hidden layer.
func scores(m *model.Model, o offsets, idx []uint32, val []float32, z, h []float64) {
	if m.Kind == model.MLP {
		mlpForward(m.W, o, uint32(m.Dim), idx, val, h, z)
		return
	}
	logits(m.W, o, uint32(m.Dim), idx, val, z)
}

// mlpForward sets h to relu(W1·x + b1) and z to W2·h + b2 for one example
// (indices < dim), panicking on an index >= dim.
func mlpForward(w []float32, o offsets, dim uint32, idx []uint32, val []float32, h, z []float64) {
	hidden, classes := len(h), len(z)
	logits(w, o, dim, idx, val, h) // W1·x + b1: the linear models' first step, Hidden wide
	for u, a := range h {
		if a < 0 {
			h[u] = 0
		}
	}
	b2 := o.of(dim + uint32(classes) + 1)
	for j := range z {
		off := o.of(dim + 1 + uint32(j))
		row := w[off : off+hidden]
		s := float64(w[b2+j])
		for u, a := range h {
			s += float64(row[u]) * a
		}
		z[j] = s
	}
}

func (g *Grad) addMLP(m *model.Model, b *data.Batch) float64 {
	o := offsetsOf(&m.Layout)
	w, dim, hidden := m.W, g.dim, g.width
	s := g.mlp
	h, z := s.h, s.z
	var loss float64
	for r, label := range b.Labels {
		lo, hi := b.Offsets[r], b.Offsets[r+1]
		idx, val := b.Indices[lo:hi], b.Values[lo:hi]
		val = val[:len(idx)]
		y := class(label, r, len(z))
		mlpForward(w, o, dim, idx, val, h, z)
		zy := z[y]
		l := softmax(z) - zy
		z[y] -= 1 // dloss/dz
		if len(b.Weights) > 0 {
			l = weigh(z, l, b.Weights[r])
		}
		loss += l
		n := len(g.d)
		g.d = g.d[:n+hidden] // Add grew g.d by a row per example
		dh := g.d[n:]
		clear(dh)
		for j, dj := range z {
			if dj == 0 {
				continue
			}
			s.gb2[j] += dj
			gw := s.gw2[j*hidden : (j+1)*hidden]
			off := o.of(dim + 1 + uint32(j))
			row := w[off : off+hidden]
			for u, a := range h {
				gw[u] += dj * a
				dh[u] += dj * float64(row[u])
			}
		}
		for u, a := range h {
			if a <= 0 { // the ReLU passed nothing back where it was off
				dh[u] = 0
			}
		}
		g.push(idx, val, uint32(g.examples+r))
	}
	return loss
}

// collectMLP appends W2's rows and b2's row (the dense part) to out, after
// collectN appended W1's and b1's, and resets their sums.
func (g *Grad) collectMLP(out *model.Sparse) {
	s, hidden := g.mlp, g.width
	for j := range s.gb2 {
		copy(g.sum, s.gw2[j*hidden:(j+1)*hidden])
		g.emit(out, g.dim+1+uint32(j))
	}
	clear(g.sum)
	copy(g.sum, s.gb2)
	g.emit(out, g.dim+uint32(len(s.gb2))+1)
	clear(s.gw2)
	clear(s.gb2)
}
