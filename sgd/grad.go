package sgd

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// Grad accumulates the summed gradient of the log-loss over the batches
// added since the last Collect. It is reused across batches: after the first
// few steps, Add and Collect allocate nothing.
//
// Add records, per nonzero, an entry (row, example, value) and, per
// example, dloss/dz (Width floats); Collect sorts the entries by row
// (stably, in about two passes: see sortEntries) and sums each row's
// dloss/dz·value in float64. Add costs O(nnz) and Collect O(nnz·Width),
// touching only buffers the size of the batch, which stay in cache. A
// dense scratch as large as the model, the obvious alternative, costs a
// cache and TLB miss per nonzero on models of 2^24 rows (profiled: about 2x
// slower end to end). Because the sort is stable, each row sums its
// contributions in example order, so the gradient does not depend on
// batching: adding a batch whole or in two halves gives bit-identical sums.
//
// A Grad is bound to the layout of the model given to NewGrad and is not
// safe for concurrent use.
type Grad struct {
	kind     model.Kind
	layout   model.Layout
	dim      uint32
	width    int
	keyBits  int       // bits of the largest feature index, dim-1
	ents     []entry   // one per nonzero since the last Collect
	tmp      []entry   // the sort's second buffer
	d        []float64 // dloss/dz of each example since the last Collect, width each
	z        []float64 // logits, then probabilities, of one example
	sum      []float64 // one row's sum while collecting
	count    []uint32  // the sort's counters
	mlp      *mlpScratch
	examples int
}

// offsets computes Layout.Offset with the layout's fields in registers and
// a shift the compiler knows is < 32: the hot loops' address arithmetic
// (profiled: 2x the cost of the load itself through *Layout).
type offsets struct {
	mask  uint32
	shift uint
	per   int // PerShard·Width
	width int
}

func offsetsOf(l *model.Layout) offsets {
	return offsets{
		mask:  uint32(l.Shards - 1),
		shift: uint(bits.TrailingZeros(uint(l.Shards))),
		per:   l.PerShard * l.Width,
		width: l.Width,
	}
}

// of is the offset of row k's first value in the model's W.
func (o offsets) of(k uint32) int {
	return int(k&o.mask)*o.per + int(k>>(o.shift&31))*o.width
}

// entry is one nonzero of an added batch: x_k = v in example r.
type entry struct {
	k uint32  // feature
	r uint32  // example number since the last Collect
	v float32 // feature value
}

// NewGrad returns an empty accumulator for models laid out like m.
func NewGrad(m *model.Model) *Grad {
	l := m.Layout
	g := &Grad{
		kind:    m.Kind,
		layout:  l,
		dim:     uint32(m.Dim),
		width:   l.Width,
		keyBits: bits.Len32(uint32(m.Dim - 1)),
		z:       make([]float64, l.Width),
		sum:     make([]float64, l.Width),
	}
	if g.keyBits > 0 {
		g.count = make([]uint32, max(1<<bucketBits, 3<<radixBits))
	}
	if m.Kind == model.MLP {
		g.mlp = newMLPScratch(m)
	}
	return g
}

// Examples is the number of examples added since the last Collect.
func (g *Grad) Examples() int { return g.examples }

// Add adds the SUM over the rows of b of the per-example gradients of the
// log-loss at m's current weights, bias row included (every example touches
// row m.Bias() with value 1), and returns the summed log-loss of b before
// any update (exact, not clamped). A row's importance weight (b.Weights,
// VW's) multiplies its loss and its gradient: weight 2 adds what the row
// given twice adds (TestImportanceWeights).
//
// Logreg: p = sigmoid(w·x + b), dloss/dz = p - y. Softmax: p = softmax(z)
// computed with the largest logit subtracted, dloss/dz_c = p_c - [c = y].
// Row k's gradient is the sum over examples of dloss/dz · x_k.
//
// b's labels must be 0 or 1 (Logreg) or a class 0..Classes-1 (Softmax), and
// its indices < Dim: readers guarantee both, so a violation panics. m must
// have the layout NewGrad saw.
func (g *Grad) Add(m *model.Model, b *data.Batch) (loss float64) {
	if m.Kind != g.kind || !m.Layout.Equal(g.layout) {
		panic(fmt.Sprintf("sgd: Grad for %v %v used with %v %v", g.kind, g.layout, m.Kind, m.Layout))
	}
	rows := b.Rows()
	if rows == 0 {
		return 0
	}
	if uint64(g.examples)+uint64(rows) > math.MaxUint32 {
		panic("sgd: more than 2^32 examples added without Collect")
	}
	g.ents = slices.Grow(g.ents, b.NNZ())
	g.d = slices.Grow(g.d, rows*g.width)
	switch g.kind {
	case model.Logreg:
		loss = g.addLogreg(m, b)
	case model.MLP:
		loss = g.addMLP(m, b)
	default:
		loss = g.addSoftmax(m, b)
	}
	g.examples += rows
	return loss
}

