package sgd

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// logisticProblem draws n rows of dim dense N(0,1) features with labels
// from a true logistic model w·x + b.
func logisticProblem(rng *rand.Rand, n int, w []float64, b float64) []row {
	rows := make([]row, n)
	for i := range rows {
		z := b
		r := row{}
		for k, wk := range w {
			x := rng.NormFloat64()
			r.idx = append(r.idx, uint32(k))
			r.val = append(r.val, float32(x))
			z += wk * float64(float32(x))
		}
		if rng.Float64() < 1/(1+math.Exp(-z)) {
			r.y = 1
		}
		rows[i] = r
	}
	return rows
}

// objective is the mean log-loss plus (l2/2)·||w||² without the bias,
// w[dim] being the bias: what Train minimises with gradient g/n + L2·w.
func objective(rows []row, w []float64, l2 float64) float64 {
	ws := make([][]float64, len(w))
	for k := range w {
		ws[k] = []float64{w[k]}
	}
	f := refLoss(model.Logreg, ws, rows) / float64(len(rows))
	for _, v := range w[:len(w)-1] {
		f += l2 / 2 * v * v
	}
	return f
}

// newtonOptimum minimises objective by Newton's method in float64: the
// reference the trained model is compared against.
func newtonOptimum(rows []row, dim int, l2 float64) []float64 {
	n := dim + 1
	w := make([]float64, n)
	x := make([]float64, n)
	for iter := 0; iter < 50; iter++ {
		grad := make([]float64, n)
		hess := make([][]float64, n)
		for i := range hess {
			hess[i] = make([]float64, n+1) // augmented with -grad
		}
		for _, r := range rows {
			clear(x)
			for i, k := range r.idx {
				x[k] += float64(r.val[i])
			}
			x[dim] = 1
			z := 0.0
			for k := range x {
				z += w[k] * x[k]
			}
			p := 1 / (1 + math.Exp(-z))
			for a := range x {
				grad[a] += (p - float64(r.y)) * x[a] / float64(len(rows))
				for b := range x {
					hess[a][b] += p * (1 - p) * x[a] * x[b] / float64(len(rows))
				}
			}
		}
		for k := 0; k < dim; k++ {
			grad[k] += l2 * w[k]
			hess[k][k] += l2
		}
		for a := range hess {
			hess[a][n] = -grad[a]
		}
		step := solve(hess)
		for k := range w {
			w[k] += step[k]
		}
	}
	return w
}

