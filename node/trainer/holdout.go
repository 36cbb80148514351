package trainer

import (
	"time"

	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// Early stopping of a peer on held-out rows (Config.Holdout).
//
// Each epoch of this peer's data holds out every Holdout-th row by position
// (sgd.HoldOut, the rule of a run alone), and the first epoch read keeps
// them in memory, re-indexed like the test set (evaluator). When the first
// batch of a later epoch is read the peer parks it: once every gradient of
// the epoch before has been handed to the core (sync; ssp and async at
// once, maybeHeld) it fetches the held-out rows' values from their owners
// (as the test evaluation does) and evaluates them. The stop rule is sgd's: the loss must improve on the
// best so far by more than HoldoutTol of it, and Patience epochs in a row
// that do not end this peer's data there (train.Core.EndOfData: the core
// says the worker is done, and the run ends once every worker is; this
// peer keeps serving its shards until then). Otherwise the parked batch
// goes on, and so does the next epoch. Epochs is the cap; the last epoch's
// end is not evaluated (the data ends there anyway).
//
// Whatever each peer decides, the model is the owners' one, so the peers
// of a sync run end with one model hash, and those of ssp and async runs
// fetch one final model (TestPeersStopOnHeldOutRows). The
// model kept is the last one: going back to the best epoch would need every
// owner to roll its shards back at once, a protocol of its own. A run
// resumed from a checkpoint holds out the same rows but starts the rule
// afresh (the best loss and the epochs without improvement are not in a
// checkpoint), so it runs at least as long as the uninterrupted one would
// have.

// heldState is a run's early stopping on held-out rows.
type heldState struct {
	ev         *evaluator // the held-out rows (nil: none yet, or none held out)
	rows       int64      // how many
	approved   int        // the epoch whose start the rule let go on (or the run started at)
	parked     *prepared  // the first batch of the epoch waiting for the rule
	fetching   bool       // the held-out rows' values were asked for
	evaluating bool       // and are being evaluated
	done       chan evalResult
	best       float64
	worse      int
	losses     []float64 // after each epoch evaluated
	stopped    bool      // the rule ended this peer's data
}

// holdBatch takes what the reader says about held-out rows, and parks the
// first batch of an epoch that the stop rule has not let start yet. It
// reports whether it took b.
func (r *run) holdBatch(b prepared) bool {
	h := &r.held
	switch {
	case b.heldSet:
		switch {
		case b.heldErr != nil:
			r.t.log.Error().Err(b.heldErr).Msg("--holdout: the held-out rows cannot be evaluated: this peer runs every epoch (--epochs)")
		case b.held == nil:
			r.t.log.Warn().Int("holdout", r.t.cfg.Holdout).Msg("--holdout: this peer's part has fewer rows than --holdout, so none was held out: it runs every epoch (--epochs)")
		default:
			h.ev, h.rows = b.held, int64(b.held.numRows())
			r.t.log.Debug().Int64("holdout_rows", h.rows).Msg("held-out rows kept")
		}
		return true
	case h.ev != nil && b.p != nil && b.epoch > h.approved:
		// A window under way is of the epoch before: it goes now.
		r.giveWindow(r.win.flush())
		h.parked = &b
		return true
	}
	return false
}

// maybeHeld asks for the held-out rows' values once a batch is parked
// and, in sync mode, every gradient of the epoch before it went to the
// core. In ssp and async mode it asks at once: their core may hold the
// last batch given until it has the next one (or the end of the data), and
// their values are as stale as staleness lets them be anyway.
func (r *run) maybeHeld() {
	h := &r.held
	if h.parked == nil || h.fetching || r.leaving || r.t.cfg.Core.Mode == train.Sync && uint64(r.rounds) != r.given {
		return
	}
	h.fetching = true
	r.core.Fetch(fetchHeld, h.ev.keys, false)
}

// startHeld evaluates the held-out rows on values on their own goroutine.
func (r *run) startHeld(values []float32) {
	h := &r.held
	if !h.fetching || h.evaluating {
		return
	}
	h.evaluating = true
	ev, batch := h.ev, r.t.cfg.EvalBatch
	go func() {
		at := time.Now()
		m, err := ev.evaluate(values, batch)
		h.done <- evalResult{metrics: m, err: err, seconds: time.Since(at).Seconds()}
	}()
}

// heldFinished applies the stop rule to an epoch's held-out loss: it ends
// this peer's data, or lets the parked batch and its epoch go on.
func (r *run) heldFinished(e evalResult) {
	t, h := r.t, &r.held
	h.fetching, h.evaluating = false, false
	r.evalSec += e.seconds
	b := h.parked
	if b == nil {
		return
	}
	h.parked = nil
	epoch := b.epoch // whole epochs trained
	stop := false
	if e.err != nil {
		t.log.Error().Err(e.err).Int("epoch", epoch).Msg("--holdout: evaluating the held-out rows failed: this peer goes on")
	} else {
		loss := e.metrics.LogLoss
		h.losses = append(h.losses, loss)
		first := len(h.losses) == 1
		improved := first || loss < h.best*(1-t.cfg.HoldoutTol)
		if first || loss < h.best {
			h.best = loss
		}
		if improved {
			h.worse = 0
		} else {
			h.worse++
		}
		stop = h.worse >= max(t.cfg.Patience, 1)
		t.log.Debug().Int("epoch", epoch).Float64("holdout_logloss", human.Round4(loss)).Bool("improved", improved).Msg("held-out loss")
	}
	if !stop {
		h.approved = b.epoch
		r.takeBatch(*b)
		return
	}
	h.stopped = true
	r.free.put(b.p)
	t.log.Info().Int("epoch", epoch).Float64("holdout_logloss", human.Round4(h.losses[len(h.losses)-1])).
		Float64("holdout_logloss_best", human.Round4(h.best)).Int64("holdout_rows", h.rows).
		Msgf("--holdout: the held-out loss has not improved for %d epochs: this peer's data ends after epoch %d (the run ends when every peer's has; it keeps its shards until then)", h.worse, epoch)
	r.dataDone = true
	r.core.EndOfData()
}
