package sgd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// ErrConfig is wrapped by Config.Validate's errors.
var ErrConfig = errors.New("invalid training configuration")

// Config configures the local training loop. Start from DefaultConfig.
type Config struct {
	// Batch is the number of rows per SGD step. Field reports on this
	// workload measured 40% shorter runs with 100-10,000 rows per step than
	// with one (design.md); 100 keeps steps frequent.
	Batch int
	// Epochs is the number of passes over the training data; with StopTol
	// it is the most that are run.
	Epochs int
	// StopTol, when > 0, ends training before Epochs once a whole epoch's
	// training loss (the mean log-loss of its examples, each at the
	// weights it was trained on: free to measure) improves on the previous
	// epoch's by less than this fraction of it. MinEpochs epochs run first.
	// 0 runs Epochs epochs.
	StopTol float64
	// MinEpochs is the fewest epochs run when StopTol is set.
	MinEpochs int
	// Holdout, when >= 2, holds out every Holdout-th row of each epoch
	// (never trained on) and stops on their loss instead of StopTol's
	// rule: after Patience whole epochs in a row that do not improve the
	// best held-out loss by more than HoldoutTol of it, returning the best
	// epoch's model (holdout.go). 0: no row is held out. With fewer rows
	// than Holdout nothing is held out and StopTol's rule applies.
	Holdout    int
	Patience   int
	HoldoutTol float64
	// EvalEvery evaluates on the test set each time this many more training
	// examples have been seen; 0 evaluates only at the end.
	EvalEvery int64
	// EvalEachEpoch also evaluates at the end of every whole epoch (the
	// last one's is the final evaluation).
	EvalEachEpoch bool
	// EvalBatch is the number of rows per batch while evaluating; it only
	// trades memory for per-call overhead.
	EvalBatch int
	// MaxExamples stops training after this many examples (the last batch is
	// shortened to hit it exactly); 0 means no limit.
	MaxExamples int64
	// ProgressEvery is the interval between Hooks.Progress calls.
	ProgressEvery time.Duration
	// Threads is the number of goroutines that compute each batch's
	// gradient (Worker); 0 means one per CPU this process may use
	// (runtime.GOMAXPROCS, which follows a cgroup CPU limit). Any value
	// gives the same model, bit for bit.
	Threads int
	// NonFinite is what a batch whose gradient or loss is not finite does
	// (CheckFinite): stop training with a *NonFiniteError naming its rows
	// (FailNonFinite, the default), or be skipped and counted
	// (SkipNonFinite).
	NonFinite NonFinite
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
	// Start, when not nil, is where a run resumed from a checkpoint
	// begins: its epoch, with the rows of it trained before read and
	// skipped, and the loss figures StopTol goes on from. The model holds
	// the weights, optimizer state and step of that point.
	Start *Position
	// CheckpointEvery, when > 0, calls Hooks.Checkpoint between steps
	// about this often.
	CheckpointEvery time.Duration
}

// Position is where a run is in its training data, between two steps: the
// epoch in progress and how far into it, and what --epochs auto (StopTol)
// needs to decide as an uninterrupted run would. A run resumed at a
// Position (Config.Start) with the model saved there, one thread or many,
// trains the model an uninterrupted run does, bit for bit
// (e2e: TestTrainAloneResumesBitIdentical).
type Position struct {
	Epoch int   // 0-based epoch in progress (the epochs before it are whole)
	Rows  int64 // rows of it trained on (or skipped as not finite)
	// EpochLoss is the training loss of each whole epoch before Epoch.
	EpochLoss []float64
	// LossSum and Examples are the training loss sum and the examples of
	// the rows of epoch Epoch trained on.
	LossSum  float64
	Examples int64
	// RunExamples is the examples this Train call trained on (the run's,
	// not the epoch's; not needed to resume).
	RunExamples int64
}

// DefaultConfig returns the defaults, with the reason for each.
func DefaultConfig() Config {
	return Config{
		Batch:         100,         // see Config.Batch
		Epochs:        1,           // click logs are large; one pass is the common protocol
		EvalEvery:     0,           // evaluation costs a pass over the test set; only at the end unless asked
		EvalBatch:     1000,        // large enough that per-batch overhead vanishes, small in memory
		ProgressEvery: time.Second, // "about once a second" for the report
	}
}

