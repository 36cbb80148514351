package sgd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// windowModel is a model of kind with optimizer opt and random weights.
func windowModel(t testing.TB, rng *rand.Rand, kind model.Kind, opt model.OptConfig) *model.Model {
	var m *model.Model
	var err error
	switch kind {
	case model.MLP:
		m, err = model.NewMLP(300, 4, 6, 4, opt, 7)
	case model.Softmax:
		m, err = model.New(kind, 300, 4, 4, opt)
	default:
		m, err = model.New(kind, 300, 0, 4, opt)
	}
	if err != nil {
		t.Fatal(err)
	}
	if kind != model.MLP {
		randomize(m, rng, 0.3)
	}
	m.OwnAll()
	return m
}

// TestWindowIsLocalSteps: a window of batches trained on the wide rows it
// fetched, then added back (model.AddDeltas), gives the model a lone peer
// gets by taking the same steps on its whole model (up to the rounding of
// adding a change back: w + (w' - w) need not be w' in float32), for every
// kind and optimizer; rows the window does not touch do not change.
func TestWindowIsLocalSteps(t *testing.T) {
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		for _, ok := range []model.OptKind{model.SGD, model.AdaGrad, model.FTRL} {
			t.Run(fmt.Sprintf("%v/%v", kind, ok), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(kind), uint64(ok)))
				opt := model.DefaultOptConfig(ok)
				opt.L2 = 1e-3
				if ok == model.SGD {
					opt.Decay, opt.Power = 0.1, 0.5 // the schedule: steps must be counted as the lone peer counts them
				}
				start := windowModel(t, rng, kind, opt)
				classes := max(2, start.Classes)
				const h = 4
				pr := NewPreparer(start)
				w := NewWorker(start, 2)
				defer w.Close()
				// A history first, so the optimizer state the window
				// fetches is not zero.
				for i := range 3 {
					p := new(Prepared)
					pr.Prepare(batchOf(randomRows(rng, 40, 300, 20, classes)), p)
					weights := make([]float32, len(p.Keys)*start.Layout.Width)
					Gather(start, p.Keys, weights)
					grad := make([]float32, len(weights))
					w.Compute(p, weights, grad)
					w.Apply(start, &model.Sparse{Idx: p.Keys, Val: grad}, p.Examples(), int64(i))
				}
				lone := start.Clone()
				win := start.Clone()
				batches, keys := windowBatches(rng, pr, h, 20, classes)
				// The lone peer: one step a batch on its model.
				const step0 = 12
				for i, p := range batches {
					loneStep(w, lone, p, step0+int64(i))
				}
				// The window, on the wide rows, added back.
				var wide []float32
				for _, k := range keys {
					wide = start.AppendWide(wide, k)
				}
				delta := make([]float32, len(wide))
				if _, bad := NewWindow(start, w).Run(batches, keys, wide, delta, step0, 1); bad != nil {
					t.Fatal(bad)
				}
				win.AddDeltas(&model.Sparse{Idx: keys, Val: delta})
				for k := range uint32(start.Layout.Features) {
					a, b := lone.AppendWide(nil, k), win.AppendWide(nil, k)
					for c := range a {
						if d := math.Abs(float64(a[c]) - float64(b[c])); d > 1e-5*(1+math.Abs(float64(a[c]))) {
							t.Fatalf("row %d value %d: lone peer %v, window %v", k, c, a[c], b[c])
						}
					}
					if _, in := slices.BinarySearch(keys, k); !in && !slices.Equal(start.AppendWide(nil, k), b) {
						t.Fatalf("row %d, which no batch touches, changed", k)
					}
				}
			})
		}
	}
}

