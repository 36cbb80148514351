package wire

import (
	"errors"
	"math"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// run sends the same gradient rounds times through an encode/decode pair
// and returns, per row, the sum of the originals, the sum of what the
// receiver decoded (both in float64) and the largest quantum seen.
func runRounds(t *testing.T, v Values, fb *Feedback, s *model.Sparse, rounds int) (orig, got []float64, quantum float64) {
	t.Helper()
	tx := NewCodec(v, None, DefaultLimits())
	tx.SetFeedback(fb)
	rx := NewCodec(F32, None, DefaultLimits())
	orig = make([]float64, len(s.Val))
	got = make([]float64, len(s.Val))
	var m Message
	var buf []byte
	for r := 0; r < rounds; r++ {
		var err error
		buf, err = tx.AppendGrad(buf[:0], testHeader(), 1, 1, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := rx.Decode(buf, &m); err != nil {
			t.Fatal(err)
		}
		var mx float64
		for i, x := range s.Val {
			orig[i] += float64(x)
			got[i] += float64(m.Sparse.Val[i])
			mx = max(mx, math.Abs(float64(m.Sparse.Val[i])))
		}
		switch v {
		case I8:
			quantum = max(quantum, mx/127*1.01)
		case F16:
			// one half ulp at the largest magnitude: 2^(e-10)
			_, e := math.Frexp(mx)
			quantum = max(quantum, math.Ldexp(1, e-1-10))
		}
	}
	return orig, got, quantum
}

// With error feedback the receiver's running sum stays within one quantum
// of the sender's; without it, the same rounding error piles up every round.
func TestFeedbackStopsDrift(t *testing.T) {
	layout, err := model.NewLayout(1000, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	// 0.1 is not a half: it rounds down by 2.4e-5 each time. Under i8 with
	// scale 0.77/127, 0.0123 -> q = 2 -> 0.0121 and 0.1 -> q = 16 -> 0.097.
	s := model.Sparse{Idx: []uint32{3, 17, 500, 999}, Val: []float32{0.1, 0.3333, 0.0123, -0.77}}
	const rounds = 2000
	for _, v := range []Values{F16, I8} {
		fb := NewFeedback(layout)
		orig, got, q := runRounds(t, v, fb, &s, rounds)
		for i := range orig {
			if d := math.Abs(got[i] - orig[i]); d > q {
				t.Errorf("%s with feedback: row %d drifted %g after %d rounds, quantum %g", v, i, d, rounds, q)
			}
			// What is still owed is exactly the stored residual.
			if d := got[i] + float64(fb.Residual(s.Idx[i])[0]) - orig[i]; math.Abs(d) > 1e-3*q {
				t.Errorf("%s: row %d: decoded + residual misses the original by %g", v, i, d)
			}
		}
		orig, got, q = runRounds(t, v, nil, &s, rounds)
		worst := 0.0
		for i := range orig {
			worst = max(worst, math.Abs(got[i]-orig[i]))
		}
		if worst < 100*q {
			t.Errorf("%s without feedback drifted only %g (%.0f quanta); the test data should show drift", v, worst, worst/q)
		}
		t.Logf("%s: after %d rounds drift without feedback %.3g = %.0f quanta", v, rounds, worst, worst/q)
	}
}

// A residual is stored only for a message actually produced.
func TestFeedbackIsTransactional(t *testing.T) {
	layout, _ := model.NewLayout(1<<20, 1, 16)
	fb := NewFeedback(layout)
	c := NewCodec(I8, None, smallLimits(512))
	c.SetFeedback(fb)
	s := model.Sparse{}
	for k := uint32(0); k < 2000; k++ {
		s.Append(k*7, []float32{float32(k%13) * 0.013})
	}
	if _, err := c.AppendGrad(nil, testHeader(), 1, 1, &s); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
	for _, k := range s.Idx {
		if r := fb.Residual(k)[0]; r != 0 {
			t.Fatalf("failed encode stored residual %g for feature %d", r, k)
		}
	}
	// Split emits every row once: decoded + residual = original, row by row.
	rx := NewCodec(F32, None, DefaultLimits())
	var m Message
	i := 0
	_, err := c.SplitGrad(testHeader(), 1, 1, &s, func(msg []byte) error {
		if err := rx.Decode(msg, &m); err != nil {
			return err
		}
		for j, k := range m.Sparse.Idx {
			if k != s.Idx[i] {
				t.Fatalf("row %d: feature %d, want %d", i, k, s.Idx[i])
			}
			if d := m.Sparse.Val[j] + fb.Residual(k)[0] - s.Val[i]; math.Abs(float64(d)) > 1e-6 {
				t.Fatalf("feature %d: decoded %g + residual %g != %g", k, m.Sparse.Val[j], fb.Residual(k)[0], s.Val[i])
			}
			i++
		}
		return nil
	})
	if err != nil || i != s.Len() {
		t.Fatalf("split: %v, %d of %d rows", err, i, s.Len())
	}
	// Params never touch the residuals.
	fb.Reset()
	if _, err := NewCodec(I8, None, DefaultLimits()).AppendParams(nil, testHeader(), 1, &s); err != nil {
		t.Fatal(err)
	}
	c2 := NewCodec(I8, None, DefaultLimits())
	c2.SetFeedback(fb)
	if _, err := c2.AppendParams(nil, testHeader(), 1, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range s.Idx {
		if fb.Residual(k)[0] != 0 {
			t.Fatalf("params encode stored a residual for %d", k)
		}
	}
	// A body that does not match the layout is refused.
	if _, err := c2.AppendGrad(nil, testHeader(), 1, 2, &model.Sparse{Idx: []uint32{1}, Val: []float32{1, 2}}); !errors.Is(err, ErrRange) {
		t.Fatalf("width mismatch: %v", err)
	}
	if _, err := c2.AppendGrad(nil, testHeader(), 1, 1, &model.Sparse{Idx: []uint32{1 << 20}, Val: []float32{1}}); !errors.Is(err, ErrRange) {
		t.Fatalf("feature outside layout: %v", err)
	}
}