// solve solves the augmented system a (n x n+1) by Gaussian elimination with
// partial pivoting.
func solve(a [][]float64) []float64 {
	n := len(a)
	for c := 0; c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		a[c], a[p] = a[p], a[c]
		for r := c + 1; r < n; r++ {
			f := a[r][c] / a[c][c]
			for k := c; k <= n; k++ {
				a[r][k] -= f * a[c][k]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := a[r][n]
		for k := r + 1; k < n; k++ {
			s -= a[r][k] * x[k]
		}
		x[r] = s / a[r][r]
	}
	return x
}

func sourceOf(rows []row) func(int) (data.Source, error) {
	return func(int) (data.Source, error) { return newSource(rows), nil }
}

func testOf(rows []row) func() (data.Source, error) {
	return func() (data.Source, error) { return newSource(rows), nil }
}

// Train reaches the optimum a float64 Newton solver computes: exactly (to
// float32 precision) with full-batch steps, closely with minibatches and a
// decaying rate.
func TestTrainConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const dim, l2 = 4, 0.01
	rows := logisticProblem(rng, 500, []float64{1.5, -2, 0.5, 0}, 0.3)
	opt := newtonOptimum(rows, dim, l2)
	fOpt := objective(rows, opt, l2)
	for _, tc := range []struct {
		name   string
		opt    model.OptConfig
		batch  int
		epochs int
		wTol   float64 // max |w - w*|
		fTol   float64 // objective above the optimum
	}{
		{"full batch sgd", model.OptConfig{Kind: model.SGD, LR: 2, L2: l2}, 500, 400, 1e-5, 1e-10},
		{"minibatch sgd", model.OptConfig{Kind: model.SGD, LR: 1, Decay: 0.05, Power: 1, L2: l2}, 10, 40, 0.01, 1e-5},
		{"minibatch adagrad", model.OptConfig{Kind: model.AdaGrad, LR: 0.2, Eps: 1e-6, L2: l2}, 10, 40, 0.02, 5e-5},
		{"minibatch ftrl", model.OptConfig{Kind: model.FTRL, LR: 0.2, Beta: 1, L2: l2}, 10, 40, 0.02, 5e-5},
	} {
		m := newModel(t, model.Logreg, dim, 0, 1, tc.opt)
		cfg := DefaultConfig()
		cfg.Batch, cfg.Epochs = tc.batch, tc.epochs
		sum, err := Train(context.Background(), m, cfg, sourceOf(rows), testOf(rows), Hooks{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := make([]float64, dim+1)
		maxDiff := 0.0
		for k := range got {
			got[k] = float64(m.Row(uint32(k))[0])
			maxDiff = math.Max(maxDiff, math.Abs(got[k]-opt[k]))
		}
		f := objective(rows, got, l2)
		t.Logf("%s: w %.4f, optimum %.4f, max diff %.2g, objective gap %.2g", tc.name, got, opt, maxDiff, f-fOpt)
		if maxDiff > tc.wTol || f-fOpt > tc.fTol {
			t.Errorf("%s: max |w - w*| = %.2g (tol %g), objective gap %.2g (tol %g)", tc.name, maxDiff, tc.wTol, f-fOpt, tc.fTol)
		}
		wantSteps := int64(tc.epochs * (500 / tc.batch))
		if sum.Examples != int64(500*tc.epochs) || sum.Steps != wantSteps || sum.Epochs != tc.epochs || m.Steps != wantSteps {
			t.Errorf("%s: summary %+v, model steps %d", tc.name, sum, m.Steps)
		}
		if !sum.Evaluated || sum.Final.Examples != 500 {
			t.Errorf("%s: final evaluation %+v", tc.name, sum.Final)
		}
	}
}

// fakeClock advances one second per call.
type fakeClock struct {
	base  time.Time
	ticks int
}

func (c *fakeClock) now() time.Time {
	c.ticks++
	return c.base.Add(time.Duration(c.ticks) * time.Second)
}

func TestTrainProgress(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := randomRows(rng, 100, 20, 5, 2)
	m := newModel(t, model.Logreg, 20, 0, 4, model.DefaultOptConfig(model.SGD))
	clock := &fakeClock{base: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.Batch, cfg.Now = 10, clock.now
	var got []Progress
	sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{Progress: func(p Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	// One tick at the start, one per step (each a second after the last
	// report, so every step reports), one at the end.
	if len(got) != 10 {
		t.Fatalf("%d progress reports, want 10", len(got))
	}
	for i, p := range got {
		want := Progress{Epoch: 1, Examples: int64(10 * (i + 1)), Steps: int64(i + 1), Seconds: float64(i + 1), ExamplesPerSec: 10}
		p.TrainLoss, want.TrainLoss = 0, 0
		if p != want {
			t.Errorf("report %d = %+v, want %+v", i, p, want)
		}
	}
	// The first batch is scored at zero weights: p = 1/2, loss log 2 each.
	if math.Abs(got[0].TrainLoss-math.Ln2) > 1e-12 {
		t.Errorf("first TrainLoss = %v, want log 2", got[0].TrainLoss)
	}
	if sum.Seconds != 11 || math.Abs(sum.ExamplesPerSec-100.0/11) > 1e-12 || sum.Evaluated {
		t.Errorf("summary %+v, want 11 s, 100/11 examples/s, no evaluation", sum)
	}
	var mean float64
	for _, p := range got {
		mean += p.TrainLoss / 10
	}
	if math.Abs(sum.TrainLoss-mean) > 1e-12 {
		t.Errorf("summary TrainLoss %v, mean of the windows %v", sum.TrainLoss, mean)
	}
}

func TestTrainEvalSchedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rows := randomRows(rng, 100, 20, 5, 2)
	test := randomRows(rng, 30, 20, 5, 2)
	for _, tc := range []struct {
		every    int64
		epochs   int
		examples []int64
		epoch    []int
	}{
		{0, 1, []int64{100}, []int{1}},
		{30, 1, []int64{30, 60, 90, 100}, []int{1, 1, 1, 1}},
		{50, 1, []int64{50, 100}, []int{1, 1}},
		{1000, 1, []int64{100}, []int{1}},
		{150, 2, []int64{150, 200}, []int{2, 2}},
		{35, 1, []int64{40, 70, 110 - 10}, []int{1, 1, 1}}, // evaluations land on batch boundaries
	} {
		m := newModel(t, model.Logreg, 20, 0, 4, model.DefaultOptConfig(model.SGD))
		clock := &fakeClock{base: time.Unix(0, 0)}
		cfg := DefaultConfig()
		cfg.Batch, cfg.Epochs, cfg.EvalEvery, cfg.Now = 10, tc.epochs, tc.every, clock.now
		var points []EvalPoint
		sum, err := Train(context.Background(), m, cfg, sourceOf(rows), testOf(test), Hooks{Eval: func(p EvalPoint) { points = append(points, p) }})
		if err != nil {
			t.Fatal(err)
		}
		if len(points) != len(tc.examples) {
			t.Fatalf("every %d: %d evaluations %+v, want at %v", tc.every, len(points), points, tc.examples)
		}
		for i, p := range points {
			if p.Examples != tc.examples[i] || p.Epoch != tc.epoch[i] || p.Metrics.Examples != 30 {
				t.Errorf("every %d: evaluation %d at %d examples, epoch %d, %d test rows; want %d, %d, 30",
					tc.every, i, p.Examples, p.Epoch, p.Metrics.Examples, tc.examples[i], tc.epoch[i])
			}
		}
		// Each evaluation reads the clock twice, one second apart.
		if !sum.Evaluated || sum.Final != points[len(points)-1].Metrics || sum.EvalSeconds != float64(len(points)) {
			t.Errorf("every %d: summary %+v", tc.every, sum)
		}
		direct, _ := Evaluate(m, newSource(test), 7)
		if direct != sum.Final {
			t.Errorf("every %d: final %+v, Evaluate on the trained model %+v", tc.every, sum.Final, direct)
		}
	}
}

func TestTrainCancel(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(5, 6)), 100, 20, 5, 2)
	m := newModel(t, model.Logreg, 20, 0, 4, model.DefaultOptConfig(model.SGD))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := newSource(rows)
	calls := 0
	src.onNext = func() {
		if calls++; calls == 5 {
			cancel()
		}
	}
	cfg := DefaultConfig()
	cfg.Batch = 10
	evals := 0
	sum, err := Train(ctx, m, cfg, func(int) (data.Source, error) { return src, nil }, testOf(rows), Hooks{Eval: func(EvalPoint) { evals++ }})
	// The fifth batch, read before the cancellation is seen, is trained on.
	if !errors.Is(err, context.Canceled) || sum.Examples != 50 || sum.Steps != 5 || m.Steps != 5 || sum.Epochs != 0 {
		t.Errorf("Train = %v, %+v; want context.Canceled after 50 examples", err, sum)
	}
	if !src.closed || evals != 0 || sum.Evaluated {
		t.Errorf("closed %v, %d evaluations; want the source closed and no evaluation", src.closed, evals)
	}
}

func TestTrainLimitsAndResume(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(7, 8)), 100, 20, 5, 2)
	m := newModel(t, model.Logreg, 20, 0, 4, model.DefaultOptConfig(model.SGD))
	m.Steps = 5 // a loaded model continues its schedule
	cfg := DefaultConfig()
	cfg.Batch, cfg.Epochs, cfg.MaxExamples = 30, 3, 250
	sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{})
	// Epochs of 30+30+30+10 rows, twice, then 30+20 to stop at 250.
	if err != nil || sum.Examples != 250 || sum.Steps != 10 || sum.Epochs != 2 || m.Steps != 15 {
		t.Errorf("Train = %v, %+v, model steps %d; want 250 examples, 10 steps, 2 whole epochs, steps 15", err, sum, m.Steps)
	}
}

