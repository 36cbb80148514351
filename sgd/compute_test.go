package sgd

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// computeCase is one random model and batch for the property tests.
type computeCase struct {
	m    *model.Model
	rows []row
}

// randomCase draws a model of the kind (dimensions, shards, weight scale)
// and a batch for it: rows with duplicate features, zero values, empty
// rows and, sometimes, features clustered into one corner of a large
// model, which sends Prepare's sort to its radix fallback.
func randomCase(t testing.TB, rng *rand.Rand, kind model.Kind) computeCase {
	dims := []uint32{1, 2, 300, 70000, 1 << 24}
	switch kind {
	case model.Softmax:
		dims[4] = 1 << 20 // dim·classes floats: keep it small
	case model.MLP:
		dims = dims[:4] // (dim+classes+2)·hidden floats
	}
	dim := dims[rng.IntN(len(dims))]
	shards := []int{1, 4, 16}[rng.IntN(3)]
	for uint64(shards) > uint64(dim)+1 {
		shards /= 2
	}
	classes, hidden := 0, 0
	opt := model.DefaultOptConfig(model.SGD)
	var m *model.Model
	var err error
	switch kind {
	case model.Logreg:
		m, err = model.New(kind, uint64(dim), 0, shards, opt)
	case model.Softmax:
		classes = 2 + rng.IntN(5)
		m, err = model.New(kind, uint64(dim), classes, shards, opt)
	case model.MLP:
		classes = 2 + rng.IntN(4)
		hidden = classes + rng.IntN(12)
		m, err = model.NewMLP(uint64(dim), classes, hidden, shards, opt, rng.Uint64())
	}
	if err != nil {
		t.Fatal(err)
	}
	rows := randomRows(rng, 1+rng.IntN(60), dim, 1+rng.IntN(20), max(classes, 2))
	clustered := dim > 1<<16 && rng.IntN(2) == 0
	wide := rng.IntN(3) == 0
	for i := range rows {
		r := &rows[i]
		switch rng.IntN(10) {
		case 0:
			r.idx, r.val = nil, nil // an example with no features: only the bias
		case 1:
			for j := range r.val {
				r.val[j] = 0
			}
		}
		if wide {
			// Magnitudes 1e-4 to 1e20 with either sign: the float64 sums
			// (1e20 + 1 - 1e20 is 0 or 1) depend on their order, so a
			// summation order that differs from Grad's shows in the
			// float32 results (with values of one magnitude it almost
			// never would).
			mags := []float64{1e-4, 1, 17, 29, 1e4, 1e20}
			mags = mags[:1+rng.IntN(len(mags))] // some examples moderate: probabilities far from 0 and 1
			for j := range r.val {
				mag := mags[rng.IntN(len(mags))]
				r.val[j] = float32(math.Copysign(mag, rng.Float64()-0.5))
			}
		}
		if clustered {
			for j := range r.idx {
				r.idx[j] = 5000 - uint32((i*20+j)%5000)
			}
		}
	}
	scale := []float64{0.01, 0.3, 3}[rng.IntN(3)]
	weight := func() float32 {
		if wide { // a few magnitudes, so wide products cancel exactly or not at all
			return float32(math.Copysign([]float64{1e-4, 1e-2, 1, 1.5}[rng.IntN(4)], rng.Float64()-0.5))
		}
		return float32(rng.NormFloat64() * scale)
	}
	for _, r := range rows { // random weights on the rows in use
		for _, k := range r.idx {
			for c := range m.Row(k) {
				m.Row(k)[c] = weight()
			}
		}
	}
	for k := m.Bias(); uint64(k) < m.Layout.Features; k++ {
		for c := range m.Row(k) {
			m.Row(k)[c] = weight()
		}
	}
	return computeCase{m: m, rows: rows}
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// Property: Prepare, Gather and Compute give the rows, the gradient and the
// loss that Grad.Add and Grad.Collect give, bit for bit, with any number of
// threads, for every kind, on random models and batches (half of them with
// importance weights); Prepared and
// Worker buffers are reused from one case to the next, as a training loop
// reuses them.
func TestComputeMatchesGrad(t *testing.T) {
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		t.Run(kind.String(), func(t *testing.T) {
			var p Prepared
			workers := map[string]*Worker{}
			defer func() {
				for _, w := range workers {
					w.Close()
				}
			}()
			var sp model.Sparse
			check := func(seed uint64) bool {
				rng := rand.New(rand.NewPCG(seed, uint64(kind)))
				c := randomCase(t, rng, kind)
				m, b := c.m, batchOf(c.rows)
				if seed%2 == 1 { // importance weights, some 0
					for range b.Rows() {
						b.Weights = append(b.Weights, float32(rng.IntN(7))/2)
					}
				}
				g := NewGrad(m)
				want := g.Add(m, b)
				g.Collect(&sp)

				NewPreparer(m).Prepare(b, &p)
				if p.Examples() != len(c.rows) || p.NNZ() != b.NNZ() {
					t.Errorf("seed %d: Prepared %d examples, %d nonzeros; batch has %d, %d", seed, p.Examples(), p.NNZ(), len(c.rows), b.NNZ())
					return false
				}
				if !slices.Equal(p.Keys, sp.Idx) {
					t.Errorf("seed %d: Keys %v, Grad's rows %v", seed, p.Keys, sp.Idx)
					return false
				}
				width := m.Width()
				ws := make([]float32, len(p.Keys)*width)
				Gather(m, p.Keys, ws)
				for _, threads := range []int{1, 2, 3, 7} {
					key := fmt.Sprint(m.Kind, m.Dim, m.Classes, m.Hidden, threads)
					w := workers[key]
					if w == nil {
						w = NewWorker(m, threads)
						if threads > 2 {
							w.chunkWork = 1 // split even the smallest batch
						}
						workers[key] = w
					}
					grad := make([]float32, len(ws))
					for i := range grad {
						grad[i] = float32(math.NaN()) // every value must be written
					}
					loss := w.Compute(&p, ws, grad)
					if math.Float64bits(loss) != math.Float64bits(want) {
						t.Errorf("seed %d, %d threads: loss %v, Grad.Add %v", seed, threads, loss, want)
						return false
					}
					if !sameBits(grad, sp.Val) {
						t.Errorf("seed %d, %d threads: gradient differs from Grad.Collect's\n got %v\nwant %v", seed, threads, grad, sp.Val)
						return false
					}
					pws := make([]float32, len(ws))
					w.Gather(m, p.Keys, pws)
					if !sameBits(pws, ws) {
						t.Errorf("seed %d, %d threads: Worker.Gather differs from Gather", seed, threads)
						return false
					}
				}
				return true
			}
			if err := quick.Check(check, &quick.Config{MaxCount: 150}); err != nil {
				t.Error(err)
			}
		})
	}
}

