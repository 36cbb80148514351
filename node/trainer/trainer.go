// Package trainer drives one peer's train.Core: it is the thin loop that
// does the core's I/O. It ticks the core's logical clock, hands it the
// messages the link delivers and the membership's live set, reads and
// prepares batches ahead of the core's needs, computes the gradients the
// core asks for on a pool of goroutines (sgd.Worker), evaluates the model
// by fetching only the rows the test set uses, and reports progress,
// rounds and configuration changes to hooks. It never pushes a gradient
// that is not finite (Config.NonFinite), and a run that stops moving
// fails after Config.StallTimeout (ErrStalled) rather than hang.
//
// Everything the protocol decides is in node/train, which the simulator
// tests under every fault; this package only moves data between the core,
// the network, the disk and the CPU. One goroutine (Run's) owns the core.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// Link sends the core's messages to other peers (gossip.CoreLink). Send
// must not block; a message it cannot send is lost, which the core
// tolerates (it asks again).
type Link interface {
	Send(to string, msg *wire.Core)
}

// Config configures a Trainer. Start from DefaultConfig.
type Config struct {
	// Core is the protocol core's configuration (its Model is the one
	// this peer trains).
	Core train.Config
	// Batch is the number of rows per round; Epochs the passes over this
	// peer's data.
	Batch  int
	Epochs int
	// Holdout, when >= 2, holds out every Holdout-th row of each epoch of
	// this peer's data and ends its data early once the loss on them stops
	// improving, Epochs becoming a cap (holdout.go; 0: none). Patience and
	// HoldoutTol are the stop rule's, as sgd.Config's.
	Holdout    int
	Patience   int
	HoldoutTol float64
	// EvalEvery evaluates every so many training examples of this peer; 0
	// only at the end. In sync mode each evaluation along the way pauses
	// this peer's worker (pause.go). EvalBatch is the evaluation's batch
	// size.
	EvalEvery int64
	EvalBatch int
	// Threads computes a batch's gradient with up to this many goroutines.
	Threads int
	// Tick is the core's tick: its retries and raft timers count them.
	Tick time.Duration
	// ProgressEvery is the interval of Hooks.Progress.
	ProgressEvery time.Duration
	// FetchModel fetches every row of the final model into Core.Model when
	// training ends (to save it); otherwise only the rows the final
	// evaluation needs travel, and the model hash is computed from the
	// owners' shard hashes.
	FetchModel bool
	// CheckpointDir is where this peer writes its part of each checkpoint
	// the run schedules (Core.CheckpointTicks; sync mode), keeping the
	// newest CheckpointKeep; empty writes none. Job names the run in them.
	CheckpointDir  string
	CheckpointKeep int
	Job            string
	// Resume, when set, is the checkpoint this peer resumes from: its
	// shards are loaded into Core.Model (LoadCheckpoint), Core.Start is
	// its round, and the worker's data starts at its position.
	Resume *CheckpointInfo
	// Log receives the trainer's own lines.
	Log zerolog.Logger
	// StallAfter is how long a run may show no progress (see
	// StallTimeout) before the trainer logs what its core waits for, and
	// again every StallAfter while it does not move: a run that waits
	// that long waits for a crash to be noticed (--dead-after) or is
	// stuck, and the line says which.
	StallAfter time.Duration
	// StallTimeout is how long a run may show no progress at all before
	// Run fails with ErrStalled, naming what the core waits for and from
	// whom; 0 waits for ever. Progress is an example trained, a round
	// pushed or applied (this peer's own or, as an owner, another's), a
	// configuration, a shard handed over or received, a fetch answered, a
	// checkpoint written. Waits on this peer's own work do not count
	// against it: a gradient being computed, an evaluation, the test set
	// being read, the training data being read (a resumed run skipping to
	// its checkpoint), and the end of a run once this peer has its final
	// values and evaluation (the others may evaluate longer).
	StallTimeout time.Duration
	// NonFinite is what a batch whose gradient or loss is not finite
	// does (sgd.CheckFinite; such a gradient would make the owners'
	// weights NaN or Inf, and the core link refuses it, so its round
	// would never end). Whatever it says, the batch's gradient never
	// leaves this peer: the worker pushes nothing for its round instead,
	// so the round goes on. With sgd.FailNonFinite (the default)
	// the peer then leaves the run, its shards handed over as on Leave
	// (it trains on until the leave takes effect, as a leaver does), and
	// Run returns the *sgd.NonFiniteError naming the batch's rows; with
	// sgd.SkipNonFinite it trains on and counts the batch
	// (Summary.SkippedNonFinite), whose rows are not in Summary.Examples.
	// The round's push carries no rows and no examples (train.Core.Computed
	// with no gradient): owners divide by the other workers' examples.
	NonFinite sgd.NonFinite
	// observe, when set (tests: TestSyncEvaluationPausesTraining), is
	// called on the goroutine doing the work as a gradient's computation
	// or an evaluation of the test set begins (done false) and ends.
	observe func(w work, done bool)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Core:           train.DefaultConfig(),
		Batch:          100,
		Epochs:         1,
		CheckpointKeep: 2,
		EvalBatch:      1000,
		Threads:        1,
		// The core's timings are tuned for a 10ms tick (train.DefaultConfig).
		Tick:          10 * time.Millisecond,
		ProgressEvery: time.Second,
		StallAfter:    30 * time.Second,
		// Far longer than any wait of a healthy run that is not progress
		// (--dead-after's 5 s to notice a crash, a raft election), short
		// enough that a stuck peer does not hold a job for long.
		StallTimeout: 2 * time.Minute,
		Log:          zerolog.Nop(),
	}
}

// RoundPoint is one round of this worker, passed to Hooks.Round.
type RoundPoint struct {
	Round       int64   // the round just pushed
	Examples    int64   // this worker's examples so far
	Seconds     float64 // since Run started
	WaitSeconds float64 // waiting for values since the previous round
	Staleness   int64   // the largest staleness so far (ssp/async)
	Config      uint64  // the newest configuration
	Owned       int     // shards this peer is primary of
	Members     int     // workers of the newest configuration
}

