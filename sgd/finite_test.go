package sgd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// overflowFile writes a libsvm file of 400 rows: 200 good ones (features
// 1-4), then 100 rows "1 6:3e38 7:3e38" (lines 201-300: finite values the
// parser accepts, whose batch gradient overflows float32), then 100 good
// ones.
func overflowFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := range 400 {
		if i >= 200 && i < 300 {
			b.WriteString("1 6:3e38 7:3e38\n")
			continue
		}
		fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", i%2, 1+i%4, 1+(i+1)%4)
	}
	p := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A batch whose finite values overflow its gradient never reaches the
// model: by default training stops with an error naming the batch's lines
// and the feature, and with SkipNonFinite the batch is skipped and
// counted (issue 30: one row "0 6:3e38" made a weight -7.49e34).
func TestTrainNonFiniteBatch(t *testing.T) {
	p := overflowFile(t)
	open := func(int) (data.Source, error) { return data.Open([]string{p}, data.Options{}) }
	newModel := func() *model.Model {
		m, err := model.New(model.Logreg, 8, 2, 4, model.DefaultOptConfig(model.SGD))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.Threads = 50, 2, 1

	m := newModel()
	sum, err := Train(context.Background(), m, cfg, open, nil, Hooks{})
	var ne *NonFiniteError
	if !errors.As(err, &ne) || !errors.Is(err, ErrNonFinite) {
		t.Fatalf("training on overflowing rows: %v, want a *NonFiniteError", err)
	}
	want := p + ":201-250 (epoch 1, rows 201-250): the batch's gradient is not finite (-Inf at feature 5 (0-based), whose values in these rows reach 3e+38): " +
		"a value in these rows overflows; fix the data (--max-value refuses such values as bad lines) or pass --nonfinite skip"
	if err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
	if sum.Examples != 200 || sum.Steps != 4 {
		t.Errorf("stopped after %d examples, %d steps; want the 200 rows before the bad batch, 4 steps", sum.Examples, sum.Steps)
	}
	for i, w := range m.W {
		if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			t.Fatalf("weight %d is %g: a non-finite gradient reached the model", i, w)
		}
	}

	cfg.NonFinite = SkipNonFinite
	m = newModel()
	var skipped []string
	sum, err = Train(context.Background(), m, cfg, open, nil, Hooks{Skipped: func(e *NonFiniteError) { skipped = append(skipped, e.Where()) }})
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped := []string{p + ":201-250 (epoch 1, rows 201-250)", p + ":251-300 (epoch 1, rows 251-300)",
		p + ":201-250 (epoch 2, rows 201-250)", p + ":251-300 (epoch 2, rows 251-300)"}
	if sum.SkippedNonFinite != 4 || fmt.Sprint(skipped) != fmt.Sprint(wantSkipped) {
		t.Errorf("skipped %d batches %q, want 4: %q", sum.SkippedNonFinite, skipped, wantSkipped)
	}
	if sum.Examples != 600 || sum.Steps != 12 || math.IsNaN(sum.TrainLoss) {
		t.Errorf("trained %d examples in %d steps, loss %g; want 600 in 12 (the 300 good rows twice), a finite loss", sum.Examples, sum.Steps, sum.TrainLoss)
	}
	for _, k := range []uint32{5, 6} {
		if w := m.Row(k)[0]; w != 0 {
			t.Errorf("feature %d has weight %g; only the skipped rows have it, so it must be untouched", k, w)
		}
	}
}

func TestCheckFinite(t *testing.T) {
	m, err := model.New(model.Softmax, 10, 3, 4, model.DefaultOptConfig(model.SGD))
	if err != nil {
		t.Fatal(err)
	}
	var b data.Batch
	b.Reset()
	b.Add(2, 4)
	b.Add(7, -1e30)
	b.EndRow(1)
	b.Add(7, 2e30)
	b.EndRow(0)
	var p Prepared
	NewPreparer(m).Prepare(&b, &p)
	grad := make([]float32, len(p.Keys)*3)
	if e := CheckFinite(&p, grad, 1.5); e != nil {
		t.Fatalf("a zero gradient and loss 1.5: %v", e)
	}
	if n := testing.AllocsPerRun(100, func() { CheckFinite(&p, grad, 1.5) }); n != 0 {
		t.Errorf("CheckFinite of a finite gradient allocates %v times", n)
	}
	grad[1*3+2] = float32(math.Inf(1)) // feature 7, class 2
	e := CheckFinite(&p, grad, 1.5)
	if e == nil || !e.InGradient || !e.Feature || e.Row != 7 || e.Column != 2 || e.MaxAbs != 2e30 || e.Examples != 2 {
		t.Fatalf("+Inf at feature 7: %+v", e)
	}
	grad[1*3+2] = 0
	grad[2*3] = float32(math.NaN()) // the bias
	if e := CheckFinite(&p, grad, 1.5); e == nil || e.Feature || e.Row != 10 ||
		!strings.Contains(e.Error(), "NaN at model row 10") || !strings.Contains(e.Error(), "or the model's weights") {
		t.Fatalf("NaN at the bias: %v", e)
	}
	grad[2*3] = 0
	if e := CheckFinite(&p, grad, math.NaN()); e == nil || e.InGradient || !strings.Contains(e.Error(), "the batch's loss is not finite (NaN) though its gradient is") {
		t.Fatalf("a NaN loss: %v", e)
	}
	if _, err := ParseNonFinite("drop"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseNonFinite(drop): %v", err)
	}
	if v, err := ParseNonFinite("skip"); err != nil || v != SkipNonFinite || v.String() != "skip" {
		t.Errorf("ParseNonFinite(skip): %v %v", v, err)
	}
}
