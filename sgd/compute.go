package sgd

import (
	"fmt"
	"runtime"
	"slices"
	"sort"

	"github.com/gossiptrain/gossiptrain/model"
)

// Worker computes gradients of prepared batches on gathered working sets,
// with up to Threads goroutines.
//
// Compute runs in two phases. Phase 1 goes over the examples: logits (an
// MLP's forward pass), the loss, and dloss/dz (an MLP's dloss/dh), each
// example on its own. Phase 2 goes over the working set's rows: a feature
// row's gradient is Σ dloss/dz · x over its examples, in example order,
// through the batch's transpose; the bias row and an MLP's W2 rows and b2
// sum over every example, in example order, one row at a time. Both phases
// split their items into contiguous chunks that the worker's goroutines
// take in turn; since every output is written by one chunk and summed in a
// fixed order, the result does not depend on the number of threads or on
// which goroutine ran what. The arithmetic is Grad's, operation for
// operation: Compute is bit-identical to Grad.Add and Grad.Collect on the
// same batch and weights.
//
// The goroutines are started by NewWorker and wait between calls; Close
// stops them. A Worker is not safe for concurrent use (one Compute at a
// time); it allocates nothing per Compute once its buffers have grown.
type Worker struct {
	shape   shape
	threads int
	pool    *pool

	// The current call's inputs and buffers, read by the chunks.
	p     *Prepared
	w, g  []float32
	d     []float64 // per example, width each: dloss/dz (dloss/dh for an MLP)
	h     []float64 // MLP: per example, the hidden activations
	dz    []float64 // MLP: per example, dloss/dz (classes each)
	loss  []float64 // per example
	split []int     // the current phase's chunk boundaries
	// chunkWork is computeChunkWork; tests lower it to split small batches.
	chunkWork int
	sums      [][]float64
	phase1    func(chunk int)
	phase2    func(chunk int)
	gather    func(chunk int)
	apply     func(chunk int)
	m         *model.Model
	keys      []uint32
	dst       []float32
	grad      *model.Sparse
	n         int
	step      int64
	parts     []model.Sparse // Apply's chunks
}

// chunksPerThread is how many chunks a phase is split into per thread:
// enough that a goroutine descheduled by another process leaves only a
// small chunk to the others, few enough that handing them out costs
// nothing measurable.
const chunksPerThread = 4

// NewWorker returns a Worker for models shaped like m (kind, layout and
// dimensions; the weights are not read) that uses up to threads
// goroutines, the caller's included; threads <= 1 computes on the caller
// alone.
func NewWorker(m *model.Model, threads int) *Worker {
	threads = max(threads, 1)
	w := &Worker{shape: shapeOf(m), threads: threads, pool: newPool(threads - 1), chunkWork: computeChunkWork}
	w.phase1, w.phase2, w.gather, w.apply = w.examplesChunk, w.rowsChunk, w.gatherChunk, w.applyChunk
	n := 1
	if threads > 1 {
		n = threads * chunksPerThread
	}
	w.sums = make([][]float64, n)
	w.parts = make([]model.Sparse, n)
	for i := range w.sums {
		w.sums[i] = make([]float64, w.shape.width)
	}
	// A Worker dropped without Close still stops its goroutines.
	runtime.AddCleanup(w, func(p *pool) { p.close() }, w.pool)
	return w
}

// Threads is the number of goroutines Compute uses.
func (w *Worker) Threads() int { return w.threads }

// Close stops the worker's goroutines. The Worker must not be used
// afterwards.
func (w *Worker) Close() { w.pool.close() }