// Validate reports the first out-of-range field.
func (c Config) Validate() error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("%w: batch %d, want >= 1", ErrConfig, c.Batch)
	case c.Epochs < 1:
		return fmt.Errorf("%w: epochs %d, want >= 1", ErrConfig, c.Epochs)
	case c.StopTol < 0 || c.StopTol != c.StopTol:
		return fmt.Errorf("%w: stop tolerance %v, want >= 0 (0 = run every epoch)", ErrConfig, c.StopTol)
	case c.Holdout < 0 || c.Holdout == 1:
		return fmt.Errorf("%w: holdout %d, want 0 (none) or >= 2 (every N-th row)", ErrConfig, c.Holdout)
	case c.Patience < 0:
		return fmt.Errorf("%w: patience %d, want >= 0", ErrConfig, c.Patience)
	case c.HoldoutTol < 0 || c.HoldoutTol != c.HoldoutTol || c.HoldoutTol >= 1:
		return fmt.Errorf("%w: holdout tolerance %v, want in [0, 1)", ErrConfig, c.HoldoutTol)
	case c.MinEpochs < 0:
		return fmt.Errorf("%w: min epochs %d, want >= 0", ErrConfig, c.MinEpochs)
	case c.EvalEvery < 0:
		return fmt.Errorf("%w: eval-every %d, want >= 0 (0 = only at the end)", ErrConfig, c.EvalEvery)
	case c.EvalBatch < 1:
		return fmt.Errorf("%w: eval batch %d, want >= 1", ErrConfig, c.EvalBatch)
	case c.MaxExamples < 0:
		return fmt.Errorf("%w: max examples %d, want >= 0 (0 = no limit)", ErrConfig, c.MaxExamples)
	case c.ProgressEvery <= 0:
		return fmt.Errorf("%w: progress interval %v, want > 0", ErrConfig, c.ProgressEvery)
	case c.Threads < 0:
		return fmt.Errorf("%w: threads %d, want >= 0 (0 = one per CPU)", ErrConfig, c.Threads)
	case c.NonFinite > SkipNonFinite:
		return fmt.Errorf("%w: non-finite policy %v", ErrConfig, c.NonFinite)
	}
	return nil
}

// Progress is a snapshot of a running Train, passed to Hooks.Progress.
type Progress struct {
	Epoch     int     // 1-based epoch in progress
	Examples  int64   // training examples so far
	Steps     int64   // optimizer steps so far (this run)
	Seconds   float64 // since Train started
	TrainLoss float64 // mean log-loss of the examples since the previous report, at the weights each was trained on (importance weights: Σ w·loss / examples)
	// ExamplesPerSec is the training rate since the previous report.
	ExamplesPerSec float64
	// Waiting, when not "", says what a distributed peer that trained
	// nothing since the previous report waits for ("round 12: a reply
	// from peer01 to its push of round 11"), and Idle how many seconds ago
	// it last trained an example (node/trainer; Train trains between any
	// two reports).
	Waiting string
	Idle    float64
}

// EvalPoint is one evaluation on the test set, passed to Hooks.Eval.
type EvalPoint struct {
	Epoch    int     // 1-based epoch in progress (the last one for the final evaluation)
	Examples int64   // training examples seen before this evaluation
	Seconds  float64 // since Train started, when the evaluation finished
	// Paused is how much of Seconds training waited for evaluations, this
	// one included: Train evaluates between steps, so a run's training
	// time at this point is Seconds - Paused.
	Paused float64
	Metrics
}

// Hooks receive Train's reports. They run on Train's goroutine, between
// steps, so they must return quickly and may read (not change) the model.
// Nil hooks are skipped.
type Hooks struct {
	Progress func(Progress)  // about every Config.ProgressEvery
	Eval     func(EvalPoint) // after every evaluation, the final one included
	// Skipped is told of every batch skipped as not finite
	// (SkipNonFinite).
	Skipped func(*NonFiniteError)
	// Checkpoint is called about every Config.CheckpointEvery with the
	// position after the last step, while the model is as that step left
	// it; an error stops training.
	Checkpoint func(Position) error
}