func (g *Grad) addLogreg(m *model.Model, b *data.Batch) float64 {
	o := offsetsOf(&m.Layout)
	w, dim := m.W, g.dim
	biasW := float64(w[o.of(dim)])
	var loss float64
	for r, y := range b.Labels {
		lo, hi := b.Offsets[r], b.Offsets[r+1]
		idx, val := b.Indices[lo:hi], b.Values[lo:hi]
		val = val[:len(idx)]
		z := biasW
		for i, k := range idx {
			if k >= dim {
				panic(fmt.Sprintf("sgd: feature %d in batch row %d, model dim %d", k, r, dim))
			}
			z += float64(w[o.of(k)]) * float64(val[i])
		}
		if y != 0 && y != 1 {
			panic(fmt.Sprintf("sgd: binary label %g in batch row %d, want 0 or 1", y, r))
		}
		p, rowLoss := sigmoidLoss(z, float64(y))
		d := p - float64(y)
		if len(b.Weights) > 0 {
			wt := float64(b.Weights[r])
			rowLoss *= wt
			d *= wt
		}
		loss += rowLoss
		g.push(idx, val, uint32(g.examples+r))
		g.d = append(g.d, d)
	}
	return loss
}

// class returns label as a class number of a model with n classes,
// panicking when it is not one (readers map labels to 0..n-1, so a
// violation is a bug; r is the row in its batch, for the message).
func class(label float32, r, n int) int {
	y := int(label)
	if float32(y) != label || y < 0 || y >= n {
		panic(fmt.Sprintf("sgd: class %g in batch row %d, want 0..%d", label, r, n-1))
	}
	return y
}

// push records the nonzeros of example r.
func (g *Grad) push(idx []uint32, val []float32, r uint32) {
	n := len(g.ents)
	g.ents = g.ents[:n+len(idx)]
	ents := g.ents[n:]
	for i, k := range idx {
		ents[i] = entry{k: k, r: r, v: val[i]}
	}
}

// dot is the logit w·x + b of one example of a Logreg model.
func dot(w []float32, o offsets, dim uint32, idx []uint32, val []float32) float64 {
	z := float64(w[o.of(dim)])
	val = val[:len(idx)]
	for i, k := range idx {
		if k >= dim {
			panic(fmt.Sprintf("sgd: feature %d, model dim %d", k, dim))
		}
		z += float64(w[o.of(k)]) * float64(val[i])
	}
	return z
}

// sigmoidLoss returns sigmoid(z) and the log-loss softplus(z) - y·z of label
// y in {0, 1}, both without overflow for any z.
func sigmoidLoss(z, y float64) (p, loss float64) {
	e := math.Exp(-math.Abs(z)) // in (0, 1]
	if z >= 0 {
		p = 1 / (1 + e)
	} else {
		p = e / (1 + e)
	}
	return p, math.Max(z, 0) + math.Log1p(e) - y*z
}

func (g *Grad) addSoftmax(m *model.Model, b *data.Batch) float64 {
	o := offsetsOf(&m.Layout)
	w, dim, width, z := m.W, g.dim, g.width, g.z
	var loss float64
	for r, label := range b.Labels {
		lo, hi := b.Offsets[r], b.Offsets[r+1]
		idx, val := b.Indices[lo:hi], b.Values[lo:hi]
		val = val[:len(idx)]
		y := class(label, r, width)
		logits(w, o, dim, idx, val, z)
		zy := z[y]
		l := softmax(z) - zy // -log p_y = log Σexp(z) - z_y
		z[y] -= 1
		if len(b.Weights) > 0 {
			l = weigh(z, l, b.Weights[r])
		}
		loss += l
		g.push(idx, val, uint32(g.examples+r))
		g.d = append(g.d, z...)
	}
	return loss
}

