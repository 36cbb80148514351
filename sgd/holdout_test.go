package sgd

import (
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// overfitProblem is a problem a model without L2 overfits: labels drawn
// from two dense features, and every row also has one of 38 rare features
// (an ID) that says nothing about it, whose weights learn the training
// rows' noise, so the loss on rows the model is not trained on falls for
// a few epochs and then rises.
func overfitProblem() []row {
	rng := rand.New(rand.NewPCG(33, 3))
	rows := logisticProblem(rng, 200, []float64{1, -1}, 0)
	for i := range rows {
		rows[i].idx = append(rows[i].idx, uint32(2+rng.IntN(38)))
		rows[i].val = append(rows[i].val, 1)
	}
	return rows
}

// heldRows are the rows Holdout k holds out: rows k, 2k, … (1-based).
func heldRows(rows []row, k int) []row {
	var h []row
	for i := k - 1; i < len(rows); i += k {
		h = append(h, rows[i])
	}
	return h
}

const holdoutTol = 1e-4

func holdoutRun(t *testing.T, rows []row, k, patience, epochs int) (Summary, *model.Model) {
	t.Helper()
	m := newModel(t, model.Logreg, 40, 0, 1, model.OptConfig{Kind: model.AdaGrad, LR: 0.05, Eps: 1e-6})
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.Holdout, cfg.Patience, cfg.HoldoutTol = 10, epochs, k, patience, holdoutTol
	sum, err := Train(context.Background(), m, cfg, sourceOf(rows), testOf(heldRows(rows, k)), Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return sum, m
}

// With Holdout, Train stops after Patience epochs in a row that do not
// improve the best held-out loss by more than HoldoutTol of it, and
// returns the model of the best epoch, not the last one: its loss on the
// held-out rows is the best epoch's, and the final evaluation is of it.
func TestTrainHoldoutKeepsTheBestEpoch(t *testing.T) {
	rows := overfitProblem()
	const k, patience, trained = 5, 3, 200 - 200/5
	full, _ := holdoutRun(t, rows, k, 1000, 60) // every epoch: the whole curve
	if full.Epochs != 60 || len(full.HoldoutLoss) != 60 || full.HoldoutRows != 200/k {
		t.Fatalf("without a stop: %d epochs, %d held-out losses, %d rows held out; want 60, 60, %d", full.Epochs, len(full.HoldoutLoss), full.HoldoutRows, 200/k)
	}
	// The rule, applied to the whole curve.
	best, worse, stop := 0, 0, 0
	for e, l := range full.HoldoutLoss {
		improved := e == 0 || l < full.HoldoutLoss[best]*(1-holdoutTol)
		if l < full.HoldoutLoss[best] {
			best = e // the lowest, by any margin
		}
		if improved {
			worse = 0
		} else if worse++; worse == patience {
			stop = e + 1
			break
		}
	}
	if stop == 0 || stop >= 40 || best < 2 {
		t.Fatalf("the held-out loss did not fall for a few epochs, then rise (the test needs it to): %v", full.HoldoutLoss)
	}
	sum, m := holdoutRun(t, rows, k, patience, 60)
	if sum.Epochs != stop || !sum.Converged || sum.BestEpoch != best+1 {
		t.Fatalf("stopped after %d epochs (converged %v) keeping epoch %d; want %d, true, %d (held-out losses %v)",
			sum.Epochs, sum.Converged, sum.BestEpoch, stop, best+1, full.HoldoutLoss[:stop])
	}
	if sum.Examples != int64(stop*trained) || sum.BestExamples != int64((best+1)*trained) {
		t.Errorf("examples %d, the kept model's %d; want %d, %d (held-out rows are never trained on)", sum.Examples, sum.BestExamples, stop*trained, (best+1)*trained)
	}
	kept, err := Evaluate(m, newSource(heldRows(rows, k)), 7)
	if err != nil {
		t.Fatal(err)
	}
	if kept.LogLoss != full.HoldoutLoss[best] || kept.LogLoss == full.HoldoutLoss[stop-1] {
		t.Errorf("the returned model's held-out loss is %v; want the best epoch's %v, not the last's %v", kept.LogLoss, full.HoldoutLoss[best], full.HoldoutLoss[stop-1])
	}
	if sum.Final.LogLoss != kept.LogLoss {
		t.Errorf("the final evaluation's loss %v is not the kept model's %v", sum.Final.LogLoss, kept.LogLoss)
	}
	if want := int64((best + 1) * trained / 10); m.Steps != want {
		t.Errorf("the kept model's steps %d, want %d (the best epoch's)", m.Steps, want)
	}
}

// Held-out rows never reach the model: a feature only they have keeps a
// zero weight, and every step still takes a whole batch of trained rows.
func TestTrainHoldoutNeverTrainsOnHeldOutRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rows := logisticProblem(rng, 100, []float64{1, -1}, 0)
	for i := 9; i < len(rows); i += 10 { // rows 10, 20, …: held out
		rows[i].idx = append(rows[i].idx, 2)
		rows[i].val = append(rows[i].val, 1)
		rows[i].y = 1
	}
	m := newModel(t, model.Logreg, 3, 0, 1, model.OptConfig{Kind: model.AdaGrad, LR: 0.5, Eps: 1e-6})
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.Holdout, cfg.Patience = 10, 4, 10, 100
	sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Row(2)[0]; w != 0 {
		t.Errorf("the weight of a feature only held-out rows have is %v, want 0", w)
	}
	if sum.Examples != 4*90 || sum.Steps != 4*9 || sum.HoldoutRows != 10 {
		t.Errorf("%d examples in %d steps, %d rows held out; want 360 in 36 (whole batches of 10), 10", sum.Examples, sum.Steps, sum.HoldoutRows)
	}
}

// With fewer rows than Holdout nothing is held out: every row is trained
// on and StopTol's rule stops training.
func TestTrainHoldoutTooFewRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	rows := logisticProblem(rng, 9, []float64{1, -1}, 0)
	m := newModel(t, model.Logreg, 2, 0, 1, model.OptConfig{Kind: model.AdaGrad, LR: 0.1, Eps: 1e-6, L2: 0.1})
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.Holdout, cfg.Patience, cfg.StopTol = 3, 500, 10, 2, 1e-3
	sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.BestEpoch != 0 || sum.HoldoutRows != 0 || len(sum.HoldoutLoss) != 0 {
		t.Errorf("kept epoch %d, %d rows held out, losses %v; want none", sum.BestEpoch, sum.HoldoutRows, sum.HoldoutLoss)
	}
	if !sum.Converged || sum.Epochs >= 500 || sum.Examples != int64(9*sum.Epochs) {
		t.Errorf("%d epochs, %d examples, converged %v: want StopTol's early stop with every row trained", sum.Epochs, sum.Examples, sum.Converged)
	}
}

