package sgd

import (
	"fmt"
	"math"

	"github.com/gossiptrain/gossiptrain/model"
)

// Window trains the batches of one window of local steps (node/train,
// Config.LocalSteps) on a local copy of the rows they touch: the worker
// fetched those rows once with their optimizer state, takes one optimizer
// step per batch on its copy, exactly as a lone peer's model would (the
// same Compute, the same model.Apply), and sends each row's change back,
// which the owners add up (model.AddDeltas).
//
// The local copy is a small model of the same kind and optimizer whose
// rows are the window's: feature i of the window is its local feature i,
// and the rows every example touches (the bias; an MLP's W2 and b2) keep
// their places after the features. It is reused from window to window
// and grows as windows touch more rows, so a Window allocates only while
// it grows. Not safe for concurrent use.
type Window struct {
	w     *Worker
	shape shape
	kind  model.Kind
	opt   model.OptConfig
	dim   uint64 // the global model's features: rows >= dim are its extra rows
	rows  uint64 // the global model's rows (Layout.Features)

	local    *model.Model // capacity local features, then the extra rows
	capacity int
	extra    int

	// keep is the optimizer state of every row this worker trained, by
	// global row (width·StatePerWeight values a row), when the window
	// keeps it (KeepState); nil otherwise. Allocated at the first window:
	// pages of rows never trained stay unmapped.
	keep      []float32
	keepState bool

	pos     []uint32 // a batch's keys as local rows
	weights []float32
	grad    []float32
	g       model.Sparse
}

// NewWindow returns a Window for models shaped like m (kind, dimensions,
// optimizer), computing with w (whose shape must be m's).
func NewWindow(m *model.Model, w *Worker) *Window {
	s := shapeOf(m)
	if w.shape != s {
		panic(fmt.Sprintf("sgd: a Window for %+v with a worker for %+v", s, w.shape))
	}
	return &Window{w: w, shape: s, kind: m.Kind, opt: m.Opt, dim: m.Dim, rows: m.Layout.Features, extra: s.extraRows()}
}

// KeepState makes the window keep the optimizer state of the rows it
// trains itself, from window to window, instead of taking it with the
// rows (node/train, Config.LocalState): Run's rows are then plain rows
// (weights only) and so are the changes it returns. The state starts at
// zero, each row's at the first window that trains it, and counts this
// worker's gradients only: with AdaGrad, N workers that share a row's
// examples each hold about an N-th of the sum one peer taking all their
// steps would (which the windows without KeepState start from, G/N), so
// Run takes it as it is and keeps the rate LR/√N. The state is this
// worker's alone: a peer that joins a run, or restarts, starts from zero.
// FTRL, whose weights follow from its state, cannot keep it (panics).
func (wd *Window) KeepState() {
	if wd.opt.Kind == model.FTRL {
		panic("sgd: a Window cannot keep FTRL's state: its weights follow from it")
	}
	wd.keepState = true
}