// Compute reads the working set weights (len(p.Keys)·Width floats, row i
// holding model row p.Keys[i]) and writes into grad (same shape) the SUM
// over p's examples of the per-example gradients of the log-loss, each
// times the example's importance weight (data.Batch.Weights; 1 when the
// batch has none), and returns the summed weighted log-loss, exactly as Grad.Add and Grad.Collect would
// on the model those rows come from. p must come from a Preparer for a
// model of the same shape; anything else panics.
func (w *Worker) Compute(p *Prepared, weights, grad []float32) (loss float64) {
	s := w.shape
	if p.shape != s {
		panic(fmt.Sprintf("sgd: batch prepared for %+v computed by a worker for %+v", p.shape, s))
	}
	if n := len(p.Keys) * s.width; len(weights) != n || len(grad) != n {
		panic(fmt.Sprintf("sgd: Compute with %d weights and %d gradient floats for %d rows of width %d", len(weights), len(grad), len(p.Keys), s.width))
	}
	n := p.examples
	if n == 0 {
		return 0
	}
	w.d = slices.Grow(w.d[:0], n*s.width)[:n*s.width]
	w.loss = slices.Grow(w.loss[:0], n)[:n]
	if s.kind == model.MLP {
		w.h = slices.Grow(w.h[:0], n*s.hidden)[:n*s.hidden]
		w.dz = slices.Grow(w.dz[:0], n*s.classes)[:n*s.classes]
	}
	w.p, w.w, w.g = p, weights, grad

	// Phase 1: examples, split by their cost (nonzeros plus the dense
	// work every example does).
	perExample := 1
	if s.kind == model.MLP {
		perExample = 2 * s.classes
	}
	total := len(p.col) + n*perExample
	chunks := min(n, w.chunks(total*s.width/w.chunkWork))
	w.split = slices.Grow(w.split[:0], chunks+1)[:chunks+1]
	for c := range w.split {
		target := total * c / chunks
		w.split[c] = sort.Search(n, func(r int) bool { return int(p.rowOff[r])+r*perExample >= target })
	}
	w.split[chunks] = n
	w.pool.run(chunks, w.phase1)

	// Phase 2: rows, split by their cost (nonzeros for a feature, every
	// example for the dense rows).
	rows := len(p.Keys)
	nnz := len(p.col)
	total = nnz + (rows-p.feats)*n
	chunks = min(rows, w.chunks(total*s.width/w.chunkWork))
	w.split = slices.Grow(w.split[:0], chunks+1)[:chunks+1]
	for c := range w.split {
		target := total * c / chunks
		w.split[c] = sort.Search(rows, func(i int) bool {
			if i <= p.feats {
				return int(p.keyOff[i]) >= target
			}
			return nnz+(i-p.feats)*n >= target
		})
	}
	w.split[chunks] = rows
	w.pool.run(chunks, w.phase2)

	for _, l := range w.loss {
		loss += l // in example order, as Grad.Add sums
	}
	w.p, w.w, w.g = nil, nil, nil
	return loss
}

// computeChunkWork is the least work (multiply-adds) a chunk of a
// Compute phase gets: below it, handing out chunks costs more than the
// second core saves (a logreg batch of 100 Criteo rows runs inline).
const computeChunkWork = 4096

// chunks is the number of chunks to split a job of items chunk-sized
// pieces into: at most chunksPerThread per thread, at least one, and one
// for a worker of one thread.
func (w *Worker) chunks(items int) int {
	if w.threads == 1 {
		return 1
	}
	return max(1, min(items, len(w.sums)))
}

// examplesChunk is phase 1 on the examples of one chunk.
func (w *Worker) examplesChunk(c int) {
	lo, hi := w.split[c], w.split[c+1]
	switch w.shape.kind {
	case model.Logreg:
		w.logregExamples(lo, hi)
	case model.MLP:
		w.mlpExamples(lo, hi)
	default:
		w.softmaxExamples(lo, hi)
	}
}

// logregExamples: z = b + w·x, p = sigmoid(z), dloss/dz = p - y.
func (w *Worker) logregExamples(lo, hi int) {
	p, ws, d, loss := w.p, w.w, w.d, w.loss
	bias := float64(ws[p.feats])
	col, val := p.col, p.val
	for r := lo; r < hi; r++ {
		a, b := p.rowOff[r], p.rowOff[r+1]
		cols, vals := col[a:b], val[a:b]
		vals = vals[:len(cols)]
		z := bias
		for i, k := range cols {
			z += float64(ws[k]) * float64(vals[i])
		}
		y := float64(p.labels[r])
		pr, l := sigmoidLoss(z, y)
		loss[r] = l
		d[r] = pr - y
		if len(p.weights) > 0 {
			wt := float64(p.weights[r])
			loss[r] *= wt
			d[r] *= wt
		}
	}
}

// softmaxExamples: z = b + W·x, p = softmax(z), dloss/dz = p - onehot(y),
// computed in place in d.
func (w *Worker) softmaxExamples(lo, hi int) {
	p, width := w.p, w.shape.width
	for r := lo; r < hi; r++ {
		z := w.d[r*width : (r+1)*width]
		w.linear(r, z)
		y := p.labels[r]
		zy := z[y]
		w.loss[r] = softmax(z) - zy
		z[y] -= 1
		if len(p.weights) > 0 {
			w.loss[r] = weigh(z, w.loss[r], p.weights[r])
		}
	}
}