// ChangePoint describes a configuration that took effect here.
type ChangePoint struct {
	Config  uint64
	Start   uint64
	Members []string
	Joined  []string
	Left    []string
	Crashed []string
	Owned   int  // shards this peer is primary of in it
	Final   bool // the configuration that ends an ssp/async run (the values are final)
}

// Hooks receive the trainer's reports, on Run's goroutine: they must
// return quickly. Nil hooks are skipped.
type Hooks struct {
	Progress func(sgd.Progress)
	Eval     func(sgd.EvalPoint)
	Round    func(RoundPoint)
	Change   func(ChangePoint)
	// Event receives the core's other events (handoffs, promotions, lost
	// contributions, leadership) for the log.
	Event func(train.Event)
}

// Summary is what a run did on this peer.
type Summary struct {
	sgd.Summary
	Rounds       int64
	WaitSeconds  float64
	MaxStaleness int64
	Configs      uint64 // the newest configuration's ID
	Members      int    // its workers
	Owned        int    // shards this peer is primary of at the end
	ModelHash    uint64 // of the final model (every peer computes the same)
	Left         bool   // this peer left the run before its end
	// Covered is the number of shards whose final hash this peer got from
	// their holders (every shard, when the run ended normally).
	Covered int
	// JoinSeconds: a peer that joined a run under way took this long from
	// Run to a configuration with it as a worker.
	JoinSeconds float64
	// ModelFetched: every row of the model is in Core.Model (FetchModel;
	// a leaver's is the model as it stood when it left).
	ModelFetched bool
	// Checkpoints this peer wrote, and those that failed (a full disk:
	// the run goes on, the older ones stay) or were skipped (the one
	// before was still being written); LastCheckpoint is the newest
	// round written.
	Checkpoints       int
	CheckpointsFailed int
	LastCheckpoint    uint64
	// ResumedAt is the checkpoint round this run resumed from (0: none).
	ResumedAt uint64
	// TrainingSeconds is the time from Run's start to the end of the
	// run's last round (train.EvFinal), nothing subtracted: Seconds less
	// the end of the run (the final fetches and evaluation, the model's
	// hash, the agreement to finish). 0 when the run did not get there
	// for this peer (it left, failed or was stopped).
	TrainingSeconds float64
	// PausedSeconds is how much of TrainingSeconds this peer's training
	// waited for its evaluations along the way: in sync mode an
	// evaluation pauses the worker (pause.go); in ssp and async it runs
	// beside training, and this is 0. EvalSeconds (sgd.Summary) is every
	// evaluation's duration, the final one and the held-out rows' too.
	PausedSeconds float64
	Core          train.Stats
}

// Errors.
var (
	// ErrLeft: Run ended because this peer left the run (Leave).
	ErrLeft = errors.New("left the training job")
	// ErrStalled: nothing moved for Config.StallTimeout; the error says
	// what the core waited for and from whom.
	ErrStalled = errors.New("the run made no progress")
)

// leaveAfterFailure bounds how long a peer that failed (a batch whose
// gradient is not finite) tries to leave the run gracefully before Run
// returns its error anyway: a leave takes a configuration change and the
// handoff of its shards, seconds even for a large model. One that cannot
// leave (it is alone, or the run lost its quorum) is then gone as if it
// crashed, and the others take its shards over from their replicas.
const leaveAfterFailure = 30 * time.Second

// Trainer runs one peer's core. Deliver, SetAlive and Leave may be called
// from any goroutine; Run from one.
type Trainer struct {
	cfg   Config
	hooks Hooks
	link  Link
	m     *model.Model
	log   zerolog.Logger

	inbox chan delivery
	alive chan []uint64
	leave chan struct{}

	core *train.Core
	now  func() time.Time
}

// work is what Config.observe is told of.
type work uint8

const (
	workCompute work = iota + 1 // a gradient (or a window's changes)
	workEval                    // an evaluation of the test set
)

type delivery struct {
	from string
	msg  *wire.Core
}

// New returns a trainer; the core starts in Run.
func New(cfg Config, hooks Hooks, link Link) (*Trainer, error) {
	switch {
	case cfg.Batch < 1:
		return nil, fmt.Errorf("%w: batch %d, want >= 1", train.ErrConfig, cfg.Batch)
	case cfg.Epochs < 1:
		return nil, fmt.Errorf("%w: epochs %d, want >= 1", train.ErrConfig, cfg.Epochs)
	case cfg.Tick <= 0 || cfg.ProgressEvery <= 0:
		return nil, fmt.Errorf("%w: tick %v and progress interval %v must be > 0", train.ErrConfig, cfg.Tick, cfg.ProgressEvery)
	case cfg.EvalBatch < 1 || cfg.EvalEvery < 0:
		return nil, fmt.Errorf("%w: evaluation batch %d (want >= 1), every %d (want >= 0)", train.ErrConfig, cfg.EvalBatch, cfg.EvalEvery)
	case cfg.StallTimeout < 0 || cfg.StallAfter < 0:
		return nil, fmt.Errorf("%w: stall timeout %v and stall interval %v must be >= 0 (0: never)", train.ErrConfig, cfg.StallTimeout, cfg.StallAfter)
	case cfg.Holdout < 0 || cfg.Holdout == 1 || cfg.Patience < 0 || !(cfg.HoldoutTol >= 0 && cfg.HoldoutTol < 1):
		return nil, fmt.Errorf("%w: holdout %d (want 0 or >= 2), patience %d (want >= 0), tolerance %v (want in [0, 1))", train.ErrConfig, cfg.Holdout, cfg.Patience, cfg.HoldoutTol)
	case cfg.NonFinite > sgd.SkipNonFinite:
		return nil, fmt.Errorf("%w: non-finite policy %v", train.ErrConfig, cfg.NonFinite)
	case link == nil:
		return nil, fmt.Errorf("%w: no link", train.ErrConfig)
	}
	if err := cfg.Core.Validate(); err != nil {
		return nil, err
	}
	if cfg.Core.Trace == nil && cfg.Log.GetLevel() <= zerolog.TraceLevel {
		// --log-level trace: every shard's history (applies, handoffs,
		// installs, frees), what the simulator records, for replaying a
		// rare failure of real processes.
		log := cfg.Log
		cfg.Core.Trace = func(e train.TraceEvent) {
			log.Trace().Str("kind", e.Kind.String()).Uints32("shards", e.Shards).Uint64("round", e.Round).
				Uints64("members", e.Members).Str("peer", e.Peer).Uint64("req", e.Req).Bool("replica", e.Replica).Msg("core")
		}
	}
	return &Trainer{
		cfg: cfg, hooks: hooks, link: link, m: cfg.Core.Model, log: cfg.Log,
		inbox: make(chan delivery, 4096), alive: make(chan []uint64, 1), leave: make(chan struct{}, 1),
		now: time.Now,
	}, nil
}

