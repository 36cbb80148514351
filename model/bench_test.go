package model

import (
	"bytes"
	"io"
	"math/rand/v2"
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
