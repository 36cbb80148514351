package data

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
}

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.Labels = b.Labels[:0]
	b.Offsets = append(b.Offsets[:0], 0)
	b.Indices = b.Indices[:0]
	b.Values = b.Values[:0]
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

// EndRow completes the row being built with the given label.
func (b *Batch) EndRow(label float32) {
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	b.Labels = append(b.Labels, label)
	b.Offsets = append(b.Offsets, len(b.Indices))
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
	base := len(b.Indices)
	b.Labels = append(b.Labels, o.Labels...)
	for _, off := range o.Offsets[1:] {
		b.Offsets = append(b.Offsets, base+off)
	}
	b.Indices = append(b.Indices, o.Indices...)
	b.Values = append(b.Values, o.Values...)
}
