package sgd

import (
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// row is one example of a test data set.
type row struct {
	idx []uint32
	val []float32
	y   float32
}

// memSource is an in-memory data.Source over rows. If failAt >= 0, the call
// to Next that would return row failAt returns the rows before it and err.
type memSource struct {
	rows   []row
	pos    int
	stats  data.Stats
	failAt int
	err    error
	closed bool
	onNext func() // called at the start of every Next
}

var _ data.Source = (*memSource)(nil)

func newSource(rows []row) *memSource { return &memSource{rows: rows, failAt: -1} }

func (s *memSource) Next(b *data.Batch, max int) (int, error) {
	if s.onNext != nil {
		s.onNext()
	}
	b.Reset()
	n := 0
	for n < max && s.pos < len(s.rows) {
		if s.pos == s.failAt {
			return n, s.err
		}
		r := s.rows[s.pos]
		for i, k := range r.idx {
			b.Add(k, r.val[i])
		}
		b.EndRow(r.y)
		s.pos++
		n++
		s.stats.Rows++
		s.stats.NNZ += int64(len(r.idx))
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *memSource) Stats() data.Stats { return s.stats }

func (s *memSource) Close() error {
	if s.closed {
		return errors.New("memSource closed twice")
	}
	s.closed = true
	return nil
}

// batchOf returns rows as one batch.
func batchOf(rows []row) *data.Batch {
	var b data.Batch
	b.Reset()
	for _, r := range rows {
		for i, k := range r.idx {
			b.Add(k, r.val[i])
		}
		b.EndRow(r.y)
	}
	return &b
}

// randomRows returns n rows of 1..maxNNZ random features < dim (duplicates
// within a row allowed) with values in [-2, 2) and labels < classes.
func randomRows(rng *rand.Rand, n int, dim uint32, maxNNZ, classes int) []row {
	rows := make([]row, n)
	for i := range rows {
		nnz := 1 + rng.IntN(maxNNZ)
		r := row{y: float32(rng.IntN(classes))}
		for range nnz {
			r.idx = append(r.idx, uint32(rng.IntN(int(dim))))
			r.val = append(r.val, float32(rng.Float64()*4-2))
		}
		rows[i] = r
	}
	return rows
}

func newModel(t testing.TB, kind model.Kind, dim uint64, classes, shards int, opt model.OptConfig) *model.Model {
	t.Helper()
	m, err := model.New(kind, dim, classes, shards, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomize sets every real row of m to N(0, scale²) weights.
func randomize(m *model.Model, rng *rand.Rand, scale float64) {
	for k := uint32(0); k <= m.Bias(); k++ {
		for c := range m.Row(k) {
			m.Row(k)[c] = float32(rng.NormFloat64() * scale)
		}
	}
}

// weights64 copies m's rows into float64 [row][class] for the references.
func weights64(m *model.Model) [][]float64 {
	w := make([][]float64, m.Bias()+1)
	for k := range w {
		for _, v := range m.Row(uint32(k)) {
			w[k] = append(w[k], float64(v))
		}
	}
	return w
}

// refLoss is the float64 reference: the summed log-loss of rows under
// weights w (bias row len(w)-1), computed the textbook way.
func refLoss(kind model.Kind, w [][]float64, rows []row) float64 {
	bias := len(w) - 1
	width := len(w[0])
	var total float64
	for _, r := range rows {
		z := make([]float64, width)
		for c := range z {
			z[c] = w[bias][c]
			for i, k := range r.idx {
				z[c] += w[k][c] * float64(r.val[i])
			}
		}
		if kind == model.Logreg {
			p := 1 / (1 + math.Exp(-z[0]))
			if r.y == 1 {
				total -= math.Log(p)
			} else {
				total -= math.Log(1 - p)
			}
			continue
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(v)
		}
		total -= math.Log(math.Exp(z[int(r.y)]) / sum)
	}
	return total
}

// mustPanic fails t unless f panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if msg, _ := r.(string); r == nil || !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one mentioning %q", r, want)
		}
	}()
	f()
}
