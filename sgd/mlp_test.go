package sgd

import (
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

func newMLP(t testing.TB, dim uint64, classes, hidden, shards int, opt model.OptConfig) *model.Model {
	t.Helper()
	m, err := model.NewMLP(dim, classes, hidden, shards, opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mlpRows copies an MLP's rows into float64 [row][unit], every row of the
// layout (W1, b1, W2, b2).
func mlpRows(m *model.Model) [][]float64 {
	w := make([][]float64, m.Layout.Features)
	for k := range w {
		for _, v := range m.Row(uint32(k)) {
			w[k] = append(w[k], float64(v))
		}
	}
	return w
}

// refMLPLoss is the summed log-loss of rows under the weights w (as
// mlpRows lays them out), written out plainly: the reference the gradient
// is checked against.
func refMLPLoss(w [][]float64, dim, classes int, rows []row) float64 {
	hidden := len(w[0])
	var loss float64
	for _, r := range rows {
		h := make([]float64, hidden)
		copy(h, w[dim])
		for i, k := range r.idx {
			for u := range h {
				h[u] += w[k][u] * float64(r.val[i])
			}
		}
		for u := range h {
			h[u] = math.Max(h[u], 0)
		}
		z := make([]float64, classes)
		for j := range z {
			z[j] = w[dim+classes+1][j]
			for u := range h {
				z[j] += w[dim+1+j][u] * h[u]
			}
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(v)
		}
		loss += math.Log(sum) - z[int(r.y)]
	}
	return loss
}

// The MLP's gradient (W1 rows by the sparse path, b1 as the bias row, W2
// and b2 dense) matches central differences of a plainly written loss, for
// every weight of every row; untouched W1 rows are absent.
func TestMLPGradNumerical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const dim, classes, hidden = 9, 3, 5
	m := newMLP(t, dim, classes, hidden, 4, model.DefaultOptConfig(model.SGD))
	for k := uint32(0); k < uint32(m.Layout.Features); k++ {
		row := m.Row(k)
		for c := range row {
			if k == m.Bias2() && c >= classes {
				continue // b2's row holds Classes values; the rest stays 0
			}
			row[c] = float32(rng.NormFloat64() * 0.7)
		}
	}
	rows := randomRows(rng, 6, dim-2, 4, classes)
	g := NewGrad(m)
	loss := g.Add(m, batchOf(rows))
	var sp model.Sparse
	g.Collect(&sp)
	w := mlpRows(m)
	if want := refMLPLoss(w, dim, classes, rows); math.Abs(loss-want) > 1e-9*want {
		t.Errorf("loss %.12g, reference %.12g", loss, want)
	}
	if !sp.Sorted(hidden) {
		t.Fatalf("gradient rows not sorted: %v", sp.Idx)
	}
	got := map[uint32][]float32{}
	for i, k := range sp.Idx {
		got[k] = sp.Val[i*hidden : (i+1)*hidden]
	}
	const h = 1e-6
	checked := 0
	for k := range w {
		for c := range w[k] {
			orig := w[k][c]
			w[k][c] = orig + h
			up := refMLPLoss(w, dim, classes, rows)
			w[k][c] = orig - h
			down := refMLPLoss(w, dim, classes, rows)
			w[k][c] = orig
			num := (up - down) / (2 * h)
			row, touched := got[uint32(k)]
			if !touched {
				if num != 0 {
					t.Errorf("row %d missing from the gradient, numerical %g", k, num)
				}
				continue
			}
			checked++
			if d := math.Abs(float64(row[c]) - num); d > 1e-5*math.Max(1, math.Abs(num)) {
				t.Errorf("row %d unit %d: gradient %.7g, numerical %.7g", k, c, row[c], num)
			}
		}
	}
	for _, k := range []uint32{dim - 1, dim - 2} {
		if _, ok := got[k]; ok {
			t.Errorf("untouched W1 row %d in the gradient", k)
		}
	}
	if dense := (1 + classes + 1) * hidden; checked <= dense {
		t.Errorf("checked %d weights, want the dense rows' %d and some W1 rows'", checked, dense)
	}
}

// A problem no linear model can solve: the class is the XOR of two binary
// features. An MLP learns it; softmax stays near chance.
func TestMLPLearnsXOR(t *testing.T) {
	var rows []row
	for i := range 400 {
		a, b := i&1, (i>>1)&1
		r := row{y: float32(a ^ b)}
		// one-hot encoding of each input's value: features 0/1 for a, 2/3 for b
		r.idx = []uint32{uint32(a), uint32(2 + b)}
		r.val = []float32{1, 1}
		rows = append(rows, r)
	}
	train := func(m *model.Model) (Metrics, *model.Model) {
		m.OwnAll()
		g := NewGrad(m)
		var sp model.Sparse
		for step := range int64(300) {
			g.Add(m, batchOf(rows[:40]))
			g.Collect(&sp)
			m.Apply(&sp, 40, step)
		}
		met, err := Evaluate(m, &memSource{rows: rows, failAt: -1}, 100)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return met, m
	}
	opt := model.DefaultOptConfig(model.AdaGrad)
	mlp, mm := train(newMLP(t, 4, 2, 8, 4, opt))
	lin, _ := train(newModel(t, model.Softmax, 4, 2, 4, opt))
	t.Logf("XOR accuracy: mlp %.3f, softmax %.3f", mlp.Accuracy, lin.Accuracy)
	if mlp.Accuracy < 0.99 {
		t.Errorf("mlp accuracy %.3f on XOR, want 1", mlp.Accuracy)
	}
	if lin.Accuracy > 0.8 {
		t.Errorf("softmax accuracy %.3f on XOR: the test does not need a hidden layer", lin.Accuracy)
	}
	// Predict gives the same decisions: the true class is the likelier.
	out := make([]float32, 2)
	for _, r := range rows[:4] {
		Predict(mm, r.idx, r.val, out)
		if y := int(r.y); out[y] <= out[1-y] || math.Abs(float64(out[0]+out[1])-1) > 1e-6 {
			t.Errorf("Predict %v on a row of class %d", out, y)
		}
	}
}
