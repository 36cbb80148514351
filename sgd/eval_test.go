package sgd

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// oneHot is a row with the single feature k = 1.
func oneHot(k uint32, y float32) row { return row{[]uint32{k}, []float32{1}, y} }

// scoreModel returns a logreg model whose feature k has weight logits[k] and
// bias 0, so the example oneHot(k, y) scores logits[k].
func scoreModel(t *testing.T, logits ...float32) *model.Model {
	m := newModel(t, model.Logreg, uint64(len(logits)), 0, 1, model.DefaultOptConfig(model.SGD))
	for k, z := range logits {
		m.Row(uint32(k))[0] = z
	}
	return m
}

func TestEvaluateBinaryByHand(t *testing.T) {
	// Logits 2, 1, 1, -1, -1 with labels 1, 0, 1, 0, 1.
	m := scoreModel(t, 2, 1, -1)
	src := newSource([]row{oneHot(0, 1), oneHot(1, 0), oneHot(1, 1), oneHot(2, 0), oneHot(2, 1)})
	got, err := Evaluate(m, src, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Pairs (positive, negative): (2,1) 1, (2,-1) 1, (1,1) ½, (1,-1) 1,
	// (-1,1) 0, (-1,-1) ½: AUC = 4/6.
	// Log-loss: -[log σ(2) + log σ(-1) + log σ(1) + log σ(1) + log σ(-1)]/5
	//   = (0.126928 + 1.313262 + 0.313262 + 0.313262 + 1.313262)/5 = 0.675995.
	// Errors: logit 1 labelled 0, logit -1 labelled 1: 2/5.
	want := Metrics{Examples: 5, LogLoss: 0.6759949522231727, Error: 0.4, Accuracy: 0.6, AUC: 4.0 / 6}
	if got.Examples != want.Examples || math.Abs(got.LogLoss-want.LogLoss) > 1e-6 ||
		got.Error != want.Error || got.Accuracy != want.Accuracy || math.Abs(got.AUC-want.AUC) > 1e-15 {
		t.Errorf("Evaluate = %+v, want %+v", got, want)
	}
}

func TestEvaluateAUCCases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		logits []float32
		rows   []row
		auc    float64
	}{
		{"perfect", []float32{3, -3}, []row{oneHot(0, 1), oneHot(1, 0), oneHot(0, 1)}, 1},
		{"reversed", []float32{3, -3}, []row{oneHot(0, 0), oneHot(1, 1)}, 0},
		{"all tied", []float32{0.5}, []row{oneHot(0, 0), oneHot(0, 1), oneHot(0, 1)}, 0.5},
		{"only positives", []float32{1, 2}, []row{oneHot(0, 1), oneHot(1, 1)}, math.NaN()},
		{"only negatives", []float32{1}, []row{oneHot(0, 0)}, math.NaN()},
		// 2 positives at 1, one negative at 1 and one at 0: (½ + 1)·2 / 4.
		{"ties between groups", []float32{1, 0}, []row{oneHot(0, 1), oneHot(0, 1), oneHot(0, 0), oneHot(1, 0)}, 0.75},
	} {
		got, err := Evaluate(scoreModel(t, tc.logits...), newSource(tc.rows), 10)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !(got.AUC == tc.auc || math.IsNaN(got.AUC) && math.IsNaN(tc.auc)) {
			t.Errorf("%s: AUC = %v, want %v", tc.name, got.AUC, tc.auc)
		}
	}
}

