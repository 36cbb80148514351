package sgd

import (
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// Scorer computes a model's outputs for single rows with exactly the
// arithmetic Evaluate uses, so predictions written by 'predict' give the
// metrics 'eval' reports. It keeps its buffers; Row allocates nothing. A
// Scorer is not safe for concurrent use.
type Scorer struct {
	m    *model.Model
	o    offsets
	z, h []float64
	p    []float64
}

// NewScorer returns a scorer for m.
func NewScorer(m *model.Model) *Scorer {
	return &Scorer{m: m, o: offsetsOf(&m.Layout), z: make([]float64, outputs(m)), h: make([]float64, m.Hidden), p: make([]float64, outputs(m))}
}

// Outputs is the number of values Row returns: 1 for Logreg, Classes
// otherwise.
func (s *Scorer) Outputs() int { return len(s.z) }

// Row returns the model's outputs for one row (indices ascending and below
// Dim): with raw false, probabilities (P(y=1) for Logreg, P(class c) for
// Softmax and MLP), with raw true the margins (the logit w·x+b for Logreg,
// the logits for Softmax and MLP). The slice is reused by the next call.
func (s *Scorer) Row(idx []uint32, val []float32, raw bool) []float64 {
	scores(s.m, s.o, idx, val, s.z, s.h)
	if raw {
		return s.z
	}
	copy(s.p, s.z)
	probabilities(s.m.Kind, s.p)
	return s.p
}

// Class returns the class the last Row predicts, as Evaluate counts it
// right or wrong: for Logreg 1 when the margin is > 0 (P(y=1) > 0.5),
// else 0; otherwise the first class of the highest probability. Call it
// after Row, raw or not.
func (s *Scorer) Class() int {
	if s.m.Kind == model.Logreg {
		if s.z[0] > 0 {
			return 1
		}
		return 0
	}
	copy(s.p, s.z)
	softmax(s.p)
	best := 0
	for c, p := range s.p {
		if p > s.p[best] {
			best = c
		}
	}
	return best
}

// probabilities turns logits z (len outputs) into probabilities in place,
// as Evaluate does: sigmoid for Logreg, softmax otherwise.
func probabilities(kind model.Kind, z []float64) {
	if kind == model.Logreg {
		z[0], _ = sigmoidLoss(z[0], 0)
		return
	}
	softmax(z)
}

// Batch calls fn with the outputs of every row of b, in order (see Row).
func (s *Scorer) Batch(b *data.Batch, raw bool, fn func(out []float64)) {
	for r := range b.Rows() {
		idx, val := b.Row(r)
		fn(s.Row(idx, val, raw))
	}
}