// Deliver hands the core a message from peer from (authenticated by the
// link). It blocks while the trainer's inbox is full, which slows the
// link's reader rather than growing memory.
func (t *Trainer) Deliver(from string, msg *wire.Core) {
	t.inbox <- delivery{from, msg}
}

// SetAlive gives the member IDs the membership sees alive (train.MemberID
// of each member's peer ID and incarnation). Only the newest set counts.
func (t *Trainer) SetAlive(ids []uint64) {
	ids = slices.Clone(ids)
	for {
		select {
		case t.alive <- ids:
			return
		default:
		}
		select {
		case <-t.alive: // drop the older set
		default:
		}
	}
}

// Leave asks the run to let this peer go: its shards are handed over and
// Run returns ErrLeft.
func (t *Trainer) Leave() {
	select {
	case t.leave <- struct{}{}:
	default:
	}
}

// prepared is a batch read and made ready to compute.
type prepared struct {
	p     *sgd.Prepared
	epoch int
	row   int64 // rows of the epoch before it
	end   bool  // no more batches
	err   error // reading failed
	// held: the first epoch read has ended and these are its held-out
	// rows (Config.Holdout; nil: none held out, heldErr: unusable).
	held    *evaluator
	heldSet bool
	heldErr error
}

// computeJob is one gradient to compute.
type computeJob struct {
	round   uint64
	p       *sgd.Prepared
	win     *window  // instead of p, with windows of local steps
	workers int      // the round's workers (train.ComputeReq.Workers)
	pos     Position // the data position before the batch
	weights []float32
}

type computeDone struct {
	round    uint64
	grad     []float32
	loss     float64
	examples int
	p        *sgd.Prepared
	win      *window
	bad      *sgd.NonFiniteError // the gradient or loss is not finite
}

// Fetch IDs of the end of the run.
const (
	fetchEval  = 1 << 62
	fetchHash  = fetchEval + 1
	fetchModel = fetchEval + 2
	fetchHeld  = fetchEval + 3 // the held-out rows' values at an epoch's end
)

// run is one Run's state, owned by its goroutine.
type run struct {
	t     *Trainer
	core  *train.Core
	start time.Time

	batches  chan prepared
	free     preparedPool
	jobs     chan computeJob
	results  chan computeDone
	dataDone bool
	readErr  error
	given    uint64                   // batches given to the core
	queue    map[uint64]*sgd.Prepared // by the order they were given
	windows  map[uint64]*window       // the same, when rounds are windows of local steps (window.go)
	win      windower
	winStart Position // the data position before the window under way
	epoch    int
	pos      map[uint64]Position // data position before each batch given and not yet computed
	nextPos  Position            // after the last batch given
	ckpts    chan ckptJob        // to the checkpoint writer
	ckptRes  chan ckptResult
	ckptOK   int
	ckptFail int
	ckptLast uint64

	examples  int64
	rounds    int64
	lossSum   float64
	lastRound uint64
	askedAt   time.Time // the core's latest compute request came (or the previous result went) then
	waiting   bool      // no gradient is being computed
	waitSec   float64
	waitAt    float64 // waitSec at the previous round reported
	joinSec   float64 // a joiner: seconds until a configuration had it as a worker
	covered   int     // shards whose final hash arrived
	progAt    time.Time
	progEx    int64
	// stuckAt and stuckSig: when the run's progress (stallSig) was last
	// seen to change, and what it was; warnedAt: the last stall line
	// (stalled).
	stuckAt    time.Time
	stuckSig   stallSig
	warnedAt   time.Time
	fetchesIn  int64     // fetch answers received
	trainedAt  time.Time // the latest example was trained then (the start before any)
	skipped    int64     // batches whose gradient was not finite, pushed as nothing
	failErr    error     // this peer failed (a gradient not finite): it leaves, then Run returns this
	failAt     time.Time
	progLoss   float64
	progSteps  int64
	nextEvalAt int64

	ev           *evaluator
	evPending    bool // the evaluator is being built
	evalID       uint64
	evalBusy     bool
	evalDone     chan evalResult
	evalSec      float64
	pause        pauseState // sync: evaluations pause the worker (pause.go)
	trainSec     float64    // Summary.TrainingSeconds, set at train.EvFinal
	final        bool
	pending      map[uint64]bool // end-of-run fetches not answered yet
	finalEval    *sgd.Metrics
	finalValues  []float32 // the final evaluation's values, while a periodic one runs
	hash         uint64
	finishing    bool
	done         bool
	left         bool
	leaving      bool
	leftRows     *model.Sparse // a leaver's fetch of the model, written into it once the core stopped
	fetchedModel bool          // every row of the model is in the trainer's model
	cfgID        uint64
	owned        int
	members      int
	held         heldState // Config.Holdout (holdout.go)
}

type evalResult struct {
	final    bool
	metrics  sgd.Metrics
	err      error
	examples int64
	seconds  float64
}