// Summary is what a Train run did.
type Summary struct {
	Examples    int64   // training examples
	Steps       int64   // optimizer steps
	Epochs      int     // epochs completed
	Seconds     float64 // wall time
	EvalSeconds float64 // of which evaluating
	// ExamplesPerSec is Examples over the time spent training, evaluation
	// excluded.
	ExamplesPerSec float64
	// TrainLoss is the mean log-loss of all training examples, each at the
	// weights it was trained on. Rows with importance weights add w·loss
	// (the sum is still over examples, as the gradient's mean is).
	TrainLoss float64
	// Converged is true when StopTol's rule, or the held-out loss
	// (Config.Holdout), ended training before Epochs.
	Converged bool
	// HoldoutRows is the rows held out (Config.Holdout) and HoldoutLoss
	// their mean log-loss after each whole epoch, in order; BestEpoch is
	// the 1-based epoch whose model Train returned (the lowest held-out
	// loss; 0: nothing held out) and BestExamples the training examples
	// that model had seen (Examples counts every one trained on).
	HoldoutRows  int64
	HoldoutLoss  []float64
	BestEpoch    int
	BestExamples int64
	// EpochLoss is the training loss of each whole epoch (see
	// Config.StopTol), in order.
	EpochLoss []float64
	// Evaluated is true when Final is the evaluation at the end of
	// training (test given, training not interrupted).
	Evaluated bool
	// Final holds the metrics of the last evaluation; zero if none ran.
	Final Metrics
	// SkippedNonFinite counts the batches skipped because their gradient
	// or loss was not finite (SkipNonFinite); their rows are in neither
	// Examples nor TrainLoss.
	SkippedNonFinite int64
	// Stopped is the position Train returned at: where a run cut short
	// (cancelled, or failed) would resume.
	Stopped Position
	// Trained is true when every epoch was trained (or StopTol ended
	// them), whether or not the final evaluation then succeeded.
	Trained bool
}

// EvalError is an evaluation on the test set that failed: the test data
// could not be opened or read. Train returns it with the model as the
// training before it left it, so a caller can still save that model.
type EvalError struct{ Err error }

func (e *EvalError) Error() string { return "test data: " + e.Err.Error() }
func (e *EvalError) Unwrap() error { return e.Err }

// Train runs the local (single-peer) SGD loop on m, which it makes own every
// shard. For each epoch e (0-based) it calls open(e) and reads batches of
// cfg.Batch rows on a goroutine of its own, prepares them on another
// (Preparer.Prepare), and keeps up to readAhead of them ready. The loop
// takes one step per batch: Gather the batch's rows, Worker.Compute with
// cfg.Threads goroutines, m.Apply(gradient, rows, step), continuing from
// step m.Steps so a loaded model continues its schedule. The model is
// bit-identical to the one Grad.Add, Grad.Collect and Apply make, for any
// cfg.Threads. Sources are closed after their epoch. A source is read by
// Train's goroutine, never the caller's: a hook that calls its Stats must
// synchronise with it (data.Shared).
//
// If test is not nil, Train evaluates on test() every cfg.EvalEvery
// examples and at the end. Between batches the reading goroutine checks
// ctx: on cancellation Train trains on the batches read before it (at
// most readAhead) and returns what was done with ctx.Err(). A source error
// stops training and is returned wrapped; so is an epoch with no rows
// (ErrNoData). A batch whose gradient or loss is not finite is never
// applied: it stops training with a *NonFiniteError naming its rows, or
// with cfg.NonFinite SkipNonFinite it is skipped and counted.
func Train(ctx context.Context, m *model.Model, cfg Config, open func(epoch int) (data.Source, error),
	test func() (data.Source, error), h Hooks) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = defaultThreads()
	}
	t := trainer{m: m, cfg: cfg, openFn: open, test: test, h: h, now: cfg.Now,
		wk: NewWorker(m, threads), slots: make([]aheadSlot, threads+readAhead)}
	for range threads {
		t.prs = append(t.prs, NewPreparer(m))
	}
	defer t.wk.Close()
	if t.now == nil {
		t.now = time.Now
	}
	m.OwnAll()
	t.start = t.now()
	t.lastProgress, t.lastCheckpoint = t.start, t.start
	t.nextEval = cfg.EvalEvery
	if st := cfg.Start; st != nil {
		t.epoch, t.skipRows = st.Epoch, st.Rows
		t.sum.Epochs, t.sum.EpochLoss = st.Epoch, slices.Clone(st.EpochLoss)
		t.startLoss, t.startExamples = st.LossSum, st.Examples
	}
	err := t.run(ctx)
	t.finish()
	return t.sum, err
}