// weigh multiplies an example's dloss/dz and loss by its importance
// weight, and returns the weighted loss.
func weigh(dz []float64, loss float64, weight float32) float64 {
	wt := float64(weight)
	for c := range dz {
		dz[c] *= wt
	}
	return loss * wt
}

// linear sets z (len width) to the bias row plus Σ row·x over example r's
// nonzeros: a linear model's logits, an MLP's hidden pre-activations.
func (w *Worker) linear(r int, z []float64) {
	p, ws, width := w.p, w.w, len(z)
	off := p.feats * width
	for c, v := range ws[off : off+width] {
		z[c] = float64(v)
	}
	a, b := p.rowOff[r], p.rowOff[r+1]
	cols, vals := p.col[a:b], p.val[a:b]
	vals = vals[:len(cols)]
	for i, k := range cols {
		off := int(k) * width
		row := ws[off : off+width]
		v := float64(vals[i])
		for c := range z {
			z[c] += float64(row[c]) * v
		}
	}
}

// mlpExamples is the MLP's forward and backward pass per example, as
// Grad.addMLP computes it, leaving W2's and b2's sums to phase 2: h =
// relu(W1·x + b1), z = W2·h + b2, dloss/dz = softmax(z) - onehot(y),
// dloss/dh = W2ᵀ·dloss/dz where the ReLU was on.
func (w *Worker) mlpExamples(lo, hi int) {
	p, ws, s := w.p, w.w, w.shape
	hidden, classes := s.hidden, s.classes
	w2 := (p.feats + 1) * hidden // W2's first row in the working set
	b2 := ws[(p.feats+1+classes)*hidden:][:classes]
	for r := lo; r < hi; r++ {
		h := w.h[r*hidden : (r+1)*hidden]
		z := w.dz[r*classes : (r+1)*classes]
		w.linear(r, h)
		for u, a := range h {
			if a < 0 {
				h[u] = 0
			}
		}
		for j := range z {
			row := ws[w2+j*hidden : w2+(j+1)*hidden]
			sum := float64(b2[j])
			for u, a := range h {
				sum += float64(row[u]) * a
			}
			z[j] = sum
		}
		y := p.labels[r]
		zy := z[y]
		w.loss[r] = softmax(z) - zy
		z[y] -= 1
		if len(p.weights) > 0 {
			w.loss[r] = weigh(z, w.loss[r], p.weights[r])
		}
		dh := w.d[r*hidden : (r+1)*hidden]
		clear(dh)
		for j, dj := range z {
			if dj == 0 {
				continue
			}
			row := ws[w2+j*hidden : w2+(j+1)*hidden]
			for u := range dh {
				dh[u] += dj * float64(row[u])
			}
		}
		for u, a := range h {
			if a <= 0 { // the ReLU passed nothing back where it was off
				dh[u] = 0
			}
		}
	}
}

// rowsChunk is phase 2 on the working-set rows of one chunk.
func (w *Worker) rowsChunk(c int) {
	p, s, width := w.p, w.shape, w.shape.width
	sum := w.sums[c]
	for i := w.split[c]; i < w.split[c+1]; i++ {
		out := w.g[i*width : (i+1)*width]
		switch {
		case i < p.feats && width == 1:
			var acc float64
			for _, e := range p.csc[p.keyOff[i]:p.keyOff[i+1]] {
				acc += w.d[e.r] * float64(e.v)
			}
			out[0] = float32(acc)
			continue
		case i < p.feats:
			clear(sum)
			for _, e := range p.csc[p.keyOff[i]:p.keyOff[i+1]] {
				dr := w.d[int(e.r)*width : int(e.r+1)*width]
				v := float64(e.v)
				for c, dc := range dr[:len(sum)] {
					sum[c] += dc * v
				}
			}
		case i == p.feats: // the bias (b1): Σ dloss/dz
			clear(sum)
			for r := range p.examples {
				for c, dc := range w.d[r*width : (r+1)*width] {
					sum[c] += dc
				}
			}
		case i < p.feats+1+s.classes: // MLP: W2 row j, Σ dloss/dz_j · h
			j := i - p.feats - 1
			clear(sum)
			for r := range p.examples {
				dj := w.dz[r*s.classes+j]
				if dj == 0 {
					continue
				}
				for u, a := range w.h[r*width : (r+1)*width] {
					sum[u] += dj * a
				}
			}
		default: // MLP: b2, Σ dloss/dz in its first Classes values
			clear(sum)
			for r := range p.examples {
				for j, dj := range w.dz[r*s.classes : (r+1)*s.classes] {
					if dj != 0 {
						sum[j] += dj
					}
				}
			}
		}
		for c, v := range sum {
			out[c] = float32(v)
		}
	}
}