func TestTrainErrors(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(9, 10)), 50, 20, 5, 2)
	bad := errors.New("train.svm:36: bad feature \"3:x\"")
	cfg := DefaultConfig()
	cfg.Batch = 10
	var failing *memSource
	closeErr := errors.New("close failed")
	for _, tc := range []struct {
		name     string
		open     func(int) (data.Source, error)
		test     func() (data.Source, error)
		want     error
		msg      string
		examples int64
	}{
		{"open fails", func(int) (data.Source, error) { return nil, bad }, nil, bad, "epoch 1: ", 0},
		{"bad line", func(int) (data.Source, error) {
			failing = newSource(rows)
			failing.failAt, failing.err = 35, bad
			return failing, nil
		}, nil, bad, "epoch 1: ", 35},
		{"empty", sourceOf(nil), nil, ErrNoData, "epoch 1: training data", 0},
		{"empty test", sourceOf(rows), testOf(nil), ErrNoData, "test data", 50},
		{"test open fails", sourceOf(rows), func() (data.Source, error) { return nil, bad }, bad, "test data", 50},
		{"close fails", func(int) (data.Source, error) { return &closeFails{newSource(rows), closeErr}, nil }, nil, closeErr, "closing", 50},
	} {
		m := newModel(t, model.Logreg, 20, 0, 4, model.DefaultOptConfig(model.SGD))
		sum, err := Train(context.Background(), m, cfg, tc.open, tc.test, Hooks{})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || sum.Examples != tc.examples {
			t.Errorf("%s: Train = %v after %d examples, want %v mentioning %q after %d", tc.name, err, sum.Examples, tc.want, tc.msg, tc.examples)
		}
	}
	if !failing.closed {
		t.Error("a source that failed was not closed")
	}
}