// eofWithRows returns its last rows together with io.EOF, as a source may.
type eofWithRows struct{ *memSource }

func (s eofWithRows) Next(b *data.Batch, max int) (int, error) {
	n, err := s.memSource.Next(b, max)
	if err == nil && s.pos == len(s.rows) {
		return n, io.EOF
	}
	return n, err
}

// holdoutSource passes on every row but the k-th ones, in order, in
// batches as large as asked, and keeps the k-th ones with their places;
// rows returned with io.EOF are not lost.
func TestHoldoutSource(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := randomRows(rng, 47, 20, 4, 2)
	for _, src := range []data.Source{newSource(rows), eofWithRows{newSource(rows)}} {
		var keep data.Batch
		h := &holdoutSource{src: src, k: 4, keep: &keep}
		var got []float32
		var sizes []int
		var b data.Batch
		for {
			n, err := h.Next(&b, 8)
			if n > 0 {
				sizes = append(sizes, n)
				got = append(got, b.Labels...)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		var want, wantHeld []float32
		for i, r := range rows {
			if (i+1)%4 == 0 {
				wantHeld = append(wantHeld, r.y)
			} else {
				want = append(want, r.y)
			}
		}
		if len(got) != len(want) || len(keep.Labels) != len(wantHeld) {
			t.Fatalf("%d rows passed on, %d kept; want %d, %d", len(got), len(keep.Labels), len(want), len(wantHeld))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("row %d passed on has label %v, want %v", i, got[i], want[i])
			}
		}
		for i, s := range sizes[:len(sizes)-1] {
			if s != 8 {
				t.Errorf("batch %d has %d rows, want 8 (all but the last: %v)", i, s, sizes)
			}
		}
		for j := range wantHeld {
			idx, _ := keep.Row(j)
			if want := rows[4*j+3].idx; len(idx) != len(want) || idx[0] != want[0] || keep.Labels[j] != wantHeld[j] {
				t.Errorf("held-out row %d is %v/%v, want row %d: %v/%v", j, idx, keep.Labels[j], 4*j+4, want, wantHeld[j])
			}
		}
	}
}

// An undoLog keeps each row once, the first time it is saved, and puts
// back exactly those rows, weights and optimizer state, and the steps.
func TestUndoLog(t *testing.T) {
	m := newModel(t, model.Softmax, 5000, 3, 4, model.OptConfig{Kind: model.AdaGrad, LR: 0.1, Eps: 1e-6})
	m.OwnAll()
	rng := rand.New(rand.NewPCG(3, 4))
	randomize(m, rng, 1)
	m.Steps = 7
	orig := m.Clone()
	var u undoLog
	u.reset(m, 70, 1)
	g := model.Sparse{Idx: []uint32{3, 17, 4999}, Val: make([]float32, 9)}
	for i := range g.Val {
		g.Val[i] = float32(i + 1)
	}
	for range 2 {
		u.save(m, g.Idx)
		m.Apply(&g, 1, m.Steps)
	}
	if len(u.keys) != 3 || len(u.vals) != 3*m.StateWidth(true) {
		t.Fatalf("kept %d rows (%d values); want 3 (each once)", len(u.keys), len(u.vals))
	}
	if m.Hash() == orig.Hash() {
		t.Fatal("the steps changed nothing")
	}
	u.restore(m)
	if m.Hash() != orig.Hash() || m.Steps != 7 {
		t.Errorf("after restore: hash %x, steps %d; want the model before the steps (%x, 7)", m.Hash(), m.Steps, orig.Hash())
	}
	for s := range m.State {
		for i, v := range m.State[s] {
			if v != orig.State[s][i] {
				t.Fatalf("state of shard %d [%d] = %v after restore, want %v", s, i, v, orig.State[s][i])
			}
		}
	}
	u.reset(m, 90, 2)
	if len(u.keys) != 0 || u.dirty[0] != 0 {
		t.Errorf("reset left %d rows kept", len(u.keys))
	}
}

// A run cancelled after its best epoch returns that epoch's model too.
func TestTrainHoldoutCancelledKeepsTheBestEpoch(t *testing.T) {
	rows := overfitProblem()
	full, _ := holdoutRun(t, rows, 5, 1000, 30)
	best := 0
	for e, l := range full.HoldoutLoss {
		if l < full.HoldoutLoss[best] {
			best = e
		}
	}
	if best >= 25 {
		t.Fatalf("the best epoch is %d of 30; the test needs one before 25", best+1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(epoch int) (data.Source, error) {
		s := newSource(rows)
		if epoch == 25 {
			s.onNext = cancel // at the start of epoch 26
		}
		return s, nil
	}
	m := newModel(t, model.Logreg, 40, 0, 1, model.OptConfig{Kind: model.AdaGrad, LR: 0.05, Eps: 1e-6})
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.Holdout, cfg.Patience, cfg.HoldoutTol = 10, 30, 5, 1000, holdoutTol
	sum, err := Train(ctx, m, cfg, open, nil, Hooks{})
	if err != context.Canceled || sum.Epochs != 25 || sum.BestEpoch != best+1 {
		t.Fatalf("Train = %v after %d epochs keeping epoch %d; want context.Canceled after 25, keeping %d", err, sum.Epochs, sum.BestEpoch, best+1)
	}
	kept, err := Evaluate(m, newSource(heldRows(rows, 5)), 7)
	if err != nil {
		t.Fatal(err)
	}
	if kept.LogLoss != full.HoldoutLoss[best] {
		t.Errorf("the cancelled run's model has held-out loss %v; want the best epoch's %v", kept.LogLoss, full.HoldoutLoss[best])
	}
}