// A working set large enough for Worker.Gather to split it (2^16 rows of a
// 2^20-feature model) is gathered like Gather gathers it, with any threads.
func TestWorkerGatherLarge(t *testing.T) {
	m := newModel(t, model.Softmax, 1<<20, 3, 8, model.DefaultOptConfig(model.SGD))
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range m.W {
		m.W[i] = float32(rng.NormFloat64())
	}
	keys := make([]uint32, 0, 1<<16)
	for k := uint32(0); k <= m.Bias(); k += 1 + uint32(rng.IntN(30)) {
		keys = append(keys, k)
	}
	want := make([]float32, len(keys)*3)
	Gather(m, keys, want)
	for i, k := range keys {
		if !sameBits(want[i*3:(i+1)*3], m.Row(k)) {
			t.Fatalf("Gather row %d (model row %d) = %v, want %v", i, k, want[i*3:(i+1)*3], m.Row(k))
		}
	}
	for _, threads := range []int{1, 2, 5} {
		w := NewWorker(m, threads)
		got := make([]float32, len(want))
		w.Gather(m, keys, got)
		w.Close()
		if !sameBits(got, want) {
			t.Errorf("%d threads: Worker.Gather differs from Gather", threads)
		}
	}
}

// At zero weights the gradient can be written down by hand: the Logreg
// case of TestGradHandComputed, through Prepare and Compute.
func TestComputeHandComputed(t *testing.T) {
	m := newModel(t, model.Logreg, 3, 0, 1, model.DefaultOptConfig(model.SGD))
	b := batchOf([]row{
		{[]uint32{0, 2}, []float32{1, 2}, 1},
		{[]uint32{2}, []float32{0.5}, 0},
	})
	var p Prepared
	NewPreparer(m).Prepare(b, &p)
	if !slices.Equal(p.Keys, []uint32{0, 2, 3}) {
		t.Fatalf("Keys %v, want [0 2 3] (features 0 and 2, bias 3)", p.Keys)
	}
	grad := make([]float32, 3)
	for _, threads := range []int{1, 2} {
		w := NewWorker(m, threads)
		loss := w.Compute(&p, make([]float32, 3), grad)
		w.Close()
		// p = 1/2: row 0 gets (1/2-1)·1, row 2 (1/2-1)·2 + (1/2-0)·1/2, the bias -1/2 + 1/2.
		if want := []float32{-0.5, -0.75, 0}; !slices.Equal(grad, want) || math.Abs(loss-2*math.Ln2) > 1e-15 {
			t.Errorf("%d threads: gradient %v loss %v, want %v and 2·log 2", threads, grad, loss, want)
		}
	}
}