// TestWindowAllocs: once its buffers and local model have grown, a window
// allocates nothing; one that keeps its optimizer state (KeepState)
// allocates the state once, and nothing after.
func TestWindowAllocs(t *testing.T) {
	for _, keep := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		m := windowModel(t, rng, model.Logreg, model.DefaultOptConfig(model.AdaGrad))
		pr := NewPreparer(m)
		w := NewWorker(m, 1)
		defer w.Close()
		batches, keys := windowBatches(rng, pr, 4, 50, 2)
		var rows []float32
		for _, k := range keys {
			if keep {
				rows = append(rows, m.Row(k)...)
			} else {
				rows = m.AppendWide(rows, k)
			}
		}
		delta := make([]float32, len(rows))
		win := NewWindow(m, w)
		if keep {
			win.KeepState()
		}
		win.Run(batches, keys, rows, delta, 0, 4)
		if n := testing.AllocsPerRun(20, func() { win.Run(batches, keys, rows, delta, 0, 4) }); n != 0 {
			t.Errorf("Window.Run (keeping its state: %v) allocates %v times a window, want 0", keep, n)
		}
	}
}

// TestWindowKeepsState: a window that keeps the optimizer state itself
// (KeepState) carries it from window to window, so one worker's windows,
// each fetched as plain rows and added back as weight changes
// (model.AddWeightDeltas), give the model a lone peer gets by taking the
// same steps on its whole model; the owners' state is never touched.
// Without the state kept, the second window would restart AdaGrad's sums
// from zero and take larger steps.
func TestWindowKeepsState(t *testing.T) {
	for _, kind := range []model.Kind{model.Logreg, model.Softmax, model.MLP} {
		for _, ok := range []model.OptKind{model.SGD, model.AdaGrad} {
			t.Run(fmt.Sprintf("%v/%v", kind, ok), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(kind)+10, uint64(ok)))
				opt := model.DefaultOptConfig(ok)
				opt.L2 = 1e-3
				start := windowModel(t, rng, kind, opt)
				classes := max(2, start.Classes)
				const h, windows = 3, 4
				pr := NewPreparer(start)
				w := NewWorker(start, 2)
				defer w.Close()
				lone, owners := start.Clone(), start.Clone()
				win := NewWindow(start, w)
				win.KeepState()
				for r := range windows {
					batches, keys := windowBatches(rng, pr, h, 20, classes)
					step0 := int64(r * h)
					for i, p := range batches {
						loneStep(w, lone, p, step0+int64(i))
					}
					rows := make([]float32, len(keys)*owners.Layout.Width)
					Gather(owners, keys, rows)
					delta := make([]float32, len(rows))
					if _, bad := win.Run(batches, keys, rows, delta, step0, 1); bad != nil {
						t.Fatal(bad)
					}
					owners.AddWeightDeltas(&model.Sparse{Idx: keys, Val: delta})
				}
				for k := range uint32(start.Layout.Features) {
					a, b := lone.Row(k), owners.Row(k)
					for c := range a {
						if d := math.Abs(float64(a[c]) - float64(b[c])); d > 1e-5*(1+math.Abs(float64(a[c]))) {
							t.Fatalf("row %d value %d: lone peer %v, windows keeping their state %v", k, c, a[c], b[c])
						}
					}
					if !slices.Equal(start.AppendWide(nil, k)[start.Layout.Width:], owners.AppendWide(nil, k)[start.Layout.Width:]) {
						t.Fatalf("row %d: the owners' optimizer state changed", k)
					}
				}
			})
		}
	}
}

// windowBatches prepares h batches of rows random rows each (300
// features, 8 a row, classes classes) and returns them with the union of
// their keys, ascending: a window's batches and keys.
func windowBatches(rng *rand.Rand, pr *Preparer, h, rows, classes int) ([]*Prepared, []uint32) {
	var batches []*Prepared
	var keys []uint32
	for range h {
		p := new(Prepared)
		pr.Prepare(batchOf(randomRows(rng, rows, 300, 8, classes)), p)
		batches = append(batches, p)
		keys = append(keys, p.Keys...)
	}
	slices.Sort(keys)
	return batches, slices.Compact(keys)
}

// loneStep takes a lone peer's step on batch p: its rows gathered from
// lone, the gradient computed and applied as SGD step step.
func loneStep(w *Worker, lone *model.Model, p *Prepared, step int64) {
	weights := make([]float32, len(p.Keys)*lone.Layout.Width)
	Gather(lone, p.Keys, weights)
	grad := make([]float32, len(weights))
	w.Compute(p, weights, grad)
	w.Apply(lone, &model.Sparse{Idx: p.Keys, Val: grad}, p.Examples(), step)
}
