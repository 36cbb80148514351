package sgd

import (
	"context"
	"fmt"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// benchCase is a model and batches like BenchmarkStep*'s.
type benchCase struct {
	name    string
	model   func(testing.TB) *model.Model
	batches []*data.Batch
}

// benchCases are BenchmarkStep*'s workloads (batch 100: Criteo-like 39
// one-hot features over 2^24 dims for logreg; MNIST-like 784 dims, ~150
// nonzeros, 10 classes for softmax and an MLP of 128 hidden units), plus
// logreg at batch 1000, the batch of the scaling figures.
func benchCases() []benchCase {
	const dim = 1 << 24
	mnist := mnistBatches(32, 100, 150)
	return []benchCase{
		{"logreg", func(b testing.TB) *model.Model {
			return newModel(b, model.Logreg, dim, 0, 256, model.DefaultOptConfig(model.AdaGrad))
		}, criteoBatches(64, 100, 39, dim)},
		{"logreg-b1000", func(b testing.TB) *model.Model {
			return newModel(b, model.Logreg, dim, 0, 256, model.DefaultOptConfig(model.AdaGrad))
		}, criteoBatches(16, 1000, 39, dim)},
		{"softmax", func(b testing.TB) *model.Model {
			return newModel(b, model.Softmax, 784, 10, 256, model.DefaultOptConfig(model.AdaGrad))
		}, mnist},
		{"mlp", func(b testing.TB) *model.Model {
			m, err := model.NewMLP(784, 10, 128, 256, model.DefaultOptConfig(model.AdaGrad), 1)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}, mnist},
	}
}

// reportNNZ reports nonzeros per second and nanoseconds per nonzero.
func reportNNZ(b *testing.B, nnz int) {
	b.ReportMetric(float64(nnz)/b.Elapsed().Seconds(), "nnz/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(nnz), "ns/nnz")
}

// BenchmarkPrepare: Prepare of one batch per iteration (the work that
// moves off the step, onto the read-ahead goroutine).
func BenchmarkPrepare(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			pr := NewPreparer(bc.model(b))
			var p Prepared
			for _, bt := range bc.batches {
				pr.Prepare(bt, &p)
			}
			nnz := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bt := bc.batches[i%len(bc.batches)]
				pr.Prepare(bt, &p)
				nnz += bt.NNZ()
			}
			reportNNZ(b, nnz)
		})
	}
}

// BenchmarkPrepareReuse: Prepare of batch-1000 logreg batches into the same
// Prepared every time (what a lone train does, and a peer's last-in-first-out
// pool gives it) against into eight in turn (a peer's first-in-first-out
// pool before: each Prepared was written again eight batches later, its
// 1.4 MB long gone from the caches).
func BenchmarkPrepareReuse(b *testing.B) {
	bc := benchCases()[1]
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("prepared=%d", n), func(b *testing.B) {
			pr := NewPreparer(bc.model(b))
			ps := make([]Prepared, n)
			for i := range ps {
				for _, bt := range bc.batches {
					pr.Prepare(bt, &ps[i])
				}
			}
			nnz := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bt := bc.batches[i%len(bc.batches)]
				pr.Prepare(bt, &ps[i%n])
				nnz += bt.NNZ()
			}
			reportNNZ(b, nnz)
		})
	}
}

// BenchmarkCompute: Gather and Compute of one prepared batch per
// iteration, with 1 and 2 threads.
func BenchmarkCompute(b *testing.B) {
	for _, bc := range benchCases() {
		m := bc.model(b)
		pr := NewPreparer(m)
		preps := make([]Prepared, len(bc.batches))
		for i, bt := range bc.batches {
			pr.Prepare(bt, &preps[i])
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", bc.name, threads), func(b *testing.B) {
				w := NewWorker(m, threads)
				defer w.Close()
				var ws, grad []float32
				run := func(p *Prepared) {
					n := len(p.Keys) * m.Width()
					ws, grad = growTo(ws, n), growTo(grad, n)
					w.Gather(m, p.Keys, ws)
					w.Compute(p, ws, grad)
				}
				for i := range preps {
					run(&preps[i])
				}
				nnz := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p := &preps[i%len(preps)]
					run(p)
					nnz += p.NNZ()
				}
				reportNNZ(b, nnz)
			})
		}
	}
}

// BenchmarkStepPrepared is BenchmarkStep* with the new path, one goroutine
// doing it all (Prepare, Gather, Compute, Apply): the cost of a step when
// nothing runs ahead.
func BenchmarkStepPrepared(b *testing.B) {
	for _, bc := range benchCases() {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", bc.name, threads), func(b *testing.B) {
				m := bc.model(b)
				m.OwnAll()
				pr := NewPreparer(m)
				w := NewWorker(m, threads)
				defer w.Close()
				var p Prepared
				var ws, grad []float32
				step := int64(0)
				run := func(bt *data.Batch) {
					pr.Prepare(bt, &p)
					n := len(p.Keys) * m.Width()
					ws, grad = growTo(ws, n), growTo(grad, n)
					w.Gather(m, p.Keys, ws)
					w.Compute(&p, ws, grad)
					m.Apply(&model.Sparse{Idx: p.Keys, Val: grad}, bt.Rows(), step)
					step++
				}
				for _, bt := range bc.batches {
					run(bt)
				}
				nnz := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bt := bc.batches[i%len(bc.batches)]
					run(bt)
					nnz += bt.NNZ()
				}
				reportNNZ(b, nnz)
			})
		}
	}
}

// BenchmarkTrain: the whole Train loop (read-ahead, Prepare on its own
// goroutine, Gather, Compute, Apply) over in-memory batches, one epoch of
// every batch per iteration, with 1 and 2 threads. Against
// BenchmarkStep*, it shows what the overlap and the split gain when the
// reading costs nothing.
func BenchmarkTrain(b *testing.B) {
	for _, bc := range benchCases() {
		rows, nnz := 0, 0
		for _, bt := range bc.batches {
			rows += bt.Rows()
			nnz += bt.NNZ()
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", bc.name, threads), func(b *testing.B) {
				m := bc.model(b)
				cfg := DefaultConfig()
				cfg.Batch = bc.batches[0].Rows()
				cfg.Threads = threads
				cfg.Epochs = 2
				open := func(int) (data.Source, error) { return &batchSource{batches: bc.batches}, nil }
				if _, err := Train(context.Background(), m, cfg, open, nil, Hooks{}); err != nil {
					b.Fatal(err)
				}
				cfg.Epochs = 1
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := Train(context.Background(), m, cfg, open, nil, Hooks{}); err != nil {
						b.Fatal(err)
					}
				}
				reportNNZ(b, b.N*nnz)
			})
		}
	}
}