// logits sets z to the logits W·x + b of one example (indices idx < dim,
// values val), panicking on an index >= dim.
func logits(w []float32, o offsets, dim uint32, idx []uint32, val []float32, z []float64) {
	width := len(z)
	if width == 1 {
		z[0] = dot(w, o, dim, idx, val)
		return
	}
	off := o.of(dim)
	for c, v := range w[off : off+width] {
		z[c] = float64(v)
	}
	for i, k := range idx {
		if k >= dim {
			panic(fmt.Sprintf("sgd: feature %d, model dim %d", k, dim))
		}
		off := o.of(k)
		row := w[off : off+width]
		v := float64(val[i])
		for c := range z {
			z[c] += float64(row[c]) * v
		}
	}
}

// softmax replaces the logits z by probabilities and returns
// log(sum(exp(z))) of the original logits, computed with the largest logit
// subtracted so no exp overflows.
func softmax(z []float64) (lse float64) {
	mx := z[0]
	for _, v := range z[1:] {
		mx = math.Max(mx, v)
	}
	var sum float64
	for c, v := range z {
		e := math.Exp(v - mx)
		z[c] = e
		sum += e
	}
	inv := 1 / sum
	for c := range z {
		z[c] *= inv
	}
	return mx + math.Log(sum)
}

// Collect resets out, appends the summed gradient's rows in ascending row
// order (Width values each; a row that occurs twice in one example or in
// several examples appears once), the bias row last (an MLP's W2 and b2
// rows follow it), and resets g for the next batch. It allocates only while out grows.
func (g *Grad) Collect(out *model.Sparse) {
	out.Reset()
	if g.examples == 0 {
		return
	}
	ents := g.sortEntries()
	if g.width == 1 && g.mlp == nil {
		g.collect1(out, ents)
	} else {
		g.collectN(out, ents)
	}
	if g.mlp != nil {
		g.collectMLP(out)
	}
	g.ents, g.d, g.examples = g.ents[:0], g.d[:0], 0
}

// collect1 is Collect for one value per row (Logreg).
func (g *Grad) collect1(out *model.Sparse, ents []entry) {
	d := g.d
	idx, val := out.Idx, out.Val
	for i := 0; i < len(ents); {
		k := ents[i].k
		var sum float64
		for ; i < len(ents) && ents[i].k == k; i++ {
			sum += d[ents[i].r] * float64(ents[i].v)
		}
		idx = append(idx, k)
		val = append(val, float32(sum))
	}
	var bias float64
	for _, dr := range d {
		bias += dr
	}
	out.Idx, out.Val = append(idx, g.dim), append(val, float32(bias))
}

// collectN is Collect for Width > 1 (Softmax).
func (g *Grad) collectN(out *model.Sparse, ents []entry) {
	width, d, sum := g.width, g.d, g.sum
	for i := 0; i < len(ents); {
		k := ents[i].k
		clear(sum)
		for ; i < len(ents) && ents[i].k == k; i++ {
			e := ents[i]
			dr := d[int(e.r)*width : int(e.r+1)*width]
			v := float64(e.v)
			for c, dc := range dr[:len(sum)] {
				sum[c] += dc * v
			}
		}
		g.emit(out, k)
	}
	clear(sum)
	for r := 0; r < g.examples; r++ {
		for c, dc := range d[r*width : (r+1)*width] {
			sum[c] += dc
		}
	}
	g.emit(out, g.dim)
}

// emit appends row k with the values in g.sum to out.
func (g *Grad) emit(out *model.Sparse, k uint32) {
	out.Idx = append(out.Idx, k)
	n := len(out.Val)
	out.Val = slices.Grow(out.Val, len(g.sum))[:n+len(g.sum)]
	for c, v := range g.sum {
		out.Val[n+c] = float32(v)
	}
}

