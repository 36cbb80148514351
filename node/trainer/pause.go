package trainer

import (
	"time"

	"github.com/gossiptrain/gossiptrain/node/train"
)

// Evaluations along the way pause a sync worker.
//
// A peer with a test set evaluates every Config.EvalEvery examples on the
// values of the test set's rows, fetched from their owners. The fetch goes
// on beside training: the owners answer once they applied the rounds
// before it, so a worker that stopped computing while it waited would
// wait for ever. Once the values are in, in sync mode, the evaluation
// starts when no gradient is being computed (when one is, as its result
// comes back), and while it runs the worker computes nothing: the core's
// next compute request is held and given to the worker when the
// evaluation ends. Every worker of a sync round waits for the slowest, so
// an evaluation beside training would slow every peer's rounds, uncounted
// (the peer that evaluates shares its CPU with its worker); paused, it is
// the lone process's pause (sgd.Train evaluates
// between steps), measured the same way: the wall time from the
// evaluation's start to its end, summed in Summary.PausedSeconds and in
// each sgd.EvalPoint's Paused. A bench leaves them out of the training
// time of every peer of the run (report.Summarize). In ssp and async the
// others do not wait for this peer, and the evaluation runs beside
// training as before: nothing pauses. The final evaluation comes after
// the last round (Summary.TrainingSeconds ends there), and the held-out
// rows' (holdout.go) while the worker has nothing to compute.
// TestSyncEvaluationPausesTraining pins this.

// pauseState is a run's evaluation pauses (sync mode).
type pauseState struct {
	on bool      // an evaluation pauses the worker now,
	at time.Time // since then
	// ready: values wait for the gradient being computed to be evaluated;
	// ex is the examples this worker had trained when they came.
	ready  bool
	values []float32
	ex     int64
	held   *computeJob // the core's compute request, given to the worker when the evaluation ends
	sec    float64     // the pauses so far, up to the end of the last round
}

// periodicValues starts the evaluation of a periodic fetch's values: at
// once in ssp and async, as a pause of the worker in sync.
func (r *run) periodicValues(values []float32) {
	if r.t.cfg.Core.Mode != train.Sync {
		r.startEval(values, false, r.examples)
		return
	}
	r.pause.ready, r.pause.values, r.pause.ex = true, values, r.examples
	r.startPausedEval()
}

// startPausedEval starts the evaluation of values that came in sync mode
// unless a gradient is being computed (computed calls it again when it
// comes back).
func (r *run) startPausedEval() {
	p := &r.pause
	if !p.ready || !r.waiting {
		return
	}
	values := p.values
	p.ready, p.values = false, nil
	p.on, p.at = true, r.t.now()
	r.startEval(values, false, p.ex)
}

// endPause ends the pause of an evaluation that ended (if it was one): its
// time is counted up to the end of the last round, and the compute request
// held meanwhile goes to the worker.
func (r *run) endPause() {
	p := &r.pause
	if !p.on {
		return
	}
	p.on = false
	from, to := p.at.Sub(r.start).Seconds(), r.t.now().Sub(r.start).Seconds()
	if r.trainSec > 0 {
		to = min(to, r.trainSec)
	}
	if to > from {
		p.sec += to - from
	}
	if j := p.held; j != nil {
		p.held = nil
		r.jobs <- *j
	}
}
