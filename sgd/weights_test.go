package sgd

import (
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// An importance weight counts a row that many times: a row of weight 2
// gives the loss and gradient of the row given twice, a row of weight 0
// those of the row left out, and weight 0.5 half of weight 1's, for every
// kind, in Grad.Add and in Compute (which TestComputeMatchesGrad holds
// bit-identical to it); evaluation's log-loss and error are VW's weighted
// averages, Σ w·loss / Σ w, which are those of the set with the row given
// twice.
func TestImportanceWeights(t *testing.T) {
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		t.Run(kind.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(kind)))
			c := randomCase(t, rng, kind)
			m, rows := c.m, c.rows
			if len(rows) < 3 {
				rows = append(rows, rows...)
				rows = append(rows, rows...)
			}
			grad := func(b *data.Batch) (float64, []float32) {
				g := NewGrad(m)
				loss := g.Add(m, b)
				var sp model.Sparse
				g.Collect(&sp)
				dense := make([]float32, m.Layout.Len())
				for i, k := range sp.Idx {
					copy(dense[m.Layout.Offset(k):][:m.Width()], sp.Val[i*m.Width():(i+1)*m.Width()])
				}
				return loss, dense
			}
			weighted := func(ws ...float32) *data.Batch {
				b := batchOf(rows)
				b.Weights = make([]float32, b.Rows())
				for i := range b.Weights {
					b.Weights[i] = 1
				}
				copy(b.Weights, ws)
				return b
			}
			near := func(what string, got, want float64) {
				t.Helper()
				if math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
					t.Errorf("%s: %v, want %v", what, got, want)
				}
			}
			sameGrad := func(what string, gl float64, g []float32, wl float64, w []float32, scale float64) {
				t.Helper()
				near(what+" loss", gl, wl*scale)
				for i := range g {
					if math.Abs(float64(g[i])-scale*float64(w[i])) > 1e-5*(1+math.Abs(float64(w[i]))) {
						t.Fatalf("%s: gradient[%d] %v, want %v", what, i, g[i], scale*float64(w[i]))
					}
				}
			}
			l2, g2 := grad(weighted(2))
			ld, gd := grad(batchOf(append([]row{rows[0]}, rows...)))
			sameGrad("weight 2 vs the row twice", l2, g2, ld, gd, 1)
			l0, g0 := grad(weighted(0))
			lx, gx := grad(batchOf(rows[1:]))
			sameGrad("weight 0 vs the row left out", l0, g0, lx, gx, 1)
			lh, gh := grad(weighted(0.5, 0.5, 0.5))
			b3 := batchOf(rows[:3])
			l1, g1 := grad(b3)
			lr, gr := grad(batchOf(rows[3:]))
			for i := range gr {
				g1[i] = 0.5*g1[i] + gr[i]
			}
			sameGrad("weight 0.5 on three rows", lh, gh, 0.5*l1+lr, g1, 1)

			// Evaluation: weighted averages equal the duplicated set's.
			ev := func(b *data.Batch) Metrics {
				met, err := Evaluate(m, &weightedSource{b: b}, 4)
				if err != nil {
					t.Fatal(err)
				}
				return met
			}
			mw, md := ev(weighted(2)), ev(batchOf(append([]row{rows[0]}, rows...)))
			near("weighted log-loss", mw.LogLoss, md.LogLoss)
			near("weighted error", mw.Error, md.Error)
			if mw.Examples != int64(len(rows)) {
				t.Errorf("Examples %d, want the %d rows", mw.Examples, len(rows))
			}
			zero := weighted()
			for i := range zero.Weights {
				zero.Weights[i] = 0
			}
			if _, err := Evaluate(m, &weightedSource{b: zero}, 4); err == nil {
				t.Error("a test set of weight 0 evaluated without an error")
			}
		})
	}
}

// weightedSource reads a batch in pieces, keeping its weights.
type weightedSource struct {
	b   *data.Batch
	pos int
}

func (s *weightedSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	n := 0
	for ; n < max && s.pos < s.b.Rows(); n++ {
		idx, val := s.b.Row(s.pos)
		for i, k := range idx {
			b.Add(k, val[i])
		}
		b.EndRowWeighted(s.b.Labels[s.pos], s.b.Weight(s.pos))
		s.pos++
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *weightedSource) Stats() data.Stats { return data.Stats{} }
func (s *weightedSource) Close() error      { return nil }
