package trainer

import (
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// evaluator evaluates the run's model on the test set from the values of
// only the rows the test set uses: a peer holds its shards, not the model,
// so it fetches those rows from their owners and evaluates a compact copy
// of the model in which they are numbered densely. The test set is read
// once, re-indexed to the compact numbering, and kept in memory.
type evaluator struct {
	keys    []uint32     // the model rows to fetch, ascending: the test set's features, then the rows past Dim (bias, an MLP's W2 and b2)
	compact *model.Model // those rows, feature k at its position in keys
	rows    data.Batch   // the test set, re-indexed
	ev      sgd.Evaluator
}

// TestSet is a test set being read into an evaluator on a goroutine of its
// own (ReadTestSet), for Run.
type TestSet struct {
	done chan struct{}
	ev   *evaluator
	err  error
}

// ReadTestSet starts reading the test set that open opens for a peer of
// model m. A peer calls it as soon as
// its model exists, so the read overlaps the wait for the cluster to form
// instead of competing with the first rounds for the CPU: on a peer capped
// at 0.4 core, 20,000 Criteo-like rows delayed the first two rounds of
// every peer by about half a second (their fresh pages are what costs).
func ReadTestSet(m *model.Model, open func() (data.Source, error)) *TestSet {
	ts := &TestSet{done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		ts.ev, ts.err = newEvaluator(m, open)
	}()
	return ts
}

func newEvaluator(m *model.Model, test func() (data.Source, error)) (*evaluator, error) {
	src, err := test()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	e := &evaluator{}
	if e.rows, err = readAll(src); err != nil {
		return nil, fmt.Errorf("test set: %w", err)
	}
	if e.rows.Rows() == 0 {
		return nil, fmt.Errorf("test set: %w", sgd.ErrNoData)
	}
	e.keys = compactIndices(e.rows.Indices, m.Dim)
	feats := e.keys
	for k := uint32(m.Dim); uint64(k) < m.Layout.Features; k++ {
		e.keys = append(e.keys, k)
	}
	dim := uint64(max(len(feats), 1))
	if m.Kind == model.MLP {
		e.compact, err = model.NewMLP(dim, m.Classes, m.Hidden, 1, m.Opt, 0)
	} else {
		e.compact, err = model.New(m.Kind, dim, m.Classes, 1, m.Opt)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// readAll reads every row of src into one batch. It keeps each batch it
// reads in slices of the batch's size, then copies them into slices of
// the whole set's size: appending batch after batch to one growing batch
// allocated five times the test set (a large slice grows by a quarter)
// and copied it about four times, most of a capped peer's time building
// its evaluator (BenchmarkEvaluator/build).
func readAll(src data.Source) (data.Batch, error) {
	var parts []data.Batch
	var b data.Batch
	rows, nnz, weighted := 0, 0, false
	for {
		n, err := src.Next(&b, 1000)
		if n > 0 {
			part := sizedBatch(b.Rows(), b.NNZ(), len(b.Weights) > 0)
			part.AppendRows(&b)
			parts = append(parts, part)
			rows, nnz, weighted = rows+b.Rows(), nnz+b.NNZ(), weighted || len(b.Weights) > 0
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return data.Batch{}, err
		}
	}
	all := sizedBatch(rows, nnz, weighted)
	for i := range parts {
		all.AppendRows(&parts[i])
		parts[i] = data.Batch{}
	}
	return all, nil
}

// sizedBatch is an empty batch with room for rows rows of nnz nonzeros
// (and their weights).
func sizedBatch(rows, nnz int, weighted bool) data.Batch {
	b := data.Batch{
		Labels:  make([]float32, 0, rows),
		Offsets: make([]int, 0, rows+1),
		Indices: make([]uint32, 0, nnz),
		Values:  make([]float32, 0, nnz),
	}
	if weighted {
		b.Weights = make([]float32, 0, rows)
	}
	return b
}

// evaluate sets the compact model's rows from values (len(keys)·Width, in
// keys' order) and evaluates it on the test set in batches of batch rows.
func (e *evaluator) evaluate(values []float32, batch int) (sgd.Metrics, error) {
	w := e.compact.Layout.Width
	if len(values) != len(e.keys)*w {
		return sgd.Metrics{}, fmt.Errorf("evaluate: %d values for %d rows of width %d", len(values), len(e.keys), w)
	}
	nf := len(e.keys) - int(e.compact.Layout.Features-e.compact.Dim)
	for i, k := range e.keys {
		row := uint32(i)
		if i >= nf {
			row = e.compact.Bias() + uint32(i-nf) // rows past Dim keep their order
		}
		_ = k
		copy(e.compact.Row(row), values[i*w:(i+1)*w])
	}
	return e.ev.Evaluate(e.compact, &memSource{b: &e.rows}, batch)
}

// memSource reads a batch held in memory.
type memSource struct {
	b   *data.Batch
	pos int
}

func (s *memSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	n := 0
	for s.pos < s.b.Rows() && n < max {
		idx, val := s.b.Row(s.pos)
		for i, k := range idx {
			b.Add(k, val[i])
		}
		b.EndRowWeighted(s.b.Labels[s.pos], s.b.Weight(s.pos))
		s.pos++
		n++
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *memSource) Stats() data.Stats { return data.Stats{Rows: int64(s.pos)} }
func (s *memSource) Close() error      { return nil }

// compactIndices numbers the distinct values of idx densely in ascending
// order: it returns them sorted and replaces each index by its rank among
// them. Every index is below dim. With a dim no larger than 64 times the
// indices it marks them in a bitmap of dim bits and ranks by popcount, in
// linear time; a peer builds its evaluator while it starts training, and
// sorting a test set's 780,000 indices (20,000 Criteo-like rows) and
// searching each took about a fifth of a second of a capped peer's CPU.
// Larger dims sort.
func compactIndices(idx []uint32, dim uint64) []uint32 {
	if dim == 0 || dim > 64*uint64(len(idx))+64 {
		feats := slices.Clone(idx)
		slices.Sort(feats)
		feats = slices.Compact(feats)
		for i, k := range idx {
			j, _ := slices.BinarySearch(feats, k)
			idx[i] = uint32(j)
		}
		return feats
	}
	words := make([]uint64, (dim+63)/64)
	for _, k := range idx {
		words[k>>6] |= 1 << (k & 63)
	}
	ranks := make([]uint32, len(words)) // set bits in the words before
	var feats []uint32
	for w, set := range words {
		ranks[w] = uint32(len(feats))
		for b := set; b != 0; b &= b - 1 {
			feats = append(feats, uint32(w)<<6|uint32(bits.TrailingZeros64(b)))
		}
	}
	for i, k := range idx {
		w := k >> 6
		idx[i] = ranks[w] + uint32(bits.OnesCount64(words[w]&(1<<(k&63)-1)))
	}
	return feats
}
