package wire

import (
	"fmt"

	"github.com/gossiptrain/gossiptrain/model"
)

// Feedback is sender-side error feedback for lossy value formats (F16, I8):
// it keeps, per parameter row, the residual original - decoded of the last
// encode and adds it to the row's next gradient before quantising, so that
// what receivers sum over many rounds tracks what the sender meant to send
// within one quantum instead of drifting by a rounding bias every round.
//
// Storage is dense over a model.Layout (one float32 per parameter value):
// fast and simple, and no larger than the sender's read copy of the model.
// A row's residual waits until the row is in a gradient again.
//
// Attach it to a Codec with SetFeedback; only Grad encodes use it (Params
// carry replacement values, whose error does not add up). A Feedback may be
// shared by codecs on different goroutines only if they encode disjoint rows
// (one codec per owner, say); otherwise it is not safe for concurrent use.
type Feedback struct {
	layout model.Layout
	resid  []float32
}

// NewFeedback returns zero residuals for every row of l.
func NewFeedback(l model.Layout) *Feedback {
	return &Feedback{layout: l, resid: make([]float32, l.Len())}
}

// Layout is the layout the residuals are stored in.
func (f *Feedback) Layout() model.Layout { return f.layout }

// Residual returns feature k's residual row, aliasing f's storage: what the
// next Grad encode will add to the row. k must be a valid feature.
func (f *Feedback) Residual(k uint32) []float32 {
	if !f.layout.Valid(k) {
		panic(fmt.Sprintf("wire: Feedback.Residual(%d) of a layout with %d features", k, f.layout.Features))
	}
	off := f.layout.Offset(k)
	return f.resid[off : off+f.layout.Width]
}

// Reset zeroes every residual (after a model reload, say).
func (f *Feedback) Reset() { clear(f.resid) }

// check reports why rows idx of the given width cannot use f.
func (f *Feedback) check(width int, idx []uint32) error {
	if width != f.layout.Width {
		return fmt.Errorf("%w: feedback layout has width %d, body has width %d", ErrRange, f.layout.Width, width)
	}
	for i, k := range idx {
		if !f.layout.Valid(k) {
			return fmt.Errorf("%w: row %d: feature %d is outside the feedback layout's %d features", ErrRange, i, k, f.layout.Features)
		}
	}
	return nil
}

// add writes vals plus the residuals of rows idx into out.
func (f *Feedback) add(out, vals []float32, idx []uint32, width int) {
	for i, k := range idx {
		off := f.layout.Offset(k)
		r := f.resid[off : off+width]
		o := out[i*width : (i+1)*width]
		v := vals[i*width : (i+1)*width]
		for j := range o {
			o[j] = v[j] + r[j]
		}
	}
}

// store replaces the residuals of rows idx with res.
func (f *Feedback) store(res []float32, idx []uint32, width int) {
	for i, k := range idx {
		off := f.layout.Offset(k)
		copy(f.resid[off:off+width], res[i*width:(i+1)*width])
	}
}
