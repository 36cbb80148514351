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
	rows    []data.Batch // the test set, re-indexed, in the parts it was read in (readAll)
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
	if e.numRows() == 0 {
		return nil, fmt.Errorf("test set: %w", sgd.ErrNoData)
	}
	idx := make([][]uint32, len(e.rows))
	for i := range e.rows {
		idx[i] = e.rows[i].Indices
	}
	e.keys = compactIndices(idx, m.Dim)
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

// numRows is the number of rows of the test set.
func (e *evaluator) numRows() int {
	n := 0
	for i := range e.rows {
		n += e.rows[i].Rows()
	}
	return n
}

// readAll reads every row of src, in batches of up to 1,000 rows, each
// copied once from the reader's batch into slices of its own size, which
// are the test set from then on. Appending batch after batch to one
// growing batch allocated five times the test set (a large slice grows by
// a quarter) and copied it about four times; copying the parts into one
// batch of the whole set's size copied it twice (BenchmarkEvaluator/build;
// TestReadAll pins the rows).
func readAll(src data.Source) ([]data.Batch, error) {
	var parts []data.Batch
	var b data.Batch
	for {
		n, err := src.Next(&b, 1000)
		if n > 0 {
			part := sizedBatch(b.Rows(), b.NNZ(), len(b.Weights) > 0)
			part.AppendRows(&b)
			parts = append(parts, part)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return parts, nil
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
	return e.ev.Evaluate(e.compact, &partsSource{parts: e.rows}, batch)
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

// partsSource reads batches held in memory one after the other, as one
// set of rows (a batch it returns may span two of them).
type partsSource struct {
	parts []data.Batch
	part  int // the part being read
	pos   int // the next row of parts[part]
	rows  int // rows read
}

func (s *partsSource) Next(b *data.Batch, max int) (int, error) {
	b.Reset()
	n := 0
	for s.part < len(s.parts) && n < max {
		p := &s.parts[s.part]
		if s.pos == p.Rows() {
			s.part, s.pos = s.part+1, 0
			continue
		}
		idx, val := p.Row(s.pos)
		for i, k := range idx {
			b.Add(k, val[i])
		}
		b.EndRowWeighted(p.Labels[s.pos], p.Weight(s.pos))
		s.pos++
		n++
	}
	s.rows += n
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *partsSource) Stats() data.Stats { return data.Stats{Rows: int64(s.rows)} }
func (s *partsSource) Close() error      { return nil }

// compactIndices numbers the distinct values of the slices of idx densely
// in ascending order: it returns them sorted and replaces each index by
// its rank among them. Every index is below dim. With a dim no larger than
// 64 times the indices it marks them in a bitmap of dim bits and ranks by
// popcount, in linear time; a peer builds its evaluator while it starts
// training, and sorting a test set's 780,000 indices (20,000 Criteo-like
// rows) and searching each took about a fifth of a second of a capped
// peer's CPU. Larger dims sort.
func compactIndices(idx [][]uint32, dim uint64) []uint32 {
	n := 0
	for _, x := range idx {
		n += len(x)
	}
	if dim == 0 || dim > 64*uint64(n)+64 {
		feats := make([]uint32, 0, n)
		for _, x := range idx {
			feats = append(feats, x...)
		}
		slices.Sort(feats)
		feats = slices.Compact(feats)
		for _, x := range idx {
			for i, k := range x {
				j, _ := slices.BinarySearch(feats, k)
				x[i] = uint32(j)
			}
		}
		return feats
	}
	words := make([]uint64, (dim+63)/64)
	for _, x := range idx {
		for _, k := range x {
			words[k>>6] |= 1 << (k & 63)
		}
	}
	ranks := make([]uint32, len(words)) // set bits in the words before
	var feats []uint32
	for w, set := range words {
		ranks[w] = uint32(len(feats))
		for b := set; b != 0; b &= b - 1 {
			feats = append(feats, uint32(w)<<6|uint32(bits.TrailingZeros64(b)))
		}
	}
	for _, x := range idx {
		for i, k := range x {
			w := k >> 6
			x[i] = ranks[w] + uint32(bits.OnesCount64(words[w]&(1<<(k&63)-1)))
		}
	}
	return feats
}
