package sgd

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// Prepared is one batch made ready to compute on a gathered working set:
// the distinct model rows it touches and its nonzeros re-indexed to them.
//
// Keys are the rows Worker.Compute reads and writes, ascending: the
// batch's distinct features, then the bias row m.Bias(), then for an MLP
// W2's rows (Bias()+1 … Bias()+Classes) and b2 (Bias2()). A batch of no
// rows has no keys. A working set is len(Keys)·Width floats, row i holding
// model row Keys[i]: Gather fills one from a model, a parameter server
// sends one.
//
// A Prepared owns copies of everything it needs (the batch it came from
// may be reused at once) and is reused by passing it to Prepare again: it
// allocates only while its buffers grow. It belongs to one goroutine at a
// time; hand it over through a channel.
type Prepared struct {
	// Keys are the model rows of the working set, ascending (see above).
	Keys []uint32
	// Span is where the batch's rows were read (data.Batch.Span), for an
	// error about the batch (CheckFinite).
	Span data.Span

	shape    shape
	examples int
	feats    int        // Keys[:feats] are the batch's features
	labels   []int32    // per example: 0 or 1 (Logreg) or the class
	weights  []float32  // per example: its importance weight; empty when every one is 1
	rowOff   []uint32   // CSR: example r's nonzeros are [rowOff[r], rowOff[r+1])
	col      []uint32   // per nonzero: the position of its feature in Keys
	val      []float32  // per nonzero: its value
	keyOff   []uint32   // CSC: Keys[i]'s nonzeros (i < feats) are csc[keyOff[i]:keyOff[i+1]]
	csc      []cscEntry // per feature, its nonzeros in example order
}

// cscEntry is one nonzero seen from its feature: example r has value v.
type cscEntry struct {
	r uint32
	v float32
}

// shape is what Prepare and Compute need of a model: no weights.
type shape struct {
	kind    model.Kind
	dim     uint32 // features; the bias row is dim
	width   int    // floats per row
	classes int    // Softmax, MLP: classes; Logreg: 2
	hidden  int    // MLP: hidden units (= width); 0 otherwise
}

func shapeOf(m *model.Model) shape {
	return shape{kind: m.Kind, dim: uint32(m.Dim), width: m.Layout.Width, classes: m.Classes, hidden: m.Hidden}
}

// extraRows is the number of rows every example touches besides its
// features: the bias, and for an MLP W2's rows and b2.
func (s shape) extraRows() int {
	if s.kind == model.MLP {
		return s.classes + 2
	}
	return 1
}

// Examples is the number of examples (batch rows) in p.
func (p *Prepared) Examples() int { return p.examples }

// NNZ is the number of nonzeros in p's examples.
func (p *Prepared) NNZ() int { return len(p.col) }

// Preparer turns batches into Prepared ones. It keeps scratch buffers, so
// keep one per goroutine: it is not safe for concurrent use. Once its and
// the Prepared's buffers have grown, Prepare allocates nothing.
type Preparer struct {
	shape   shape
	keyBits int        // bits of the largest feature, dim-1
	packed  []uint64   // per nonzero: feature<<32 | nonzero number
	tmp     []uint64   // the sort's second buffer
	ents    []cscEntry // per nonzero: its example and value, in batch order
	count   []uint32   // the sort's counters
}

// NewPreparer returns a Preparer for models shaped like m (its kind,
// layout and dimensions; the weights are not read).
func NewPreparer(m *model.Model) *Preparer {
	pr := &Preparer{shape: shapeOf(m), keyBits: bits.Len32(uint32(m.Dim - 1))}
	if pr.keyBits > 0 {
		pr.count = make([]uint32, max(1<<bucketBits, 3<<radixBits))
	}
	return pr
}