// Gather copies model rows keys (valid rows of m) into dst, len(keys)·Width
// floats, row i holding row keys[i]: the working set Compute reads.
func Gather(m *model.Model, keys []uint32, dst []float32) {
	width := m.Layout.Width
	if len(dst) != len(keys)*width {
		panic(fmt.Sprintf("sgd: Gather of %d rows of width %d into %d floats", len(keys), width, len(dst)))
	}
	gatherRows(m, keys, dst)
}

// gatherRows is Gather without the length check.
func gatherRows(m *model.Model, keys []uint32, dst []float32) {
	o, w, rows := offsetsOf(&m.Layout), m.W, m.Layout.Features
	width := o.width
	for i, k := range keys {
		if uint64(k) >= rows {
			panic(fmt.Sprintf("sgd: Gather of row %d, model has %d rows", k, rows))
		}
		off := o.of(k)
		if width == 1 {
			dst[i] = w[off]
			continue
		}
		copy(dst[i*width:(i+1)*width], w[off:off+width])
	}
}

// Gather is the package's Gather split over the worker's goroutines, for
// working sets large enough that the model's cache misses dominate.
func (w *Worker) Gather(m *model.Model, keys []uint32, dst []float32) {
	width := m.Layout.Width
	if len(dst) != len(keys)*width {
		panic(fmt.Sprintf("sgd: Gather of %d rows of width %d into %d floats", len(keys), width, len(dst)))
	}
	chunks := w.chunks(len(keys) * width / gatherChunkFloats)
	if chunks <= 1 {
		gatherRows(m, keys, dst)
		return
	}
	w.m, w.keys, w.dst = m, keys, dst
	w.split = slices.Grow(w.split[:0], chunks+1)[:chunks+1]
	for c := range w.split {
		w.split[c] = len(keys) * c / chunks
	}
	w.pool.run(chunks, w.gather)
	w.m, w.keys, w.dst = nil, nil, nil
}

// gatherChunkFloats is the least a Gather chunk copies: below it, waking
// another goroutine costs more than it saves.
const gatherChunkFloats = 4096

func (w *Worker) gatherChunk(c int) {
	lo, hi := w.split[c], w.split[c+1]
	width := w.m.Layout.Width
	gatherRows(w.m, w.keys[lo:hi], w.dst[lo*width:hi*width])
}

// growTo returns s with length n, reusing its storage when it can.
func growTo(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// Apply is m.Apply(g, n, step) split over the worker's goroutines, each
// applying a contiguous range of g's rows: the same model, bit for bit,
// since every row's update reads and writes only that row's weights and
// optimizer state (model.Apply documents that calls on disjoint rows may
// run concurrently once m.Steps > step, which Apply makes so first).
func (w *Worker) Apply(m *model.Model, g *model.Sparse, n int, step int64) {
	width := m.Layout.Width
	chunks := w.chunks(len(g.Val) / applyChunkFloats)
	if chunks <= 1 || len(g.Val) != len(g.Idx)*width {
		m.Apply(g, n, step) // also reports a malformed g
		return
	}
	if step+1 > m.Steps {
		m.Steps = step + 1
	}
	rows := len(g.Idx)
	for c := range chunks {
		lo, hi := rows*c/chunks, rows*(c+1)/chunks
		w.parts[c] = model.Sparse{Idx: g.Idx[lo:hi], Val: g.Val[lo*width : hi*width]}
	}
	w.m, w.n, w.step = m, n, step
	w.pool.run(chunks, w.apply)
	w.m = nil
	clear(w.parts)
}

// applyChunkFloats is the least an Apply chunk updates: below it, waking
// another goroutine costs more than it saves.
const applyChunkFloats = 2048

func (w *Worker) applyChunk(c int) {
	if len(w.parts[c].Idx) > 0 {
		w.m.Apply(&w.parts[c], w.n, w.step)
	}
}