// Run trains until the run ends for this peer: every worker is done and
// every member has the final values it needs (nil), this peer left
// (ErrLeft), the core failed (train.ErrRemoved, ErrRefused, ErrAlone,
// ErrNoQuorum), or ctx ended. open(e) opens this peer's data for epoch e; test, when not
// nil, is the test set (ReadTestSet), evaluated every EvalEvery examples and
// at the end; training starts while it is still being read.
func (t *Trainer) Run(ctx context.Context, open func(epoch int) (data.Source, error), test *TestSet) (Summary, error) {
	r := &run{
		t: t, start: t.now(),
		batches: make(chan prepared, 4),
		jobs:    make(chan computeJob, 1), results: make(chan computeDone, 1),
		queue: map[uint64]*sgd.Prepared{}, windows: map[uint64]*window{}, evalDone: make(chan evalResult, 1),
		pending: map[uint64]bool{}, nextEvalAt: t.cfg.EvalEvery, waiting: true,
		pos: map[uint64]Position{}, ckpts: make(chan ckptJob, 1), ckptRes: make(chan ckptResult, 4),
	}
	r.held.done = make(chan evalResult, 1)
	if rs := t.cfg.Resume; rs != nil {
		r.nextPos = rs.Position
		r.held.approved = rs.Position.Epoch
	}
	r.win.h = t.cfg.Core.LocalSteps
	r.free.max = max(8, 4*r.win.h+8) // the batches of the windows in flight: the one computed, those given ahead, the one being read
	r.progAt, r.askedAt, r.trainedAt = r.start, r.start, r.start
	core, err := train.New(t.cfg.Core)
	if err != nil {
		return Summary{}, err
	}
	r.core = core
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { r.read(ctx, open) })
	wg.Go(func() { r.compute(ctx) })
	if t.cfg.CheckpointDir != "" {
		wg.Go(func() { r.writeCheckpoints(ctx) })
	}
	var evBuilt chan struct{}
	if test != nil {
		evBuilt = test.done
		r.evPending = true
	}
	tick := time.NewTicker(t.cfg.Tick)
	defer tick.Stop()
	for {
		if err := r.handle(); err != nil {
			return r.summary(), err
		}
		if r.failErr != nil && r.finishing && !r.holdsShards() {
			// Failed, and the run went final before its leave took
			// effect: nobody needs anything of this peer any more (a
			// leaver outside the final configuration would wait for
			// ever for the fetches and finish messages of members).
			return r.summary(), r.failErr
		}
		if r.left {
			if r.leftRows != nil {
				t.m.SetRows(r.leftRows) // the core has stopped: the storage is ours
				r.fetchedModel = true
			}
			if r.failErr != nil {
				return r.summary(), r.failErr
			}
			return r.summary(), ErrLeft
		}
		if r.done {
			if r.failErr != nil {
				return r.summary(), r.failErr
			}
			if r.readErr != nil {
				return r.summary(), r.readErr
			}
			return r.summary(), nil
		}
		select {
		case <-ctx.Done():
			return r.summary(), ctx.Err()
		case d := <-t.inbox:
			core.Receive(d.from, d.msg)
		case ids := <-t.alive:
			core.Alive(ids)
		case <-t.leave:
			r.startLeave()
		case <-tick.C:
			core.Tick()
			r.progress(false)
			if err := r.stalled(); err != nil {
				return r.summary(), err
			}
			if r.failErr != nil && t.now().Sub(r.failAt) >= leaveAfterFailure {
				t.log.Error().Dur("tried_for", leaveAfterFailure).Msg("could not leave the run gracefully: stopping (the others take this peer's shards over from their replicas once they notice it gone)")
				return r.summary(), r.failErr
			}
		case res := <-r.results:
			r.computed(res)
		case b := <-r.batchesWanted():
			r.takeBatch(b)
		case e := <-r.evalDone:
			r.evalFinished(e)
		case e := <-r.held.done:
			r.heldFinished(e)
		case res := <-r.ckptRes:
			r.checkpointWritten(res)
		case <-evBuilt:
			evBuilt = nil
			if test.err != nil {
				return r.summary(), test.err
			}
			r.ev, r.evPending = test.ev, false
			if r.final {
				r.pending[fetchEval] = true
				r.core.Fetch(fetchEval, r.ev.keys, false)
			}
		}
	}
}

// holdsShards reports whether this peer holds any shard.
func (r *run) holdsShards() bool {
	for s := range r.t.m.Layout.Shards {
		if r.core.Holds(s) {
			return true
		}
	}
	return false
}

// startLeave leaves the run; with FetchModel it first fetches every row of
// the model as it stands (partial: the run goes on without this peer),
// since a leaver holds nothing once its shards are handed over.
func (r *run) startLeave() {
	t := r.t
	if r.leaving {
		return
	}
	r.leaving = true
	if t.cfg.FetchModel && !r.final && !r.pending[fetchModel] {
		t.log.Info().Msg("leaving the run: fetching the model as it stands for --save, then handing this peer's shards over")
		r.pending[fetchModel] = true
		r.core.Fetch(fetchModel, nil, true)
		return
	}
	t.log.Info().Msg("leaving the run: this peer's shards go to their new holders")
	r.core.Leave()
}

// batchesWanted is the batch channel while the core wants batches, else
// nil (a nil channel never fires in a select).
func (r *run) batchesWanted() chan prepared {
	if !r.dataDone && r.held.parked == nil && r.core.WantBatches() > 0 {
		return r.batches
	}
	return nil
}

func (r *run) takeBatch(b prepared) {
	if r.holdBatch(b) {
		return
	}
	switch {
	case b.err != nil:
		r.readErr = b.err
		r.t.log.Error().Err(b.err).Msg("reading the training data failed: this peer stops training (the others go on)")
		r.giveWindow(r.win.flush())
		r.dataDone = true
		r.core.EndOfData()
	case b.end:
		r.giveWindow(r.win.flush())
		r.dataDone = true
		r.core.EndOfData()
	case r.win.h > 1:
		r.epoch = b.epoch
		if r.win.cur == nil || r.win.cur.epoch != b.epoch {
			r.winStart = Position{Epoch: b.epoch, Rows: b.row, Examples: r.nextPos.Examples}
		}
		start := r.winStart
		n := int64(b.p.Examples())
		r.nextPos = Position{Epoch: b.epoch, Rows: b.row + n, Examples: r.nextPos.Examples + n}
		if done := r.win.add(b.p, b.epoch, b.row); done != nil {
			if done.epoch != b.epoch {
				// The new epoch's first batch closed the window before it,
				// and starts the next.
				prev := r.winStart
				r.winStart = Position{Epoch: b.epoch, Rows: b.row, Examples: r.nextPos.Examples - n}
				r.giveWindowAt(done, prev)
				return
			}
			r.giveWindowAt(done, start)
		}
	default:
		r.epoch = b.epoch
		r.queue[r.given] = b.p
		r.pos[r.given] = Position{Epoch: b.epoch, Rows: b.row, Examples: r.nextPos.Examples}
		n := int64(b.p.Examples())
		r.nextPos = Position{Epoch: b.epoch, Rows: b.row + n, Examples: r.nextPos.Examples + n}
		r.given++
		// A copy: the core keeps the keys until the round is pushed
		// (train.Core.Batch), and b.p goes back to the reader once computed.
		r.core.Batch(slices.Clone(b.p.Keys), b.p.Examples())
	}
}