// The sweep AUC equals the O(P·N) pair count on data with many ties.
func TestAUCAgainstPairCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	logits := []float32{-1, -0.5, 0, 0.5, 1, 2}
	m := scoreModel(t, logits...)
	var e Evaluator
	for trial := range 20 {
		var rows []row
		for range 5 + rng.IntN(200) {
			k := uint32(rng.IntN(len(logits)))
			y := float32(0)
			if rng.Float64() < 0.2+0.1*float64(k) {
				y = 1
			}
			rows = append(rows, oneHot(k, y))
		}
		var num, pairs float64
		for _, p := range rows {
			for _, n := range rows {
				if p.y != 1 || n.y != 0 {
					continue
				}
				pairs++
				switch sp, sn := logits[p.idx[0]], logits[n.idx[0]]; {
				case sp > sn:
					num++
				case sp == sn:
					num += 0.5
				}
			}
		}
		got, err := e.Evaluate(m, newSource(rows), 7)
		if err != nil {
			t.Fatal(err)
		}
		if pairs == 0 {
			if !math.IsNaN(got.AUC) {
				t.Errorf("trial %d: no pairs, AUC %v", trial, got.AUC)
			}
			continue
		}
		if math.Abs(got.AUC-num/pairs) > 1e-12 {
			t.Errorf("trial %d: AUC %v, pair count %v", trial, got.AUC, num/pairs)
		}
	}
}

// Probabilities are clamped to [1e-15, 1-1e-15] as scikit-learn does.
func TestEvaluateClamp(t *testing.T) {
	m := scoreModel(t, 40, -40)
	got, err := Evaluate(m, newSource([]row{oneHot(0, 0), oneHot(1, 0)}), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Row 1: P(y=0) = 1 - 4e-18, clamped to 1-1e-15: loss 1e-15.
	want := (-math.Log(1e-15) - math.Log(1-1e-15)) / 2
	if math.Abs(got.LogLoss-want) > 1e-12 || got.Error != 0.5 {
		t.Errorf("LogLoss = %.15g, error %v; want %.15g, 0.5", got.LogLoss, got.Error, want)
	}
	// Without clamping the confident mistake would still be finite but the
	// clamp caps it: logit 60 labelled 0 costs 34.54, not 60.
	m = scoreModel(t, 60)
	got, _ = Evaluate(m, newSource([]row{oneHot(0, 0)}), 1)
	if math.Abs(got.LogLoss-34.538776394910684) > 1e-9 {
		t.Errorf("LogLoss of logit 60 labelled 0 = %v, want 34.5388", got.LogLoss)
	}
}

func TestEvaluateSoftmax(t *testing.T) {
	// Zero weights: every class 1/3, the prediction is class 0 (lowest on
	// ties), log-loss log 3.
	m := newModel(t, model.Softmax, 2, 3, 1, model.DefaultOptConfig(model.SGD))
	rows := []row{oneHot(0, 0), oneHot(1, 1), oneHot(0, 2), oneHot(1, 2)}
	got, err := Evaluate(m, newSource(rows), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Examples != 4 || math.Abs(got.LogLoss-math.Log(3)) > 1e-12 || got.Error != 0.75 || !math.IsNaN(got.AUC) {
		t.Errorf("zero weights: %+v, want loss log 3, error 0.75, AUC NaN", got)
	}
	// Feature 0 votes class 2, feature 1 class 1 (logit ln 2 above the others:
	// p = 2/4, 1/4, 1/4).
	m.Row(0)[2] = float32(math.Ln2)
	m.Row(1)[1] = float32(math.Ln2)
	got, _ = Evaluate(m, newSource(rows), 3)
	// Predictions 2, 1, 2, 1 against labels 0, 1, 2, 2: two wrong.
	wantLoss := (math.Log(4) + math.Log(2) + math.Log(2) + math.Log(4)) / 4
	if got.Error != 0.5 || math.Abs(got.LogLoss-wantLoss) > 1e-6 {
		t.Errorf("voting weights: error %v loss %v, want 0.5 and %v", got.Error, got.LogLoss, wantLoss)
	}
}

func TestEvaluateErrors(t *testing.T) {
	m := scoreModel(t, 1)
	if _, err := Evaluate(m, newSource(nil), 10); !errors.Is(err, ErrNoData) {
		t.Errorf("empty source: %v, want ErrNoData", err)
	}
	bad := errors.New("test.svm:3: bad feature")
	src := newSource([]row{oneHot(0, 1), oneHot(0, 0), oneHot(0, 1)})
	src.failAt, src.err = 2, bad
	if _, err := Evaluate(m, src, 10); !errors.Is(err, bad) {
		t.Errorf("failing source: %v, want the source's error", err)
	}
}