// An MLP's working set is its features, b1, W2's rows and b2, in that
// (ascending) order.
func TestPreparedKeysMLP(t *testing.T) {
	m := newMLP(t, 10, 3, 4, 2, model.DefaultOptConfig(model.SGD))
	var p Prepared
	NewPreparer(m).Prepare(batchOf([]row{{[]uint32{7, 1, 7}, []float32{1, 1, 1}, 2}, {nil, nil, 0}}), &p)
	if want := []uint32{1, 7, 10, 11, 12, 13, 14}; !slices.Equal(p.Keys, want) {
		t.Errorf("Keys %v, want %v", p.Keys, want)
	}
	NewPreparer(m).Prepare(batchOf(nil), &p)
	if len(p.Keys) != 0 || p.Examples() != 0 {
		t.Errorf("empty batch: Keys %v, %d examples; want none", p.Keys, p.Examples())
	}
	w := NewWorker(m, 2)
	defer w.Close()
	if loss := w.Compute(&p, nil, nil); loss != 0 {
		t.Errorf("empty batch: loss %v", loss)
	}
}

// Prepare rejects what Grad.Add rejects, and Compute rejects a working
// set of the wrong size or a batch prepared for another model.
func TestPrepareComputeInvariants(t *testing.T) {
	m := newModel(t, model.Logreg, 4, 0, 1, model.DefaultOptConfig(model.SGD))
	pr := NewPreparer(m)
	var p Prepared
	mustPanic(t, "feature 4 in batch row 0", func() { pr.Prepare(batchOf([]row{{[]uint32{4}, []float32{1}, 0}}), &p) })
	mustPanic(t, "binary label 2", func() { pr.Prepare(batchOf([]row{{[]uint32{1}, []float32{1}, 2}}), &p) })
	s := newModel(t, model.Softmax, 4, 3, 1, model.DefaultOptConfig(model.SGD))
	ps := NewPreparer(s)
	mustPanic(t, "class 3", func() { ps.Prepare(batchOf([]row{{[]uint32{1}, []float32{1}, 3}}), &p) })
	mustPanic(t, "class 1.5", func() { ps.Prepare(batchOf([]row{{[]uint32{1}, []float32{1}, 1.5}}), &p) })

	pr.Prepare(batchOf([]row{{[]uint32{1, 3}, []float32{1, 1}, 1}}), &p) // keys 1, 3, bias 4
	w := NewWorker(m, 2)
	defer w.Close()
	mustPanic(t, "2 weights and 3 gradient floats", func() { w.Compute(&p, make([]float32, 2), make([]float32, 3)) })
	ws := NewWorker(s, 1)
	mustPanic(t, "computed by a worker for", func() { ws.Compute(&p, make([]float32, 9), make([]float32, 9)) })
	mustPanic(t, "Gather of row 5", func() { Gather(m, []uint32{5}, make([]float32, 1)) })
	mustPanic(t, "into 2 floats", func() { Gather(m, []uint32{1}, make([]float32, 2)) })
}

