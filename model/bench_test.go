package model

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkApply: one step on 3,900 rows spread evenly over a 2^24-row
// logreg model: every row a cache miss, the worst case of the Apply part of
// sgd's BenchmarkStepLogreg.
func BenchmarkApply(b *testing.B) {
	for _, k := range []OptKind{SGD, AdaGrad, FTRL} {
		b.Run(k.String(), func(b *testing.B) {
			m := mustNew(b, Logreg, 1<<24, 0, 256, DefaultOptConfig(k))
			m.OwnAll()
			rng := rand.New(rand.NewPCG(1, 2))
			grads := make([]*Sparse, 16)
			for i := range grads {
				g := &Sparse{}
				off := uint32(rng.IntN(4301))
				for r := uint32(0); r < 3900; r++ { // sorted, distinct, spread over the rows
					g.Append(r*4301+off, []float32{float32(rng.NormFloat64())})
				}
				grads[i] = g
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Apply(grads[i%len(grads)], 100, int64(i))
			}
			b.ReportMetric(float64(b.N)*3900/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkSaveRead: a 2^24-row logreg model with FTRL state (192 MiB)
// written to io.Discard and read back from memory.
func BenchmarkSaveRead(b *testing.B) {
	m := mustNew(b, Logreg, 1<<24, 0, 256, DefaultOptConfig(FTRL))
	m.OwnAll()
	var buf bytes.Buffer
	n, err := m.Save(&buf, SaveOptions{State: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("save", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			if _, err := m.Save(io.Discard, SaveOptions{State: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			if _, err := Read(bytes.NewReader(buf.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWideRows: what a sync owner does with a window's rows each
// round, on a 2^24-row logreg model with AdaGrad (every page written
// before): read ("append": the wide rows it answers, AppendWideRows)
// and add ("add": AddDeltas of the summed changes) 13,000 rows spread at
// random over the model, most of them cache misses.
// go test ./model -run '^$' -bench WideRows
func BenchmarkWideRows(b *testing.B) {
	m := mustNew(b, Logreg, 1<<24, 0, 256, DefaultOptConfig(AdaGrad))
	m.OwnAll()
	for i := range m.W {
		m.W[i] = 1e-3
	}
	for _, st := range m.State {
		for i := range st {
			st[i] = 1e-2
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	sets := make([]*Sparse, 16)
	for i := range sets {
		keys := make([]uint32, 13000)
		for j := range keys {
			keys[j] = rng.Uint32N(1 << 24)
		}
		slices.Sort(keys)
		s := &Sparse{}
		for _, k := range slices.Compact(keys) {
			s.Append(k, []float32{1e-6, 1e-6})
		}
		sets[i] = s
	}
	b.Run("append", func(b *testing.B) {
		var dst []float32
		rows := 0
		for i := 0; b.Loop(); i++ {
			s := sets[i%len(sets)]
			dst = m.AppendWideRows(dst[:0], s.Idx)
			rows += s.Len()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
	})
	b.Run("add", func(b *testing.B) {
		rows := 0
		for i := 0; b.Loop(); i++ {
			s := sets[i%len(sets)]
			m.AddDeltas(s)
			rows += s.Len()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
	})
}