// computed hands the core a gradient. One that is not finite (or whose
// loss is not) never leaves this peer: the round gets none,
// and the batch is counted, or fails the peer (Config.NonFinite;
// TestNonFiniteBatchFailsOnlyItsPeer, TestNonFiniteBatchSkipped).
func (r *run) computed(res computeDone) {
	grad, loss, examples := res.grad, res.loss, res.examples
	if e := res.bad; e != nil && res.win != nil {
		// A window's batch: its step was not taken (sgd.Window.Run); the
		// window's other batches go (Config.NonFinite).
		examples -= e.Examples
		r.skipped++
		if r.t.cfg.NonFinite == sgd.FailNonFinite && r.failErr == nil {
			r.fail(e)
		} else {
			r.logSkipped(e)
		}
	} else if e != nil {
		// The round's push carries nothing (Config.NonFinite).
		grad, loss, examples = nil, 0, 0
		r.skipped++
		if r.t.cfg.NonFinite == sgd.FailNonFinite && r.failErr == nil {
			r.fail(e)
		} else {
			r.logSkipped(e)
		}
	}
	r.core.Computed(res.round, grad, loss)
	r.examples += int64(examples)
	if examples > 0 {
		r.trainedAt = r.t.now()
	}
	r.rounds++
	r.lossSum += loss
	r.progLoss += loss
	r.progSteps++
	r.waiting = true
	r.askedAt = r.t.now()
	if res.win != nil {
		for _, p := range res.win.batches {
			r.free.put(p)
		}
		return
	}
	r.free.put(res.p)
}

// giveWindow gives the core a window (nil: none) whose first batch is the
// batch after the last one given.
func (r *run) giveWindow(w *window) {
	if w != nil {
		r.giveWindowAt(w, r.winStart)
	}
}

// giveWindowAt gives the core window w, which starts at data position at.
func (r *run) giveWindowAt(w *window, at Position) {
	r.windows[r.given] = w
	r.pos[r.given] = at
	r.given++
	r.core.Batch(w.keys, w.examples)
}

// maxSkipLines is how many skipped batches are logged one by one; the
// rest are counted (Summary.SkippedNonFinite).
const maxSkipLines = 10

func (r *run) logSkipped(e *sgd.NonFiniteError) {
	log := r.t.log
	switch {
	case r.skipped <= maxSkipLines:
		msg := "skipped a batch whose gradient is not finite (--nonfinite skip): nothing of it left this peer"
		if r.failErr != nil {
			msg = "another batch whose gradient is not finite: nothing of it left this peer, which is leaving"
		}
		log.Warn().Str("rows", e.Where()).Str("why", e.What()).Int64("skipped", r.skipped).Msg(msg)
	case r.skipped == maxSkipLines+1:
		log.Warn().Msg("more batches whose gradient is not finite: they are skipped and counted, no longer logged one by one")
	}
}

// fail stops this peer's training on err: it leaves the run as on Leave
// (its shards go to their new holders, so the others lose nothing), and
// Run returns err once it has left.
func (r *run) fail(err error) {
	t := r.t
	r.failErr, r.failAt = err, t.now()
	t.log.Error().Err(err).Msg("this peer stops: it hands its shards over and leaves the run, which goes on without it")
	if !r.leaving {
		r.leaving = true
		r.core.Leave()
	}
}

// handle acts on what the core decided, until it decides nothing more.
func (r *run) handle() error {
	t := r.t
	// Until Ready has nothing to act on. Ready hands over the core's
	// queues and empties them; in this loop only the body's own calls
	// fill them again (Finish on EvFinal after a failure, Leave once the
	// model is fetched), each once in a run, so it ends within a few
	// passes. The bound guards against a core that kept deciding without
	// an event: handle returns, and what is left is handled at the next
	// turn of Run's loop, which calls handle first.
	for range 1000 {
		rd := r.core.Ready()
		for _, e := range rd.Messages {
			if e.To == t.cfg.Core.Self {
				// To itself: back through the inbox, after what is queued
				// (the core never expects a message handled within its
				// own call).
				select {
				case t.inbox <- delivery{e.To, e.Msg}:
				default:
					go func(d delivery) { t.inbox <- d }(delivery{e.To, e.Msg})
				}
				continue
			}
			t.link.Send(e.To, e.Msg)
		}
		if c := rd.Compute; c != nil {
			i := c.Round - r.core.FirstRound()
			p, win := r.queue[i], r.windows[i]
			if p == nil && win == nil {
				return fmt.Errorf("trainer: the core asked for round %d, batch %d, which it was not given", c.Round, i)
			}
			delete(r.queue, i)
			delete(r.windows, i)
			if i >= 4 {
				delete(r.pos, i-4) // a checkpoint is scheduled after the round being computed
			}
			now := t.now()
			if r.waiting {
				r.waitSec += now.Sub(r.askedAt).Seconds()
			}
			r.waiting = false
			j := computeJob{round: c.Round, p: p, win: win, pos: r.pos[i], weights: c.Weights, workers: c.Workers}
			r.pause.request(now)
			switch {
			case r.pause.on:
				r.pause.held = &j // given to compute when the evaluation ends (pause.go)
			case r.pause.want:
				r.pauseToEvaluate(j)
			default:
				r.jobs <- j
			}
		}
		for _, e := range rd.Events {
			r.event(e)
		}
		for i := range rd.Fetched {
			r.fetched(&rd.Fetched[i])
		}
		for _, c := range rd.Checkpoints {
			r.checkpoint(c)
		}
		if rd.Err != nil {
			return rd.Err
		}
		if rd.Left {
			r.left = true
		}
		if rd.Done {
			r.done = true
		}
		if len(rd.Messages) == 0 && rd.Compute == nil && len(rd.Events) == 0 && len(rd.Fetched) == 0 {
			break
		}
	}
	r.rounds2()
	r.maybeEval()
	r.maybeHeld()
	r.maybeFinish()
	return nil
}

