package sim

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// workload is what the peers train: logistic regression on generated
// sparse rows labelled by a planted model, cut into batches (or windows of
// LocalSteps batches), and the gradients and window changes a worker
// computes from them, the way sgd computes them (float64 sums in example
// order). It knows nothing of the network, the faults or the checks: the
// run asks it for a peer's rows, a feed's next batch and a compute
// request's answer, and the serial reference asks it for the model a
// serial run of the same rounds ends with.
type workload struct {
	seed                             uint64
	dim, rows, batch, fields, epochs int
	shards, localSteps               int
	localState                       bool // Options.LocalState
	combine                          train.Combine
	planted                          []float64 // weights per feature, bias last
	at                               []int32   // logregGrad's scratch
	bits                             []uint64  // batchKeys's scratch: one bit per row of the model
}

// row is one example.
type row struct {
	keys  []uint32
	label float32
}

// feed is where a process is in its peer's rows: the rows handed out to
// its core so far, and whether its core was told the data ended.
type feed struct {
	rows  []row
	pos   int // rows handed out
	ended bool
}

// newWorkload draws the planted model from r (the run's first draws).
func newWorkload(o Options, r *rng) *workload {
	w := &workload{seed: o.Seed, dim: o.Dim, rows: o.Rows, batch: o.Batch, fields: o.Fields, epochs: o.Epochs,
		shards: o.Shards, localSteps: o.LocalSteps, localState: o.LocalState, combine: o.Combine}
	w.planted = make([]float64, o.Dim+1)
	w.at = make([]int32, o.Dim+1)
	for i := range w.planted {
		w.planted[i] = (r.float()*2 - 1) * 2
	}
	return w
}

// steps is the batches of a round: LocalSteps, or 1.
func (w *workload) steps() int { return max(1, w.localSteps) }

// perRound is the rows a worker trains in a round.
func (w *workload) perRound() int { return w.batch * w.steps() }

// total is the rows a worker trains over all its epochs.
func (w *workload) total() int { return w.rows * w.epochs }

