package data

import "fmt"

// Batch is a minibatch in compressed sparse row (CSR) form.
//
// Row r has label Labels[r] and the nonzeros Indices[Offsets[r]:Offsets[r+1]]
// with values Values[Offsets[r]:Offsets[r+1]]. Indices are 0-based feature
// numbers. Labels are already mapped for the model: 0 or 1 for binary data,
// the class number 0..K-1 for multiclass data.
//
// Readers fill a caller's Batch and reuse its slices, so a training loop that
// keeps one Batch allocates nothing once the slices have grown to the largest
// batch seen.
type Batch struct {
	Labels  []float32
	Offsets []int // len(Labels)+1 entries, Offsets[0] == 0
	Indices []uint32
	Values  []float32
	// Weights are the rows' importance weights: empty when every row's
	// weight is 1 (most data), else one per row. A weight multiplies its
	// row's loss and gradient (VW's importance weight); readers take it
	// from VW's label section and libsvm's "label:weight" (see Weight).
	Weights []float32
	// Span is where the rows were read: the places of the first and the
	// last (zero when the source does not say, as for rows made in
	// memory). The files' readers set it as they append rows.
	Span Span
}

// Span is where a batch's rows were read: the place of its first row and
// of its last. Between them lie the batch's rows and, in the same files,
// the lines it did not take: other parts' rows (Options.Part), bad lines
// skipped (Options.SkipBad), blank and comment lines. Lines are exact for
// libsvm and Criteo text; IDX places are record numbers, and a cache's
// (*.gtc) are its row numbers, since a cache keeps no lines.
type Span struct {
	First, Last Place
}

// IsZero reports whether the span says nothing.
func (s Span) IsZero() bool { return s.First.File == "" && s.Last.File == "" }

// String formats the span as "train.svm:1201-1300" (one file),
// "train.svm:1201" (one row) or "a.svm:1201-b.svm:40" (two files); "" for
// the zero span.
func (s Span) String() string {
	switch {
	case s.IsZero():
		return ""
	case s.First == s.Last || s.Last.File == "":
		return s.First.String()
	case s.First.File == s.Last.File:
		return fmt.Sprintf("%s:%d-%d", s.First.File, s.First.Line, s.Last.Line)
	}
	return s.First.String() + "-" + s.Last.String()
}

// mark records that the row just completed (EndRow) was read at p.
func (b *Batch) mark(p Place) {
	if len(b.Labels) == 1 {
		b.Span.First = p
	}
	b.Span.Last = p
}

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.Span = Span{}
	b.Labels = b.Labels[:0]
	b.Offsets = append(b.Offsets[:0], 0)
	b.Indices = b.Indices[:0]
	b.Values = b.Values[:0]
	b.Weights = b.Weights[:0]
}

// Rows is the number of complete rows.
func (b *Batch) Rows() int { return len(b.Labels) }

// NNZ is the number of nonzeros in complete rows.
func (b *Batch) NNZ() int {
	if len(b.Offsets) == 0 {
		return 0
	}
	return b.Offsets[len(b.Offsets)-1]
}

// Add appends a nonzero to the row being built.
func (b *Batch) Add(k uint32, v float32) {
	b.Indices = append(b.Indices, k)
	b.Values = append(b.Values, v)
}

// EndRow completes the row being built with the given label and weight 1.
func (b *Batch) EndRow(label float32) {
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	if len(b.Weights) > 0 {
		b.Weights = append(b.Weights, 1)
	}
	b.Labels = append(b.Labels, label)
	b.Offsets = append(b.Offsets, len(b.Indices))
}

// EndRowWeighted completes the row being built with the given label and
// importance weight. A batch whose rows all weigh 1 keeps Weights empty.
func (b *Batch) EndRowWeighted(label, weight float32) {
	if weight == 1 {
		b.EndRow(label)
		return
	}
	for len(b.Weights) < len(b.Labels) {
		b.Weights = append(b.Weights, 1) // the rows before weigh 1
	}
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	b.Weights = append(b.Weights, weight)
	b.Labels = append(b.Labels, label)
	b.Offsets = append(b.Offsets, len(b.Indices))
}

// Weight returns row r's importance weight (1 when Weights is empty).
func (b *Batch) Weight(r int) float32 {
	if len(b.Weights) == 0 {
		return 1
	}
	return b.Weights[r]
}

// DropRow discards the nonzeros added since the last complete row (a line
// that turned out to be bad half way through).
func (b *Batch) DropRow() {
	end := b.NNZ()
	b.Indices = b.Indices[:end]
	b.Values = b.Values[:end]
}

// Row returns the indices and values of row r, aliasing b's storage.
func (b *Batch) Row(r int) ([]uint32, []float32) {
	lo, hi := b.Offsets[r], b.Offsets[r+1]
	return b.Indices[lo:hi], b.Values[lo:hi]
}

// AppendRows appends every row of o to b.
func (b *Batch) AppendRows(o *Batch) {
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	switch {
	case o.Rows() == 0:
	case b.Rows() == 0:
		b.Span = o.Span
	default:
		b.Span.Last = o.Span.Last
	}
	base := len(b.Indices)
	switch {
	case len(o.Weights) > 0:
		for len(b.Weights) < len(b.Labels) {
			b.Weights = append(b.Weights, 1)
		}
		b.Weights = append(b.Weights, o.Weights...)
	case len(b.Weights) > 0:
		for range o.Labels {
			b.Weights = append(b.Weights, 1)
		}
	}
	b.Labels = append(b.Labels, o.Labels...)
	for _, off := range o.Offsets[1:] {
		b.Offsets = append(b.Offsets, base+off)
	}
	b.Indices = append(b.Indices, o.Indices...)
	b.Values = append(b.Values, o.Values...)
}
