package sgd

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/gossiptrain/gossiptrain/data"
)

// A batch of finite values can still have a gradient that is not: the
// sum over its rows overflows float32 (two rows with 3e38 in one feature
// make -Inf). A non-finite gradient must never reach a model: applied, it
// turns weights into NaN or Inf for good (and a peer's owners refuse a
// push that carries one, wire.Core.Check). So the training loops check
// every gradient and its loss before they use them (CheckFinite), and
// fail or skip the batch as NonFinite says.

// NonFinite says what a training loop does with a batch whose gradient or
// loss is not finite.
type NonFinite uint8

const (
	// FailNonFinite stops training with a *NonFiniteError that names the
	// batch's rows (the default: bad data is to be fixed, not trained
	// around unnoticed).
	FailNonFinite NonFinite = iota
	// SkipNonFinite skips the batch, so nothing of it reaches the model,
	// and counts it (Summary.SkippedNonFinite).
	SkipNonFinite
)

// String returns the name ParseNonFinite accepts.
func (n NonFinite) String() string {
	switch n {
	case FailNonFinite:
		return "fail"
	case SkipNonFinite:
		return "skip"
	}
	return fmt.Sprintf("NonFinite(%d)", uint8(n))
}

// ParseNonFinite parses "fail" or "skip".
func ParseNonFinite(s string) (NonFinite, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fail":
		return FailNonFinite, nil
	case "skip":
		return SkipNonFinite, nil
	}
	return FailNonFinite, fmt.Errorf("%w: %q: want fail or skip", ErrConfig, s)
}

// ErrNonFinite is wrapped by every *NonFiniteError.
var ErrNonFinite = errors.New("the batch's gradient is not finite")

// NonFiniteError is a batch whose gradient, or loss, is NaN or infinite.
// Its Error reads
//
//	train.svm:1201-1300 (epoch 1, rows 601-700): the batch's gradient is not finite
//	(-Inf at feature 5, whose values in these rows reach 3e+38): a value in these
//	rows overflows; fix the data (--max-value refuses such values as bad lines)
//	or pass --nonfinite skip
type NonFiniteError struct {
	// Span is where the batch's rows were read (data.Batch.Span); zero
	// when the source does not say.
	Span data.Span
	// Epoch (1-based) and FirstRow (1-based, in the epoch's rows) place
	// the batch in the rows the loop read; Examples is its rows.
	Epoch    int
	FirstRow int64
	Examples int
	// InGradient: the gradient is not finite, first at model row Row,
	// column Column, where it is Value. Otherwise the gradient is finite
	// and the loss (Loss) is not.
	InGradient bool
	Row        uint32
	Column     int
	Value      float32
	Loss       float64
	// Feature: Row is a feature (not a bias or output row), whose largest
	// |value| among the batch's rows is MaxAbs.
	Feature bool
	MaxAbs  float32
}

// Where names the batch's rows: their span in the files, and the epoch and
// rows of the loop.
func (e *NonFiniteError) Where() string {
	rows := fmt.Sprintf("epoch %d, rows %d-%d", e.Epoch, e.FirstRow, e.FirstRow+int64(e.Examples)-1)
	if e.Examples == 1 {
		rows = fmt.Sprintf("epoch %d, row %d", e.Epoch, e.FirstRow)
	}
	if e.Span.IsZero() {
		return rows
	}
	return e.Span.String() + " (" + rows + ")"
}

// What says what is not finite, where.
func (e *NonFiniteError) What() string {
	if !e.InGradient {
		return fmt.Sprintf("the batch's loss is not finite (%g) though its gradient is", e.Loss)
	}
	at := fmt.Sprintf("at model row %d", e.Row)
	if e.Feature {
		at = fmt.Sprintf("at feature %d (0-based), whose values in these rows reach %g", e.Row, e.MaxAbs)
	}
	return fmt.Sprintf("the batch's gradient is not finite (%g %s)", e.Value, at)
}

func (e *NonFiniteError) Error() string {
	why := "a value in these rows overflows"
	if !e.Feature {
		why = "these rows' values, or the model's weights, overflow"
	}
	return e.Where() + ": " + e.What() + ": " + why + "; fix the data " +
		"(--max-value refuses such values as bad lines) or pass --nonfinite skip"
}

// Unwrap returns ErrNonFinite.
func (e *NonFiniteError) Unwrap() error { return ErrNonFinite }

// CheckFinite returns nil when grad (Compute's gradient of p) and loss are
// finite, and otherwise a *NonFiniteError naming the first value that is
// not and p's span (the caller fills in Epoch and FirstRow). The check is
// one pass over grad and allocates nothing; only a failure costs more.
func CheckFinite(p *Prepared, grad []float32, loss float64) *NonFiniteError {
	i := firstNonFinite(grad)
	if i < 0 && !math.IsNaN(loss) && !math.IsInf(loss, 0) {
		return nil
	}
	e := &NonFiniteError{Span: p.Span, Examples: p.examples, Loss: loss}
	if i < 0 {
		return e
	}
	width := max(p.shape.width, 1)
	pos := i / width
	e.InGradient, e.Column, e.Value = true, i%width, grad[i]
	if pos < len(p.Keys) {
		e.Row = p.Keys[pos]
	}
	if pos < p.feats {
		e.Feature = true
		for _, c := range p.csc[p.keyOff[pos]:p.keyOff[pos+1]] {
			e.MaxAbs = max(e.MaxAbs, float32(math.Abs(float64(c.v))))
		}
	}
	return e
}

// firstNonFinite returns the index of the first NaN or infinity in g, or
// -1: a float32 whose exponent bits are all ones is one of them.
func firstNonFinite(g []float32) int {
	for i, v := range g {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}