// rounds2 reports the rounds this worker pushed since the last call.
func (r *run) rounds2() {
	cur := r.core.Round()
	for r.lastRound < cur {
		if r.t.hooks.Round != nil && r.lastRound >= r.core.FirstRound() {
			r.t.hooks.Round(RoundPoint{
				Round: int64(r.lastRound), Examples: r.examples, Seconds: r.t.now().Sub(r.start).Seconds(),
				WaitSeconds: r.waitSec - r.waitAt, Staleness: int64(r.core.Stats().MaxStaleness),
				Config: r.cfgID, Owned: r.owned, Members: r.members,
			})
		}
		r.waitAt = r.waitSec
		r.lastRound++
	}
}

func (r *run) event(e train.Event) {
	t := r.t
	switch e.Kind {
	case train.EvConfig:
		r.cfgID, r.owned, r.members = e.Config, e.Shards, len(e.Members)
		if t.cfg.Core.Initial == nil && r.joinSec == 0 && slices.Contains(e.Members, t.cfg.Core.Self) {
			r.joinSec = t.now().Sub(r.start).Seconds()
		}
		if t.hooks.Change != nil {
			t.hooks.Change(ChangePoint{Config: e.Config, Start: e.Start, Members: e.Members, Joined: e.Joined, Left: e.Left, Crashed: e.Crashed, Owned: e.Shards, Final: e.Final})
		}
	case train.EvFinal:
		r.final = true
		if r.pause.want {
			// No round left to pause before: the final evaluation comes.
			r.pause.want, r.evalBusy = false, false
		}
		r.trainSec = t.now().Sub(r.start).Seconds()
		if r.failErr != nil {
			// A peer that failed needs no final values: it says it is
			// done, and goes once it holds no shard (Run).
			r.finishing = true
			r.core.Finish()
			return
		}
		if r.ev != nil {
			r.pending[fetchEval] = true
			r.core.Fetch(fetchEval, r.ev.keys, false)
		}
		r.pending[fetchHash] = true
		r.core.FetchHashes(fetchHash)
		if t.cfg.FetchModel && !r.pending[fetchModel] {
			r.pending[fetchModel] = true
			r.core.Fetch(fetchModel, nil, true)
		}
	default:
		if t.hooks.Event != nil {
			t.hooks.Event(e)
		}
	}
}

func (r *run) fetched(f *train.FetchResult) {
	t := r.t
	r.fetchesIn++
	switch f.ID {
	case fetchEval:
		delete(r.pending, f.ID)
		if r.evalBusy {
			r.finalValues = f.Values // after the periodic evaluation running now
		} else {
			r.startEval(f.Values, true, r.examples)
		}
	case fetchHash:
		delete(r.pending, f.ID)
		r.hash = model.CombineHashes(t.m.Layout, f.Hashes)
		r.covered = len(f.Hashes)
	case fetchHeld:
		r.startHeld(f.Values)
	case fetchModel:
		delete(r.pending, f.ID)
		if r.leaving && !r.final {
			// Written into the model once the core is done with it.
			r.leftRows = &f.Rows
			t.log.Info().Msg("model fetched: handing this peer's shards over")
			r.core.Leave()
			return
		}
		// The model's storage holds this peer's shards; every other row
		// is zero there until now.
		t.m.SetRows(&f.Rows)
		r.fetchedModel = true
	default:
		if f.ID == r.evalID && r.evalBusy {
			r.periodicValues(f.Values)
		}
	}
}

// maybeEval starts a periodic evaluation once this worker's examples pass
// the next multiple of EvalEvery, unless they are all it has.
func (r *run) maybeEval() {
	if r.ev == nil || r.t.cfg.EvalEvery == 0 || r.final || r.evalBusy || r.examples < r.nextEvalAt {
		return
	}
	if r.dataDone && uint64(r.rounds) == r.given {
		// This worker's last gradient: the final evaluation comes next,
		// of the same values or later ones (a fetch of the test set's rows
		// costs a capped peer about a fifth of a second).
		return
	}
	for r.nextEvalAt <= r.examples {
		r.nextEvalAt += r.t.cfg.EvalEvery
	}
	r.evalBusy = true
	r.evalID++
	if r.t.cfg.Core.Mode == train.Sync {
		r.pause.want = true // fetched and evaluated in a pause, at the next compute request (pause.go)
		return
	}
	r.core.Fetch(r.evalID, r.ev.keys, false)
}

// startEval evaluates fetched values, which came when this worker had
// trained ex examples, on their own goroutine.
func (r *run) startEval(values []float32, final bool, ex int64) {
	r.evalBusy = true
	observe := r.t.cfg.observe
	go func() {
		if observe != nil {
			observe(workEval, false)
		}
		at := time.Now()
		m, err := r.ev.evaluate(values, r.t.cfg.EvalBatch)
		sec := time.Since(at).Seconds()
		if observe != nil {
			observe(workEval, true)
		}
		r.evalDone <- evalResult{final: final, metrics: m, err: err, examples: ex, seconds: sec}
	}()
}

func (r *run) evalFinished(e evalResult) {
	t := r.t
	r.evalBusy = false
	r.evalSec += e.seconds
	r.endPause()
	if r.finalValues != nil {
		r.startEval(r.finalValues, true, r.examples)
		r.finalValues = nil
	}
	if e.err != nil {
		t.log.Error().Err(e.err).Msg("evaluation failed")
		if e.final {
			r.finalEval = &sgd.Metrics{}
		}
		return
	}
	if e.final {
		r.finalEval = &e.metrics
	}
	if t.hooks.Eval != nil {
		t.hooks.Eval(sgd.EvalPoint{Epoch: r.epoch + 1, Examples: e.examples, Seconds: t.now().Sub(r.start).Seconds(), Paused: r.pause.paused(), Metrics: e.metrics})
	}
}

