package trainer

import (
	"time"

	"github.com/gossiptrain/gossiptrain/node/train"
)

// Evaluations along the way pause a sync worker.
//
// A peer with a test set evaluates every Config.EvalEvery examples on the
// values of the test set's rows, fetched from their owners. In sync mode
// the whole evaluation is a pause of this peer's worker, between two
// rounds: once its examples pass the next multiple of EvalEvery, the core's
// next compute request (round r+1, whose rows came once round r was
// applied) is held, the test set's rows are fetched (the owners answer
// once they applied the rounds before r+1, which needs nothing more of
// this worker), evaluated, and then the request goes to the worker. Every
// worker of a sync round waits for the slowest, so an evaluation beside
// training would slow every peer's rounds, uncounted (the peer that
// evaluates shares its CPU with its worker, and its owners answer the
// fetch); paused, it is the lone process's pause (sgd.Train evaluates
// between steps, reading its whole model), measured the same way: the
// wall time from the request held to the evaluation's end, summed in
// Summary.PausedSeconds and in each sgd.EvalPoint's Paused. A bench
// leaves them out of the training time of every peer of the run
// (report.Summarize). The values are then those of the end of round r,
// the same on every run. In ssp and async the others do not wait for this
// peer, and the fetch and the evaluation run beside training: nothing
// pauses. The final evaluation comes after the last round
// (Summary.TrainingSeconds ends there), and the held-out rows'
// (holdout.go) while the worker has nothing to compute.
// TestSyncEvaluationPausesTraining pins this.

// pauseState is a run's evaluation pauses (sync mode).
type pauseState struct {
	want bool      // an evaluation is due: pause at the next compute request
	on   bool      // an evaluation pauses the worker now,
	at   time.Time // since then
	// ready: values wait for the gradient being computed to be evaluated;
	// ex is the examples this worker had trained when they came.
	ready  bool
	values []float32
	ex     int64
	held   *computeJob // the core's compute request, given to the worker when the evaluation ends
	sec    float64     // the pauses so far, up to the end of the last round
}

// pauseToEvaluate holds compute request j, which comes after the
// evaluation due, and fetches the test set's rows.
func (r *run) pauseToEvaluate(j computeJob) {
	p := &r.pause
	p.want, p.on, p.at, p.held, p.ex = false, true, r.t.now(), &j, r.examples
	r.core.Fetch(r.evalID, r.ev.keys, false)
}

// periodicValues starts the evaluation of a periodic fetch's values: at
// once in ssp and async, and in sync in the pause that fetched them.
func (r *run) periodicValues(values []float32) {
	if r.t.cfg.Core.Mode != train.Sync {
		r.startEval(values, false, r.examples)
		return
	}
	if r.pause.on {
		r.startEval(values, false, r.pause.ex) // (the worker computes nothing: pauseToEvaluate)
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