// trainer is the state of one Train call.
type trainer struct {
	m      *model.Model
	cfg    Config
	openFn func(epoch int) (data.Source, error)
	test   func() (data.Source, error)
	h      Hooks
	now    func() time.Time

	g     *Grad // the distributed loop's step
	batch data.Batch
	grad  model.Sparse
	ev    Evaluator

	// The local loop's step: batches prepared ahead in slots, the working
	// set gathered into ws, the gradient computed into gv.
	prs    []*Preparer // one per preparing goroutine
	wk     *Worker
	slots  []aheadSlot
	ws, gv []float32

	start        time.Time
	epoch        int
	lossSum      float64 // over all examples
	lastProgress time.Time
	winLoss      float64 // since the last progress report
	winExamples  int64
	nextEval     int64
	evaluatedAt  int64 // examples at the last evaluation, -1 for none
	sum          Summary

	// The distributed loop reuses this machinery with its own step (nil:
	// the local step) and a hook run after the last epoch, before the
	// final evaluation (nil: none).
	stepFn          func(n int) error
	beforeFinalEval func() error
	// epochRows counts the rows of the current epoch trained on;
	// skipRows rows at the start of the first epoch run are read and
	// skipped (resuming from a checkpoint mid-epoch).
	epochRows int64
	skipRows  int64
	// The training loss sum and examples at the start of the epoch in
	// progress (less a resumed epoch's figures before the resume:
	// startLoss, startExamples), for its EpochLoss and Position.
	epochLoss0     float64
	epochExamples0 int64
	startLoss      float64
	startExamples  int64
	lastCheckpoint time.Time

	// Early stopping on held-out rows (holdout.go): the rows held out,
	// the best held-out loss, the model that had it, and the whole
	// epochs since.
	held     *data.Batch
	bestLoss float64
	best     undoLog
	worse    int
}

func (t *trainer) run(ctx context.Context) error {
	t.evaluatedAt = -1
	for ; t.epoch < t.cfg.Epochs; t.epoch++ {
		if t.cfg.MaxExamples > 0 && t.sum.Examples >= t.cfg.MaxExamples {
			break
		}
		t.epochLoss0, t.epochExamples0 = t.lossSum-t.startLoss, t.sum.Examples-t.startExamples
		t.startLoss, t.startExamples = 0, 0
		whole, err := t.runEpoch(ctx)
		if err != nil {
			t.keepBest() // a run stopped (cancelled) returns its best epoch's model too
			return err
		}
		if whole {
			t.sum.Epochs++
			if n := t.sum.Examples - t.epochExamples0; n > 0 {
				t.sum.EpochLoss = append(t.sum.EpochLoss, (t.lossSum-t.epochLoss0)/float64(n))
			}
			stop, err := t.holdoutEpoch()
			if err != nil {
				return fmt.Errorf("epoch %d: held-out rows: %w", t.epoch+1, err)
			}
			if stop || t.converged() {
				t.sum.Converged = true
				break
			}
			if t.cfg.EvalEachEpoch && t.test != nil && t.evaluatedAt != t.sum.Examples && t.epoch+1 < t.cfg.Epochs {
				if err := t.evaluate(); err != nil {
					return err
				}
			}
		}
	}
	t.sum.Trained = true
	t.keepBest()
	if t.beforeFinalEval != nil {
		if err := t.beforeFinalEval(); err != nil {
			return err
		}
	}
	if t.test != nil && (t.evaluatedAt != t.sum.Examples || t.beforeFinalEval != nil) {
		if err := t.evaluate(); err != nil {
			return err
		}
	}
	if t.test != nil {
		t.sum.Evaluated = true
	}
	return nil
}

