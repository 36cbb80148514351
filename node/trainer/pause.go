package trainer

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
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
// between steps, reading its whole model), counted as what it cost the
// run: the time the round it held took beyond the rounds without a pause
// (pauseState, at most the pause's wall time), summed in
// Summary.PausedSeconds and in each sgd.EvalPoint's Paused. A bench
// leaves them out of the training time of every peer of the run
// (report.Summarize). The values are then those of the end of round r,
// the same on every run. In ssp and async the others do not wait for this
// peer, and the fetch and the evaluation run beside training: nothing
// pauses. The final evaluation comes after the last round
// (Summary.TrainingSeconds ends there), and the held-out rows'
// (holdout.go) while the worker has nothing to compute.
// TestSyncEvaluationPausesTraining pins this.
//
// The reader pauses too (readGate): it reads and prepares up to 4H+8
// batches ahead of the worker, and a pause left out of the training time
// must not give it time to parse the next windows. It finishes the batch
// it is reading. Counting each pause's whole wall time instead of its
// round's excess made 20 evaluations shorten a 4-peer run's training time
// (2.02-2.34 s against 2.42-2.44 s with one evaluation, 2026-11-29).

// pauseState is a run's evaluation pauses (sync mode).
type pauseState struct {
	gate readGate    // closed to the reader while an evaluation pauses
	want bool        // an evaluation is due: pause at the next compute request
	on   bool        // an evaluation pauses the worker now,
	at   time.Time   // since then
	ex   int64       // the examples this worker had trained when the pause began
	held *computeJob // the core's compute request, given to the worker when the evaluation ends
	sec  float64     // the pauses so far, settled (settle), up to the end of the last round
	// A pause costs the run what its round took beyond a round without
	// one: while this worker evaluates, the others compute their share of
	// the round it held, and once it is back its own share is what is
	// left, so that round ends sooner after the pause than a round after
	// the slowest worker. pending is the last pause's wall time until
	// its round ends (settle): then its cost is that round's time (from
	// the request held to the next) less the median of the last rounds
	// without a pause, at most pending and at least 0.
	pending float64
	settle  bool
	last    time.Time  // the latest compute request
	recent  [8]float64 // the seconds between the latest requests of rounds without a pause
	nRecent int
}

// paused is the pauses' time so far: settled, and the last one's wall
// time while its round is under way.
func (p *pauseState) paused() float64 { return p.sec + p.pending }

// request notes a compute request that came at now: it times the round
// before it, and settles the cost of a pause in that round.
func (p *pauseState) request(now time.Time) {
	if !p.last.IsZero() {
		d := now.Sub(p.last).Seconds()
		switch {
		case p.settle:
			p.sec += min(p.pending, max(0, d-p.typical()))
			p.pending, p.settle = 0, false
		case !p.on:
			p.recent[p.nRecent%len(p.recent)] = d
			p.nRecent++
		}
	}
	p.last = now
}

// typical is the median of the recent rounds without a pause (0 before
// any).
func (p *pauseState) typical() float64 {
	n := min(p.nRecent, len(p.recent))
	if n == 0 {
		return 0
	}
	s := slices.Clone(p.recent[:n])
	slices.Sort(s)
	return s[n/2]
}

// pauseToEvaluate holds compute request j, which comes after the
// evaluation due, and fetches the test set's rows.
func (r *run) pauseToEvaluate(j computeJob) {
	p := &r.pause
	p.want, p.on, p.at, p.held, p.ex = false, true, r.t.now(), &j, r.examples
	p.gate.close()
	r.core.Fetch(r.evalID, r.ev.keys, false)
}

// periodicValues starts the evaluation of a periodic fetch's values: in
// ssp and async beside training, in sync in the pause that fetched them
// (maybeEval fetches nothing in sync: pauseToEvaluate does).
func (r *run) periodicValues(values []float32) {
	ex := r.examples
	if r.pause.on {
		ex = r.pause.ex // (the worker computes nothing meanwhile)
	}
	r.startEval(values, false, ex)
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
	p.gate.open()
	from, to := p.at.Sub(r.start).Seconds(), r.t.now().Sub(r.start).Seconds()
	if r.trainSec > 0 {
		to = min(to, r.trainSec)
	}
	if to > from {
		p.pending, p.settle = to-from, true
	}
	if j := p.held; j != nil {
		p.held = nil
		r.jobs <- *j
	}
}

// readGate holds the reader between two batches while it is closed.
type readGate struct{ closed atomic.Bool }

func (g *readGate) close() { g.closed.Store(true) }
func (g *readGate) open()  { g.closed.Store(false) }

// wait returns once the gate is open or ctx is done. Pauses are short and
// rare (an evaluation along the way), so it polls.
func (g *readGate) wait(ctx context.Context) {
	for g.closed.Load() && ctx.Err() == nil {
		time.Sleep(200 * time.Microsecond)
	}
}
