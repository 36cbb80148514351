package sgd

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// ErrNoData is wrapped by the errors of Evaluate and Train when a data set
// has no rows.
var ErrNoData = errors.New("no examples")

// ClampProb is the probability clamp of the log-loss: the true class's
// probability is clamped to [ClampProb, 1-ClampProb], as scikit-learn's
// log_loss does with its eps=1e-15, so one confident mistake costs at most
// -log(1e-15) ≈ 34.5 instead of +Inf.
const ClampProb = 1e-15

// Metrics are the quality measures of a model on a data set.
type Metrics struct {
	// Examples is the number of rows evaluated.
	Examples int64
	// LogLoss is the mean negative log-probability of the true class,
	// clamped (ClampProb). Rows with importance weights (data.Batch.Weights)
	// count by their weight: the mean is Σ w·loss / Σ w, VW's "average
	// loss" (TestImportanceWeights).
	LogLoss float64
	// Error is the fraction of rows whose predicted class is wrong: for
	// Logreg the prediction is 1 when P(y=1) > 0.5, for Softmax the most
	// probable class (the lowest on ties). Weighted like LogLoss.
	Error float64
	// Accuracy is 1 - Error.
	Accuracy float64
	// AUC is the area under the ROC curve of P(y=1) for Logreg, exact with
	// tied scores counted as half; NaN for Softmax and when the data has
	// only one class. It counts every row once, whatever its weight.
	AUC float64
}

// String formats the metrics on one line, for logs.
func (m Metrics) String() string {
	return fmt.Sprintf("examples=%d logloss=%.6f error=%.6f auc=%.6f", m.Examples, m.LogLoss, m.Error, m.AUC)
}

// Evaluator computes Metrics, keeping its buffers (the batch, the scores
// for the AUC) between calls. The zero value is ready; it is not safe for
// concurrent use.
type Evaluator struct {
	// OnRow, when set, is called with every row's probabilities (P(y=1)
	// for Logreg, one per class otherwise), in order, as Evaluate reads
	// them ('eval --predictions'). The slice is reused.
	OnRow func(p []float64)

	batch    data.Batch
	p1       [1]float64
	z        []float64
	h        []float64 // an MLP's hidden layer
	pos, neg []float64 // logits of the positive and negative examples
}

// Evaluate reads src to its end in batches of batch rows and returns m's
// metrics on it. It does not close src. See Evaluator.Evaluate.
func Evaluate(m *model.Model, src data.Source, batch int) (Metrics, error) {
	var e Evaluator
	return e.Evaluate(m, src, batch)
}

// Evaluate reads src to its end in batches of batch rows and returns m's
// metrics on it; it does not close src. Labels and indices must satisfy
// what Grad.Add requires. An empty src is an error wrapping ErrNoData.
// The AUC ranks examples by their logit w·x + b (the same order as P(y=1),
// without float rounding ties near 0 and 1) and sorts once at the end.
func (e *Evaluator) Evaluate(m *model.Model, src data.Source, batch int) (Metrics, error) {
	if batch < 1 {
		panic(fmt.Sprintf("sgd: Evaluate with batch %d", batch))
	}
	width, o := outputs(m), offsetsOf(&m.Layout)
	if cap(e.z) < width {
		e.z = make([]float64, width)
	}
	if cap(e.h) < m.Hidden {
		e.h = make([]float64, m.Hidden)
	}
	z, h := e.z[:width], e.h[:m.Hidden]
	e.pos, e.neg = e.pos[:0], e.neg[:0]
	var n int64
	var loss, wrong, weight float64
	for {
		rows, err := src.Next(&e.batch, batch)
		b := &e.batch
		for r := range rows {
			idx, val := b.Row(r)
			scores(m, o, idx, val, z, h)
			label := b.Labels[r]
			wt := float64(b.Weight(r))
			var py float64
			if m.Kind == model.Logreg {
				switch label {
				case 1:
					py, _ = sigmoidLoss(z[0], 0)
					e.pos = append(e.pos, z[0])
				case 0:
					py, _ = sigmoidLoss(-z[0], 0)
					e.neg = append(e.neg, z[0])
				default:
					panic(fmt.Sprintf("sgd: binary label %g in batch row %d, want 0 or 1", label, r))
				}
				if (z[0] > 0) != (label == 1) { // predict 1 iff P(y=1) > 0.5 iff z > 0
					wrong += wt
				}
				if e.OnRow != nil {
					e.p1[0], _ = sigmoidLoss(z[0], 0)
					e.OnRow(e.p1[:])
				}
			} else {
				y := class(label, r, width)
				softmax(z)
				py = z[y]
				best := 0
				for c, p := range z {
					if p > z[best] {
						best = c
					}
				}
				if best != y {
					wrong += wt
				}
				if e.OnRow != nil {
					e.OnRow(z)
				}
			}
			loss -= wt * math.Log(min(max(py, ClampProb), 1-ClampProb))
			weight += wt
			n++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Metrics{}, fmt.Errorf("evaluate: %w", err)
		}
	}
	if n == 0 {
		return Metrics{}, fmt.Errorf("evaluate: %w", ErrNoData)
	}
	if weight == 0 {
		return Metrics{}, fmt.Errorf("evaluate: %w: each of the %d rows has importance weight 0", ErrNoData, n)
	}
	errRate := wrong / weight
	return Metrics{
		Examples: n,
		LogLoss:  loss / weight,
		Error:    errRate,
		Accuracy: 1 - errRate,
		AUC:      e.auc(m.Kind),
	}, nil
}

// auc returns the probability that a random positive scores above a random
// negative, ties counting half (the Mann-Whitney statistic), from the
// scores collected by Evaluate; NaN when undefined.
func (e *Evaluator) auc(kind model.Kind) float64 {
	if kind != model.Logreg || len(e.pos) == 0 || len(e.neg) == 0 {
		return math.NaN()
	}
	slices.Sort(e.pos)
	slices.Sort(e.neg)
	pos, neg := e.pos, e.neg
	var sum float64 // Σ over positives of (#negatives below + half the tied ones)
	below, upto := 0, 0
	for i := 0; i < len(pos); {
		s := pos[i]
		j := i + 1
		for j < len(pos) && pos[j] == s {
			j++
		}
		for below < len(neg) && neg[below] < s {
			below++
		}
		upto = max(upto, below)
		for upto < len(neg) && neg[upto] == s {
			upto++
		}
		sum += float64(j-i) * (float64(below) + 0.5*float64(upto-below))
		i = j
	}
	return sum / (float64(len(pos)) * float64(len(neg)))
}