// converged reports whether the last whole epoch improved the training
// loss by less than StopTol of the one before (after MinEpochs epochs).
func (t *trainer) converged() bool {
	l := t.sum.EpochLoss
	if t.sum.BestEpoch > 0 {
		return false // the held-out loss decides (holdoutEpoch)
	}
	if t.cfg.StopTol <= 0 || len(l) < max(t.cfg.MinEpochs, 2) || t.sum.Epochs >= t.cfg.Epochs {
		return false
	}
	prev, cur := l[len(l)-2], l[len(l)-1]
	return prev-cur < t.cfg.StopTol*prev
}

// runEpoch trains on one epoch's source; whole reports that it was read
// to its end (not cut short by MaxExamples).
func (t *trainer) runEpoch(ctx context.Context) (whole bool, err error) {
	src, err := t.open()
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := src.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("epoch %d: closing training data: %w", t.epoch+1, cerr)
		}
	}()
	rowsThisEpoch := int64(0)
	t.epochRows = 0
	for t.skipRows > 0 {
		n, err := src.Next(&t.batch, int(min(t.skipRows, int64(t.cfg.Batch))))
		t.skipRows -= int64(n)
		rowsThisEpoch += int64(n)
		t.epochRows += int64(n)
		if err == io.EOF {
			t.skipRows = 0
			break
		}
		if err != nil {
			return false, fmt.Errorf("epoch %d: skipping to the checkpoint's position: %w", t.epoch+1, err)
		}
	}
	read := t.readInline
	if t.stepFn == nil {
		read = t.readAhead
	}
	rows, whole, err := read(ctx, src)
	rowsThisEpoch += rows
	if err != nil || !whole {
		return false, err
	}
	if rowsThisEpoch == 0 {
		return false, fmt.Errorf("epoch %d: training data: %w", t.epoch+1, ErrNoData)
	}
	return true, nil
}

// readInline reads src's batches into t.batch and takes the distributed
// loop's step (t.stepFn) on each, on this goroutine. It returns the rows
// read and whether src was read to its end (not cut short by
// MaxExamples).
func (t *trainer) readInline(ctx context.Context, src data.Source) (rows int64, whole bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return rows, false, err
		}
		want := t.cfg.Batch
		if t.cfg.MaxExamples > 0 {
			left := t.cfg.MaxExamples - t.sum.Examples
			if left <= 0 {
				return rows, false, nil
			}
			want = int(min(int64(want), left))
		}
		n, err := src.Next(&t.batch, want)
		if n > 0 {
			rows += int64(n)
			t.epochRows += int64(n)
			if err := t.stepFn(n); err != nil {
				return rows, false, err
			}
		}
		if err == io.EOF {
			return rows, true, nil
		}
		if err != nil {
			return rows, false, fmt.Errorf("epoch %d: %w", t.epoch+1, err)
		}
	}
}