// Prepare fills p from b: the working set's keys, the batch re-indexed to
// them (CSR) and its transpose (CSC: per feature, its examples in order).
// Like Grad.Add it panics on an index >= Dim or a label the model cannot
// have (readers rule both out). It costs about what Grad.Collect's sort
// did, and is meant to run ahead of the step, on another goroutine.
func (pr *Preparer) Prepare(b *data.Batch, p *Prepared) {
	s := pr.shape
	rows, nnz := b.Rows(), b.NNZ()
	if uint64(nnz) >= math.MaxUint32 {
		panic(fmt.Sprintf("sgd: batch of %d nonzeros, at most 2^32-2", nnz))
	}
	p.shape, p.examples, p.feats = s, rows, 0
	p.Span = b.Span
	p.Keys = p.Keys[:0]
	p.labels = slices.Grow(p.labels[:0], rows)[:rows]
	p.weights = append(p.weights[:0], b.Weights...)
	p.rowOff = slices.Grow(p.rowOff[:0], rows+1)[:rows+1]
	p.col = slices.Grow(p.col[:0], nnz)[:nnz]
	p.val = append(p.val[:0], b.Values[:nnz]...)
	p.csc = slices.Grow(p.csc[:0], nnz)[:nnz]
	p.keyOff = p.keyOff[:0]
	if rows == 0 {
		p.rowOff[0] = 0
		return
	}
	pr.packed = slices.Grow(pr.packed[:0], nnz)[:nnz]
	pr.ents = slices.Grow(pr.ents[:0], nnz)[:nnz]
	packed, ents, dim := pr.packed, pr.ents, s.dim
	for r, label := range b.Labels {
		lo, hi := b.Offsets[r], b.Offsets[r+1]
		idx, val := b.Indices[lo:hi], b.Values[lo:hi]
		val = val[:len(idx)]
		for i, k := range idx {
			if k >= dim {
				panic(fmt.Sprintf("sgd: feature %d in batch row %d, model dim %d", k, r, dim))
			}
			packed[lo+i] = uint64(k)<<32 | uint64(lo+i)
			ents[lo+i] = cscEntry{r: uint32(r), v: val[i]}
		}
		p.rowOff[r] = uint32(lo)
		if s.kind == model.Logreg {
			if label != 0 && label != 1 {
				panic(fmt.Sprintf("sgd: binary label %g in batch row %d, want 0 or 1", label, r))
			}
			p.labels[r] = int32(label)
		} else {
			p.labels[r] = int32(class(label, r, s.classes))
		}
	}
	p.rowOff[rows] = uint32(nnz)

	sorted := pr.sort(packed)
	keys := slices.Grow(p.Keys, nnz+s.extraRows())
	keyOff := slices.Grow(p.keyOff, nnz+1)
	col, csc := p.col, p.csc[:len(sorted)]
	for j, e := range sorted {
		k, i := uint32(e>>32), uint32(e)
		if len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
			keyOff = append(keyOff, uint32(j))
		}
		col[i] = uint32(len(keys) - 1)
		csc[j] = ents[i]
	}
	p.feats = len(keys)
	p.keyOff = append(keyOff, uint32(nnz))
	for k := range uint32(s.extraRows()) {
		keys = append(keys, dim+k) // the bias; an MLP's W2 rows and b2 follow it
	}
	p.Keys = keys
}

// sort orders a (feature<<32 | nonzero number) ascending, which sorts the
// nonzeros by feature and, within a feature, in batch order, and returns
// the sorted slice (pr.packed or pr.tmp). It is Grad.sortEntries on packed
// keys: a counting pass on the top bits into about as many buckets as
// nonzeros, then an insertion sort, or an LSD radix sort if the keys are
// too clustered for it.
func (pr *Preparer) sort(a []uint64) []uint64 {
	if cap(pr.tmp) < len(a) {
		pr.tmp = make([]uint64, len(a), cap(a))
	}
	b := pr.tmp[:len(a)]
	if pr.keyBits == 0 || len(a) < 2 {
		return a // a one-feature model (every feature is 0: already in order) or nothing to order
	}
	bb := min(bits.Len(uint(len(a))), pr.keyBits, bucketBits)
	shift := uint(32 + pr.keyBits - bb)
	count := pr.count[:1<<bb]
	clear(count)
	for _, e := range a {
		count[e>>shift]++
	}
	pos := uint32(0)
	for i, n := range count {
		count[i] = pos
		pos += n
	}
	for _, e := range a {
		j := e >> shift
		b[count[j]] = e
		count[j]++
	}
	sorted, spare := b, a
	if shift > 32 && !insertionSort64(b, 8*len(b)) {
		sorted, spare = pr.radixSort(b, a)
	}
	pr.packed, pr.tmp = sorted[:0], spare[:0] // keep both buffers
	return sorted
}

// insertionSort64 sorts a unless that takes more than budget moves; it
// reports whether it finished. Unfinished, a is a permutation in which
// equal features are still in nonzero order (the values are distinct and
// ordered by feature first).
func insertionSort64(a []uint64, budget int) bool {
	for i := 1; i < len(a); i++ {
		e := a[i]
		j := i
		for ; j > 0 && a[j-1] > e; j-- {
			a[j] = a[j-1]
		}
		a[j] = e
		if budget -= i - j; budget < 0 {
			return false
		}
	}
	return true
}

// radixSort sorts a by feature (bits 32 and up) with a stable LSD radix
// sort, using b (same length) as the other buffer, and returns the sorted
// and the spare buffer. Stability keeps each feature's nonzeros in order.
func (pr *Preparer) radixSort(a, b []uint64) (sorted, spare []uint64) {
	passes := (pr.keyBits + radixBits - 1) / radixBits
	digit := uint((pr.keyBits + passes - 1) / passes)
	size := 1 << digit
	mask := uint64(size - 1)
	count := pr.count[:3*size]
	clear(count)
	c0, c1, c2 := count[:size], count[size:2*size], count[2*size:]
	for _, e := range a {
		k := e >> 32
		c0[k&mask]++
		c1[k>>digit&mask]++
		c2[k>>(2*digit)&mask]++
	}
	for p := range passes {
		shift := 32 + uint(p)*digit
		c := count[p*size : (p+1)*size]
		if int(c[a[0]>>shift&mask]) == len(a) {
			continue // every key has this digit: the pass would not move anything
		}
		pos := uint32(0)
		for i, n := range c {
			c[i] = pos
			pos += n
		}
		for _, e := range a {
			j := e >> shift & mask
			b[c[j]] = e
			c[j]++
		}
		a, b = b, a
	}
	return a, b
}