// data generates a peer's rows (the same for every process of a peer).
func (w *workload) data(peer string) []row {
	var h uint64 = w.seed
	for _, c := range peer {
		h = h*31 + uint64(c)
	}
	r := rng{s: h}
	rows := make([]row, w.rows)
	for i := range rows {
		keys := make([]uint32, 0, w.fields)
		for len(keys) < w.fields {
			// Skewed: low features are frequent, as in click data.
			u := r.float()
			k := uint32(float64(w.dim) * u * u)
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		z := w.planted[w.dim]
		for _, k := range keys {
			z += w.planted[k]
		}
		label := float32(0)
		if r.float() < 1/(1+math.Exp(-z)) {
			label = 1
		}
		rows[i] = row{keys: keys, label: label}
	}
	return rows
}

// newModel is an empty model of the workload's shape.
func (w *workload) newModel() *model.Model {
	m, err := model.New(model.Logreg, uint64(w.dim), 2, w.shards, model.DefaultOptConfig(model.AdaGrad))
	if err != nil {
		panic(err)
	}
	m.W = make([]float32, m.Layout.Len())
	return m
}

// newState is a worker's own optimizer state (LocalState) as it starts:
// a zero AdaGrad accumulator for every row of the model.
func (w *workload) newState() []float32 { return make([]float32, w.dim+1) }

// next cuts f's next batch (a round's rows): its keys and row count, or
// n 0 once every row of every epoch was handed out.
func (w *workload) next(f *feed) (keys []uint32, n int) {
	if f.pos >= w.total() {
		return nil, 0
	}
	lo := f.pos
	for f.pos-lo < w.perRound() && f.pos < w.total() {
		f.pos++
	}
	var rows []row
	for j := lo; j < f.pos; j++ {
		rows = append(rows, f.rows[j%w.rows])
	}
	return w.batchKeys(rows), f.pos - lo
}

// batchKeys returns the distinct keys of rows and the bias row, ascending.
func (w *workload) batchKeys(rows []row) []uint32 {
	if w.bits == nil {
		w.bits = make([]uint64, w.dim/64+1)
	}
	n := 1
	for _, r := range rows {
		for _, k := range r.keys {
			w.bits[k/64] |= 1 << (k % 64)
		}
		n += len(r.keys)
	}
	bias := uint32(w.dim)
	w.bits[bias/64] |= 1 << (bias % 64)
	keys := make([]uint32, 0, n)
	for i, b := range w.bits {
		for b != 0 {
			keys = append(keys, uint32(i*64+bits.TrailingZeros64(b)))
			b &= b - 1
		}
		w.bits[i] = 0
	}
	return keys
}

// batchRows returns the rows of a peer's batch (or window) i, counted from
// its first round: batches are consecutive Batch rows of all.
func (w *workload) batchRows(all []row, i uint64) []row {
	lo := int(i) * w.perRound()
	hi := min(lo+w.perRound(), w.total())
	var out []row
	for j := lo; j < hi; j++ {
		out = append(out, all[j%w.rows])
	}
	return out
}

// gradient answers a compute request for the batch i of a peer's rows all:
// the logistic regression gradient on the working set, as sgd computes it
// (per row, float64 sums in example order), or a window's changes; acc is
// the process's own optimizer state with LocalState (nil otherwise).
func (w *workload) gradient(all []row, i uint64, req *train.ComputeReq, acc []float32) ([]float32, float64) {
	rows := w.batchRows(all, i)
	if w.localSteps > 1 {
		return w.window(rows, req.Keys, req.Weights, int64(req.Round)*int64(w.localSteps), req.Workers, acc)
	}
	return logregGrad(rows, req.Keys, req.Weights, uint32(w.dim), w.at)
}

// window trains a window's rows, Batch at a time, on a local copy of the
// wide rows of keys (weights and AdaGrad's accumulator), as a worker with
// windows of local steps does, and returns each row's change and the
// summed loss. The local copy is a whole model of the simulator's small
// dimension; its steps are model.Apply's, the owners' own, with AdaGrad's
// accumulator seen by workers workers as sgd.Window sees it.
//
// With acc (LocalState: the worker keeps its own state) the rows fetched
// are plain (vals, a weight a row) and the accumulators are the worker's
// own, not scaled (they sum its own steps alone), at the rate for workers
// as above; the accumulators go back into acc and the change returned is
// the weights' alone.
func (w *workload) window(rows []row, keys []uint32, vals []float32, step0 int64, workers int, acc []float32) ([]float32, float64) {
	m := w.newModel()
	m.OwnAll()
	sw := m.StateWidth(true)
	scale := float32(1)
	if workers > 1 {
		scale = 1 / float32(workers)
		m.Opt.LR /= math.Sqrt(float64(workers))
	}
	var in model.Sparse
	if acc != nil {
		in.Idx, in.Val = keys, make([]float32, 0, len(keys)*sw)
		for i, k := range keys {
			in.Val = append(in.Val, vals[i], acc[k]) // (logreg, AdaGrad: weight, accumulator)
		}
	} else {
		in = model.Sparse{Idx: keys, Val: slices.Clone(vals)}
		for i := range keys {
			in.Val[i*sw+1] *= scale // (logreg, AdaGrad: weight, accumulator)
		}
	}
	m.AddDeltas(&in) // onto zeros: the rows as fetched
	var loss float64
	for h := 0; h*w.batch < len(rows); h++ {
		b := rows[h*w.batch : min((h+1)*w.batch, len(rows))]
		bk := w.batchKeys(b)
		wt := make([]float32, len(bk))
		for i, k := range bk {
			wt[i] = m.Row(k)[0]
		}
		g, l := logregGrad(b, bk, wt, uint32(w.dim), w.at)
		loss += l
		m.Apply(&model.Sparse{Idx: bk, Val: g}, len(b), step0+int64(h))
	}
	if acc != nil {
		delta := make([]float32, len(keys))
		var wide []float32
		for i, k := range keys {
			wide = m.AppendWide(wide[:0], k)
			delta[i] = wide[0] - in.Val[i*sw]
			acc[k] = wide[1]
		}
		return delta, loss
	}
	delta := make([]float32, 0, len(vals))
	for i, k := range keys {
		delta = m.AppendWide(delta, k)
		for c := range sw {
			delta[i*sw+c] -= in.Val[i*sw+c]
		}
	}
	return delta, loss
}

// serial trains the rounds of the peers whose rows are peers (in member
// order) one after the other on one model, as one process would: each
// round's contributions summed in member order through the owners' guards
// (G2), then applied (or, with windows, added, averaged by Mean). With
// LocalState each peer trains its windows with its own accumulators, kept
// from window to window, and the model takes the weights' changes alone
// (model.AddWeightDeltas).
func (w *workload) serial(peers [][]row) *model.Model {
	m := w.newModel()
	for sh := range w.shards {
		m.Own(sh)
	}
	rounds := (w.total() + w.perRound() - 1) / w.perRound()
	bound := train.DefaultMaxRowGrad(m.Kind)
	var sum, tmp, guard model.Sparse
	var parts []*model.Sparse
	xw := m.StateWidth(true) // a window's rows: wide, or the weights alone with LocalState
	accs := make([][]float32, len(peers))
	if w.localState {
		xw = m.Layout.Width
		for i := range accs {
			accs[i] = w.newState()
		}
	}
	for r := range rounds {
		sum.Reset()
		parts = parts[:0]
		n := 0
		for pi, all := range peers {
			rows := w.batchRows(all, uint64(r))
			if len(rows) == 0 {
				continue
			}
			keys := w.batchKeys(rows)
			if w.localSteps > 1 {
				// A window: each worker's changes from the same start,
				// summed in member order, then added (model.AddDeltas, or
				// model.AddWeightDeltas with LocalState).
				var vals []float32
				for _, k := range keys {
					if w.localState {
						vals = append(vals, m.Row(k)...)
					} else {
						vals = m.AppendWide(vals, k)
					}
				}
				workers := len(peers) // (summed changes: each counts the others' steps)
				if w.combine == train.Mean {
					workers = 1 // (averaged changes: a lone peer's steps)
				}
				d, _ := w.window(rows, keys, vals, int64(r)*int64(w.localSteps), workers, accs[pi])
				part := model.Sparse{Idx: keys, Val: d}
				kept, _ := train.GuardRows(&part, xw, 1, bound*bound*float64(w.localSteps), &guard)
				if w.combine == train.Mean || w.combine == train.Capped {
					parts = append(parts, &model.Sparse{Idx: slices.Clone(kept.Idx), Val: slices.Clone(kept.Val)})
				}
				tmp.Add(&sum, kept, xw)
				sum, tmp = tmp, sum
				n += len(rows)
				continue
			}
			wt := make([]float32, len(keys))
			for i, k := range keys {
				wt[i] = m.Row(k)[0]
			}
			g, _ := logregGrad(rows, keys, wt, uint32(w.dim), w.at)
			part := model.Sparse{Idx: keys, Val: g}
			kept, _ := train.GuardRows(&part, 1, uint64(len(rows)), bound, &guard)
			tmp.Add(&sum, kept, 1)
			sum, tmp = tmp, sum
			n += len(rows)
		}
		if n > 0 && w.localSteps > 1 {
			switch w.combine {
			case train.Mean:
				meanRows(&sum, parts, m.Layout.Width, xw, 1)
			case train.Capped:
				meanRows(&sum, parts, m.Layout.Width, xw, train.CappedFactor)
			}
			if w.localState {
				m.AddWeightDeltas(&sum)
			} else {
				m.AddDeltas(&sum)
			}
		} else if n > 0 {
			m.Apply(&sum, n, int64(r))
		}
	}
	return m
}

// logregGrad is the summed gradient of rows at weights (one per key).
// at is scratch of Dim+1 entries, all 0, left so: the position+1 of each key.
func logregGrad(rows []row, keys []uint32, w []float32, bias uint32, at []int32) ([]float32, float64) {
	for i, k := range keys {
		at[k] = int32(i + 1)
	}
	defer func() {
		for _, k := range keys {
			at[k] = 0
		}
	}()
	pos := func(k uint32) int {
		i := at[k]
		if i == 0 {
			panic(fmt.Sprintf("sim: row %d not in the batch's keys", k))
		}
		return int(i - 1)
	}
	bi := pos(bias)
	sum := make([]float64, len(keys))
	var loss float64
	for _, r := range rows {
		z := float64(w[bi])
		for _, k := range r.keys {
			z += float64(w[pos(k)])
		}
		p := 1 / (1 + math.Exp(-z))
		d := p - float64(r.label)
		if r.label == 1 {
			loss += -math.Log(max(p, 1e-12))
		} else {
			loss += -math.Log(max(1-p, 1e-12))
		}
		for _, k := range r.keys {
			sum[pos(k)] += d
		}
		sum[bi] += d
	}
	g := make([]float32, len(keys))
	for i, v := range sum {
		g[i] = float32(v)
	}
	return g, loss
}

// meanRows sets dst to parts combined as train.Mean (capped 1) and
// train.Capped (capped train.CappedFactor) combine a window: per row, the
// mean of the weight changes of the k parts that have it times min(k,
// capped), and the sum of their state changes, summed in float32 in the
// parts' (member) order and divided in float32 by k/min(k, capped)
// (written here on its own, as the check of the owners' MeanSum).
func meanRows(dst *model.Sparse, parts []*model.Sparse, width, sw int, capped float32) {
	count := map[uint32]int{}
	sums := map[uint32][]float32{}
	for _, p := range parts {
		for i, k := range p.Idx {
			count[k]++
			if sums[k] == nil {
				sums[k] = make([]float32, sw)
			}
			for c := range sw {
				sums[k][c] += p.Val[i*sw+c]
			}
		}
	}
	keys := make([]uint32, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst.Reset()
	row := make([]float32, sw)
	for _, k := range keys {
		copy(row, sums[k])
		n := float32(count[k])
		if n > 1 && capped > 1 {
			n /= min(n, capped)
		}
		for c := range width {
			row[c] /= n
		}
		dst.Append(k, row)
	}
}