// readAhead is the local loop's epoch, a pipeline: a reader goroutine
// reads src's batches, preparer goroutines (one per thread) prepare them
// (Prepare), several batches at once, and this goroutine steps
// (stepPrepared) through them in the order they were read. Reading and
// preparing a batch each take about as long as its step's gathering,
// computing and applying on one core (profiled on Criteo-like rows), so
// they overlap with it and with each other, and the goroutines give every
// core something to do. It returns like readInline.
//
// The reader checks ctx and MaxExamples before each batch, as readInline
// does; on cancellation the batches it read before are still trained on,
// so what a cancelled run did does not depend on timing.
func (t *trainer) readAhead(ctx context.Context, src data.Source) (rows int64, whole bool, err error) {
	n := len(t.slots)
	free := make(chan *aheadSlot, n)
	read := make(chan *aheadSlot, n)  // to the preparers; never full: there are only n slots
	order := make(chan *aheadSlot, n) // to the stepper, in reading order
	for i := range t.slots {
		s := &t.slots[i]
		if s.prepared == nil {
			s.prepared = make(chan struct{}, 1)
		}
		select {
		case <-s.prepared: // left by an epoch that stopped early
		default:
		}
		free <- s
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	examples, batch, limit := t.sum.Examples, t.cfg.Batch, t.cfg.MaxExamples
	// most is the largest batch read: a slot read into for the first time
	// grows to it at once.
	var most batchSize
	wg.Go(func() { // the reader
		defer close(read)
		defer close(order)
		for {
			var s *aheadSlot
			select {
			case <-stop:
				return
			case s = <-free:
			}
			select {
			case <-stop:
				return
			default:
			}
			s.n, s.err, s.cancelled = 0, nil, nil
			if err := ctx.Err(); err != nil {
				s.cancelled = err
			} else {
				want := batch
				if limit > 0 {
					left := limit - examples
					if left <= 0 {
						return
					}
					want = int(min(int64(want), left))
				}
				most.grow(&s.batch)
				s.n, s.err = src.Next(&s.batch, want)
				examples += int64(s.n)
				most = most.max(batchSize{s.n, s.batch.NNZ()})
			}
			order <- s
			read <- s
			if s.err != nil || s.cancelled != nil {
				return
			}
		}
	})
	for _, pr := range t.prs {
		wg.Go(func() { // a preparer
			for s := range read {
				if s.n > 0 {
					pr.Prepare(&s.batch, &s.prep)
				}
				s.prepared <- struct{}{}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait() // the reader is out of src before the caller closes it
	}()
	for s := range order {
		<-s.prepared
		if s.cancelled != nil {
			return rows, false, s.cancelled
		}
		if s.n > 0 {
			rows += int64(s.n)
			t.epochRows += int64(s.n)
			if err := t.stepPrepared(&s.prep); err != nil {
				return rows, false, err
			}
		}
		if s.err == io.EOF {
			return rows, true, nil
		}
		if s.err != nil {
			return rows, false, fmt.Errorf("epoch %d: %w", t.epoch+1, s.err)
		}
		free <- s
	}
	return rows, false, nil // MaxExamples reached
}

// readAhead is how many batches, beyond one per preparer, Train reads
// ahead of the one it steps on: one being read, one ready so that a step
// never waits on a shared machine's jitter. Each costs a batch's memory
// and, the first time, the page faults of filling it (tens of
// milliseconds for a batch of 1000 MNIST images on this project's VM).
const readAhead = 2

// batchSize is a batch's rows and nonzeros.
type batchSize struct{ rows, nnz int }

// max is the larger of z and o in both counts.
func (z batchSize) max(o batchSize) batchSize {
	return batchSize{max(z.rows, o.rows), max(z.nnz, o.nnz)}
}

// grow makes room in b for a batch of size z, so a batch read into b for
// the first time does not grow, and copy, its way up.
func (z batchSize) grow(b *data.Batch) {
	b.Labels = slices.Grow(b.Labels[:0], z.rows)
	b.Offsets = slices.Grow(b.Offsets[:0], z.rows+1)
	b.Indices = slices.Grow(b.Indices[:0], z.nnz)
	b.Values = slices.Grow(b.Values[:0], z.nnz)
}

// aheadSlot is one batch read ahead: the rows as read, prepared, and what
// the read returned.
type aheadSlot struct {
	batch     data.Batch
	prep      Prepared
	prepared  chan struct{} // receives once prep is ready
	n         int
	err       error // from Next: io.EOF, or a source error
	cancelled error // ctx's error, seen before reading
}

func (t *trainer) open() (data.Source, error) {
	src, err := t.openFn(t.epoch)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", t.epoch+1, err)
	}
	if t.cfg.Holdout >= 2 {
		h := &holdoutSource{src: src, k: int64(t.cfg.Holdout)}
		if t.held == nil {
			t.held = &data.Batch{}
			h.keep = t.held
		}
		return h, nil
	}
	return src, nil
}

// stepPrepared trains on the prepared batch p: Gather, Compute, Apply,
// each split over the worker's goroutines. A gradient or loss that is not
// finite is never applied: the batch fails the run or is skipped
// (Config.NonFinite; TestTrainNonFiniteBatch).
func (t *trainer) stepPrepared(p *Prepared) error {
	n := p.Examples()
	size := len(p.Keys) * t.m.Layout.Width
	t.ws, t.gv = growTo(t.ws, size), growTo(t.gv, size)
	t.wk.Gather(t.m, p.Keys, t.ws)
	loss := t.wk.Compute(p, t.ws, t.gv)
	if e := CheckFinite(p, t.gv[:size], loss); e != nil {
		e.Epoch, e.FirstRow = t.epoch+1, t.epochRows-int64(n)+1
		if t.cfg.NonFinite != SkipNonFinite {
			return e
		}
		t.sum.SkippedNonFinite++
		if t.h.Skipped != nil {
			t.h.Skipped(e)
		}
		return nil
	}
	if t.sum.BestEpoch > 0 {
		t.best.save(t.m, p.Keys) // the rows as the best epoch left them (holdout.go)
	}
	t.grad.Idx, t.grad.Val = p.Keys, t.gv
	t.wk.Apply(t.m, &t.grad, n, t.m.Steps)
	t.grad = model.Sparse{}
	t.sum.Steps++
	t.sum.Examples += int64(n)
	t.lossSum += loss
	t.winLoss += loss
	t.winExamples += int64(n)
	return t.afterStep()
}

// position is where the run is, between steps.
func (t *trainer) position() Position {
	return Position{Epoch: t.epoch, Rows: t.epochRows, EpochLoss: slices.Clone(t.sum.EpochLoss),
		LossSum: t.lossSum - t.epochLoss0, Examples: t.sum.Examples - t.epochExamples0, RunExamples: t.sum.Examples}
}

// afterStep reports progress, checkpoints and evaluates when due.
func (t *trainer) afterStep() error {
	now := t.now()
	if t.cfg.CheckpointEvery > 0 && t.h.Checkpoint != nil && now.Sub(t.lastCheckpoint) >= t.cfg.CheckpointEvery {
		if err := t.h.Checkpoint(t.position()); err != nil {
			return err
		}
		t.lastCheckpoint = t.now()
	}
	if d := now.Sub(t.lastProgress); d >= t.cfg.ProgressEvery && t.h.Progress != nil {
		secs := d.Seconds()
		t.h.Progress(Progress{
			Epoch:          t.epoch + 1,
			Examples:       t.sum.Examples,
			Steps:          t.sum.Steps,
			Seconds:        now.Sub(t.start).Seconds(),
			TrainLoss:      t.winLoss / float64(t.winExamples),
			ExamplesPerSec: float64(t.winExamples) / secs,
		})
		t.lastProgress, t.winLoss, t.winExamples = now, 0, 0
	}
	if t.test != nil && t.cfg.EvalEvery > 0 && t.sum.Examples >= t.nextEval {
		for t.nextEval <= t.sum.Examples {
			t.nextEval += t.cfg.EvalEvery
		}
		return t.evaluate()
	}
	return nil
}

// evaluate runs one evaluation on the test set and reports it.
func (t *trainer) evaluate() (err error) {
	began := t.now()
	src, err := t.test()
	if err != nil {
		return &EvalError{err}
	}
	defer func() {
		if cerr := src.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing test data: %w", cerr)
		}
	}()
	met, err := t.ev.Evaluate(t.m, src, t.cfg.EvalBatch)
	if err != nil {
		return &EvalError{err}
	}
	end := t.now()
	t.sum.EvalSeconds += end.Sub(began).Seconds()
	t.sum.Final = met
	t.evaluatedAt = t.sum.Examples
	// Do not count evaluation time in the next progress window's rate.
	t.lastProgress = t.lastProgress.Add(end.Sub(began))
	if t.h.Eval != nil {
		t.h.Eval(EvalPoint{Epoch: min(t.epoch+1, t.cfg.Epochs), Examples: t.sum.Examples, Seconds: end.Sub(t.start).Seconds(), Paused: t.sum.EvalSeconds, Metrics: met})
	}
	return nil
}

// finish fills the summary's totals.
func (t *trainer) finish() {
	t.sum.Stopped = t.position()
	t.sum.Seconds = t.now().Sub(t.start).Seconds()
	if train := t.sum.Seconds - t.sum.EvalSeconds; train > 0 {
		t.sum.ExamplesPerSec = float64(t.sum.Examples) / train
	}
	if t.sum.Examples > 0 {
		t.sum.TrainLoss = t.lossSum / float64(t.sum.Examples)
	}
}