// maybeFinish tells the core this peer has what it needs once the final
// fetches are in and the final evaluation ran.
func (r *run) maybeFinish() {
	if !r.final || r.finishing || len(r.pending) > 0 || r.evPending || r.ev != nil && r.finalEval == nil {
		return
	}
	r.finishing = true
	r.progress(true)
	r.core.Finish()
}

// stallSig is what moves when a run progresses (Config.StallTimeout).
type stallSig struct {
	examples, rounds, clock, cfg                  int64
	final                                         bool
	pushed, applied, replicated, received, handed uint64
	promoted, changes, lost                       uint64
	fetches, checkpoints                          int64
}

func (r *run) signature() stallSig {
	st := r.core.Stats()
	return stallSig{
		examples: r.examples, rounds: r.rounds, clock: int64(r.core.Round()), cfg: int64(r.cfgID), final: r.final,
		pushed: st.Rounds, applied: st.Applied, replicated: st.Replicated, received: st.Received, handed: st.HandedOff,
		promoted: st.Promoted, changes: st.ConfigChanges, lost: st.Lost,
		fetches: r.fetchesIn, checkpoints: int64(r.ckptOK + r.ckptFail),
	}
}

// busy reports whether this peer waits on its own work, which is not a
// stall: a gradient being computed, an evaluation (of the test set or the
// held-out rows), the test set being
// read at the end, the training data being read, or the end of the run
// once this peer said it has everything (the others may still evaluate).
func (r *run) busy() bool {
	return !r.waiting || r.evalBusy || r.held.evaluating || r.evPending && r.final || r.finishing ||
		!r.dataDone && r.held.parked == nil && r.core.WantBatches() > 0 // a parked batch waits for the held-out values (holdout.go)
}

// stalled watches for a run that does not move (stallSig): it logs the
// core's state once per Config.StallAfter, and after Config.StallTimeout
// returns ErrStalled naming what the core waits for
// (TestStalledRunLogsWhatItWaitsFor, TestStalledRunFailsNamingThePeer).
func (r *run) stalled() error {
	t := r.t
	at := t.now()
	if sig := r.signature(); sig != r.stuckSig || r.stuckAt.IsZero() || r.busy() {
		r.stuckSig, r.stuckAt, r.warnedAt = sig, at, at
		return nil
	}
	if every := t.cfg.StallAfter; every > 0 && at.Sub(r.warnedAt) >= every {
		r.warnedAt = at
		log := t.log
		log.Warn().Dur("for", at.Sub(r.stuckAt).Round(time.Second)).Str("waiting_for", waitingFor(r.core.Debug(), 4)).Str("state", r.core.String()).
			Msg("no progress: this peer waits for other peers (waiting_for and the state say for what; with --log-level debug every shard's follows)")
		if e := log.Debug(); e.Enabled() {
			e.Str("shards", r.core.Debug()).Msg("core state")
		}
	}
	if limit := t.cfg.StallTimeout; limit > 0 && at.Sub(r.stuckAt) >= limit {
		what := waitingFor(r.core.Debug(), 8)
		if what == "" {
			what = "nothing it can name"
		}
		return fmt.Errorf("%w for %v (--stall-timeout): no example trained, no round pushed or applied, no configuration, no shard moved; "+
			"this peer waits for %s; state: %s", ErrStalled, limit, what, r.core.String())
	}
	return nil
}

// waitingText says what a peer that trained nothing since the previous
// progress report waits for.
func (r *run) waitingText() string {
	switch {
	case r.finishing:
		return "the other peers to finish the run"
	case r.final:
		return "the final values and evaluation"
	case r.pause.held != nil:
		return fmt.Sprintf("round %d: this peer's evaluation (training pauses while it evaluates)", r.core.Round())
	case !r.waiting:
		return fmt.Sprintf("round %d: its gradient being computed", r.core.Round())
	}
	if w := waitingFor(r.core.Debug(), 2); w != "" {
		return fmt.Sprintf("round %d: %s", r.core.Round(), w)
	}
	return fmt.Sprintf("round %d: %s", r.core.Round(), r.core.String())
}

// progress calls Hooks.Progress every ProgressEvery (or now).
func (r *run) progress(now bool) {
	t := r.t
	at := t.now()
	dt := at.Sub(r.progAt)
	if t.hooks.Progress == nil || !now && dt < t.cfg.ProgressEvery {
		return
	}
	p := sgd.Progress{Epoch: r.epoch + 1, Examples: r.examples, Steps: r.rounds, Seconds: at.Sub(r.start).Seconds()}
	if n := r.examples - r.progEx; n > 0 {
		p.TrainLoss = r.progLoss / float64(n)
		p.ExamplesPerSec = float64(n) / dt.Seconds()
	} else {
		p.Waiting, p.Idle = r.waitingText(), at.Sub(r.trainedAt).Seconds()
	}
	t.hooks.Progress(p)
	r.progAt, r.progEx, r.progLoss, r.progSteps = at, r.examples, 0, 0
}

func (r *run) summary() Summary {
	t := r.t
	sec := t.now().Sub(r.start).Seconds()
	s := Summary{
		Rounds: r.rounds, WaitSeconds: r.waitSec, Configs: r.cfgID, Members: r.members, Owned: r.owned,
		ModelHash: r.hash, Left: r.left, Covered: r.covered, JoinSeconds: r.joinSec, ModelFetched: r.fetchedModel,
		Checkpoints: r.ckptOK, CheckpointsFailed: r.ckptFail, LastCheckpoint: r.ckptLast,
	}
	if rs := t.cfg.Resume; rs != nil {
		s.ResumedAt = rs.Round
	}
	if r.core != nil {
		s.Core = r.core.Stats()
		s.MaxStaleness = int64(s.Core.MaxStaleness)
	}
	s.Examples, s.Steps, s.Epochs, s.Seconds, s.EvalSeconds = r.examples, r.rounds, r.epoch+1, sec, r.evalSec
	s.TrainingSeconds, s.PausedSeconds = r.trainSec, r.pause.paused()
	s.SkippedNonFinite = r.skipped
	s.HoldoutRows, s.HoldoutLoss, s.Converged = r.held.rows, r.held.losses, r.held.stopped
	train := sec
	if r.trainSec > 0 {
		train = r.trainSec
	}
	if train -= r.pause.paused(); train > 0 {
		s.ExamplesPerSec = float64(r.examples) / train
	}
	if r.examples > 0 {
		s.TrainLoss = r.lossSum / float64(r.examples)
	}
	if r.finalEval != nil {
		s.Final, s.Evaluated = *r.finalEval, true
	}
	return s
}