// sortEntries sorts g.ents by feature, stably (each feature's entries stay
// in example order), and returns the sorted slice, which is g.ents or
// g.tmp.
//
// A batch's features are spread over the model's rows, so one counting
// pass on the top bits into about as many buckets as entries leaves each
// bucket with a handful of distinct features, which an insertion sort then
// orders in about one more pass (copies of a hot feature are equal keys and
// never move). If the keys are clustered and the insertion sort would move
// too much, an LSD radix sort finishes the job.
func (g *Grad) sortEntries() []entry {
	a := g.ents
	if cap(g.tmp) < len(a) {
		g.tmp = make([]entry, len(a), cap(g.ents))
	}
	b := g.tmp[:len(a)]
	if g.keyBits == 0 || len(a) < 2 {
		return a // a one-feature model (every key is 0) or nothing to order
	}
	bb := min(bits.Len(uint(len(a))), g.keyBits, bucketBits)
	shift := uint(g.keyBits - bb)
	count := g.count[:1<<bb]
	clear(count)
	for _, e := range a {
		count[e.k>>shift]++
	}
	pos := uint32(0)
	for i, n := range count {
		count[i] = pos
		pos += n
	}
	for _, e := range a {
		j := e.k >> shift
		b[count[j]] = e
		count[j]++
	}
	sorted, spare := b, a
	if shift > 0 && !insertionSort(b, 8*len(b)) {
		sorted, spare = g.radixSort(b, a)
	}
	g.ents, g.tmp = sorted[:0], spare[:0] // keep both buffers
	return sorted
}

// bucketBits caps the buckets of sortEntries' first pass: 2^16 uint32
// counters (256 KiB) stay in L2 cache.
const bucketBits = 16

// insertionSort sorts a by feature, stably, unless that takes more than
// budget moves; it reports whether it finished. Unfinished, a is still a
// permutation that keeps equal features in their original order.
func insertionSort(a []entry, budget int) bool {
	for i := 1; i < len(a); i++ {
		e := a[i]
		j := i
		for ; j > 0 && a[j-1].k > e.k; j-- {
			a[j] = a[j-1]
		}
		a[j] = e
		if budget -= i - j; budget < 0 {
			return false
		}
	}
	return true
}

// radixBits is the digit of the fallback LSD radix sort: 2^12 uint32
// counters per pass (16 KiB) stay in L1 cache, and any uint32 key sorts in
// at most 3 passes.
const radixBits = 12

// radixSort sorts a by feature with a stable LSD radix sort, using b (same
// length) as the other buffer, and returns the sorted and the spare buffer.
func (g *Grad) radixSort(a, b []entry) (sorted, spare []entry) {
	passes := (g.keyBits + radixBits - 1) / radixBits
	digit := uint((g.keyBits + passes - 1) / passes)
	size := 1 << digit
	mask := uint32(size - 1)
	count := g.count[:3*size]
	clear(count)
	c0, c1, c2 := count[:size], count[size:2*size], count[2*size:]
	for _, e := range a {
		k := e.k
		c0[k&mask]++
		c1[k>>digit&mask]++
		c2[k>>(2*digit)&mask]++
	}
	for p := range passes {
		shift := uint(p) * digit
		c := count[p*size : (p+1)*size]
		if int(c[a[0].k>>shift&mask]) == len(a) {
			continue // every key has this digit: the pass would not move anything
		}
		pos := uint32(0)
		for i, n := range c {
			c[i] = pos
			pos += n
		}
		for _, e := range a {
			j := e.k >> shift & mask
			b[c[j]] = e
			c[j]++
		}
		a, b = b, a
	}
	return a, b
}

// Predict sets out (len 1 for Logreg, Classes otherwise) to the model's
// probabilities for one example with indices idx (< Dim) and values val:
// out[0] = P(y=1) for Logreg, out[c] = P(class c) for Softmax and MLP. It
// allocates nothing for up to 64 classes (and 256 hidden units).
func Predict(m *model.Model, idx []uint32, val []float32, out []float32) {
	width := outputs(m)
	if len(out) != width || len(val) != len(idx) {
		panic(fmt.Sprintf("sgd: Predict with %d indices, %d values, %d outputs for %d", len(idx), len(val), len(out), width))
	}
	var buf [64]float64
	var hbuf [256]float64
	var z, h []float64
	if width <= len(buf) {
		z = buf[:width]
	} else {
		z = make([]float64, width)
	}
	if m.Hidden <= len(hbuf) {
		h = hbuf[:m.Hidden]
	} else {
		h = make([]float64, m.Hidden)
	}
	scores(m, offsetsOf(&m.Layout), idx, val, z, h)
	if m.Kind == model.Logreg {
		p, _ := sigmoidLoss(z[0], 0)
		out[0] = float32(p)
		return
	}
	softmax(z)
	for c, p := range z {
		out[c] = float32(p)
	}
}