// Once buffers have grown, Prepare, Gather, Compute and Apply allocate
// nothing, with one thread or several.
func TestComputeAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		var m *model.Model
		classes := 5
		switch kind {
		case model.MLP:
			m = newMLP(t, 1000, classes, 32, 16, model.DefaultOptConfig(model.AdaGrad))
		case model.Logreg:
			classes = 2
			m = newModel(t, kind, 1<<20, 0, 16, model.DefaultOptConfig(model.SGD))
		default:
			m = newModel(t, kind, 1<<20, classes, 16, model.DefaultOptConfig(model.SGD))
		}
		m.OwnAll()
		batches := []*data.Batch{
			batchOf(randomRows(rng, 50, 1000, 20, classes)),
			batchOf(randomRows(rng, 2000, 1000, 20, classes)), // large enough to split Gather and Apply
		}
		for _, threads := range []int{1, 2} {
			pr := NewPreparer(m)
			w := NewWorker(m, threads)
			var p Prepared
			var ws, grad []float32
			var sp model.Sparse
			i := 0
			step := func() {
				pr.Prepare(batches[i%2], &p)
				i++
				n := len(p.Keys) * m.Width()
				ws, grad = slices.Grow(ws[:0], n)[:n], slices.Grow(grad[:0], n)[:n]
				w.Gather(m, p.Keys, ws)
				w.Compute(&p, ws, grad)
				sp.Idx, sp.Val = p.Keys, grad
				w.Apply(m, &sp, p.Examples(), m.Steps)
			}
			step()
			step()
			if a := testing.AllocsPerRun(20, step); a != 0 {
				t.Errorf("%v, %d threads: Prepare+Gather+Compute+Apply allocate %v times per step", kind, threads, a)
			}
			w.Close()
		}
	}
}

// The dense sums (a bias row, an MLP's b2) run over the examples in order,
// as Grad's do. Random batches rarely show their order (float64 sums of
// values of one size round the same either way once stored as float32),
// so this batch is built to: the logit is x itself, and the examples'
// dloss/dz are 1-9.4e-14, -1 and 1e-18, whose float64 sum is -9.4e-14 +
// 1e-18 in this order and -9.4e-14 in the reverse one.
func TestComputeSumsInExampleOrder(t *testing.T) {
	xs := []float32{30, -1000, -41.4}
	rows := []row{{[]uint32{0}, xs[:1], 0}, {[]uint32{0}, xs[1:2], 1}, {[]uint32{0}, xs[2:], 0}}
	lr := newModel(t, model.Logreg, 1, 0, 1, model.DefaultOptConfig(model.SGD))
	lr.Row(0)[0] = 1 // z = x
	// The MLP's z0 = relu(x) - relu(-x) = x and z1 = 0, so dloss/dz0 is
	// the logistic one with the classes swapped.
	mlp := newMLP(t, 1, 2, 2, 1, model.DefaultOptConfig(model.SGD))
	clear(mlp.W)
	copy(mlp.Row(0), []float32{1, -1}) // W1
	copy(mlp.Row(2), []float32{1, -1}) // W2 row 0
	mlpRows := []row{{[]uint32{0}, xs[:1], 1}, {[]uint32{0}, xs[1:2], 0}, {[]uint32{0}, xs[2:], 1}}
	for _, tc := range []struct {
		m    *model.Model
		rows []row
		row  uint32 // the summed row to look at
	}{{lr, rows, lr.Bias()}, {mlp, mlpRows, mlp.Bias2()}} {
		var sp model.Sparse
		g := NewGrad(tc.m)
		g.Add(tc.m, batchOf(tc.rows))
		g.Collect(&sp)
		var p Prepared
		NewPreparer(tc.m).Prepare(batchOf(tc.rows), &p)
		ws := make([]float32, len(p.Keys)*tc.m.Width())
		Gather(tc.m, p.Keys, ws)
		i, _ := slices.BinarySearch(p.Keys, tc.row)
		for _, threads := range []int{1, 3} {
			w := NewWorker(tc.m, threads)
			w.chunkWork = 1
			grad := make([]float32, len(ws))
			w.Compute(&p, ws, grad)
			w.Close()
			got := grad[i*tc.m.Width()]
			want := sp.Val[i*tc.m.Width()]
			// The same three dloss/dz summed the other way round:
			d0 := 1 / (1 + math.Exp(-30.0))
			d2 := math.Exp(float64(xs[2])) / (1 + math.Exp(float64(xs[2])))
			reversed := float32((d2 - 1) + d0)
			if got != want || got == reversed {
				t.Errorf("%v, %d threads: row %d sums to %g, Grad %g, the reverse order %g", tc.m.Kind, threads, tc.row, got, want, reversed)
			}
		}
	}
}

