package sgd

import (
	"io"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// criteoBatches returns n batches of rows one-hot in fields fields over dim
// (a power of two) hashed features, each field's value drawn from a Zipf
// law and hashed per field, as the hashing trick does with Criteo's columns.
func criteoBatches(n, rows, fields int, dim uint64) []*data.Batch {
	rng := rand.New(rand.NewPCG(42, 43))
	zipf := rand.NewZipf(rng, 1.1, 1, dim-1)
	out := make([]*data.Batch, n)
	for i := range out {
		b := &data.Batch{}
		b.Reset()
		for range rows {
			for f := range fields {
				v := zipf.Uint64()
				h := (v+1)*0x9E3779B97F4A7C15 ^ uint64(f+1)*0xBF58476D1CE4E5B9
				h ^= h >> 31
				b.Add(uint32(h&(dim-1)), 1)
			}
			y := float32(0)
			if rng.IntN(4) == 0 {
				y = 1
			}
			b.EndRow(y)
		}
		out[i] = b
	}
	return out
}

// mnistBatches returns n batches of rows with nnz distinct pixels of 784
// each, values in (0, 1], classes 0..9.
func mnistBatches(n, rows, nnz int) []*data.Batch {
	rng := rand.New(rand.NewPCG(44, 45))
	out := make([]*data.Batch, n)
	for i := range out {
		b := &data.Batch{}
		b.Reset()
		for range rows {
			perm := rng.Perm(784)[:nnz]
			// ascending, as readers produce them
			seen := [784]bool{}
			for _, p := range perm {
				seen[p] = true
			}
			for p := range seen {
				if seen[p] {
					b.Add(uint32(p), float32(1+rng.IntN(255))/255)
				}
			}
			b.EndRow(float32(rng.IntN(10)))
		}
		out[i] = b
	}
	return out
}

// benchStep measures one training step (Add, Collect, Apply) per iteration.
func benchStep(b *testing.B, m *model.Model, batches []*data.Batch) {
	m.OwnAll()
	g := NewGrad(m)
	var sp model.Sparse
	step := int64(0)
	run := func(bt *data.Batch) {
		g.Add(m, bt)
		g.Collect(&sp)
		m.Apply(&sp, bt.Rows(), step)
		step++
	}
	for _, bt := range batches { // warm up: grow buffers, touch pages
		run(bt)
	}
	nnz := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := batches[i%len(batches)]
		run(bt)
		nnz += bt.NNZ()
	}
	b.ReportMetric(float64(nnz)/b.Elapsed().Seconds(), "nnz/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nnz), "ns/nnz")
}

// BenchmarkStepLogreg: batch 100 of 39 one-hot features over 2^24 hashed
// dims (Criteo-like), one step per iteration.
func BenchmarkStepLogreg(b *testing.B) {
	const dim = 1 << 24
	batches := criteoBatches(64, 100, 39, dim)
	for _, k := range []model.OptKind{model.SGD, model.AdaGrad, model.FTRL} {
		b.Run(k.String(), func(b *testing.B) {
			m := newModel(b, model.Logreg, dim, 0, 256, model.DefaultOptConfig(k))
			benchStep(b, m, batches)
		})
	}
}

// BenchmarkStepSoftmax: batch 100 of MNIST-like rows (784 dims, ~150 nnz,
// 10 classes).
func BenchmarkStepSoftmax(b *testing.B) {
	batches := mnistBatches(32, 100, 150)
	for _, k := range []model.OptKind{model.SGD, model.AdaGrad} {
		b.Run(k.String(), func(b *testing.B) {
			m := newModel(b, model.Softmax, 784, 10, 256, model.DefaultOptConfig(k))
			benchStep(b, m, batches)
		})
	}
}

// BenchmarkStepMLP: batch 100 of MNIST-like rows (784 dims, ~150 nnz,
// 10 classes) through 128 hidden units: about 2·nnz·hidden + 3·classes·hidden
// multiply-adds an example.
func BenchmarkStepMLP(b *testing.B) {
	batches := mnistBatches(32, 100, 150)
	m, err := model.NewMLP(784, 10, 128, 256, model.DefaultOptConfig(model.AdaGrad), 1)
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, m, batches)
}

// batchSource serves pre-built batches (max must be >= their rows).
type batchSource struct {
	batches []*data.Batch
	i       int
}

func (s *batchSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	if s.i == len(s.batches) {
		return 0, io.EOF
	}
	b.AppendRows(s.batches[s.i])
	s.i++
	return b.Rows(), nil
}
func (s *batchSource) Stats() data.Stats { return data.Stats{} }
func (s *batchSource) Close() error      { return nil }

// BenchmarkEvaluate: one pass over 10,000 test rows per iteration.
func BenchmarkEvaluate(b *testing.B) {
	for _, tc := range []struct {
		name    string
		m       func() *model.Model
		batches []*data.Batch
	}{
		{"logreg", func() *model.Model {
			return newModel(b, model.Logreg, 1<<24, 0, 256, model.DefaultOptConfig(model.SGD))
		}, criteoBatches(100, 100, 39, 1<<24)},
		{"softmax", func() *model.Model {
			return newModel(b, model.Softmax, 784, 10, 256, model.DefaultOptConfig(model.SGD))
		}, mnistBatches(100, 100, 150)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := tc.m()
			randomize(m, rand.New(rand.NewPCG(1, 1)), 0.01)
			var e Evaluator
			rows, nnz := 0, 0
			for _, bt := range tc.batches {
				rows += bt.Rows()
				nnz += bt.NNZ()
			}
			src := &batchSource{batches: tc.batches}
			if _, err := e.Evaluate(m, src, 100); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				src.i = 0
				if _, err := e.Evaluate(m, src, 100); err != nil {
					b.Fatal(err)
				}
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*rows)/secs, "rows/s")
			b.ReportMetric(float64(b.N*nnz)/secs, "nnz/s")
		})
	}
}

// BenchmarkBaselinePerExample is the floor the step benchmarks are read
// against: the textbook per-example SGD loop (as scikit-learn's
// SGDClassifier runs it) over the same Criteo-like batches and a flat
// 2^24-float weight vector: one dot product and one in-place update per
// example, no batching, no sorted gradient, no optimizer state. On this
// workload its cost is the random access to the weights, which every
// method pays at least once per nonzero.
func BenchmarkBaselinePerExample(b *testing.B) {
	const dim = 1 << 24
	batches := criteoBatches(64, 100, 39, dim)
	w := make([]float32, dim+1)
	pass := func(bt *data.Batch) {
		for r, y := range bt.Labels {
			idx, val := bt.Row(r)
			z := float64(w[dim])
			for i, k := range idx {
				z += float64(w[k]) * float64(val[i])
			}
			p, _ := sigmoidLoss(z, 0)
			d := float32(0.1 * (p - float64(y)))
			for i, k := range idx {
				w[k] -= d * val[i]
			}
			w[dim] -= d
		}
	}
	for _, bt := range batches {
		pass(bt)
	}
	nnz := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := batches[i%len(batches)]
		pass(bt)
		nnz += bt.NNZ()
	}
	b.ReportMetric(float64(nnz)/b.Elapsed().Seconds(), "nnz/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nnz), "ns/nnz")
}