// Run trains batches, in order, from the rows of keys: keys are the
// union of the batches' keys (ascending), rows holds their rows as
// model.AppendWide gives them (weights, then optimizer state; the weights
// alone when the window keeps the state, KeepState), and batch h
// takes SGD step step0+h. It writes each row's change (its value after the
// last batch minus rows') into delta, shaped as rows, and returns the
// batches' summed log-loss (each batch's at the weights it was trained on).
// A batch whose gradient or loss is not finite (CheckFinite) takes no step
// and adds no loss; the first such is returned (the others train on).
//
// workers is the number of workers whose windows the owners add up. Each
// starts from the same rows, so with AdaGrad a worker's steps are as
// large as if it were alone, and N workers' changes added would move a
// row √N times too far early on (N·H steps each as large as the first);
// so the window trains as if each of its squared gradients had been seen
// N times, as one peer taking every worker's steps in turn would: its
// accumulator starts at G/N and its rate is LR/√N (the step
// LR·g/√(G + N·Σg²) exactly), and the accumulator's change it returns is
// Σg², which the owners sum to G's change. SGD needs nothing: N workers'
// steps of one start add up, to first order, to one peer's N·H steps, and
// FTRL's weight is computed from its summed z and n.
func (wd *Window) Run(batches []*Prepared, keys []uint32, rows, delta []float32, step0 int64, workers int) (loss float64, bad *NonFiniteError) {
	width := wd.shape.width
	spw := wd.opt.Kind.StatePerWeight()
	sw := width * (1 + spw) // the floats of a row in rows and delta
	keep := wd.keepState && spw > 0
	if keep {
		sw = width
		if wd.keep == nil {
			wd.keep = make([]float32, int(wd.rows)*width*spw)
		}
	}
	sr := width * spw // a row's state
	if len(rows) != len(keys)*sw || len(delta) != len(rows) {
		panic(fmt.Sprintf("sgd: Window.Run with %d row and %d delta floats for %d rows of width %d", len(rows), len(delta), len(keys), sw))
	}
	feats := 0
	for feats < len(keys) && uint64(keys[feats]) < wd.dim {
		feats++
	}
	wd.ensure(feats)
	m := wd.local
	scale := float32(1) // AdaGrad's accumulator, as seen by N workers (above)
	m.Opt.LR = wd.opt.LR
	if wd.opt.Kind == model.AdaGrad && workers > 1 {
		scale = 1 / float32(workers)
		m.Opt.LR = wd.opt.LR / math.Sqrt(float64(workers))
	}
	if keep {
		scale = 1 // (this worker's own sum: KeepState)
	}
	// Load: row i of keys into its local row.
	for i, k := range keys {
		lr := wd.localRow(k, i)
		copy(m.Row(lr), rows[i*sw:i*sw+width])
		if spw > 0 {
			j := int(lr) * sr
			st := m.State[0][j : j+sr]
			if keep {
				copy(st, wd.keep[int(k)*sr:int(k+1)*sr])
				continue
			}
			copy(st, rows[i*sw+width:(i+1)*sw])
			if scale != 1 {
				for c := range st {
					st[c] *= scale
				}
			}
		}
	}
	for h, p := range batches {
		if p.examples == 0 {
			continue
		}
		// The batch's keys are a subset of keys, both ascending.
		wd.pos = wd.pos[:0]
		j := 0
		for _, k := range p.Keys {
			for keys[j] != k {
				j++
				if j == len(keys) {
					panic(fmt.Sprintf("sgd: a batch key %d not among the window's keys", k))
				}
			}
			wd.pos = append(wd.pos, wd.localRow(k, j))
		}
		n := len(p.Keys) * width
		wd.weights = growTo(wd.weights, n)
		wd.grad = growTo(wd.grad, n)
		for i, lr := range wd.pos {
			copy(wd.weights[i*width:(i+1)*width], m.Row(lr))
		}
		l := wd.w.Compute(p, wd.weights, wd.grad)
		if e := CheckFinite(p, wd.grad, l); e != nil {
			if bad == nil {
				bad = e
			}
			continue
		}
		loss += l
		wd.g.Idx, wd.g.Val = wd.pos, wd.grad
		wd.w.Apply(m, &wd.g, p.examples, step0+int64(h))
		wd.g = model.Sparse{}
	}
	// The changes.
	for i, k := range keys {
		lr := wd.localRow(k, i)
		row := m.Row(lr)
		for c := range width {
			delta[i*sw+c] = row[c] - rows[i*sw+c]
		}
		if spw > 0 {
			j := int(lr) * sr
			st := m.State[0][j : j+sr]
			if keep {
				copy(wd.keep[int(k)*sr:int(k+1)*sr], st)
				continue
			}
			for c := range st {
				delta[i*sw+width+c] = st[c] - rows[i*sw+width+c]*scale
			}
		}
	}
	return loss, bad
}

// localRow is the local row of global row k, the i-th of the window's keys.
func (wd *Window) localRow(k uint32, i int) uint32 {
	if uint64(k) < wd.dim {
		return uint32(i)
	}
	return uint32(wd.capacity) + (k - uint32(wd.dim)) // the bias, W2, b2: after the features
}

// ensure makes the local model hold at least feats features.
func (wd *Window) ensure(feats int) {
	if wd.local != nil && feats <= wd.capacity {
		return
	}
	capacity := max(feats, 2*wd.capacity, 64)
	var m *model.Model
	var err error
	if wd.kind == model.MLP {
		m, err = model.NewMLP(uint64(capacity), wd.shape.classes, wd.shape.hidden, 1, wd.opt, 0)
	} else {
		m, err = model.New(wd.kind, uint64(capacity), wd.shape.classes, 1, wd.opt)
	}
	if err != nil {
		panic(fmt.Sprintf("sgd: a window's local model: %v", err))
	}
	m.Own(0)
	wd.local, wd.capacity = m, capacity
}