type closeFails struct {
	*memSource
	err error
}

func (c *closeFails) Close() error { return c.err }

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    func(*Config)
		want string
	}{
		{func(c *Config) { c.Batch = 0 }, "batch 0"},
		{func(c *Config) { c.Epochs = 0 }, "epochs 0"},
		{func(c *Config) { c.EvalEvery = -1 }, "eval-every -1"},
		{func(c *Config) { c.EvalBatch = 0 }, "eval batch 0"},
		{func(c *Config) { c.MaxExamples = -5 }, "max examples -5"},
		{func(c *Config) { c.Holdout = 1 }, "holdout 1"},
		{func(c *Config) { c.Patience = -1 }, "patience -1"},
		{func(c *Config) { c.HoldoutTol = 1 }, "holdout tolerance 1"},
		{func(c *Config) { c.ProgressEvery = 0 }, "progress interval"},
	} {
		c := DefaultConfig()
		tc.f(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want ErrConfig mentioning %q", err, tc.want)
		}
		m := newModel(t, model.Logreg, 2, 0, 1, model.DefaultOptConfig(model.SGD))
		if _, err := Train(context.Background(), m, c, sourceOf(nil), nil, Hooks{}); !errors.Is(err, ErrConfig) {
			t.Errorf("Train with a bad config = %v", err)
		}
	}
}

// With StopTol, Train stops at the first epoch whose training loss improves
// on the previous one by less than StopTol of it, and records every
// epoch's loss; without it, it runs every epoch.
func TestTrainStopsWhenTheLossStopsImproving(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows := logisticProblem(rng, 300, []float64{1, -1, 0.5}, 0.2)
	run := func(tol float64, minEpochs int) Summary {
		m := newModel(t, model.Logreg, 3, 0, 1, model.OptConfig{Kind: model.AdaGrad, LR: 0.1, Eps: 1e-6, L2: 1e-3})
		cfg := DefaultConfig()
		cfg.Batch, cfg.Epochs, cfg.StopTol, cfg.MinEpochs = 10, 100, tol, minEpochs
		sum, err := Train(context.Background(), m, cfg, sourceOf(rows), nil, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	all := run(0, 0)
	if all.Epochs != 100 || all.Converged || len(all.EpochLoss) != 100 {
		t.Fatalf("without StopTol: %d epochs, converged %v, %d losses; want 100, false, 100", all.Epochs, all.Converged, len(all.EpochLoss))
	}
	const tol = 1e-3
	want := 0 // the first epoch e >= 2 (1-based) whose improvement is below tol
	for e := 1; e < len(all.EpochLoss); e++ {
		if prev, cur := all.EpochLoss[e-1], all.EpochLoss[e]; prev-cur < tol*prev {
			want = e + 1
			break
		}
	}
	if want == 0 || want >= 100 {
		t.Fatalf("the loss improved by at least %g every epoch: %v", tol, all.EpochLoss)
	}
	s := run(tol, 0)
	if s.Epochs != want || !s.Converged || s.Examples != int64(300*want) {
		t.Errorf("StopTol %g: %d epochs (converged %v, %d examples); want %d epochs", tol, s.Epochs, s.Converged, s.Examples, want)
	}
	if s := run(tol, want+3); s.Epochs < want+3 {
		t.Errorf("MinEpochs %d: stopped after %d epochs", want+3, s.Epochs)
	}
}