// read reads and prepares batches ahead of the core, epoch after epoch.
func (r *run) read(ctx context.Context, open func(epoch int) (data.Source, error)) {
	t := r.t
	pr := sgd.NewPreparer(t.m)
	var b data.Batch
	send := func(p prepared) bool {
		select {
		case r.batches <- p:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var skip Position // a resumed run starts where its checkpoint was
	if t.cfg.Resume != nil {
		skip = t.cfg.Resume.Position
	}
	for e := skip.Epoch; e < t.cfg.Epochs; e++ {
		src, err := open(e)
		if err != nil {
			send(prepared{err: fmt.Errorf("epoch %d: %w", e+1, err)})
			return
		}
		var held *data.Batch // the held-out rows, kept in the first epoch read
		if t.cfg.Holdout >= 2 {
			if e == skip.Epoch {
				held = &data.Batch{}
			}
			src = sgd.HoldOut(src, t.cfg.Holdout, held)
		}
		rows := 0
		if e == skip.Epoch && skip.Rows > 0 {
			// The batches before the checkpoint, read and dropped in the
			// same sizes, so the ones after have the same rows.
			for int64(rows) < skip.Rows {
				n, err := src.Next(&b, int(min(int64(t.cfg.Batch), skip.Rows-int64(rows))))
				rows += n
				if err == io.EOF {
					break
				}
				if err != nil {
					src.Close()
					send(prepared{err: fmt.Errorf("epoch %d: skipping to the checkpoint's row %d: %w", e+1, skip.Rows, err)})
					return
				}
			}
			if int64(rows) < skip.Rows {
				src.Close()
				send(prepared{err: fmt.Errorf("epoch %d has %d rows, but the checkpoint resumes after row %d: is this the data (and --part) it was written with?", e+1, rows, skip.Rows)})
				return
			}
		}
		for {
			r.pause.gate.wait(ctx)
			before := int64(rows)
			n, err := src.Next(&b, t.cfg.Batch)
			if n > 0 {
				rows += n
				p := r.free.get()
				pr.Prepare(&b, p)
				if !send(prepared{p: p, epoch: e, row: before}) {
					src.Close()
					return
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				src.Close()
				send(prepared{err: fmt.Errorf("epoch %d: %w", e+1, err)})
				return
			}
		}
		src.Close()
		if rows == 0 {
			send(prepared{err: fmt.Errorf("epoch %d: %w", e+1, sgd.ErrNoData)})
			return
		}
		if held != nil {
			p := prepared{heldSet: true}
			if held.Rows() > 0 {
				p.held, p.heldErr = newEvaluator(t.m, func() (data.Source, error) { return &memSource{b: held}, nil })
			}
			if !send(p) {
				return
			}
		}
	}
	send(prepared{end: true})
}

// compute computes the gradients the core asks for, one at a time, with
// the worker's goroutines.
func (r *run) compute(ctx context.Context) {
	w := sgd.NewWorker(r.t.m, r.t.cfg.Threads)
	defer w.Close()
	var wd *sgd.Window
	// Every gradient (a window's changes) goes into out: the core copies
	// the one it was given before it asks for the next (train.Core.Computed),
	// so one slice serves the run instead of one a round.
	var out []float32
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.jobs:
			observe := r.t.cfg.observe
			if observe != nil {
				observe(workCompute, false)
			}
			var res computeDone
			if j.win != nil {
				// A window: its batches trained on the wide rows fetched,
				// the rows' changes pushed.
				if wd == nil {
					wd = sgd.NewWindow(r.t.m, w)
					if r.t.cfg.Core.LocalState {
						wd.KeepState() // (the workers keep the optimizer state: plain rows)
					}
				}
				out = zeroed(out, len(j.weights))
				delta := out
				loss, bad := wd.Run(j.win.batches, j.win.keys, j.weights, delta, int64(j.round)*int64(r.win.h), j.workers)
				if bad != nil {
					bad.Epoch = j.pos.Epoch + 1
				}
				res = computeDone{round: j.round, grad: delta, loss: loss, examples: j.win.examples, win: j.win, bad: bad}
			} else {
				out = zeroed(out, len(j.weights))
				grad := out
				loss := w.Compute(j.p, j.weights, grad)
				bad := sgd.CheckFinite(j.p, grad, loss)
				if bad != nil {
					bad.Epoch, bad.FirstRow = j.pos.Epoch+1, j.pos.Rows+1
				}
				res = computeDone{round: j.round, grad: grad, loss: loss, examples: j.p.Examples(), p: j.p, bad: bad}
			}
			if observe != nil {
				observe(workCompute, true)
			}
			select {
			case r.results <- res:
			case <-ctx.Done():
				return
			}
		}
	}
}

// zeroed returns buf resliced to n zeros, reallocated when too small.
func zeroed(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

// preparedPool keeps the batches compute is done with for the reader to
// prepare into again, and hands out the one returned last: its buffers
// were read a moment ago and are still in the caches, where the first
// returned has been evicted by every batch since (a peer keeps several in
// flight). Safe for concurrent use.
type preparedPool struct {
	mu  sync.Mutex
	s   []*sgd.Prepared
	max int // batches kept (0: 8)
}

// get returns the batch put last, or a new one.
func (pp *preparedPool) get() *sgd.Prepared {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if n := len(pp.s); n > 0 {
		p := pp.s[n-1]
		pp.s[n-1] = nil
		pp.s = pp.s[:n-1]
		return p
	}
	return new(sgd.Prepared)
}

// put keeps p for get, up to 8 batches (more are left to the collector).
func (pp *preparedPool) put(p *sgd.Prepared) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if len(pp.s) < max(8, pp.max) {
		pp.s = append(pp.s, p)
	}
}