// gradLoop is the local loop as it was before Prepare and Compute: one
// Grad, Add, Collect and Apply per batch, on one goroutine. It returns the
// summed loss and the examples trained on.
func gradLoop(m *model.Model, rows []row, batch, epochs int, limit int64) (loss float64, examples int64) {
	m.OwnAll()
	g := NewGrad(m)
	var b data.Batch
	var sp model.Sparse
	for range epochs {
		src := newSource(rows)
		for limit == 0 || examples < limit {
			want := batch
			if limit > 0 {
				want = int(min(int64(want), limit-examples))
			}
			n, err := src.Next(&b, want)
			if n > 0 {
				loss += g.Add(m, &b)
				g.Collect(&sp)
				m.Apply(&sp, n, m.Steps)
				examples += int64(n)
			}
			if err != nil {
				break
			}
		}
	}
	return loss, examples
}

// Train (read-ahead, Prepare, Gather, Compute with 1 to 3 threads, Apply)
// makes the model the old Grad loop makes, bit for bit, with the same
// loss, for every kind and optimizer, over several epochs, a last short
// batch and a limit that stops mid-epoch.
func TestTrainMatchesGradLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		for _, opt := range []model.OptConfig{
			{Kind: model.SGD, LR: 0.3, L2: 0.01, Decay: 0.1, Power: 0.5},
			{Kind: model.AdaGrad, LR: 0.2, L2: 0.001, Eps: 1e-6},
			{Kind: model.FTRL, LR: 0.2, Beta: 1, L1: 0.001, L2: 0.01},
		} {
			classes := map[model.Kind]int{model.Logreg: 0, model.Softmax: 4, model.MLP: 3}[kind]
			const dim = 500
			rows := randomRows(rng, 230, dim, 12, max(classes, 2))
			fresh := func() *model.Model {
				if kind == model.MLP {
					return newMLP(t, dim, classes, 8, 8, opt)
				}
				return newModel(t, kind, dim, classes, 8, opt)
			}
			for _, limit := range []int64{0, 400} {
				checkTrainMatches(t, fmt.Sprintf("%v/%v limit %d", kind, opt.Kind, limit), fresh, rows, 32, 3, limit)
			}
		}
	}
	// Batches large enough that Gather and Apply split too.
	rows := randomRows(rng, 1200, 1<<16, 40, 2)
	fresh := func() *model.Model {
		return newModel(t, model.Logreg, 1<<16, 0, 16, model.DefaultOptConfig(model.AdaGrad))
	}
	checkTrainMatches(t, "logreg batch 400", fresh, rows, 400, 2, 0)
}

