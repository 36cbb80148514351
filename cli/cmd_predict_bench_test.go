package cli

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// BenchmarkPredict compares, per core, predicting a libsvm file (read,
// score, format one line per row) with only reading it the way train does.
// Issue 12 asks predict to be at least as fast per core as train reads:
// compare the rows/s of predict-logreg with train-logreg (train's pass over
// the same rows: reading, gradients, AdaGrad) and with read (parsing
// alone). Logreg on 2^24 hashed features (39 a row, the generator's
// default) and softmax over 10 classes on the same rows. Scoring a row
// costs its 39 random reads of a 64 MiB model, as training does.
//
//	go test -run '^$' -bench Predict -benchtime 3x .
func BenchmarkPredict(b *testing.B) {
	dir := b.TempDir()
	c := data.DefaultGenConfig()
	c.Rows, c.TestRows = 100_000, 0
	meta, err := data.Generate(dir, c, nil)
	if err != nil {
		b.Fatal(err)
	}
	file := meta.Files[0]
	st, _ := os.Stat(file)
	opt := data.Options{Dim: meta.Features, NoLabels: true}
	b.Run("read", func(b *testing.B) {
		b.SetBytes(st.Size())
		b.ReportAllocs()
		var batch data.Batch
		var rows int64
		for b.Loop() {
			src, err := data.Open([]string{file}, opt)
			if err != nil {
				b.Fatal(err)
			}
			for {
				_, err := src.Next(&batch, 1000)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			rows += src.Stats().Rows
			src.Close()
		}
		b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	})
	// Train's own pass over the same rows: one epoch of logreg + AdaGrad,
	// batch 100 (the defaults), with its rows read the same way.
	b.Run("train-logreg", func(b *testing.B) {
		b.SetBytes(st.Size())
		b.ReportAllocs()
		m, err := model.New(model.Logreg, meta.Features, 0, 256, model.DefaultOptConfig(model.AdaGrad))
		if err != nil {
			b.Fatal(err)
		}
		cfg := sgd.DefaultConfig()
		var rows int64
		for b.Loop() {
			sum, err := sgd.Train(context.Background(), m, cfg, func(int) (data.Source, error) {
				return data.Open([]string{file}, data.Options{Dim: meta.Features})
			}, nil, sgd.Hooks{})
			if err != nil {
				b.Fatal(err)
			}
			rows += sum.Examples
		}
		b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	})
	for _, tc := range []struct {
		name    string
		kind    model.Kind
		classes int
	}{{"logreg", model.Logreg, 0}, {"softmax10", model.Softmax, 10}} {
		m, err := model.New(tc.kind, meta.Features, tc.classes, 256, model.DefaultOptConfig(model.AdaGrad))
		if err != nil {
			b.Fatal(err)
		}
		for i := range m.W {
			m.W[i] = float32(i%13-6) / 10
		}
		b.Run("predict-"+tc.name, func(b *testing.B) {
			b.SetBytes(st.Size())
			b.ReportAllocs()
			var rows int64
			for b.Loop() {
				src, err := data.Open([]string{file}, opt)
				if err != nil {
					b.Fatal(err)
				}
				n, err := writePredictions(m, src, 1000, false, false, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				rows += n
				src.Close()
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