// checkTrainMatches trains fresh models on rows with Train and with the
// old Grad loop, and reports any difference in model, steps or loss.
func checkTrainMatches(t *testing.T, name string, fresh func() *model.Model, rows []row, batch, epochs int, limit int64) {
	t.Helper()
	ref := fresh()
	wantLoss, wantExamples := gradLoop(ref, rows, batch, epochs, limit)
	for _, threads := range []int{1, 2, 3} {
		m := fresh()
		cfg := DefaultConfig()
		cfg.Batch, cfg.Epochs, cfg.MaxExamples, cfg.Threads = batch, epochs, limit, threads
		sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{})
		if err != nil {
			t.Fatalf("%s, %d threads: %v", name, threads, err)
		}
		if m.Hash() != ref.Hash() || m.Steps != ref.Steps {
			t.Errorf("%s, %d threads: model %016x after %d steps, the Grad loop's %016x after %d", name, threads, m.Hash(), m.Steps, ref.Hash(), ref.Steps)
		}
		if sum.Examples != wantExamples || sum.TrainLoss != wantLoss/float64(wantExamples) {
			t.Errorf("%s, %d threads: %d examples, loss %v; the Grad loop %d, %v", name, threads, sum.Examples, sum.TrainLoss, wantExamples, wantLoss/float64(wantExamples))
		}
	}
}

// Worker.Apply, which splits a gradient's rows over its goroutines, makes
// the model m.Apply makes, with any threads, for every optimizer.
func TestWorkerApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, opt := range []model.OptConfig{
		{Kind: model.SGD, LR: 0.3, L2: 0.01, Decay: 0.5, Power: 0.5},
		{Kind: model.AdaGrad, LR: 0.2, L2: 0.01, Eps: 1e-6},
		{Kind: model.FTRL, LR: 0.2, Beta: 1, L1: 0.01, L2: 0.01},
	} {
		ref := newModel(t, model.Softmax, 20000, 5, 16, opt)
		ref.OwnAll()
		randomize(ref, rng, 0.5)
		var g model.Sparse
		for k := uint32(0); k <= ref.Bias(); k += 1 + uint32(rng.IntN(4)) {
			row := make([]float32, 5)
			for c := range row {
				row[c] = float32(rng.NormFloat64())
			}
			g.Append(k, row)
		}
		for _, threads := range []int{1, 2, 3} {
			m := ref.Clone()
			w := NewWorker(m, threads)
			want := ref.Clone()
			for step := range int64(3) {
				want.Apply(&g, 9, 10+step)
				w.Apply(m, &g, 9, 10+step)
			}
			w.Close()
			if m.Hash() != want.Hash() || m.Steps != want.Steps || m.Steps != 13 {
				t.Errorf("%v, %d threads: Worker.Apply differs from Apply (steps %d, want %d)", opt.Kind, threads, m.Steps, want.Steps)
			}
		}
	}
	m := newModel(t, model.Logreg, 10, 0, 1, model.DefaultOptConfig(model.SGD))
	m.OwnAll()
	w := NewWorker(m, 2)
	defer w.Close()
	mustPanic(t, "values for", func() { w.Apply(m, &model.Sparse{Idx: []uint32{1}, Val: []float32{1, 2}}, 1, 0) })
}

// A progress hook may ask a data.Shared source how far it got while
// Train's reader goroutine reads it (run with -race, as CI does): the
// pattern the train command's progress display uses.
func TestTrainHookReadsSharedStats(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(41, 42)), 2000, 50, 5, 2)
	m := newModel(t, model.Logreg, 50, 0, 4, model.DefaultOptConfig(model.SGD))
	var src data.Source
	open := func(int) (data.Source, error) {
		src = data.Shared(newSource(rows))
		return src, nil
	}
	cfg := DefaultConfig()
	cfg.Batch, cfg.Threads, cfg.ProgressEvery = 10, 2, time.Nanosecond
	var seen int64
	hooks := Hooks{Progress: func(p Progress) {
		st := src.Stats()
		if st.Rows < p.Examples || st.Rows < seen {
			t.Errorf("Stats says %d rows read after %d trained (and %d before)", st.Rows, p.Examples, seen)
		}
		seen = st.Rows
	}}
	if _, err := Train(context.Background(), m, cfg, open, nil, hooks); err != nil {
		t.Fatal(err)
	}
	if seen == 0 || src.Stats().Rows != 2000 {
		t.Errorf("Stats at the end %+v, last seen %d; want 2000 rows", src.Stats(), seen)
	}
}
